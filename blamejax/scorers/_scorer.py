"""The scorer protocol: `score(requests) -> [logits [K] per request]`, batched, through an
optional cache and a meter; and `FunctionScorer`, which wraps any Python or JAX function."""

from __future__ import annotations

import concurrent.futures as cf
import json
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np

from ._cache import Cache, OfflineMiss
from ._meter import Meter
from ._request import Request, check_logits, check_requests, digest


class Answer(NamedTuple):
    """What one call returned: the logits `[K]` and the tokens it used (0 if unknown)."""

    logits: object
    input_tokens: int = 0
    output_tokens: int = 0


def check_concurrency(concurrency) -> int:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"`concurrency` must be an integer >= 1 (the most calls at once), got {concurrency!r}")
    return concurrency


class Scorer:
    """The base of every scorer. A scorer turns requests into logits:

    `scorer.score(requests) -> list` of float64 `[K]` arrays, one per `Request` in order
    (K = its number of options; -inf marks an impossible option).

    Requests the `cache` holds are answered from it (`meter.hits`); the others are answered
    by the model, at most `concurrency` at once, each stored as soon as it arrives, and
    counted in `meter` (calls, attempts, retries, tokens). Identical requests in one batch
    are asked once. With an offline cache a miss raises `OfflineMiss` naming the request,
    before anything is sent. If one request fails, those already answered stay stored and
    the error is raised.

    A subclass sets `identity` (a JSON object as a string: what, besides the request,
    decides the answer, e.g. model, prompt template and temperature) and `name`, and
    implements `_answer(request) -> Answer` (or `_dispatch` for a whole batch).
    """

    identity: str
    name: str

    def __init__(self, *, cache: Cache | None = None, meter: Meter | None = None, concurrency: int = 1):
        if cache is not None and not isinstance(cache, Cache):
            raise TypeError(f"`cache` must be a bj.scorers.Cache or None, got {cache!r}")
        if meter is not None and not isinstance(meter, Meter):
            raise TypeError(f"`meter` must be a bj.scorers.Meter or None, got {meter!r}")
        self.cache = cache
        self.meter = Meter() if meter is None else meter
        self.concurrency = check_concurrency(concurrency)

    def _answer(self, request: Request) -> Answer:
        raise NotImplementedError

    def _dispatch(self, requests: list[Request]) -> Iterator[tuple[Request, Answer]]:
        """Yield (request, answer) as answers arrive; after a failure, the answers that still
        arrive are yielded, then the first error is raised."""
        if self.concurrency == 1 or len(requests) == 1:
            for request in requests:
                yield request, self._answer(request)
            return
        error = None
        with cf.ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(self._answer, r): r for r in requests}
            try:
                for future in cf.as_completed(futures):
                    if future.cancelled():
                        continue
                    if future.exception() is not None:
                        if error is None:
                            error = future.exception()
                            for other in futures:
                                other.cancel()
                        continue
                    yield futures[future], future.result()
            finally:
                for other in futures:
                    other.cancel()
        if error is not None:
            raise error

    def score(self, requests) -> list[np.ndarray]:
        """The logits of each request: a list of float64 `[K]` arrays, in order.

        **Raises:** `OfflineMiss` (offline cache, a request it lacks); `ValueError` for
        logits of the wrong shape or with NaN/+inf (and `ReplyError` for a malformed
        reply); `ScorerError` when the model could not be reached after the retries.
        """
        requests = check_requests(requests)
        out: list = [None] * len(requests)
        todo: dict = {}
        for i, request in enumerate(requests):
            if self.cache is not None:
                stored = self.cache.get(self.identity, request)
                if stored is not None:
                    self.meter.add(hits=1)
                    out[i] = stored
                    continue
            self.meter.add(misses=1)
            todo.setdefault(digest(self.identity, request), (request, []))[1].append(i)
        if todo and self.cache is not None and self.cache.offline:
            first = next(iter(todo.values()))[0]
            more = f" (and {len(todo) - 1} other missing request(s))" if len(todo) > 1 else ""
            raise OfflineMiss(
                f"offline cache {self.cache.path} holds no score of {self.name} for "
                f"{first.describe()}{more}; score it online once, or ship the cache that has it"
            )
        where = {key: indices for key, (_, indices) in todo.items()}
        for request, answer in self._dispatch([request for request, _ in todo.values()]):
            logits = check_logits(answer.logits, request, who=self.name)
            if self.cache is not None:
                logits = self.cache.put(
                    self.identity, request, logits,
                    input_tokens=answer.input_tokens, output_tokens=answer.output_tokens,
                )
            self.meter.add(calls=1, input_tokens=answer.input_tokens, output_tokens=answer.output_tokens)
            for i in where[digest(self.identity, request)]:
                out[i] = logits.copy()
        return out

    def __repr__(self) -> str:
        return self.name


class FunctionScorer(Scorer):
    """A scorer that calls a Python or JAX function.

    - `fn`: `fn(request) -> logits [K]` (any array-like: a list, a NumPy or JAX array), or
      with `batched=True`, `fn(requests) -> [N, K]` logits or a list of N `[K]` rows (one
      call for all the misses of a `score` call: a place to `jax.vmap` a local model).
    - `name`, `version`: the function's identity in the cache (default name: its module and
      qualified name); change `version` when the function changes. A cache needs a name
      that a lambda cannot give, so a lambda with a cache needs `name=`.
    - `cache`, `meter`, `concurrency`: as for every `Scorer` (threads for unbatched calls).

    ```python
    import numpy as np
    from blamejax.scorers import FunctionScorer, Request
    def prefer_short(request):
        return -np.array([len(o) for o in request.options], np.float64)
    scorer = FunctionScorer(prefer_short)
    [logits] = scorer.score([Request("route", "factual", "hi", ("answer", "search web"))])
    assert logits.tolist() == [-6.0, -10.0] and scorer.meter.calls == 1
    ```
    """

    def __init__(
        self,
        fn: Callable,
        *,
        batched: bool = False,
        name: str | None = None,
        version: str = "1",
        cache: Cache | None = None,
        meter: Meter | None = None,
        concurrency: int = 1,
    ):
        if not callable(fn):
            raise TypeError(f"`fn` must be a function of a Request, got {fn!r}")
        if not isinstance(batched, bool):
            raise TypeError(f"`batched` must be True or False, got {batched!r}")
        if name is None:
            name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
            if cache is not None and ("<lambda>" in name or "<locals>" in name):
                raise ValueError(
                    f"`name` is required with a cache for {name}: a lambda or a local function "
                    "has no stable name to key the cache on"
                )
        if not isinstance(name, str) or not name:
            raise TypeError(f"`name` must be a non-empty string, got {name!r}")
        if not isinstance(version, str):
            raise TypeError(f"`version` must be a string, got {version!r}")
        super().__init__(cache=cache, meter=meter, concurrency=concurrency)
        self.fn = fn
        self.batched = batched
        self.identity = json.dumps({"kind": "function", "name": name, "version": version}, sort_keys=True)
        self.name = f"FunctionScorer({name!r})"

    def _answer(self, request: Request) -> Answer:
        return Answer(self.fn(request))

    def _dispatch(self, requests):
        if not self.batched:
            yield from super()._dispatch(requests)
            return
        if not requests:
            return
        rows = self.fn(list(requests))
        if len(rows) != len(requests):
            raise ValueError(f"{self.name} returned {len(rows)} rows of logits for {len(requests)} requests")
        for request, row in zip(requests, rows):
            yield request, Answer(row)
