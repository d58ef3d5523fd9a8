"""What a scorer is asked: one `Request` (step, variant, inputs, options), its stable JSON
key, and the check of the logits a scorer returns for it."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .._arguments import check_option_names


def canonical_json(value, *, where: str) -> str:
    """`value` as one stable line of JSON: sorted keys, no spaces, UTF-8 kept, no NaN or
    infinity (tuples are written as lists, so `(1, 2)` and `[1, 2]` are the same key)."""
    try:
        return json.dumps(
            value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"`{where}` must be plain JSON (str, number, bool, None, list, dict), got {value!r}: {error}"
        ) from None


class Request(NamedTuple):
    """One question to a scorer: how good is each of `options` at `step`, in `variant`,
    given `inputs`?

    - `step`: the step's name (a non-empty string).
    - `variant`: which logits are asked for, `"factual"` (what ran) or a fix (`"fix"`).
    - `inputs`: what the step saw, as plain JSON (a string, or a dict of strings and numbers).
    - `options`: the K options, distinct non-empty strings, in the order of the logits.

    `key` is the request as one stable line of JSON; with the scorer's identity it is the
    row of the cache.

    ```python
    from blamejax.scorers import Request
    r = Request("route", "factual", {"ticket": "refund please"}, ("refund", "escalate"))
    assert r.key == '["route","factual",{"ticket":"refund please"},["refund","escalate"]]'
    ```
    """

    step: str
    variant: str
    inputs: Any
    options: tuple[str, ...]

    @property
    def key(self) -> str:
        """The request as canonical JSON (step, variant, inputs, options): its cache key."""
        return canonical_json(
            [self.step, self.variant, self.inputs, list(self.options)], where="inputs"
        )

    def describe(self) -> str:
        """The request in words, for error messages."""
        inputs = canonical_json(self.inputs, where="inputs")
        if len(inputs) > 120:
            inputs = inputs[:117] + "..."
        return f"step {self.step!r}, variant {self.variant!r}, options {list(self.options)}, inputs {inputs}"


def check_request(request, *, where: str = "requests[0]") -> Request:
    """`request` (a `Request` or a 4-tuple) checked, with `options` as a tuple."""
    if not isinstance(request, tuple) or len(request) != 4:
        raise TypeError(
            f"`{where}` must be a bj.scorers.Request(step, variant, inputs, options), got {request!r}"
        )
    step, variant, inputs, options = request
    for name, value in (("step", step), ("variant", variant)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"`{where}.{name}` must be a non-empty string, got {value!r}")
    options = check_option_names(options, f"{where}.options")
    canonical_json(inputs, where=f"{where}.inputs")
    return Request(step, variant, inputs, options)


def check_requests(requests) -> list[Request]:
    if (
        isinstance(requests, Request)
        or isinstance(requests, (str, bytes))
        or not isinstance(requests, Sequence)
    ):
        raise TypeError(
            f"`requests` must be a list of bj.scorers.Request, got {type(requests).__name__}"
        )
    return [check_request(r, where=f"requests[{i}]") for i, r in enumerate(requests)]


def check_logits(logits, request: Request, *, who: str) -> np.ndarray:
    """`logits` as a float64 `[K]` array: finite or -inf, not all -inf; else a `ValueError`
    naming `who` (the scorer) and the request."""
    try:
        row = np.asarray(logits, np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"{who} returned {logits!r} for {request.describe()}: expected {len(request.options)} numbers"
        ) from None
    if row.shape != (len(request.options),):
        raise ValueError(
            f"{who} returned logits of shape {row.shape} for {request.describe()}: expected shape "
            f"({len(request.options)},), one per option"
        )
    bad = np.isnan(row) | (row == math.inf)
    if bad.any() or (row == -math.inf).all():
        raise ValueError(
            f"{who} returned logits {row.tolist()} for {request.describe()}: expected finite numbers "
            "or -inf, not all -inf"
        )
    return row


def digest(identity: str, request: Request) -> str:
    """The cache row's key: a SHA-256 of the scorer's identity and the request's key."""
    return hashlib.sha256((identity + "\n" + request.key).encode("utf-8")).hexdigest()


def encode_logits(row: np.ndarray) -> str:
    """Logits as JSON; -inf as the string "-inf" (as trace files write it). Exact: Python
    writes the shortest decimal that reads back as the same float64."""
    return json.dumps([("-inf" if x == -math.inf else float(x)) for x in row.tolist()])


def decode_logits(text: str) -> np.ndarray:
    return np.asarray([(-math.inf if x == "-inf" else x) for x in json.loads(text)], np.float64)
