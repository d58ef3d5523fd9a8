"""Variants that carry their own prompt or model: each request goes to the scorer of its variant."""

from __future__ import annotations

from collections.abc import Mapping

from ._meter import Meter
from ._request import check_requests
from ._scorer import Scorer, check_scorer
from ._text import check_text_requests


class ByVariant(Scorer):
    """A scorer that sends each request to the scorer of its variant: a fix that is a better
    prompt or a stronger model, with no hand-written dispatcher.

    **Arguments:**
    - `scorers`: `{variant: Scorer}`, e.g. `{"factual": small, "fix": small.with_prompt(...)}`
      or `{"factual": small, "fix": large}`.
    - `default`: the scorer of any other variant, or `None` (such a variant is an error).

    `score(requests)` keeps the order of `requests`; each scorer answers its own requests in
    one batch, through its own cache and meter. `meter` is a `Meter` that sums theirs when
    read (`meter.snapshot()`).

    **Raises:** `TypeError` for scorers that are not `Scorer`s; `ValueError` (at `score`)
    naming a variant no scorer is given for.

    ```python
    import numpy as np
    from blamejax.scorers import ByVariant, FunctionScorer, Request
    small = FunctionScorer(lambda r: np.array([0.0, -1.0]), name="small")
    large = FunctionScorer(lambda r: np.array([-2.0, 0.0]), name="large")
    scorer = ByVariant({"factual": small, "fix": large})
    rows = scorer.score([Request("route", v, "hi", ("a", "b")) for v in ("fix", "factual")])
    assert [r.tolist() for r in rows] == [[-2.0, 0.0], [0.0, -1.0]]
    assert scorer.meter.snapshot()["calls"] == 2
    ```
    """

    def __init__(self, scorers: Mapping[str, Scorer], *, default: Scorer | None = None):
        if not isinstance(scorers, Mapping) or not scorers:
            raise TypeError(
                f"`scorers` must be a non-empty mapping {{variant: Scorer}}, got {scorers!r:.200}"
            )
        for variant, scorer in scorers.items():
            if not isinstance(variant, str) or not variant:
                raise TypeError(f"`scorers` keys must be variant names, got {variant!r}")
            check_scorer(scorer, f"scorers[{variant!r}]")
        if default is not None and not isinstance(default, Scorer):
            raise TypeError(f"`default` must be a bj.scorers.Scorer or None, got {default!r}")
        super().__init__()
        self.scorers = dict(scorers)
        self.default = default
        self.meter = _SumMeter([*self.scorers.values(), *([default] if default else [])])
        self.identity = "by-variant"
        self.name = "ByVariant(" + ", ".join(f"{v}={s!r}" for v, s in self.scorers.items()) + ")"

    def _scorer_of(self, request) -> Scorer:
        scorer = self.scorers.get(request.variant, self.default)
        if scorer is None:
            raise ValueError(
                f"{self.name} has no scorer for variant {request.variant!r} ({request.describe()}); "
                f"give one in `scorers` or pass `default`"
            )
        return scorer

    def _route(self, requests, method: str) -> list:
        groups: dict[int, tuple[Scorer, list[int]]] = {}
        for i, request in enumerate(requests):
            scorer = self._scorer_of(request)
            groups.setdefault(id(scorer), (scorer, []))[1].append(i)
        out: list = [None] * len(requests)
        for scorer, indices in groups.values():
            answers = getattr(scorer, method)([requests[i] for i in indices])
            for i, answer in zip(indices, answers):
                out[i] = answer
        return out

    def score(self, requests) -> list:
        """The logits of each request, each from the scorer of its variant, in order."""
        return self._route(check_requests(requests), "score")

    def generate(self, requests) -> list[str]:
        """The text of each free-text request, each from the scorer of its variant, in order."""
        return self._route(check_text_requests(requests), "generate")


class _SumMeter(Meter):
    """A meter whose counts are the sums of other scorers' meters (read-only)."""

    def __init__(self, scorers):
        self._scorers = scorers
        super().__init__()

    def add(self, **counts: int) -> None:
        raise TypeError("a ByVariant scorer counts in its scorers' meters")

    def snapshot(self) -> dict:
        meters = {id(s.meter): s.meter for s in self._scorers}.values()
        snaps = [m.snapshot() for m in meters]
        return {name: sum(s[name] for s in snaps) for name in self.FIELDS}

    def __getattribute__(self, name):
        if name in Meter.FIELDS:
            return self.snapshot()[name]
        return super().__getattribute__(name)
