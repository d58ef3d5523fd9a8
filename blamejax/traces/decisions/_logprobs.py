"""Decisions from the LLM call itself: the logits of declared options, read from the
log-probabilities an OpenAI-compatible chat completion returns (`logprobs=True`,
`top_logprobs=N`), and the option the reply chose.

The rule is blamejax's one reply-to-logits rule (`blamejax/_replies.py`, shared with the
scorers), read here in its first-token mode: the candidates are the first generated token's
`top_logprobs` (and that token itself); a candidate counts for an option when the token,
stripped of white space and compared without case, is a non-empty prefix of the option (so
`"search"`, `" Search"` and `"se"` all count for `"search"`); an option's logit is the log of
the summed probabilities of its candidates. An option no candidate counts for was not ranked
among the top N: an error, or the lowest returned log-probability (`absent="floor"`), never
`-inf`. A token that is a prefix of two options cannot tell them apart and is an error:
declare options whose first tokens differ (letters, or distinct first words).
`decisions_from_logprobs` applies the rule after the fact, to the responses that an
instrumentation kept in imported runs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

from ..._replies import check_rule, first_token_candidates, logits_from_top, plain
from ..format._check import shown
from ..format._format import Run
from ..importers.spans._langchain import as_chat_completion
from ._declare import check_options
from ._nothing import nothing_matched


def logits_from_response(
    response, options, *, rule: str = "first-token", absent: str = "error"
) -> tuple[float, ...]:
    """The logits of the declared `options` from a chat completion's log-probabilities.

    The reading is blamejax's one reply-to-logits rule, shared with the scorers
    (`bj.scorers.logits_from_logprobs`; the rule and its assumptions are in the guide
    docs/local_model.md).

    **Arguments:**
    - `response`: a `chat.completion` (a dict, or the `openai` client's `ChatCompletion`)
      asked with `logprobs=True` and `top_logprobs=N`.
    - `options`: the options the call chooses among (distinct strings).
    - `rule`: `"first-token"` (default: the model answered with an option's text; a
      candidate counts for an option when, stripped of white space and compared without
      case, it is a non-empty prefix of the option) or `"letters"` (the model answered with
      the letter A, B, ... of the option).
    - `absent`: what an option no candidate counts for gets: `"error"` (default) or
      `"floor"`, the lowest log-probability returned (an upper bound of its own). It is
      unranked by the server, not impossible, so it never gets `-inf`.

    **Returns:** one float per option: the log of the summed probabilities of the first
    token's candidates (its `top_logprobs` and the token itself) that count for it. They are
    log-probabilities, not normalised over the options.

    **Raises:** `bj.scorers.ReplyError` (a `ValueError`) for a response without
    log-probabilities, a token that is a prefix of two options, no option matched at all, or
    an option no candidate counts for with `absent="error"`; `TypeError` for a response or
    options of the wrong type.

    ```python
    import math
    import blamejax as bj

    response = {"object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": "answer"},
        "logprobs": {"content": [{"token": "answer", "logprob": -0.25, "top_logprobs": [
            {"token": "answer", "logprob": -0.25}, {"token": " Search", "logprob": -1.5},
            {"token": "se", "logprob": -3.0}]}]}}]}
    logits = bj.traces.logits_from_response(response, ["search", "answer", "ask"], absent="floor")
    assert logits[1] == -0.25 and logits[2] == -3.0  # 'ask' is unranked: the floor
    assert math.isclose(logits[0], math.log(math.exp(-1.5) + math.exp(-3.0)))
    assert bj.traces.choice_from_response(response, ["search", "answer", "ask"]) == "answer"
    ```
    """
    response = as_chat_completion(response)  # LangChain's LLMResult or AIMessage
    options = check_options(options)
    check_rule(rule)
    if rule == "likelihood":
        raise ValueError(
            "`rule='likelihood'` needs each option's token log-probabilities as the prompt's "
            "continuation, which a chat completion does not carry: score the options with "
            "bj.scorers.LlamaScorer"
        )
    top = first_token_candidates(response, where="`response`")
    logits = logits_from_top(top, options, rule=rule, absent=absent, where="`response`")
    return tuple(float(x) for x in logits)


def choice_from_response(response, options) -> str:
    """The option a chat completion's reply chose: the option its text (stripped of white
    space, compared without case) equals, else the one option it starts with.

    **Raises:** `ValueError` when the reply names no option or several.
    """
    options = check_options(options)
    data = plain(as_chat_completion(response))
    try:
        text = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"`response` has no choices[0].message.content: {shown(data)}") from None
    text = (text or "").strip()
    folded = text.casefold()
    equal = [o for o in options if o.casefold() == folded]
    if len(equal) == 1:
        return equal[0]
    starts = [
        o
        for o in options
        if folded and (folded.startswith(o.casefold()) or o.casefold().startswith(folded))
    ]
    if len(starts) != 1:
        raise ValueError(
            f"`response`: the reply {text!r} names {'no' if not starts else 'more than one'} option of "
            f"{shown(list(options))}"
        )
    return starts[0]


def _response_of(step):
    """The chat completion a traced LLM step kept, or None: OpenInference's `output.value`
    (a JSON string), in the step's `extra.attributes` or as its `output`, or MLflow's
    `mlflow.spanOutputs` (decoded on import)."""
    attributes = step.extra.get("attributes") or {}
    texts = [attributes.get("output.value"), step.output]
    kept = attributes.get("mlflow.spanOutputs")
    if isinstance(kept, dict):  # MLflow: the call's return value, already decoded
        texts.insert(0, json.dumps(kept))
    for text in texts:
        if isinstance(text, str) and text.lstrip().startswith("{"):
            try:
                data = as_chat_completion(json.loads(text))
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


def decisions_from_logprobs(runs, options, *, accept=None, absent: str = "error") -> list:
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
    - `absent`: for an option the first token's candidates miss, `"error"` (default) or
      `"floor"` (as `logits_from_response`).

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
    out, declared_for, converted = [], set(), 0
    for run in runs:
        if not isinstance(run, Run):
            raise TypeError(f"`runs` must hold bj.traces.Run, got {type(run).__name__}")
        steps = []
        for step in run.steps:
            declared, named = _lookup(options, run, step, "options")
            declared_for.update([step.agent] if declared is not None else [])
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
                    "log-probabilities: record the decision with bj.traces.record_decision, or "
                    "declare it with bj.traces.declare_decisions and score it with "
                    "bj.traces.score_decisions)"
                )
            try:
                logits = logits_from_response(response, declared, absent=absent)
                choice = choice_from_response(response, declared)
            except ValueError as error:
                hint = (
                    "; for a trace without log-probabilities, declare the decisions with "
                    "bj.traces.declare_decisions and score them with bj.traces.score_decisions"
                    if "no log-probabilities" in str(error)
                    else ""
                )
                raise ValueError(f"{where}: {error}{hint}") from None
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
    converted = sum(len(new.decisions) - len(old.decisions) for new, old in zip(out, runs))
    nothing_matched(runs, options, declared_for, converted)  # never a silent no-op
    return out
