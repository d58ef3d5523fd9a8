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
`decisions_from_logprobs` applies the rule after the fact, to the responses that an
instrumentation kept in imported runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence

import numpy as np

from ._check import shown
from ._format import Run


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
        raise ValueError(
            f"`options` must be a non-empty list of non-empty strings, got {shown(list(options))}"
        )
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
        if (
            not isinstance(token, str)
            or isinstance(logprob, bool)
            or not isinstance(logprob, int | float)
        ):
            raise ValueError(
                f"`response`: a log-probability entry is not {{token, logprob}}: {shown(entry)}"
            )
        if math.isnan(logprob) or logprob > 0:
            raise ValueError(
                f"`response`: token {token!r} has log-probability {logprob!r}; expected a number <= 0"
            )
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


def _response_of(step):
    """The chat completion a traced LLM step kept, or None: OpenInference's `output.value`
    (a JSON string), in the step's `extra.attributes` or as its `output`."""
    texts = [(step.extra.get("attributes") or {}).get("output.value"), step.output]
    for text in texts:
        if isinstance(text, str) and text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and isinstance(data.get("choices"), list):
                return data
    return None


def _lookup(table, run, step, name):
    """(what `table` declares for `step`, whether a function declared it for this step):
    a mapping is keyed by agent."""
    if table is None:
        return None, False
    if callable(table):
        return table(run, step), True
    if not isinstance(table, Mapping):
        raise TypeError(
            f"`{name}` must be a mapping {{agent: options}} or a function, got {shown(table)}"
        )
    return (table.get(step.agent), False) if step.agent is not None else (None, False)


def decisions_from_logprobs(runs, options, *, accept=None) -> list:
    """Decision steps from the LLM calls of imported runs: each traced call whose response
    (kept by OpenInference in `output.value`) carries log-probabilities, and whose options
    are declared, becomes a decision step with those options, the factual logits read by
    `logits_from_response` and the choice read by `choice_from_response`.

    **Arguments:**
    - `runs`: `bj.traces.Run`s, as `bj.traces.from_openinference` imports them.
    - `options`: the declared options, `{agent: options}` (for the agent's steps that kept a
      chat completion), or a function `(run, step) -> options or None` (for the steps it
      names). Steps without declared options are left as they are.
    - `accept`: the options that count as right, in the same form as `options`, or `None`.

    **Returns:** the runs (a new list); each converted step keeps its name, agent, parents,
    text, tokens and `extra`, and gains `options`, `logits={"factual": ...}`, `choice` and
    `accept`. Its fix is scored afterwards (`bj.scorers.score_fixes`).

    **Raises:** `ValueError` naming the run and step when a step with declared options kept
    no chat completion, or its response has no log-probabilities (as `logits_from_response`).

    ```python
    import json
    import blamejax as bj
    response = {"object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "answer"},
        "logprobs": {"content": [{"token": "answer", "logprob": -0.2, "top_logprobs": [
            {"token": "answer", "logprob": -0.2}, {"token": "search", "logprob": -1.7}]}]}}]}
    call = bj.traces.Step("ChatCompletion", agent="Planner", output="answer",
                          extra={"attributes": {"output.value": json.dumps(response)}})
    [run] = bj.traces.decisions_from_logprobs([bj.traces.Run("t", (call,), passed=False)],
                                              {"Planner": ("search", "answer")},
                                              accept={"Planner": ("search",)})
    [step] = run.decisions
    assert step.logits == {"factual": (-1.7, -0.2)} and step.choice == "answer"
    ```
    """
    if isinstance(runs, (str, bytes)) or not isinstance(runs, Sequence):
        raise TypeError(f"`runs` must be a list of bj.traces.Run, got {type(runs).__name__}")
    if options is None or not (callable(options) or isinstance(options, Mapping)):
        raise TypeError(
            f"`options` must be a mapping {{agent: options}} or a function, got {shown(options)}"
        )
    out = []
    for run in runs:
        if not isinstance(run, Run):
            raise TypeError(f"`runs` must hold bj.traces.Run, got {type(run).__name__}")
        steps = []
        for step in run.steps:
            declared, named = _lookup(options, run, step, "options")
            response = None if declared is None else _response_of(step)
            if declared is None or step.options is not None or (response is None and not named):
                steps.append(step)  # an agent's options apply to its calls, not to its other spans
                continue
            where = f"run {run.run!r}, step {step.name!r}"
            declared = check_options(declared)
            if response is None:
                raise ValueError(
                    f"{where}: options are declared for it, but it kept no chat completion (OpenInference "
                    "keeps the response in output.value; OpenTelemetry GenAI spans drop the "
                    "log-probabilities: record the decision with bj.traces.record_decision)"
                )
            try:
                logits = logits_from_response(response, declared)
                choice = choice_from_response(response, declared)
            except ValueError as error:
                raise ValueError(f"{where}: {error}") from None
            labels, _ = _lookup(accept, run, step, "accept")
            steps.append(
                dataclasses.replace(
                    step,
                    options=declared,
                    logits={"factual": logits},
                    choice=choice,
                    accept=None if labels is None else tuple(labels),
                )
            )
        out.append(dataclasses.replace(run, steps=tuple(steps)))
    return out
