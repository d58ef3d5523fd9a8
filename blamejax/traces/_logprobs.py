"""Decisions from the LLM call itself: the logits of declared options, read from the
log-probabilities an OpenAI-compatible chat completion returns (`logprobs=True`,
`top_logprobs=N`), and the option the reply chose.

The rule, for options declared by the caller: the candidates are the first generated token's
`top_logprobs` (and that token itself). A candidate counts for an option when the token,
stripped of white space, is a non-empty prefix of the option (so `"search"`, `" search"` and
`"se"` all count for `"search"`); an option's logit is the log of the summed probabilities of
its candidates; an option no candidate counts for gets `-inf` (the server did not rank it
among the top N). A token that is a prefix of two options cannot tell them apart and is an
error: declare options whose first tokens differ (letters, or distinct first words).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ._check import shown


def _plain(response):
    """A chat completion as plain data: a dict, or an SDK object's `model_dump()`."""
    if isinstance(response, Mapping):
        return response
    dump = getattr(response, "model_dump", None)
    if callable(dump):
        return dump()
    raise TypeError(
        f"`response` must be a chat.completion (a dict, or the openai client's object), got {type(response).__name__}"
    )


def check_options(options) -> tuple[str, ...]:
    """`options` checked: a non-empty sequence of distinct non-empty strings."""
    if isinstance(options, str) or not isinstance(options, Sequence):
        raise TypeError(f"`options` must be a list of strings, got {shown(options)}")
    options = tuple(options)
    if not options or not all(isinstance(o, str) and o for o in options):
        raise ValueError(f"`options` must be a non-empty list of non-empty strings, got {shown(list(options))}")
    if len(set(options)) != len(options):
        raise ValueError(f"`options` must be distinct, got {shown(list(options))}")
    return options


def _first_token(response) -> dict:
    data = _plain(response)
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"`response` has no choices: {shown(data)}") from None
    content = ((choice.get("logprobs") or {}).get("content")) or []
    if not content:
        raise ValueError(
            "`response` carries no log-probabilities (choices[0].logprobs.content is empty); "
            "ask for them with logprobs=True, top_logprobs=N"
        )
    return content[0]


def logits_from_response(response, options) -> tuple[float, ...]:
    """The logits of the declared `options` from a chat completion's log-probabilities.

    **Arguments:**
    - `response`: a `chat.completion` (a dict, or the `openai` client's `ChatCompletion`)
      asked with `logprobs=True` and `top_logprobs=N`.
    - `options`: the options the call chooses among (distinct strings).

    **Returns:** one float per option: the log of the summed probabilities of the first
    token's candidates (its `top_logprobs` and the token itself) whose text, stripped of
    white space, is a non-empty prefix of the option; `-inf` for an option no candidate
    counts for. They are log-probabilities, not normalised over the options.

    **Raises:** `ValueError` for a response without log-probabilities, a token that is a
    prefix of two options, or no option matched at all; `TypeError` for a response or options
    of the wrong type.

    ```python
    import math
    import blamejax as bj

    response = {"object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "answer"},
        "logprobs": {"content": [{"token": "answer", "logprob": -0.25, "top_logprobs": [
            {"token": "answer", "logprob": -0.25}, {"token": " search", "logprob": -1.5},
            {"token": "search", "logprob": -3.0}]}]}}]}
    logits = bj.traces.logits_from_response(response, ["search", "answer", "ask"])
    assert logits[1] == -0.25 and logits[2] == -math.inf
    assert math.isclose(logits[0], math.log(math.exp(-1.5) + math.exp(-3.0)))
    assert bj.traces.choice_from_response(response, ["search", "answer", "ask"]) == "answer"
    ```
    """
    options = check_options(options)
    first = _first_token(response)
    candidates = {}
    for entry in [first, *(first.get("top_logprobs") or [])]:
        token, logprob = entry.get("token"), entry.get("logprob")
        if not isinstance(token, str) or isinstance(logprob, bool) or not isinstance(logprob, int | float):
            raise ValueError(f"`response`: a log-probability entry is not {{token, logprob}}: {shown(entry)}")
        if math.isnan(logprob) or logprob > 0:
            raise ValueError(f"`response`: token {token!r} has log-probability {logprob!r}; expected a number <= 0")
        candidates.setdefault(token, float(logprob))  # the token itself repeats its top entry
    found: list[list[float]] = [[] for _ in options]
    for token, logprob in candidates.items():
        text = token.strip()
        matched = [i for i, option in enumerate(options) if text and option.startswith(text)]
        if len(matched) > 1:
            raise ValueError(
                f"`response`: the token {token!r} is the start of several options "
                f"{shown([options[i] for i in matched])}, so the first token cannot tell them apart; "
                "declare options whose first tokens differ (letters, or distinct first words)"
            )
        if matched:
            found[matched[0]].append(logprob)
    if not any(found):
        raise ValueError(
            f"`response`: none of the first token's candidates {shown(sorted(candidates))} starts any "
            f"option of {shown(list(options))}; ask for more top_logprobs, or declare the options the "
            "model was told to answer with"
        )
    return tuple(
        float(np.logaddexp.reduce(np.asarray(values, np.float64))) if values else -math.inf
        for values in found
    )


def choice_from_response(response, options) -> str:
    """The option a chat completion's reply chose: the option its text (stripped of white
    space) equals, else the one option it starts with.

    **Raises:** `ValueError` when the reply names no option or several.
    """
    options = check_options(options)
    data = _plain(response)
    try:
        text = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"`response` has no choices[0].message.content: {shown(data)}") from None
    text = (text or "").strip()
    if text in options:
        return text
    starts = [o for o in options if text and (text.startswith(o) or o.startswith(text))]
    if len(starts) != 1:
        raise ValueError(
            f"`response`: the reply {text!r} names {'no' if not starts else 'more than one'} option of "
            f"{shown(list(options))}"
        )
    return starts[0]
