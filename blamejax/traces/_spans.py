"""Spans to runs: OTLP JSON traces, with OpenTelemetry GenAI or OpenInference attributes.

One trace (trace id) is one run; one span is one step, in the order the spans started (a
parent always before its children), whose parent is the step of its parent span. What the
attributes say is read by `_attributes.py`; everything not mapped stays in the step's
`extra` (the span as written, its attributes decoded). docs/traces.md has the mapping tables
and the outcome rule.
"""

import math
import re
from collections.abc import Mapping

from ._attributes import openinference_fields, otel_fields
from ._check import check_run
from ._format import ERRORS, Problem, Run, Step, deliver, to_record
from ._otlp import Bad, ordered, read_spans


def _outcome(tid, roots, outcomes, bad):
    """`(score, passed)` of one trace: the user's `outcomes[tid]` if given, else its roots'
    status (any ERROR: failed; every root OK: passed; otherwise unknown, an error)."""
    if tid in outcomes:
        value = outcomes[tid]
        return (None, value) if isinstance(value, bool) else (float(value), None)
    statuses = {s["status"] for s in roots}
    if "ERROR" in statuses:
        return None, False
    if statuses == {"OK"}:
        return None, True
    bad(
        roots[0],
        "status",
        f"the outcome of trace {tid} is unknown: its root span's status is UNSET; "
        f"pass outcomes={{{tid!r}: True/False or a score}}",
    )
    return None, None


def _check_outcomes(outcomes) -> dict:
    if outcomes is None:
        return {}
    if not isinstance(outcomes, Mapping):
        raise TypeError(
            f"outcomes must be a mapping of trace id -> bool or score, got {type(outcomes).__name__}"
        )
    for key, value in outcomes.items():
        ok = isinstance(value, bool) or (isinstance(value, int | float) and math.isfinite(value))
        if not isinstance(key, str) or not ok:
            raise TypeError(
                f"outcomes[{key!r}] must be True/False or a finite score (trace ids are str), got {value!r}"
            )
    return dict(outcomes)


def _import(path, fields_of, outcomes, errors):
    if errors not in ERRORS:
        raise ValueError(f"errors must be 'raise' or 'collect', got {errors!r}")
    outcomes = _check_outcomes(outcomes)
    problems: list[Problem] = []
    spans, broken, skipped = read_spans(path, problems)
    traces: dict[str, list[dict]] = {}
    for span in spans:
        traces.setdefault(span["trace"], []).append(span)
    for tid in outcomes:
        if tid not in traces and tid not in broken:
            problems.append(Problem(str(path), None, f"outcomes[{tid!r}]", "no trace has this id"))
    skipped += sum(1 for tid in broken if tid not in traces)  # no span of it could be read
    runs = []
    for tid, group in traces.items():
        found: list[Problem] = []
        if tid in broken:  # a run without some of its spans would be wrong: leave it out
            message = f"not imported: {broken[tid]} of its spans could not be read (see above)"
            problems.append(Problem(group[0]["file"], group[0]["line"], f"trace[{tid}]", message))
            skipped += 1
            continue

        def bad(span, field, message):
            found.append(
                Problem(
                    span["file"],
                    span["line"],
                    f"span[{span['id']}]" + (f".{field}" if field else ""),
                    message,
                )
            )

        ids = {}
        for span in group:
            if span["id"] in ids:
                bad(span, "spanId", f"duplicate span id in trace {tid}")
            ids.setdefault(span["id"], span)
        for span in group:
            if span["parent"] is not None and span["parent"] not in ids:
                bad(
                    span,
                    "parentSpanId",
                    f"unknown parent span {span['parent']}: not in trace {tid}",
                )
        roots = [s for s in group if s["parent"] is None]
        if found or not roots:
            if not found:
                bad(
                    group[0],
                    "parentSpanId",
                    f"trace {tid} has no root span (every span has a parent)",
                )
            problems += found
            skipped += 1
            continue
        for span in group:
            trail, up = {span["id"]}, ids.get(span["parent"])
            while up is not None and up["id"] not in trail:
                trail.add(up["id"])
                up = ids.get(up["parent"])
            if up is not None:
                bad(span, "parentSpanId", f"its ancestors form a cycle in trace {tid}")
        if found:
            problems += found
            skipped += 1
            continue
        names, taken, agents, steps, spans_of_steps = {}, set(), {}, [], []
        for span in ordered(list(ids.values())):
            name, k = span["name"], 1
            while name in taken:
                k += 1
                name = f"{span['name']} #{k}"
            names[span["id"]] = name
            taken.add(name)
            used: set[str] = set()
            try:
                fields = fields_of(span, agents.get(span["parent"]), used)
            except Bad as e:
                key, _, message = str(e).partition(": ")
                bad(span, key, message)
                continue
            agents[span["id"]] = fields["agent"]
            extra = dict(span["extra"])
            rest = {k: v for k, v in span["attributes"].items() if k not in used}
            if rest:
                extra["attributes"] = rest
            if span["resource"] != group[0]["resource"]:
                extra["resource"] = span["resource"]
            parents = () if span["parent"] is None else (names[span["parent"]],)
            steps.append(Step(name=name, parents=parents, extra=extra, **fields))
            spans_of_steps.append(span)
        score, passed = _outcome(tid, roots, outcomes, bad)
        if found:
            problems += found
            skipped += 1
            continue
        run = Run(
            run=tid,
            steps=tuple(steps),
            score=score,
            passed=passed,
            extra={"resource": group[0]["resource"]} if group[0]["resource"] else {},
        )
        checked = check_run(to_record(run))
        if checked:
            for field, message in checked:  # a step's problem is named by its span
                match = re.match(r"steps\[(\d+)\]\.?(.*)", field)
                if match:
                    bad(spans_of_steps[int(match.group(1))], match.group(2), message)
                else:
                    found.append(
                        Problem(
                            roots[0]["file"], roots[0]["line"], f"trace[{tid}].{field}", message
                        )
                    )
            problems += found
            skipped += 1
            continue
        runs.append(run)
    return deliver(runs, problems, skipped, errors)


def from_otel(path, *, outcomes: Mapping | None = None, errors: str = "raise"):
    """Runs from OpenTelemetry GenAI spans in OTLP JSON (a .json export, a .jsonl file of
    exports, or a folder of them).

    One trace id is one run (its id); one span one step, named after the span ("#2", "#3"
    added to repeated names), its parent the step of its parent span. `gen_ai.agent.name`
    (or, when absent, the nearest ancestor's) -> agent; the text parts of
    `gen_ai.output.messages` (an attribute, or an event's) or `gen_ai.tool.call.result` ->
    output; `gen_ai.usage.input_tokens`/`output_tokens` -> tokens. Everything else (the span
    id, kind, times, status, events, other attributes such as `gen_ai.operation.name`) stays
    in the step's `extra`. The steps have no options: free-text steps.

    The outcome: `outcomes[trace_id]` (True/False, or a score) when given; otherwise the root
    span's status: ERROR -> passed False, OK -> passed True, UNSET -> an error asking for
    `outcomes`.

    **Raises:** `TraceError` listing every problem, each named by file, line (.jsonl) and
    `span[<span id>]` (an unknown parent, a bad attribute, an unknown outcome, ...).

    ```python
    import json
    import blamejax as bj

    def attr(key, value):
        return {"key": key, "value": value}

    spans = [
        {"traceId": "t1", "spanId": "a", "name": "invoke_agent Planner", "status": {"code": 2},
         "attributes": [attr("gen_ai.operation.name", {"stringValue": "invoke_agent"}),
                        attr("gen_ai.agent.name", {"stringValue": "Planner"})]},
        {"traceId": "t1", "spanId": "b", "parentSpanId": "a", "name": "chat",
         "attributes": [attr("gen_ai.usage.input_tokens", {"intValue": "12"})]},
    ]
    export = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    with open("spans.json", "w") as f:
        json.dump(export, f)
    [run] = bj.traces.from_otel("spans.json")
    assert [(s.name, s.agent, s.parents) for s in run.steps] == [
        ("invoke_agent Planner", "Planner", ()), ("chat", "Planner", ("invoke_agent Planner",))]
    assert run.passed is False and run.steps[1].tokens == {"input": 12}
    ```
    """
    return _import(path, otel_fields, outcomes, errors)


def from_openinference(path, *, outcomes: Mapping | None = None, errors: str = "raise"):
    """Runs from OpenInference spans in OTLP JSON (read as `from_otel` reads its files).

    `agent.name` (an AGENT span without it: its span name; other spans: the nearest
    ancestor's agent) -> agent; `output.value` (else the `llm.output_messages.N.message.content`
    texts) -> output; `llm.token_count.prompt`/`completion` -> tokens. A decision span
    (`openinference.span.kind` "DECISION", or any span with `decision.options`) becomes a
    decision step: `decision.options` (list of strings) -> options, `decision.probabilities`
    -> the "factual" logits as log p (p = 0 -> -inf), `decision.fix.probabilities` -> the
    "fix" logits, `decision.choice` -> choice, `decision.accept` -> accept. The outcome and
    `outcomes` are as in `from_otel`.

    **Raises:** `TraceError` listing every problem by file, line and `span[<span id>]`.
    """
    return _import(path, openinference_fields, outcomes, errors)
