"""Replies to logits: the log-probabilities of the option letters (blamejax's one rule,
`blamejax/_replies.py`), or scores as JSON."""

from __future__ import annotations

import json
import math

import numpy as np

from .._replies import ABSENT as ABSENT
from .._replies import ReplyError as ReplyError
from .._replies import logits_from_top
from ._request import Request


def logits_from_logprobs(
    top, request: Request, *, absent: str = "error", who: str = "the model", rule: str = "letters"
) -> np.ndarray:
    """Logits from the first generated token's `top` log-probabilities, `[(token, logprob)]`.

    The rule is blamejax's one reply-to-logits rule (shared with
    `bj.traces.logits_from_response`): with `rule="letters"` (default) option i is the letter
    `LABELS[i]`, and a token counts for it when it equals the letter after stripping white
    space (so `"B"` and `" B"` both count, their probabilities added); with
    `rule="first-token"` a token counts for an option when, stripped and compared without
    case, it starts the option's text. Other tokens are ignored (the logits are not
    normalised). An option no token counts for is unranked, not impossible: an error
    (`absent="error"`), or the lowest log-probability returned (`absent="floor"`: an upper
    bound of its own); never `-inf`.

    **Raises:** `ReplyError` naming the scorer, the step, the variant and what to change.

    ```python
    from blamejax.scorers import Request, logits_from_logprobs
    request = Request("route", "fix", "refund please", ("refund", "escalate"))
    top = [("A", -0.2), (" A", -3.0), ("B", -2.0)]
    assert logits_from_logprobs(top, request).round(3).tolist() == [-0.141, -2.0]
    ```
    """
    return logits_from_top(
        top, request.options, rule=rule, absent=absent, where=f"{who} on {request.describe()}"
    )


def _quote(text, limit: int = 200) -> str:
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
