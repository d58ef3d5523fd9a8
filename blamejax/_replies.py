"""The one rule that turns a model's reply into the logits of declared options, shared by
`bj.scorers` (which asks the model) and `bj.traces` (which reads the calls a run kept).

Three readings, each valid under its own assumption:

- `"letters"`: option i was shown to the model as the letter `LABELS[i]` and the model was told
  to answer with a letter. A first-token candidate counts for option i when, stripped of white
  space, it is that letter (`"B"` and `" B"` both count, their probabilities added). Valid for
  models that follow the instruction; a small model may answer one letter whatever the question.
- `"first-token"`: the options are named (`"refund"`, `"escalate"`) and the model was told to
  answer with one of them. A candidate counts for an option when its text, stripped of white
  space and compared without case, is a non-empty prefix of the option's text (`"ref"`,
  `" Ref"` and `"refund"` all count for `"Refund"`). Valid only when the options' first tokens
  differ (a token that starts two options is an error) and when the reply starts with the
  option, not with a preamble (`"You"`, `"Sure"`).
- `"likelihood"`: each option's logit is the log-probability of its whole text as the
  continuation of the prompt, the sum of its tokens' log-probabilities (as lm-evaluation-harness
  scores multiple choice). Finite for every option; exact where the log-probabilities are the
  model's own (`bj.scorers.LlamaScorer`).

The two top-k readings see only the `top_logprobs` a server returned (at most 20). An option
none of them counts for is not impossible, only unranked: it is an error (`absent="error"`),
or it gets the lowest log-probability returned, an upper bound of its own (`absent="floor"`).
It never becomes `-inf`, which would make it a choice no replay could ever make.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

import numpy as np

LABELS = "ABCDEFGHIJKLMNOPQRST"  # one token each in common tokenizers; top_logprobs is at most 20
RULES = ("letters", "first-token", "likelihood")
ABSENT = ("error", "floor")


class ReplyError(ValueError):
    """A reply that cannot be read as scores of the request's options."""


def _shown(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 200 else text[:197] + "..."


def check_rule(rule) -> str:
    if rule not in RULES:
        raise ValueError(f"`rule` must be one of {RULES}, got {rule!r}")
    return rule


def check_absent(absent) -> str:
    if absent not in ABSENT:
        raise ValueError(f"`absent` must be one of {ABSENT}, got {absent!r}")
    return absent


def plain(response) -> Mapping:
    """A chat completion as plain data: a dict, or an SDK object's `model_dump()`."""
    if isinstance(response, Mapping):
        return response
    dump = getattr(response, "model_dump", None)
    if callable(dump):
        return dump()
    raise TypeError(
        f"`response` must be a chat.completion (a dict, or the openai client's object), got {type(response).__name__}"
    )


def first_token_candidates(response, *, where: str) -> list[tuple[object, object]]:
    """`[(token, logprob)]`: the first generated token of a chat completion and its
    `top_logprobs`; a `ReplyError` naming `where` when it carries no log-probabilities."""
    data = plain(response)
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise ReplyError(f"{where}: the response has no choices: {str(data)[:200]}") from None
    content = ((choice.get("logprobs") or {}).get("content")) or []
    if not content:
        raise ReplyError(
            f"{where}: the response carries no log-probabilities (choices[0].logprobs.content is "
            "empty); ask for them with logprobs=True, top_logprobs=N, or score the options by "
            "their likelihood (bj.scorers.LlamaScorer) where the server returns none"
        )
    first = content[0]
    return [
        (entry.get("token"), entry.get("logprob"))
        for entry in [first, *(first.get("top_logprobs") or [])]
    ]


def _checked(top, *, where: str) -> dict[str, float]:
    """`{token: logprob}` from `[(token, logprob)]`, each checked (a token repeated keeps its
    first value: the generated token repeats its own top entry)."""
    found: dict[str, float] = {}
    for token, logprob in top:
        if not isinstance(token, str) or isinstance(logprob, bool):
            raise ReplyError(
                f"{where}: a log-probability entry is not (token, number): {token!r}, {logprob!r}"
            )
        try:
            value = float(logprob)
        except (TypeError, ValueError):
            raise ReplyError(
                f"{where}: a non-numeric log-probability {logprob!r} for token {token!r}"
            ) from None
        if math.isnan(value) or value > 0:
            raise ReplyError(
                f"{where}: token {token!r} has log-probability {value!r}; expected a number <= 0"
            )
        found.setdefault(token, value)
    return found


def _counts(token: str, option: str, index: int, rule: str) -> bool:
    text = token.strip()
    if rule == "letters":
        return text == LABELS[index]
    return bool(text) and option.casefold().startswith(text.casefold())


def logits_from_top(top, options: Sequence[str], *, rule: str, absent: str, where: str):
    """The logits of `options` from a first token's candidates `top`, `[(token, logprob)]`,
    by the `"letters"` or `"first-token"` reading (module docstring).

    **Returns:** a float64 `[K]` array: for each option, the log of the summed probabilities
    of the candidates that count for it; an option none counts for is an error
    (`absent="error"`) or the lowest log-probability returned (`absent="floor"`).

    **Raises:** `ReplyError` naming `where` for no candidates, a malformed candidate, a token
    that counts for two options, no option counted at all, or (`absent="error"`) an option
    none counted for.
    """
    if rule not in ("letters", "first-token"):
        raise ValueError(f"`rule` must be 'letters' or 'first-token' here, got {rule!r}")
    check_absent(absent)
    if rule == "letters" and len(options) > len(LABELS):
        raise ValueError(
            f"{where}: the letters rule labels at most {len(LABELS)} options, got {len(options)}"
        )
    if not top:
        raise ReplyError(
            f"{where}: the model returned no log-probabilities; the server may not support "
            "logprobs: use mode='json', or score the options by their likelihood (bj.scorers.LlamaScorer)"
        )
    found = _checked(top, where=where)
    counted: list[list[float]] = [[] for _ in options]
    for token, logprob in found.items():
        matched = [i for i, o in enumerate(options) if _counts(token, o, i, rule)]
        if len(matched) > 1:
            raise ReplyError(
                f"{where}: the token {token!r} is the start of several options "
                f"{_shown([options[i] for i in matched])}, so the first token cannot tell them apart; "
                "declare options whose first tokens differ (letters, or distinct first words), or "
                "score them by their likelihood"
            )
        if matched:
            counted[matched[0]].append(logprob)
    if not any(counted):
        what = "letter of an option" if rule == "letters" else "start of an option"
        raise ReplyError(
            f"{where}: none of the first token's candidates {_shown(sorted(found))} is the {what} "
            f"of {_shown(list(options))} (the reply starts with something else); ask for more top_logprobs, "
            "tell the model to answer with the option only, or score the options by their "
            "likelihood (bj.scorers.LlamaScorer)"
        )
    floor = min(found.values())
    logits = []
    for i, (option, values) in enumerate(zip(options, counted)):
        if values:
            logits.append(float(np.logaddexp.reduce(np.asarray(values, np.float64))))
        elif absent == "floor":
            logits.append(floor)
        else:
            named = f"the letter {LABELS[i]!r} of option" if rule == "letters" else "option"
            raise ReplyError(
                f"{where}: {named} {option!r} is not among the returned tokens {_shown(sorted(found))}; "
                "it is unranked, not impossible: ask for more top_logprobs, pass absent='floor' "
                "(the lowest returned log-probability, an upper bound), or score the options by "
                "their likelihood (bj.scorers.LlamaScorer)"
            )
    return np.asarray(logits, np.float64)


def logits_from_likelihoods(token_logprobs: Sequence[Sequence[float]], *, where: str):
    """The `"likelihood"` reading: each option's logit is the sum of its continuation tokens'
    log-probabilities, `token_logprobs[i]` for option i (float64 `[K]`, every entry finite).

    **Raises:** `ReplyError` naming `where` for an option without tokens or a log-probability
    that is not a finite number <= 0.
    """
    logits = []
    for i, values in enumerate(token_logprobs):
        row = np.asarray(values, np.float64)
        if row.ndim != 1 or row.size == 0:
            raise ReplyError(f"{where}: option {i} has no tokens to score")
        if not np.all(np.isfinite(row)) or np.any(row > 0):
            raise ReplyError(
                f"{where}: option {i} has token log-probabilities {row.tolist()}; expected finite "
                "numbers <= 0"
            )
        logits.append(float(row.sum()))
    return np.asarray(logits, np.float64)
