"""Replies to logits: the log-probabilities of the option letters, or scores as JSON."""

from __future__ import annotations

import json
import math

import numpy as np

from ._prompt import LABELS
from ._request import Request


class ReplyError(ValueError):
    """A reply that cannot be read as scores of the request's options."""


ABSENT = ("error", "floor")


def _quote(text, limit: int = 200) -> str:
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def logits_from_logprobs(
    top, request: Request, *, absent: str = "error", who: str = "the model"
) -> np.ndarray:
    """Logits from the first generated token's `top` log-probabilities, `[(token, logprob)]`.

    Rules: option i is the letter `LABELS[i]`; a token counts for it when it equals the
    letter after stripping white space (so `"B"` and `" B"` both count, their probabilities
    added); other tokens are ignored (the logits are not normalised). An option whose letter
    is not among the tokens is an error (`absent="error"`), or gets the lowest log-probability
    returned (`absent="floor"`: an upper bound of its own).
    """
    if not top:
        raise ReplyError(
            f"{who} returned no log-probabilities for {request.describe()}; the server may not "
            "support logprobs: use mode='json'"
        )
    found: dict = {}
    for token, logprob in top:
        try:
            value = float(logprob)
        except (TypeError, ValueError):
            raise ReplyError(
                f"{who} returned a non-numeric log-probability {logprob!r} for token {token!r}"
            ) from None
        if math.isnan(value) or value > 0:
            raise ReplyError(
                f"{who} returned the log-probability {value!r} for token {token!r}: expected a number <= 0"
            )
        found.setdefault(str(token).strip(), []).append(value)
    floor = min(v for values in found.values() for v in values)
    logits = []
    for i, option in enumerate(request.options):
        values = found.get(LABELS[i])
        if values is None:
            if absent == "floor":
                logits.append(floor)
                continue
            raise ReplyError(
                f"{who}: the letter {LABELS[i]!r} of option {option!r} is not among the returned "
                f"tokens {sorted(found)} for {request.describe()}; ask for more top_logprobs or pass "
                "absent='floor'"
            )
        logits.append(float(np.logaddexp.reduce(np.asarray(values, np.float64))))
    return np.asarray(logits, np.float64)


def _strip_fence(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        lines = text.split("\n")
        if len(lines) >= 2 and lines[-1].strip() == "```":
            return "\n".join(lines[1:-1]).strip()
    return text


def _reject_constant(name):
    raise ValueError(f"{name} is not a number JSON allows")


def logits_from_json(text, request: Request, *, who: str = "the model") -> np.ndarray:
    """Logits `log p` from a reply that is one JSON object `{option: p}` with `p` in [0, 1].

    Rules: a code fence around the object (```json ... ```) is removed; every option must
    appear exactly as written, with a number (not a string or a boolean) between 0 and 1;
    an option the model invented, a missing option, a non-numeric or out-of-range score,
    all scores 0, or a reply that is not one JSON object is a `ReplyError` quoting the reply.
    A score of 0 becomes -inf (the option is impossible).
    """
    if not isinstance(text, str):
        raise ReplyError(f"{who} returned no text for {request.describe()}, got {_quote(text)}")
    try:
        scores = json.loads(_strip_fence(text), parse_constant=_reject_constant)
    except ValueError as error:
        raise ReplyError(
            f"{who} replied with text that is not JSON ({error}) for {request.describe()}: {_quote(text)}"
        ) from None
    if not isinstance(scores, dict):
        raise ReplyError(
            f"{who} replied with JSON that is not an object of scores for {request.describe()}: {_quote(text)}"
        )
    invented = [k for k in scores if k not in request.options]
    if invented:
        raise ReplyError(
            f"{who} scored options that were not offered, {invented}, for {request.describe()}: {_quote(text)}"
        )
    missing = [o for o in request.options if o not in scores]
    if missing:
        raise ReplyError(
            f"{who} gave no score for the options {missing} of {request.describe()}: {_quote(text)}"
        )
    logits = []
    for option in request.options:
        value = scores[option]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0.0 <= value <= 1.0
        ):
            raise ReplyError(
                f"{who} scored option {option!r} with {value!r}: expected a probability between 0 and 1, "
                f"for {request.describe()}: {_quote(text)}"
            )
        logits.append(math.log(value) if value > 0 else -math.inf)
    if all(x == -math.inf for x in logits):
        raise ReplyError(f"{who} scored every option 0 for {request.describe()}: {_quote(text)}")
    return np.asarray(logits, np.float64)
