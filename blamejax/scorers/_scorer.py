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
from ._parse import ReplyError
from ._request import Request, check_logits, check_requests, digest
from ._text import TextAnswer, TextRequest, check_text_requests


class Answer(NamedTuple):
    """What one call returned: the logits `[K]` and the tokens it used (0 if unknown)."""

    logits: object
    input_tokens: int = 0
    output_tokens: int = 0


def check_concurrency(concurrency) -> int:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(
            f"`concurrency` must be an integer >= 1 (the most calls at once), got {concurrency!r}"
        )
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

    `scorer.generate(text_requests) -> list` of strings writes free-text steps the same way
    (cache, offline mode, meter, retries), each `TextRequest` seeded from the step's noise;
    `scorer.record(text_requests, texts)` stores a run's recorded texts for replay.

    A subclass sets `identity` (a JSON object as a string: what, besides the request,
    decides the answer, e.g. model, prompt template and temperature) and `name`, and
    implements `_answer(request) -> Answer` (or `_dispatch` for a whole batch); one that
    writes text also sets `text_identity` and implements `_generate(request) -> TextAnswer`.
    """

    identity: str
    name: str
    text_identity: str | None = None  # the identity its texts are cached under; None: no text

    def __init__(
        self, *, cache: Cache | None = None, meter: Meter | None = None, concurrency: int = 1
    ):
        if cache is not None and not isinstance(cache, Cache):
            raise TypeError(f"`cache` must be a bj.scorers.Cache or None, got {cache!r}")
        if meter is not None and not isinstance(meter, Meter):
            raise TypeError(f"`meter` must be a bj.scorers.Meter or None, got {meter!r}")
        self.cache = cache
        self.meter = Meter() if meter is None else meter
        self.concurrency = check_concurrency(concurrency)

    def _answer(self, request: Request) -> Answer:
        raise NotImplementedError

    def _generate(self, request: TextRequest) -> TextAnswer:
        raise TypeError(f"{self.name} writes no text: it scores options only")

    def _dispatch(self, requests: list[Request]) -> Iterator[tuple[Request, Answer]]:
        """Yield (request, answer) as answers arrive; after a failure, the answers that still
        arrive are yielded, then the first error is raised."""
        return self._pool(self._answer, requests)

    def _pool(self, answer: Callable, requests: list) -> Iterator:
        """`(request, answer(request))` for each request, at most `concurrency` at once."""
        if self.concurrency == 1 or len(requests) == 1:
            for request in requests:
                yield request, answer(request)
            return
        error = None
        with cf.ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(answer, r): r for r in requests}
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
        return self._through_cache(
            requests,
            self.identity,
            "score",
            self._dispatch,
            get=None if self.cache is None else self.cache.get,
            put=None if self.cache is None else self.cache.put,
            check=lambda answer, request: check_logits(answer.logits, request, who=self.name),
        )

    def generate(self, requests) -> list[str]:
        """The text of each free-text step: a list of strings, one per `TextRequest`, in order.

        Through the same machinery as `score`: the cache's texts are replayed (`meter.hits`),
        the others asked of the model with the request's seed and temperature (OpenAI-compatible
        servers take the seed; Anthropic's API takes none, so there only the cache makes a
        replay exact), each stored as it arrives, identical requests asked once; an offline
        cache raises `OfflineMiss` naming the first missing request before anything is sent.

        Interventional, not counterfactual: a request with changed inputs (after a fix
        upstream) is a new sample, not the recorded luck applied to the new input.

        **Raises:** as `score` (`ReplyError` for a reply without text); `TypeError` for a
        scorer that writes no text.
        """
        requests = check_text_requests(requests)
        if self.text_identity is None:
            raise TypeError(f"{self.name} writes no text: it scores options only")
        return self._through_cache(
            requests,
            self.text_identity,
            "text",
            lambda todo: self._pool(self._generate, todo),
            get=None if self.cache is None else self.cache.get_text,
            put=None if self.cache is None else self.cache.put_text,
            check=lambda answer, request: _check_text(answer.text, request, who=self.name),
        )

    def record(self, requests, texts) -> None:
        """Store `texts`, the recorded outputs, as this scorer's answers to `requests` (the
        recorded world's `TextRequest`s, seeded with `text_seed(..., world=0)`), so that
        replaying the recorded world needs no call. Nothing is sent, in offline mode too.

        **Raises:** `ValueError` without a cache, or where the cache already holds another
        text for a request; `TypeError` for texts that are not one string per request.
        """
        requests = check_text_requests(requests)
        if (
            isinstance(texts, str)
            or not isinstance(texts, (list, tuple))
            or len(texts) != len(requests)
        ):
            raise TypeError(
                f"`texts` must be a list of {len(requests)} strings, one per request, got {texts!r:.200}"
            )
        if self.text_identity is None:
            raise TypeError(f"{self.name} writes no text: it scores options only")
        if self.cache is None:
            raise ValueError(f"{self.name} has no cache: `record` stores the texts in its cache")
        for i, (request, text) in enumerate(zip(requests, texts)):
            if not isinstance(text, str):
                raise TypeError(f"`texts[{i}]` must be a string, got {text!r:.200}")
            stored = self.cache.put_text(self.text_identity, request, text)
            if stored != text:
                raise ValueError(
                    f"the cache {self.cache.path} already holds another text for {request.describe()}: "
                    f"{stored[:80]!r}, not {text[:80]!r}"
                )

    def _through_cache(
        self, requests, identity: str, what: str, dispatch: Callable, *, get, put, check
    ):
        """What `score` and `generate` share: cache hits, the offline check, one call per
        distinct missing request (`dispatch(todo)` yields `(request, answer)`), each checked
        and stored as it arrives, and the meter."""
        out: list = [None] * len(requests)
        todo: dict = {}
        for i, request in enumerate(requests):
            if get is not None:
                stored = get(identity, request)
                if stored is not None:
                    self.meter.add(hits=1)
                    out[i] = stored
                    continue
            self.meter.add(misses=1)
            todo.setdefault(digest(identity, request), (request, []))[1].append(i)
        if todo and self.cache is not None and self.cache.offline:
            first = next(iter(todo.values()))[0]
            more = f" (and {len(todo) - 1} other missing request(s))" if len(todo) > 1 else ""
            verb = "score it" if what == "score" else "generate it"
            raise OfflineMiss(
                f"offline cache {self.cache.path} holds no {what} of {self.name} for "
                f"{first.describe()}{more}; {verb} online once, or ship the cache that has it"
            )
        where = {key: indices for key, (_, indices) in todo.items()}
        for request, answer in dispatch([request for request, _ in todo.values()]):
            value = check(answer, request)
            if put is not None:
                value = put(
                    identity,
                    request,
                    value,
                    input_tokens=answer.input_tokens,
                    output_tokens=answer.output_tokens,
                )
            self.meter.add(
                calls=1, input_tokens=answer.input_tokens, output_tokens=answer.output_tokens
            )
            for i in where[digest(identity, request)]:
                out[i] = value.copy() if isinstance(value, np.ndarray) else value
        return out

    def __repr__(self) -> str:
        return self.name


def check_scorer(scorer, argument: str = "scorer") -> Scorer:
    """`scorer`, a `Scorer` (a plain function is refused: wrap it in `FunctionScorer`)."""
    if not isinstance(scorer, Scorer):
        raise TypeError(f"`{argument}` must be a bj.scorers.Scorer, got {scorer!r}")
    return scorer


def _check_text(text, request: TextRequest, *, who: str) -> str:
    if not isinstance(text, str):
        raise ReplyError(
            f"{who} returned {text!r:.200} for {request.describe()}: expected a string of text"
        )
    return text


class FunctionScorer(Scorer):
    """A scorer that calls a Python or JAX function.

    - `fn`: `fn(request) -> logits [K]` (any array-like: a list, a NumPy or JAX array), or
      with `batched=True`, `fn(requests) -> [N, K]` logits or a list of N `[K]` rows (one
      call for all the misses of a `score` call: a place to `jax.vmap` a local model).
    - `text`: `text(text_request) -> str`, for `generate` (a local text model; it gets the
      seed, temperature and token limit in the request); `fn` may be None with `text` given.
    - `name`, `version`: the functions' identity in the cache (default name: the module and
      qualified name of `fn`, else of `text`); change `version` when a function changes. A
      cache needs a name that a lambda cannot give, so a lambda with a cache needs `name=`.
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
        fn: Callable | None,
        *,
        text: Callable | None = None,
        batched: bool = False,
        name: str | None = None,
        version: str = "1",
        cache: Cache | None = None,
        meter: Meter | None = None,
        concurrency: int = 1,
    ):
        if not callable(fn) and not (fn is None and text is not None):
            raise TypeError(
                f"`fn` must be a function of a Request (or None with `text`), got {fn!r}"
            )
        if text is not None and not callable(text):
            raise TypeError(f"`text` must be a function of a TextRequest or None, got {text!r}")
        if not isinstance(batched, bool):
            raise TypeError(f"`batched` must be True or False, got {batched!r}")
        if name is None:
            named = fn if fn is not None else text
            name = f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', type(named).__name__)}"
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
        self.text = text
        self.identity = json.dumps(
            {"kind": "function", "name": name, "version": version}, sort_keys=True
        )
        if text is not None:
            self.text_identity = json.dumps(
                {"kind": "function-text", "name": name, "version": version}, sort_keys=True
            )
        self.name = f"FunctionScorer({name!r})"

    def _answer(self, request: Request) -> Answer:
        if self.fn is None:
            raise TypeError(f"{self.name} was given no `fn`: it writes text only")
        return Answer(self.fn(request))

    def _generate(self, request: TextRequest) -> TextAnswer:
        if self.text is None:
            raise TypeError(f"{self.name} was given no `text` function: it scores options only")
        return TextAnswer(self.text(request))

    def _dispatch(self, requests):
        if not self.batched:
            yield from super()._dispatch(requests)
            return
        if not requests:
            return
        if self.fn is None:
            raise TypeError(f"{self.name} was given no `fn`: it writes text only")
        rows = self.fn(list(requests))
        if (
            isinstance(rows, (str, bytes, dict))
            or not hasattr(rows, "__len__")
            or getattr(rows, "ndim", 1) == 0
        ):
            raise ValueError(
                f"{self.name} (batched) returned {rows!r:.80} for {len(requests)} requests: expected "
                "[N, K] logits or a list of N rows, one per request"
            )
        if len(rows) != len(requests):
            raise ValueError(
                f"{self.name} returned {len(rows)} rows of logits for {len(requests)} requests"
            )
        for request, row in zip(requests, rows):
            yield request, Answer(row)
