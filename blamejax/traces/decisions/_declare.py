"""Decisions declared on a trace that kept no log-probabilities: which steps chose among
which options (by agent, by span name, or by a function), the option each reply named, and
the factual logits scored afterwards by a scorer from the prompt the trace recorded.

`declare_decisions` marks the steps (options, the observed choice read from the reply's
text, the accepted options); `score_decisions` asks a `bj.scorers.Scorer` for the factual
logits of every declared decision from its recorded prompt (`prompt_of`); the fixes are
scored as for any decision (`bj.scorers.score_fixes`). Nothing is re-run: the scorer is
asked how likely each option was given what the step saw.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence

from ..._arguments import check_option_names
from ..format._check import shown
from ..format._format import Run, Step

#: How a mapping of declared options is keyed.
BY = ("agent", "span")
_MODEL_OPERATIONS = ("chat", "text_completion", "generate_content", "completion")


def check_options(options) -> tuple[str, ...]:
    """`options` checked: a non-empty sequence of distinct non-empty strings."""
    return check_option_names(options, "options")


def is_model_call(step: Step) -> bool:
    """Whether an imported step is a model call: a GenAI inference span (`gen_ai.operation.name`
    chat/text_completion/generate_content, a `gen_ai.request.model`, Traceloop's
    `llm.request.type`) or an OpenInference LLM span."""
    a = step.extra.get("attributes") or {}
    return (
        a.get("gen_ai.operation.name") in _MODEL_OPERATIONS
        or "gen_ai.request.model" in a
        or "llm.request.type" in a
        or a.get("openinference.span.kind") == "LLM"
        or a.get("mlflow.spanType") in ("CHAT_MODEL", "LLM")
    )


def _span_name(step: Step) -> str:
    name = step.extra.get("name")
    return name if isinstance(name, str) and name else step.name


def check_runs(runs) -> list:
    if isinstance(runs, (str, bytes, Run)) or not isinstance(runs, Sequence):
        raise TypeError(f"`runs` must be a list of bj.traces.Run, got {type(runs).__name__}")
    for i, run in enumerate(runs):
        if not isinstance(run, Run):
            raise TypeError(f"`runs[{i}]` must be a bj.traces.Run, got {type(run).__name__}")
    return list(runs)


def check_table(table, name: str, by: str):
    if by not in BY:
        raise ValueError(f"`by` must be one of {BY}, got {by!r}")
    if table is None and name == "accept":
        return None
    if callable(table) or isinstance(table, Mapping):
        return table
    raise TypeError(
        f"`{name}` must be a mapping {{{by}: options}} or a function (run, step) -> options, "
        f"got {shown(table)}"
    )


def lookup(table, run: Run, step: Step, by: str):
    """What `table` declares for `step`: a function is asked for every step; a mapping keyed
    by agent applies to the agent's model calls, keyed by span name to every span of that
    name."""
    if table is None:
        return None
    if callable(table):
        return table(run, step)
    if by == "span":
        return table.get(_span_name(step), table.get(step.name))
    if step.agent is None or not is_model_call(step):
        return None
    return table.get(step.agent)


def unmatched(table, runs, by: str, matched: set) -> None:
    """Raise when a declaration matched no step of `runs`: a key of a mapping that named no
    step, or a function that declared nothing."""
    where = ", ".join(repr(r.run) for r in runs[:5]) + (", ..." if len(runs) > 5 else "")
    if callable(table):
        if not matched:
            raise ValueError(
                f"the function declaring the options declared none for any step of runs {where}: "
                "it must return the options of the decision steps (None for the others)"
            )
        return
    missing = [key for key in table if key not in matched]
    if not missing:
        return
    if by == "agent":
        seen = sorted({s.agent for r in runs for s in r.steps if s.agent and is_model_call(s)})
        hint = (
            f"the agents with model calls in these runs are {seen}"
            if seen
            else "no model call in these runs has an agent (see the agent rule in "
            "docs/traces.md), so declare by span name (by='span') or by a function"
        )
    else:
        seen = sorted({_span_name(s) for r in runs for s in r.steps})
        hint = f"the span names in these runs are {seen[:20]}" + (" ..." if len(seen) > 20 else "")
    raise ValueError(
        f"options are declared for {by}s {missing} that match no step of runs {where}; {hint}"
    )


def choice_of_text(text: str, options) -> str | None:
    """The option a reply's text names: the option it equals (white space stripped, case
    ignored), else the one option it starts with or that starts with it; None when it names
    none or several."""
    said = text.strip().strip(".!\"'`").strip().casefold()
    if not said:
        return None
    for option in options:
        if said == option.casefold():
            return option
    starts = [o for o in options if said.startswith(o.casefold()) or o.casefold().startswith(said)]
    return starts[0] if len(starts) == 1 else None


def declare_decisions(runs, options, *, accept=None, by: str = "agent") -> list:
    """Mark the decision steps of imported runs that kept no log-probabilities: each declared
    step gets its `options`, the option its reply named as its `choice`, and its `accept`;
    its logits are scored afterwards (`score_decisions`, then `bj.scorers.score_fixes`).

    **Arguments:**
    - `runs`: `bj.traces.Run`s, as the span importers return them.
    - `options`: the declared options, `{agent: options}` (every model call of the agent:
      a GenAI `chat`/`text_completion` span, an OpenInference LLM span),
      `{span name: options}` with `by="span"` (every span of that name, as the tracer wrote
      it), or a function `(run, step) -> options or None`.
    - `accept`: the options that count as right, in the same form, or `None`.
    - `by`: `"agent"` or `"span"`, what a mapping's keys name.

    **Returns:** the runs (a new list); each declared step keeps its name, agent, parents,
    text, tokens and `extra`.

    **Raises:** `ValueError` for a declaration that matches no step (naming what the runs
    hold), a declared step that kept no reply text to read the choice from, or whose text
    names no option (naming the run, the step and the way out); `TypeError` for arguments of
    the wrong type.

    ```python
    import blamejax as bj
    call = bj.traces.Step("chat", agent="Planner", output="answer",
                          extra={"attributes": {"gen_ai.operation.name": "chat"}})
    runs = [bj.traces.Run("t1", (call,), passed=False)]
    [run] = bj.traces.declare_decisions(runs, {"Planner": ("search", "answer")},
                                        accept={"Planner": ("search",)})
    [step] = run.decisions
    assert (step.options, step.choice, step.accept, step.logits) == (
        ("search", "answer"), "answer", ("search",), None)
    ```
    """
    runs = check_runs(runs)
    options = check_table(options, "options", by)
    accept = check_table(accept, "accept", by)

    matched: set = set()
    out = []
    for run in runs:
        steps = []
        for step in run.steps:
            declared = lookup(options, run, step, by)
            if declared is not None:
                matched.add(step.agent if by == "agent" else _span_name(step))
                if by == "span" and not callable(options) and step.name in options:
                    matched.add(step.name)
            if declared is None or step.options is not None:
                steps.append(step)
                continue
            where = f"run {run.run!r}, step {step.name!r}"
            try:
                declared = check_options(declared)
            except (TypeError, ValueError) as error:
                raise type(error)(f"{where}: {error}") from None
            if not isinstance(step.output, str) or not step.output.strip():
                raise ValueError(
                    f"{where}: declared a decision, but it kept no reply text to read the choice "
                    "from; record the content (OpenTelemetry GenAI: "
                    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY; OpenInference "
                    "keeps it unless hidden), or declare the decision with a function that "
                    "names the steps that replied"
                )
            choice = choice_of_text(step.output, declared)
            if choice is None:
                raise ValueError(
                    f"{where}: its reply {shown(step.output[:80])} names no single option of "
                    f"{shown(list(declared))}; declare the options the model was told to answer "
                    "with"
                )
            labels = lookup(accept, run, step, by)
            if labels is not None:
                labels = tuple(labels)
                wrong = [x for x in labels if x not in declared]
                if wrong:
                    raise ValueError(
                        f"{where}: `accept` names {shown(wrong)}, which are not among its options "
                        f"{shown(list(declared))}"
                    )
            steps.append(dataclasses.replace(step, options=declared, choice=choice, accept=labels))
        out.append(dataclasses.replace(run, steps=tuple(steps)))
    unmatched(options, runs, by, matched)
    return out


def _messages(value) -> list | None:
    """GenAI messages (`[{"role", "parts": [{"type": "text", "content"}]}]` or
    `[{"role", "content"}]`, a list or a JSON string of one) as `[{"role", "content"}]`."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not isinstance(value, list) or not value:
        return None
    out = []
    for m in value:
        if not isinstance(m, dict):
            return None
        content = m.get("content")
        if not isinstance(content, str):
            parts = m.get("parts") or []
            texts = [
                p.get("content")
                for p in parts
                if isinstance(p, dict) and isinstance(p.get("content"), str)
            ]
            content = "\n".join(texts) if texts else None
        if content is None:
            continue
        out.append({"role": str(m.get("role", "user")), "content": content})
    return out or None


def _indexed_messages(a, pattern) -> list | None:
    """Messages written one attribute per field: `gen_ai.prompt.<i>.role`/`.content`, or
    OpenInference's `llm.input_messages.<i>.message.role`/`.content`."""
    found: dict = {}
    for key, value in a.items():
        m = re.fullmatch(pattern, key)
        if m:
            found.setdefault(int(m.group(1)), {})[m.group(2)] = value
    out = [
        {"role": str(fields.get("role", "user")), "content": fields["content"]}
        for _, fields in sorted(found.items())
        if isinstance(fields.get("content"), str)
    ]
    return out or None


def prompt_of(step: Step) -> list | None:
    """The prompt a traced model call recorded, as `[{"role", "content"}]`, or None: the
    GenAI `gen_ai.input.messages` (an attribute, or a joined log record's), the older
    `gen_ai.prompt.<i>.role`/`.content`, OpenInference's
    `llm.input_messages.<i>.message.role`/`.content`, or the `messages` of MLflow's
    `mlflow.spanInputs`.

    ```python
    import blamejax as bj
    step = bj.traces.Step("chat", extra={"attributes": {
        "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "You plan.",
        "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "When?"}})
    assert bj.traces.prompt_of(step) == [
        {"role": "system", "content": "You plan."}, {"role": "user", "content": "When?"}]
    ```
    """
    if not isinstance(step, Step):
        raise TypeError(f"`step` must be a bj.traces.Step, got {type(step).__name__}")
    a = step.extra.get("attributes") or {}
    found = _messages(a.get("gen_ai.input.messages"))
    if found is None:
        for record in step.extra.get("logs") or ():
            if isinstance(record, dict):
                found = found or _messages(
                    (record.get("attributes") or {}).get("gen_ai.input.messages")
                )
    if found is None:
        found = _indexed_messages(a, r"gen_ai\.prompt\.(\d+)\.(role|content)")
    if found is None:
        found = _indexed_messages(a, r"llm\.input_messages\.(\d+)\.message\.(role|content)")
    inputs = a.get("mlflow.spanInputs")
    if found is None and isinstance(inputs, dict):  # MLflow: the call's own arguments
        found = _messages(inputs.get("messages"))
    return found


def _default_request(run, step, variant, parent):
    prompt = prompt_of(step)
    if prompt is None:
        raise ValueError(
            f"run {run.run!r}, step {step.name!r}: it kept no prompt for the scorer to read "
            "(no gen_ai.input.messages, gen_ai.prompt.N.content or llm.input_messages); record "
            "the content (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY), or pass "
            "request=(run, step, variant, parent) -> Request that builds it from what the step kept"
        )
    # a bj.scorers.Request is this 4-tuple (step, variant, inputs, options); the scorers
    # import the traces, so the traces build none of their types
    return (step.name, variant, {"agent": step.agent, "messages": prompt}, step.options)


def score_decisions(
    runs,
    scorer,
    request: Callable | None = None,
    *,
    steps=None,
    batch_size: int = 32,
    progress: bool = False,
) -> list:
    """Give every declared decision without logits its factual logits, scored by `scorer`
    from what the step saw: by default its recorded prompt (`prompt_of`) and agent,
    `Request(step.name, "factual", {"agent": step.agent, "messages": prompt}, step.options)`.

    **Arguments:**
    - `runs`: `bj.traces.Run`s whose decisions were declared (`declare_decisions`).
    - `scorer`: a `bj.scorers.Scorer` (the same model, asked how likely each option was).
    - `request`: `request(run, step, variant, parent) -> Request`, or `None` for the default
      above (variant `"factual"`; `parent` is `None`: declared decisions are given no step).
    - `steps`: step names to score, or `None` for all; `batch_size`: requests per call of
      `scorer.score`; `progress`: show a progress bar (tqdm) over the batches.

    **Returns:** the runs (a new list), each scored step's `logits` holding `"factual"`. The
    fixes are scored next by `bj.scorers.score_fixes(runs, scorer, fix_request)`.

    **Raises:** `ValueError` naming the run and step when the step kept no prompt (with the
    default request), when its observed choice gets logit -inf (the scorer says it could
    not have been chosen), or when no step is left to score.

    ```python
    import numpy as np
    import blamejax as bj
    from blamejax.scorers import FunctionScorer
    call = bj.traces.Step("chat", agent="Planner", output="answer", extra={"attributes": {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "Plan"}]}]'}})
    runs = bj.traces.declare_decisions([bj.traces.Run("t1", (call,), passed=False)],
                                       {"Planner": ("search", "answer")})
    [run] = bj.traces.score_decisions(runs, FunctionScorer(lambda r: np.array([-1.0, -0.5])))
    assert run.decisions[0].logits == {"factual": (-1.0, -0.5)}
    ```
    """
    runs = check_runs(runs)
    if not callable(getattr(scorer, "score", None)):
        raise TypeError(f"`scorer` must be a bj.scorers.Scorer, got {scorer!r}")
    request = _default_request if request is None else request
    if not callable(request):
        raise TypeError(
            f"`request` must be a function (run, step, variant, parent) -> Request, got {request!r}"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be an int >= 1, got {batch_size!r}")
    if isinstance(steps, str):
        raise TypeError(f"`steps` must be a list of step names or None, got the string {steps!r}")
    wanted = None if steps is None else set(steps)
    rows, requests = [], []
    for r, run in enumerate(runs):
        for s, step in enumerate(run.steps):
            if step.options is None or step.logits is not None:
                continue
            if wanted is not None and step.name not in wanted:
                continue
            made = request(run, step, "factual", None)
            if not isinstance(made, tuple) or len(made) != 4:
                raise TypeError(
                    f"`request` must return a bj.scorers.Request(step, variant, inputs, options), "
                    f"got {made!r:.120} for step {step.name!r} of run {run.run!r}"
                )
            if tuple(made[3]) != tuple(step.options):
                raise ValueError(
                    f"`request` returned options {list(made[3])} for step {step.name!r} of run "
                    f"{run.run!r}, expected its options {list(step.options)}"
                )
            rows.append((r, s))
            requests.append(made)
    if not requests:
        which = "" if wanted is None else f" among {sorted(wanted)}"
        raise ValueError(
            f"no declared decision step{which} is without logits: nothing to score (declare "
            "them first with bj.traces.declare_decisions)"
        )
    answers = []
    batches = range(0, len(requests), batch_size)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="scoring decisions", unit="batch")
    for start in batches:
        answers += scorer.score(requests[start : start + batch_size])
    scored: dict = {}
    for (r, s), row in zip(rows, answers):
        step = runs[r].steps[s]
        values = tuple(float(x) for x in row)
        if values[step.options.index(step.choice)] == float("-inf"):
            raise ValueError(
                f"run {runs[r].run!r}, step {step.name!r}: the scorer gives the observed choice "
                f"{step.choice!r} logit -inf (impossible), so the recorded run cannot be replayed; "
                "check that the request shows the scorer what the step saw"
            )
        scored[r, s] = values
    out = []
    for r, run in enumerate(runs):
        new = [
            dataclasses.replace(step, logits={"factual": scored[r, s]})
            if (r, s) in scored
            else step
            for s, step in enumerate(run.steps)
        ]
        out.append(dataclasses.replace(run, steps=tuple(new)))
    return out
