"""The span importers read what real tools write: the files of tests/data/traces/sdk/ were
written by the OpenTelemetry SDK, its OTLP encoders, protobuf's `MessageToJson` and the
official instrumentation packages (`generate.py` there says how); the Who&When files of
tests/data/traces/whowhen/both/ are copies of the benchmark's, both halves.

No test here needs those packages: the fixtures are committed.
"""

import json
import shutil
from pathlib import Path

import pytest

import blamejax as bj
from blamejax._cli import main

T = bj.traces
DATA = Path(__file__).parent / "data" / "traces"
SDK = DATA / "sdk"
# the trace every SDK fixture holds (the Collector's, protobuf's and the console's files
# hold the same spans); the OpenInference file holds another
TRACE = json.loads((SDK / "collector" / "spans.json").read_text().split("\n")[0])["resourceSpans"][
    0
]["scopeSpans"][0]["spans"][0]["traceId"]
OPENINFERENCE_TRACE = json.loads((SDK / "openinference" / "spans.ndjson").read_text())[
    "resourceSpans"
][0]["scopeSpans"][0]["spans"][0]["traceId"]
STEPS = [
    ("invoke_agent Planner", "Planner", ()),
    ("chat test-model", "Planner", ("invoke_agent Planner",)),
    ("invoke_agent Writer", "Writer", ("invoke_agent Planner",)),
    ("chat test-model #2", "Writer", ("invoke_agent Writer",)),
]
OUTPUTS = [None, "Search the 1998 final, then write one line.", None, "Brazil won in 1998."]


def _where(problems):
    return [(Path(p.file).name, p.line, p.field) for p in problems]


def _export(*spans) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]})


def _attributes(**values):
    def value(v):
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, float):
            return {"doubleValue": v}
        return {"stringValue": v}

    return [{"key": k.replace("__", "."), "value": value(v)} for k, v in values.items()]


def _span(sid, name, parent=None, status=0, events=(), **attributes):
    span = {"traceId": "t1", "spanId": sid, "name": name, "status": {"code": status},
            "attributes": _attributes(**attributes), "events": list(events)}  # fmt: skip
    return span if parent is None else {**span, "parentSpanId": parent}


# ----------------------------------------------------------------------------- files users have


def test_collector_json_lines_in_a_json_file_with_its_logs_beside():
    """The Collector's file exporter writes JSON Lines into `*.json`; content captured in
    event mode is in log records (`gen_ai.client.inference.operation.details`), beside."""
    [run] = T.from_otel(SDK / "collector", outcomes={TRACE: False})
    assert run.run == TRACE and run.passed is False
    assert [(s.name, s.agent, s.parents) for s in run.steps] == STEPS
    assert [s.output for s in run.steps] == OUTPUTS  # from the log records
    assert run.steps[1].tokens == {"input": 20, "output": 9}
    [log] = run.steps[1].extra["logs"]
    assert log["name"] == "gen_ai.client.inference.operation.details"
    assert log["attributes"]["gen_ai.output.messages"][0]["role"] == "assistant"
    assert run.extra["outcome_from"] == "outcomes" and "ids" not in run.extra
    # the run's outcome keyed by its root span's name (the SDK's trace ids are not shown)
    [by_name] = T.from_otel(SDK / "collector", outcome_key="root_name",
                            outcomes={"invoke_agent Planner": 0.0})  # fmt: skip
    assert by_name.score == 0.0


@pytest.mark.parametrize("suffix", [".json", ".ndjson", ".log", ".jsonl", ".txt"])
def test_json_lines_are_read_whatever_the_file_is_called(tmp_path, suffix):
    path = tmp_path / f"spans{suffix}"
    shutil.copy(SDK / "collector" / "spans.json", path)
    [run] = T.from_otel(path, outcomes={TRACE: False})
    assert [(s.name, s.agent, s.parents) for s in run.steps] == STEPS


def test_protobuf_base64_ids_become_hex_and_say_so():
    """`MessageToJson` writes base64 ids (OTLP/JSON wants hex): read as hex, so the run id is
    the SDK's hex trace id, outcomes keyed by it apply, and the run says what was done."""
    [run] = T.from_otel(SDK / "protobuf", outcomes={TRACE: False})
    [collector] = T.from_otel(SDK / "collector", outcomes={TRACE: False})
    assert run.run == TRACE and run.passed is False
    assert "base64" in run.extra["ids"] and "hex" in run.extra["ids"]
    assert [(s.name, s.agent, s.parents, s.output) for s in run.steps] == [
        (s.name, s.agent, s.parents, s.output) for s in collector.steps
    ]
    assert run.steps[1].extra["spanId"] == collector.steps[1].extra["spanId"]
    assert len(run.steps[1].extra["spanId"]) == 16  # hex, not base64
    # the SDK prints ids as "0x..."; such a key is the same trace
    [printed] = T.from_otel(SDK / "protobuf", outcomes={"0x" + TRACE: 0.25})
    assert printed.score == 0.25


def test_console_span_exporter_output(tmp_path):
    [run] = T.from_otel(SDK / "console", outcomes={TRACE: False})
    assert run.run == TRACE
    assert [(s.name, s.agent, s.parents) for s in run.steps] == STEPS
    assert run.steps[1].tokens == {"input": 20, "output": 9}
    assert run.steps[1].extra["kind"] == "SpanKind.CLIENT"
    assert run.extra["resource"]["service.name"] == "two-agents"
    # the log records ConsoleLogRecordExporter printed beside them are joined to them
    assert [s.output for s in run.steps] == OUTPUTS
    assert run.steps[3].extra["logs"][0]["name"] == "gen_ai.client.inference.operation.details"
    # as are logs in OTLP JSON beside the printed spans
    shutil.copy(SDK / "console" / "spans.log", tmp_path / "spans.log")
    shutil.copy(SDK / "collector" / "logs.json", tmp_path / "logs.json")
    [joined] = T.from_otel(tmp_path, outcomes={TRACE: False})
    assert [s.output for s in joined.steps] == OUTPUTS


def test_logs_and_spans_in_one_file(tmp_path):
    path = tmp_path / "all.jsonl"
    path.write_text(
        (SDK / "collector" / "logs.json").read_text()
        + (SDK / "collector" / "spans.json").read_text()
    )
    [run] = T.from_otel(path, outcomes={TRACE: False})
    assert [s.output for s in run.steps] == OUTPUTS


def test_openinference_text_from_output_messages_and_no_workflow_agent():
    """OpenInference LLM spans: the text of `llm.output_messages`, not `output.value` (the
    chat.completion JSON, kept in extra); a root AGENT span without `agent.name` is the
    workflow, not an agent."""
    [run] = T.from_openinference(SDK / "openinference", outcomes={OPENINFERENCE_TRACE: False})
    assert [(s.name, s.agent) for s in run.steps] == [
        ("pipeline", None),
        ("Planner", "Planner"),
        ("ChatCompletion", "Planner"),
        ("Writer", "Writer"),
        ("ChatCompletion #2", "Writer"),
    ]
    assert run.agents == ("Planner", "Writer")
    assert [run.steps[2].output, run.steps[4].output] == [OUTPUTS[1], OUTPUTS[3]]
    raw = json.loads(run.steps[2].extra["attributes"]["output.value"])
    assert raw["object"] == "chat.completion"


# ----------------------------------------------------------------------------- agents


def test_the_nearest_invoke_agent_span_names_the_agent(tmp_path):
    """The Agents-SDK OTel bridge writes `gen_ai.agent.name = "OpenAI Agent"` on its chat
    spans: the invoke_agent parent wins. An invoke_agent span without `gen_ai.agent.name`
    names its agent from its span name."""
    spans = [
        _span("0000000000000001", "workflow", status=2),
        _span("0000000000000002", "invoke_agent Researcher", "0000000000000001",
              gen_ai__operation__name="invoke_agent"),
        _span("0000000000000003", "chat gpt-4o", "0000000000000002",
              gen_ai__operation__name="chat", gen_ai__agent__name="OpenAI Agent"),
        _span("0000000000000004", "invoke_agent", "0000000000000001",
              gen_ai__operation__name="invoke_agent", gen_ai__agent__name="Writer"),
        _span("0000000000000005", "chat gpt-4o", "0000000000000004", gen_ai__agent__name="Writer"),
        _span("0000000000000006", "chat alone", "0000000000000001", gen_ai__agent__name="Helper"),
    ]  # fmt: skip
    (tmp_path / "spans.json").write_text(_export(*spans))
    [run] = T.from_otel(tmp_path / "spans.json")
    assert [(s.name, s.agent) for s in run.steps] == [
        ("workflow", None),
        ("invoke_agent Researcher", "Researcher"),
        ("chat gpt-4o", "Researcher"),
        ("invoke_agent", "Writer"),
        ("chat gpt-4o #2", "Writer"),
        ("chat alone", "Helper"),  # under no agent span: its own name
    ]
    assert run.agents == ("Researcher", "Writer", "Helper")  # no "OpenAI Agent"
    # the default the agent span overrode is kept; a name that agrees is consumed
    assert run.steps[2].extra["attributes"]["gen_ai.agent.name"] == "OpenAI Agent"
    assert "gen_ai.agent.name" not in run.steps[4].extra.get("attributes", {})


# ----------------------------------------------------------------------------- outcomes


def test_status_ok_is_not_taken_as_passed_unless_asked(tmp_path):
    (tmp_path / "spans.json").write_text(_export(_span("a", "agent", status=1)))
    with pytest.raises(T.TraceError, match=r"span\[a\]\.status: the outcome of trace t1 is unknown: its root span's status is OK, which is not taken as passed unless ok_means_passed=True"):  # fmt: skip
        T.from_otel(tmp_path / "spans.json")
    [run] = T.from_otel(tmp_path / "spans.json", ok_means_passed=True)
    assert run.passed is True and run.extra["outcome_from"] == "status OK (ok_means_passed)"
    loaded = T.from_otel(tmp_path / "spans.json", errors="collect")
    assert loaded.runs == [] and loaded.skipped == 1 and len(loaded.problems) == 1
    with pytest.raises(TypeError, match="ok_means_passed must be True or False, got 1"):
        T.from_otel(tmp_path / "spans.json", ok_means_passed=1)


def test_outcome_from_a_root_attribute(tmp_path):
    (tmp_path / "a.json").write_text(_export(_span("a", "agent", status=1, outcome__passed=False)))
    [run] = T.from_otel(tmp_path / "a.json")
    assert run.passed is False and run.extra["outcome_from"] == "outcome attributes"
    (tmp_path / "a.json").write_text(
        _export(_span("a", "agent", outcome__score=0.5, outcome__passed=True))
    )
    [run] = T.from_openinference(tmp_path / "a.json")
    assert (run.score, run.passed) == (0.5, True)
    (tmp_path / "a.json").write_text(_export(_span("a", "agent", outcome__passed="no")))
    with pytest.raises(
        T.TraceError, match=r'span\[a\]\.outcome\.passed: expected true or false, got "no"'
    ):
        T.from_otel(tmp_path / "a.json")


def test_outcome_from_an_evaluation_result_event_or_log(tmp_path):
    def evaluation(label=None, value=None, name="correctness"):
        attributes = {"gen_ai__evaluation__name": name}
        if label is not None:
            attributes["gen_ai__evaluation__score__label"] = label
        if value is not None:
            attributes["gen_ai__evaluation__score__value"] = value
        return {"name": "gen_ai.evaluation.result", "attributes": _attributes(**attributes)}

    path = tmp_path / "a.json"
    path.write_text(_export(_span("a", "agent", status=1, events=[evaluation("fail", 0.0)])))
    [run] = T.from_otel(path)
    assert (run.passed, run.score, run.extra["outcome_from"]) == (
        False,
        0.0,
        "gen_ai.evaluation.result",
    )
    path.write_text(_export(_span("a", "agent", events=[evaluation("relevant")])))
    with pytest.raises(T.TraceError, match=r"span\[a\]\.events\.gen_ai\.evaluation\.result: neither gen_ai\.evaluation\.score\.label \(\"relevant\"\) says pass or fail"):  # fmt: skip
        T.from_otel(path)
    path.write_text(
        _export(_span("a", "agent", events=[evaluation("pass"), evaluation("fail", name="tone")]))
    )
    with pytest.raises(T.TraceError, match=r"2 gen_ai\.evaluation\.result events on the root span \(\[\"correctness\", \"tone\"\]\)"):  # fmt: skip
        T.from_otel(path)
    # as a log record (the Logs API), joined to the root span by its ids
    trace, root = "5b8aa5a2d2c872e8321cf37308d69df2", "00f067aa0ba902b7"
    span = {**_span(root, "agent"), "traceId": trace}
    record = {"traceId": trace, "spanId": root, "eventName": "gen_ai.evaluation.result",
              "attributes": _attributes(gen_ai__evaluation__name="exact", gen_ai__evaluation__score__label="PASS")}  # fmt: skip
    logs = {"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]}
    path.write_text(_export(span) + "\n" + json.dumps(logs) + "\n")
    [run] = T.from_otel(path)
    assert run.passed is True and run.extra["outcome_from"] == "gen_ai.evaluation.result"


def test_outcomes_keyed_by_root_name_or_attribute(tmp_path):
    spans = [
        {**_span("a", "case 1", app__case=17), "traceId": "t1"},
        {**_span("b", "case 2", app__case=18), "traceId": "t2"},
    ]
    (tmp_path / "a.json").write_text(_export(*spans))
    runs = T.from_otel(
        tmp_path / "a.json", outcome_key="root_name", outcomes={"case 1": False, "case 2": 1.0}
    )
    assert [(r.run, r.passed, r.score) for r in runs] == [("t1", False, None), ("t2", None, 1.0)]
    runs = T.from_otel(tmp_path / "a.json", outcome_key="app.case", outcomes={17: True, 18: False})
    assert [r.passed for r in runs] == [True, False]
    with pytest.raises(T.TraceError, match=r"outcomes\['case 3'\]: no root span has this name"):
        T.from_otel(
            tmp_path / "a.json",
            outcome_key="root_name",
            outcomes={"case 1": False, "case 2": True, "case 3": True},
        )
    with pytest.raises(T.TraceError, match=r"outcomes\[19\]: no root span has this app\.case"):
        T.from_otel(
            tmp_path / "a.json", outcome_key="app.case", outcomes={17: True, 18: False, 19: True}
        )
    with pytest.raises(
        TypeError,
        match="outcome_key must be 'trace_id', 'root_name' or the name of a root-span attribute",
    ):
        T.from_otel(tmp_path / "a.json", outcome_key=None)


# ----------------------------------------------------------------------------- decisions


def test_from_otel_reads_decision_attributes(tmp_path):
    attributes = _attributes(gen_ai__agent__name="Planner", decision__choice="answer") + [
        {"key": "decision.options", "value": {"arrayValue": {"values": [{"stringValue": "search"}, {"stringValue": "answer"}]}}},
        {"key": "decision.probabilities", "value": {"arrayValue": {"values": [{"doubleValue": 0.5}, {"doubleValue": 0.5}]}}},
    ]  # fmt: skip
    span = {**_span("a", "plan", status=2), "attributes": attributes}
    (tmp_path / "a.json").write_text(_export(span))
    [run] = T.from_otel(tmp_path / "a.json")
    [decision] = run.decisions
    assert (decision.agent, decision.options, decision.choice) == (
        "Planner",
        ("search", "answer"),
        "answer",
    )
    attributes.pop()  # options, but no probabilities
    (tmp_path / "a.json").write_text(_export({**span, "attributes": attributes}))
    loaded = T.from_otel(tmp_path / "a.json", errors="collect")
    assert loaded.runs == [] and loaded.skipped == 1
    [problem] = loaded.problems
    assert problem.field == "span[a].decision.probabilities"
    assert problem.message.startswith("missing: a decision with options needs the probabilities")


# ----------------------------------------------------------------------------- bad input


def test_an_unknown_format_names_the_formats_tried(tmp_path):
    (tmp_path / "a.json").write_text('{"spans": []}')
    with pytest.raises(T.TraceError) as e:
        T.from_otel(tmp_path / "a.json")
    [problem] = e.value.problems
    assert (problem.line, problem.field) == (None, "")  # the file is one document
    assert problem.message.startswith(
        "not a span or log format that blamejax reads; tried OTLP JSON spans"
    )
    assert "ConsoleSpanExporter" in problem.message and 'got {"spans": []}' in problem.message
    run = T.Run("r", (T.Step("s"),), passed=False)
    T.write(tmp_path / "runs.jsonl", [run])
    with pytest.raises(T.TraceError, match="a blamejax trace .*: read it with bj.traces.read"):
        T.from_otel(tmp_path / "runs.jsonl")
    with pytest.raises(
        T.TraceError, match="a Who&When log, not spans: read it with bj.traces.from_whowhen"
    ):
        T.from_openinference(DATA / "whowhen" / "hand-crafted-1.json")


def test_mixed_formats_in_one_folder(tmp_path):
    shutil.copy(SDK / "collector" / "spans.json", tmp_path / "a.json")
    shutil.copy(SDK / "console" / "spans.log", tmp_path / "b.log")
    with pytest.raises(T.TraceError) as e:
        T.from_otel(tmp_path, outcomes={TRACE: False})
    first = e.value.problems[0]
    assert (Path(first.file).name, first.line) == ("b.log", 1)
    assert first.message.startswith(
        "mixed formats: this holds the spans the OpenTelemetry SDK's ConsoleSpanExporter prints, "
        f"but {tmp_path / 'a.json'}:1 holds OTLP JSON spans"
    )


def test_log_records_without_their_span(tmp_path):
    shutil.copy(SDK / "collector" / "logs.json", tmp_path / "logs.json")
    loaded = T.from_otel(tmp_path / "logs.json", errors="collect")
    assert loaded.runs == [] and loaded.skipped == 2
    assert _where(loaded.problems) == [
        ("logs.json", None, "logRecords[0] (gen_ai.client.inference.operation.details).spanId"),
        ("logs.json", None, "logRecords[1] (gen_ai.client.inference.operation.details).spanId"),
    ]
    assert loaded.problems[0].message.startswith(f"no span in trace {TRACE} to join it to")
    record = {"body": {"stringValue": "hello"}}  # no trace context at all
    (tmp_path / "logs.json").write_text(
        json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]})
    )
    (tmp_path / "spans.json").write_text(_export(_span("a", "agent", status=2)))
    with pytest.raises(
        T.TraceError,
        match=r"logs\.json: logRecords\[0\]: no traceId/spanId: a log record that no span holds",
    ):
        T.from_otel(tmp_path)


def test_a_bad_line_among_json_lines_is_named_by_its_line(tmp_path):
    good = (SDK / "collector" / "spans.json").read_text().split("\n")
    (tmp_path / "spans.json").write_text(good[0] + "\n" + '{"resourceSpans": [\n' + good[1] + "\n")
    loaded = T.from_otel(tmp_path / "spans.json", errors="collect")
    assert [(p.line, p.field) for p in loaded.problems][0] == (2, "")
    assert loaded.problems[0].message.startswith("not valid JSON")


# ----------------------------------------------------------------------------- Who&When


def test_both_whowhen_dialects_and_halves():
    """The hand-crafted half spells its flag `is_corrected`; a run is a failure unless
    marked otherwise. A folder of both halves is read half by half."""
    runs = T.from_whowhen(DATA / "whowhen" / "both")
    assert [r.run for r in runs] == ["Algorithm-Generated/47", "Hand-Crafted/6", "Hand-Crafted/24"]
    assert all(r.passed is False for r in runs)
    hand = runs[1]
    record = json.loads((DATA / "whowhen" / "both" / "Hand-Crafted" / "6.json").read_text())
    assert record["is_corrected"] is False and "is_correct" not in record
    assert (
        hand.decisive_step == int(record["mistake_step"])
        and hand.decisive_agent == record["mistake_agent"]
    )
    assert "is_corrected" not in hand.extra and len(hand.steps) == len(record["history"])
    [one] = T.from_whowhen(DATA / "whowhen" / "both" / "Hand-Crafted" / "24.json")
    assert one.run == "24" and one.passed is False


def test_whowhen_outcome_flags(tmp_path):
    history = [{"role": "WebSurfer", "content": "x"}]
    (tmp_path / "1.json").write_text(json.dumps({"history": history}))
    [run] = T.from_whowhen(tmp_path)
    assert run.passed is False  # a Who&When run is a failure unless marked otherwise
    [run] = T.from_whowhen(tmp_path, passed=True)
    assert run.passed is True
    (tmp_path / "1.json").write_text(json.dumps({"history": history, "is_corrected": True}))
    assert T.from_whowhen(tmp_path)[0].passed is True
    (tmp_path / "1.json").write_text(json.dumps({"history": history, "is_corrected": "no"}))
    with pytest.raises(
        T.TraceError, match='1.json: is_corrected: expected true or false, got "no"'
    ):
        T.from_whowhen(tmp_path)
    (tmp_path / "1.json").write_text(
        json.dumps({"history": history, "is_corrected": True, "is_correct": False})
    )
    with pytest.raises(T.TraceError, match="1.json: is_corrected: disagrees with is_correct"):
        T.from_whowhen(tmp_path)


def test_the_whowhen_command_reads_both_halves(capsys):
    assert main(["whowhen", str(DATA / "whowhen" / "both" / "Hand-Crafted")]) == 0
    assert "Who&When evaluation of 2 runs" in capsys.readouterr().out
    assert main(["whowhen", str(DATA / "whowhen" / "both")]) == 0
    assert "Who&When evaluation of 3 runs" in capsys.readouterr().out


def test_every_run_imported_here_is_written_and_read_back(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(
        json.loads(T.SCHEMA_PATH.read_text(encoding="utf-8"))
    )
    runs = [
        *T.from_otel(SDK / "collector", outcomes={TRACE: False}, errors="collect").runs,
        *T.from_whowhen(DATA / "whowhen" / "both"),
    ]
    for folder in ("protobuf", "console"):
        [run] = T.from_otel(SDK / folder, outcomes={TRACE: 0.0})
        runs.append(
            bj.traces.Run(f"{folder}-{run.run}", run.steps, run.score, run.passed, extra=run.extra)
        )
    runs += T.from_openinference(SDK / "openinference", outcomes={OPENINFERENCE_TRACE: False})
    T.write(tmp_path / "all.jsonl", runs)
    assert T.read(tmp_path / "all.jsonl") == runs
    for line in (tmp_path / "all.jsonl").read_text(encoding="utf-8").split("\n")[:-1]:
        errors = list(validator.iter_errors(json.loads(line)))
        assert not errors, errors[0].message


def test_bad_json_says_how_the_file_was_read(tmp_path):
    (tmp_path / "a.json").write_text('{"resourceSpans": [\n  {"scopeSpans": []},\n  oops\n]}\n')
    [problem] = T.from_otel(tmp_path / "a.json", errors="collect").problems
    assert problem.line == 3
    assert problem.message == (
        "not valid JSON: Expecting value at column 3 (read as JSON documents one after another)"
    )
    (tmp_path / "b.json").write_text('{"resourceSpans": []}\n{"resourceSpans": [\n')
    [problem] = T.from_otel(tmp_path / "b.json", errors="collect").problems
    assert problem.line == 2 and problem.message.endswith(
        "(read as JSON Lines: one value per line)"
    )
