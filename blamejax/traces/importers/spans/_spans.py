"""Spans to runs: traces with OpenTelemetry GenAI or OpenInference attributes.

The files are read by `_sniff.py` (OTLP JSON, `_otlp.py`; the console exporters' output,
`_console.py`), their log records joined here to their spans. One trace (trace id) is one
run; one span is one step, in the order the spans started (a parent always before its
children), whose parent is the step of its parent span. What the attributes say is read by
`_attributes.py`, the run's outcome by `_outcomes.py`; everything not mapped stays in the
step's `extra` (the span as written, its attributes decoded). docs/traces.md has the mapping
tables, the agent rule and the outcome rule.
"""

import re
import warnings
from collections.abc import Mapping

from ...._checks import user_stacklevel
from ...format._check import check_run
from ...format._format import ERRORS, Problem, Run, Step, deliver, to_record
from ._attributes import openinference_fields, otel_fields
from ._mlflow import mlflow_fields
from ._otlp import Bad, hex_id, ordered
from ._outcomes import check_outcomes, keys_of, outcome
from ._sniff import read_sources

BASE64_NOTE = "base64 in the file (as protobuf's MessageToJson writes them), read as hex"


def _join_logs(logs, traces, problems) -> int:
    """Attach each log record to its span (`span["logs"]`); a record without a trace and
    span id, or whose span is not in the trace, is a problem. Returns how many were not
    joined."""
    spans = {(s["trace"], s["id"]): s for group in traces.values() for s in group}
    lost = 0
    for record in logs:
        where = dict(file=record["file"], line=record["line"])
        field = f"{record['field']}" + (f" ({record['name']})" if record["name"] else "")
        if record["trace"] is None or record["span"] is None:
            message = "no traceId/spanId: a log record that no span holds cannot be joined to a run"
            problems.append(Problem(**where, field=field, message=message))
            lost += 1
            continue
        span = spans.get((record["trace"], record["span"]))
        if span is None:
            missing = "no span" if record["trace"] not in traces else f"no span {record['span']}"
            message = (
                f"{missing} in trace {record['trace']} to join it to (spanId {record['span']})"
            )
            problems.append(Problem(**where, field=f"{field}.spanId", message=message))
            lost += 1
            continue
        entry = {"name": record["name"], **record["record"], "attributes": record["attributes"]}
        if record["body"] is not None:
            entry["body"] = record["body"]
        span.setdefault("logs", []).append(entry)
        span["base64"] = span["base64"] or record["base64"]
    return lost


def _running_agent(agent_spans, start) -> str | None:
    """The agent of the innermost agent span that was running when a span started (its
    start inside the agent span's time), or None: none was, or two ran at once without one
    holding the other (concurrent agents: the time cannot tell which)."""
    running = [(s, e, agent) for s, e, agent in agent_spans if s <= start <= e and s < e]
    if not running:
        return None
    inner = max(running, key=lambda entry: entry[0])
    if any(not (s <= inner[0] and inner[1] <= e) for s, e, _ in running):
        return None
    return inner[2]


def _import(path, fields_of, outcomes, outcome_key, ok_means_passed, errors, convention):
    """The span importers' common path: read the spans of `path`, group them by trace, check
    each trace's tree, turn each span into a step (`fields_of`) and each trace into a run with
    its outcome; a trace with a problem is left out and its problems reported."""
    if errors not in ERRORS:
        raise ValueError(f"errors must be 'raise' or 'collect', got {errors!r}")
    if not isinstance(ok_means_passed, bool):
        raise TypeError(f"ok_means_passed must be True or False, got {ok_means_passed!r}")
    outcomes = _outcomes_by_key(check_outcomes(outcomes, outcome_key), outcome_key)
    problems: list[Problem] = []
    spans, logs, broken, skipped = read_sources(path, problems)
    traces: dict[str, list[dict]] = {}
    for span in spans:
        traces.setdefault(span["trace"], []).append(span)
    skipped += _join_logs(logs, traces, problems)
    _check_outcome_keys(path, traces, broken, outcomes, outcome_key, problems)
    skipped += sum(1 for tid in broken if tid not in traces)  # no span of it could be read
    runs, matched, agentless = [], set(), []
    for tid, group in traces.items():
        if tid in broken:  # a run without some of its spans would be wrong: leave it out
            message = f"not imported: {broken[tid]} of its spans could not be read (see above)"
            problems.append(Problem(group[0]["file"], group[0]["line"], f"trace[{tid}]", message))
            skipped += 1
            continue
        found: list[Problem] = []
        settings = (outcomes, outcome_key, ok_means_passed, matched)
        run, model_calls = _run_of(tid, group, fields_of, settings, found)
        if found:
            problems += found
            skipped += 1
            continue
        runs.append(run)
        if model_calls and not run.agents:
            agentless.append(run.run)
    if agentless:
        warnings.warn(
            NoAgentsWarning(agentless_message(agentless, convention)),
            stacklevel=user_stacklevel(),
        )
    return deliver(runs, problems, skipped, errors)


def _outcomes_by_key(outcomes: dict, outcome_key: str) -> dict:
    """Trace ids as the SDK prints them ("0x...", "tr-...") or in base64, in the importer's
    hex form; other keys as given."""
    if outcome_key != "trace_id":
        return outcomes
    return {
        hex_id(k.removeprefix("0x").removeprefix("tr-"), 16)[0] if isinstance(k, str) else k: v
        for k, v in outcomes.items()
    }


def _check_outcome_keys(path, traces, broken, outcomes, outcome_key, problems) -> None:
    """A problem for each key of `outcomes` that names no trace of the file."""
    known = set(broken)
    for tid, group in traces.items():
        known.update(keys_of(tid, [s for s in group if s["parent"] is None], outcome_key))
    what = {"trace_id": "no trace has this id", "root_name": "no root span has this name"}
    for key in outcomes:
        if key not in known:
            message = what.get(outcome_key, f"no root span has this {outcome_key}")
            problems.append(Problem(str(path), None, f"outcomes[{key!r}]", message))


def _reporter(found: list):
    """`bad(span, field, message)`: a problem named by its span (and field), put in `found`."""

    def bad(span, field, message):
        where = f"span[{span['id']}]" + (f".{field}" if field else "")
        found.append(Problem(span["file"], span["line"], where, message))

    return bad


def _run_of(tid, group, fields_of, settings, found):
    """The run of one trace's spans and its count of model calls; `(None, 0)` with the
    problems in `found` when its tree, a span's fields, its outcome or the run is wrong."""
    outcomes, outcome_key, ok_means_passed, matched = settings
    bad = _reporter(found)
    ids, roots = _span_tree(tid, group, bad, found)
    if found:
        return None, 0
    steps, spans_of_steps, model_calls = _steps_of(ids, group, fields_of, bad)
    score, passed, source = outcome(
        tid, roots, outcomes, outcome_key, ok_means_passed, bad, matched
    )
    if found:
        return None, 0
    extra = {"resource": group[0]["resource"]} if group[0]["resource"] else {}
    extra["outcome_from"] = source
    if any(s["base64"] for s in group):
        extra["ids"] = BASE64_NOTE
    run = Run(run=tid, steps=tuple(steps), score=score, passed=passed, extra=extra)
    for field, message in check_run(to_record(run)):  # a step's problem is named by its span
        match = re.match(r"steps\[(\d+)\]\.?(.*)", field)
        if match:
            bad(spans_of_steps[int(match.group(1))], match.group(2), message)
        else:
            where = f"trace[{tid}].{field}"
            found.append(Problem(roots[0]["file"], roots[0]["line"], where, message))
    return (None, 0) if found else (run, model_calls)


def _span_tree(tid, group, bad, found):
    """The spans of one trace by id, and its roots; a problem for a duplicate id, an unknown
    parent, a trace without a root, or ancestors that form a cycle."""
    ids = {}
    for span in group:
        if span["id"] in ids:
            bad(span, "spanId", f"duplicate span id in trace {tid}")
        ids.setdefault(span["id"], span)
    for span in group:
        if span["parent"] is not None and span["parent"] not in ids:
            bad(span, "parentSpanId", f"unknown parent span {span['parent']}: not in trace {tid}")
    roots = [s for s in group if s["parent"] is None]
    if found or not roots:
        if not found:
            bad(group[0], "parentSpanId", f"trace {tid} has no root span (every span has a parent)")
        return ids, roots
    for span in group:
        trail, up = {span["id"]}, ids.get(span["parent"])
        while up is not None and up["id"] not in trail:
            trail.add(up["id"])
            up = ids.get(up["parent"])
        if up is not None:
            bad(span, "parentSpanId", f"its ancestors form a cycle in trace {tid}")
    return ids, roots


def _steps_of(ids, group, fields_of, bad):
    """One step per span, in order: a unique name, its parents, the fields `fields_of` reads
    (with the agent above it, whether that came from an agent span, and the agent span
    running beside it), the attributes it did not read kept in `extra`. Returns the steps,
    their spans and the count of model calls."""
    names, taken, agents, steps, spans_of_steps = {}, set(), {}, [], []
    agent_spans: list = []  # (start, end, agent) of the agent spans met so far
    model_calls = 0
    for span in ordered(list(ids.values())):
        name, k = span["name"], 1
        while name in taken:
            k += 1
            name = f"{span['name']} #{k}"
        names[span["id"]] = name
        taken.add(name)
        used: set[str] = set()
        agent_above, from_agent_span = agents.get(span["parent"], (None, False))
        beside = _running_agent(agent_spans, span["start"])
        try:
            fields = fields_of(span, (agent_above, from_agent_span, beside), used)
        except Bad as e:
            key, _, message = str(e).partition(": ")
            bad(span, key, message)
            continue
        agents[span["id"]] = (fields["agent"], fields.pop("from_agent_span"))
        if fields.pop("agent_span") and fields["agent"] is not None:
            agent_spans.append((span["start"], span.get("end", span["start"]), fields["agent"]))
        model_calls += fields.pop("model_call")
        extra = dict(span["extra"])
        if span.get("logs"):
            extra["logs"] = span["logs"]
        rest = {k: v for k, v in span["attributes"].items() if k not in used}
        if rest:
            extra["attributes"] = rest
        if span["resource"] != group[0]["resource"]:
            extra["resource"] = span["resource"]
        parents = () if span["parent"] is None else (names[span["parent"]],)
        steps.append(Step(name=name, parents=parents, extra=extra, **fields))
        spans_of_steps.append(span)
    return steps, spans_of_steps, model_calls


class NoAgentsWarning(UserWarning):
    """A span import found runs with model calls but no agent: nothing in the spans named one
    (see the agent rule in docs/traces.md), so blame cannot be summed per agent."""


def agentless_message(runs, convention) -> str:
    shown_runs = ", ".join(runs[:5]) + (", ..." if len(runs) > 5 else "")
    how = {
        "otel": "an `invoke_agent <name>` span with `gen_ai.agent.name` (or Traceloop's "
        "@agent decorator)",
        "openinference": "an AGENT span with `agent.name` (or a LangGraph node)",
        "mlflow": "a span of type AGENT (@mlflow.trace(span_type='AGENT'))",
    }[convention]
    return (
        f"{len(runs)} run(s) ({shown_runs}) have model calls but no agent: no span names one. "
        f"Wrap each agent's work in {how}, or name agents afterwards "
        "(dataclasses.replace(step, agent=...)); steps without an agent are left out of the "
        "per-agent blame"
    )


def from_otel(
    path,
    *,
    outcomes: Mapping | None = None,
    outcome_key: str = "trace_id",
    ok_means_passed: bool = False,
    errors: str = "raise",
):
    """Runs from OpenTelemetry GenAI spans: OTLP JSON (one export, or JSON Lines of exports,
    whatever the file's name), the base64-id JSON of protobuf's `MessageToJson`, or what the
    SDK's `ConsoleSpanExporter` prints; with OTLP log records beside them, joined to their
    spans. A folder is read whole (its .json, .jsonl, .ndjson and .log files).

    One trace id is one run (its id, hex); one span one step, named after the span ("#2",
    "#3" added to repeated names), its parent the step of its parent span. The agent is that
    of the nearest `invoke_agent` span (its `gen_ai.agent.name`, else its name after
    "invoke_agent "), outside them a span's own `gen_ai.agent.name`; the text parts of
    `gen_ai.output.messages` (an attribute, or a span event's, or a log record's) or
    `gen_ai.tool.call.result` -> output; `gen_ai.usage.input_tokens`/`output_tokens` ->
    tokens; `decision.*` attributes -> a decision step. Everything else (span id, kind, times,
    status, events, joined log records, other attributes) stays in the step's `extra`.

    **The outcome** of each run, the first that applies: `outcomes[key]` (True/False, or a
    score), the key chosen by `outcome_key`: "trace_id" (default; hex, as OTLP/JSON writes
    it, or "0x..." as the SDK prints it), "root_name" (the root span's name) or the name of a
    root-span attribute (say "session.id"); the root span's `outcome.passed` (boolean) or
    `outcome.score` (number) attribute; a `gen_ai.evaluation.result` event or log record on
    the root span (`gen_ai.evaluation.score.label` "pass"/"fail" and the like -> passed,
    `gen_ai.evaluation.score.value` -> score); a root span with status ERROR -> passed False;
    every root OK -> passed True, only with `ok_means_passed=True`. A trace with none has no
    outcome: a problem naming its root span, never a guess. `run.extra["outcome_from"]` says
    which rule applied.

    **Raises:** `TraceError` listing every problem, each named by file, line and
    `span[<span id>]` (an unknown format, mixed formats, an unknown parent, a bad attribute,
    a trace without an outcome, a log record without its span, ...).

    ```python
    import json
    import blamejax as bj

    def attr(key, value):
        return {"key": key, "value": value}

    spans = [
        {"traceId": "t1", "spanId": "a", "name": "invoke_agent Planner", "status": {"code": 2},
         "attributes": [attr("gen_ai.operation.name", {"stringValue": "invoke_agent"})]},
        {"traceId": "t1", "spanId": "b", "parentSpanId": "a", "name": "chat",
         "attributes": [attr("gen_ai.usage.input_tokens", {"intValue": "12"}),
                        attr("gen_ai.agent.name", {"stringValue": "OpenAI Agent"})]},
    ]
    export = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    with open("spans.json", "w") as f:
        json.dump(export, f)
    [run] = bj.traces.from_otel("spans.json")
    assert [(s.name, s.agent, s.parents) for s in run.steps] == [
        ("invoke_agent Planner", "Planner", ()), ("chat", "Planner", ("invoke_agent Planner",))]
    assert run.passed is False and run.steps[1].tokens == {"input": 12}
    assert run.extra["outcome_from"] == "status ERROR"
    ```
    """
    return _import(path, otel_fields, outcomes, outcome_key, ok_means_passed, errors, "otel")


def from_openinference(
    path,
    *,
    outcomes: Mapping | None = None,
    outcome_key: str = "trace_id",
    ok_means_passed: bool = False,
    errors: str = "raise",
):
    """Runs from OpenInference spans (the files read as `from_otel` reads them).

    The agent: an AGENT span's `agent.name`, else its span name, except a root AGENT span
    without `agent.name` (the workflow), which names none; below an AGENT span its agent;
    elsewhere a span's own `agent.name`, else its parent's. The texts of
    `llm.output_messages.N.message.content` (else `output.value`) -> output;
    `llm.token_count.prompt`/`completion` -> tokens. A decision span
    (`openinference.span.kind` "DECISION", or any span with `decision.options`) becomes a
    decision step: `decision.options` (list of strings) -> options, `decision.probabilities`
    (required) -> the "factual" logits as log p (p = 0 -> -inf), `decision.fix.probabilities`
    -> the "fix" logits, `decision.choice` -> choice, `decision.accept` -> accept.

    **The outcome** of each run: as in `from_otel` (the same rules, in the same order).

    **Raises:** `TraceError` listing every problem by file, line and `span[<span id>]`.
    """
    return _import(
        path, openinference_fields, outcomes, outcome_key, ok_means_passed, errors, "openinference"
    )


def from_mlflow(
    path,
    *,
    outcomes: Mapping | None = None,
    outcome_key: str = "trace_id",
    ok_means_passed: bool = False,
    errors: str = "raise",
):
    """Runs from MLflow 3.x traces, as `mlflow.get_trace(trace_id).to_json()` writes them:
    one trace per file, or one per line (a folder is read whole, as `from_otel` reads one).

    One trace is one run, its id the trace id in hex (MLflow's "tr-<hex>" without "tr-";
    `outcomes` takes either); one span one step. A span of `mlflow.spanType` AGENT names its
    agent (its span name), and the agent rule of the other span importers applies; the text
    of `mlflow.spanOutputs` (a chat completion's reply, or text) -> output;
    `mlflow.chat.tokenUsage` -> tokens; the recorded messages of `mlflow.spanInputs` are the
    prompt (`bj.traces.prompt_of`). The outcome: as in `from_otel` (a trace whose call raised
    has its root span's status ERROR).

    **Raises:** `TraceError` listing every problem by file, line and span.

    ```python
    import json
    import blamejax as bj

    span = {"trace_id": "4KBjKr54V+/XkUIrtocIuQ==", "span_id": "yyhmIsZQxuE=",
            "parent_span_id": None, "name": "planner", "start_time_unix_nano": 1,
            "end_time_unix_nano": 2, "status": {"code": "STATUS_CODE_ERROR"},
            "attributes": {"mlflow.spanType": '"AGENT"', "mlflow.spanOutputs": '"answer"'}}
    trace = {"info": {"trace_id": "tr-e0a0632abe7857efd791422bb68708b9", "state": "ERROR"},
             "data": {"spans": [span]}}
    with open("trace.json", "w") as f:
        json.dump(trace, f)
    [run] = bj.traces.from_mlflow("trace.json")
    assert run.run == "e0a0632abe7857efd791422bb68708b9" and run.passed is False
    assert (run.steps[0].agent, run.steps[0].output) == ("planner", "answer")
    ```
    """
    return _import(path, mlflow_fields, outcomes, outcome_key, ok_means_passed, errors, "mlflow")
