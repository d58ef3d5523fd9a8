"""The importers of `bj.traces`: Who&When, OpenTelemetry GenAI spans, OpenInference spans.

Hand-made fixtures are in tests/data/traces/ (whowhen/, otel/, openinference/). The 126
published Who&When traces ship in tests/data/whowhen (MIT licence beside them).
"""

import json
import math
import re
from pathlib import Path

import pytest

import blamejax as bj

T = bj.traces
DATA = Path(__file__).parent / "data" / "traces"
WHOWHEN = Path(__file__).parent / "data" / "whowhen" / "algorithm-generated"


# the Who&When fields that become run fields; the others are kept in the run's extra
MAPPED = {"history", "mistake_agent", "mistake_step", "is_correct"}


def _where(problems):
    return [(Path(p.file).name, p.line, p.field) for p in problems]


# ----------------------------------------------------------------------------- Who&When


@pytest.fixture(scope="module")
def shipped():
    files = sorted(WHOWHEN.glob("*.json"), key=lambda p: int(p.stem))
    return files, [json.loads(p.read_text(encoding="utf-8")) for p in files]


def test_every_shipped_whowhen_trace_imports(shipped, tmp_path):
    files, records = shipped
    runs = T.from_whowhen(WHOWHEN)
    assert len(runs) == len(files) == 126
    assert [r.run for r in runs] == [p.stem for p in files]  # natural order: 1, 2, ..., 126
    for run, record in zip(runs, records):
        history = record["history"]
        assert run.passed is record["is_correct"] is False
        assert run.decisive_step == int(record["mistake_step"])
        assert run.decisive_agent == record["mistake_agent"]
        assert [s.name for s in run.steps] == [f"{i} {m['name']}" for i, m in enumerate(history)]
        assert [s.agent for s in run.steps] == [m["name"] for m in history]
        assert [s.output for s in run.steps] == [m["content"] for m in history]
        assert [s.extra for s in run.steps] == [{"role": m["role"]} for m in history]
        assert [s.parents for s in run.steps] == [()] + [(s.name,) for s in run.steps[:-1]]
        assert run.decisions == ()
        unmapped = {k: v for k, v in record.items() if k not in MAPPED}
        assert run.extra == unmapped  # question, ground_truth, mistake_reason, ... kept
    assert set(runs[0].extra) >= {"question", "ground_truth", "mistake_reason", "system_prompt",
                                  "level", "question_ID"}  # fmt: skip
    path = tmp_path / "whowhen.jsonl"
    T.write(path, runs)
    assert T.validate(path) == []
    assert T.read(path) == runs


def test_the_hand_crafted_dialect_takes_the_agent_from_role():
    [run] = T.from_whowhen(DATA / "whowhen" / "hand-crafted-1.json")
    assert run.run == "hand-crafted-1"
    assert [(s.name, s.agent) for s in run.steps] == [
        ("0 human", "human"),
        ("1 Orchestrator", "Orchestrator"),
        ("2 Orchestrator", "Orchestrator"),
        ("3 WebSurfer", "WebSurfer"),
        ("4 Orchestrator", "Orchestrator"),
    ]
    assert [s.extra for s in run.steps] == [
        {"role": "human"},
        {"role": "Orchestrator (thought)", "note": "thought"},
        {"role": "Orchestrator (-> WebSurfer)", "to": "WebSurfer"},
        {"role": "WebSurfer"},
        {"role": "Orchestrator (termination condition)", "timestamp": "2024-05-01T10:00:00",
         "note": "termination condition"},
    ]  # fmt: skip
    assert run.agents == ("human", "Orchestrator", "WebSurfer")
    assert (run.passed, run.decisive_agent, run.decisive_step) == (False, "WebSurfer", 3)
    assert run.steps[3].output == "Café Kitsuné opens at 7:30 (these are the weekday hours)."
    assert run.extra["ground_truth"] == "Café Marly"


def test_broken_whowhen_files_name_the_file_and_the_message():
    folder = DATA / "whowhen" / "broken"
    with pytest.raises(T.TraceError, match=r"6 problems .*\(3 items could not be loaded\)") as e:
        T.from_whowhen(folder)
    assert _where(e.value.problems) == [
        ("bad-fields.json", None, "history[1]"),
        ("bad-fields.json", None, "history[2].name"),
        ("bad-fields.json", None, "mistake_step"),
        ("bad-fields.json", None, "is_correct"),
        ("no-history.json", None, "history"),
        ("truncated.json", 3, ""),
    ]
    text = str(e.value)
    assert "bad-fields.json: history[1]: no agent: expected a non-empty 'name'" in text
    assert (
        'mistake_step: expected a string holding a 0-based index into history (0 to 2), got "7"'
        in text
    )
    assert 'is_correct: expected true or false, got "no"' in text
    loaded = T.from_whowhen(folder, errors="collect")
    assert [r.run for r in loaded.runs] == ["good"] and loaded.skipped == 3
    assert loaded.problems == e.value.problems


def test_whowhen_outcome_prefix_and_arguments(tmp_path):
    record = {"history": [{"role": "WebSurfer", "content": "x"}], "mistake_step": 0}
    (tmp_path / "5.json").write_text(json.dumps(record))
    [run] = T.from_whowhen(tmp_path / "5.json")
    assert run.passed is False  # no flag: a Who&When run is a failure
    [run] = T.from_whowhen(tmp_path, passed=False, prefix="hand-")
    assert (run.run, run.passed, run.decisive_step, run.decisive_agent) == (
        "hand-5",
        False,
        0,
        None,
    )
    with pytest.raises(ValueError, match="errors must be 'raise' or 'collect', got 'skip'"):
        T.from_whowhen(tmp_path, errors="skip")
    with pytest.raises(TypeError, match="passed must be True, False or None, got 0"):
        T.from_whowhen(tmp_path, passed=0)
    with pytest.raises(FileNotFoundError, match="no such Who&When file or folder"):
        T.from_whowhen(tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match="a folder with no .json Who&When files"):
        T.from_whowhen(DATA / "folder")


# ----------------------------------------------------------------------------- OpenTelemetry

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
UNSET_TRACE = "5b8aa5a2d2c872e8321cf37308d69df2"


def test_otel_genai_spans_become_steps():
    with pytest.raises(T.TraceError, match=rf"span\[1111111111111111\]\.status: the outcome of trace {UNSET_TRACE} is unknown"):  # fmt: skip
        T.from_otel(DATA / "otel" / "genai.json")
    failed, unset = T.from_otel(DATA / "otel" / "genai.json", outcomes={UNSET_TRACE: 0.5})
    assert (failed.run, failed.passed, failed.score) == (TRACE, False, None)  # root ERROR
    assert (unset.run, unset.passed, unset.score) == (UNSET_TRACE, None, 0.5)
    assert [(s.name, s.agent, s.parents) for s in failed.steps] == [
        ("invoke_agent Planner", "Planner", ()),
        ("chat gpt-4o", "Planner", ("invoke_agent Planner",)),
        ("invoke_agent WebSurfer", "WebSurfer", ("invoke_agent Planner",)),
        ("execute_tool web_search", "WebSurfer", ("invoke_agent WebSurfer",)),
        ("chat gpt-4o #2", "WebSurfer", ("invoke_agent WebSurfer",)),
    ]
    assert [s.output for s in failed.steps] == [
        None, "Ask WebSurfer to search.", None, "no results", "France — I think."]  # fmt: skip
    assert [s.tokens for s in failed.steps] == [
        None, {"input": 120, "output": 35}, None, None, {"input": 300, "output": 8}]  # fmt: skip
    root, chat = failed.steps[0].extra, failed.steps[1].extra
    assert root["status"] == {"code": 2, "message": "wrong answer"}
    assert root["attributes"] == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": "planner-1",
    }
    assert root["spanId"] == "00f067aa0ba902b7" and root["scope"]["name"] == "crew.instrumentation"
    assert "gen_ai.agent.name" not in root["attributes"]  # mapped to the step's agent
    assert json.loads(chat["attributes"]["gen_ai.input.messages"])[0]["role"] == "user"
    assert "gen_ai.usage.input_tokens" not in chat["attributes"]  # mapped to tokens
    assert failed.steps[4].extra["events"][0]["name"] == "gen_ai.client.inference.operation.details"
    assert failed.extra == {
        "resource": {"service.name": "research-crew"},
        "outcome_from": "status ERROR",
    }
    assert all(s.options is None for s in failed.steps)


def test_otel_traces_split_over_lines_are_joined_parent_first(tmp_path):
    [run] = T.from_otel(DATA / "otel" / "batches.jsonl", ok_means_passed=True)
    assert run.passed is True  # the root's status is OK, and OK is asked to mean passed
    assert [(s.name, s.agent, s.parents) for s in run.steps] == [
        ("invoke_agent Calculator", "Calculator", ()),
        ("execute_tool calc", "Calculator", ("invoke_agent Calculator",)),
    ]
    # clock skew: the child says it started before its parent; the parent still comes first
    spans = [
        {
            "traceId": "t",
            "spanId": "c",
            "parentSpanId": "p",
            "name": "child",
            "startTimeUnixNano": 5,
        },
        {"traceId": "t", "spanId": "p", "name": "parent", "startTimeUnixNano": "9"},
        {"traceId": "t", "spanId": "q", "name": "late root", "startTimeUnixNano": "7"},
    ]
    path = tmp_path / "skew.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    [run] = T.from_otel(path, outcomes={"t": False})
    assert [s.name for s in run.steps] == ["parent", "child", "late root"]
    T.write(tmp_path / "runs.jsonl", [run])
    assert T.read(tmp_path / "runs.jsonl") == [run]


def test_broken_otel_exports_name_the_line_and_the_span():
    path = DATA / "otel" / "broken.jsonl"
    with pytest.raises(T.TraceError) as e:
        T.from_otel(path)
    assert _where(e.value.problems) == [
        ("broken.jsonl", 2, ""),
        ("broken.jsonl", 3, "span[0000000000000003]"),
        ("broken.jsonl", 5, "span[0000000000000005].status.code"),
        ("broken.jsonl", 1, "span[0000000000000002].parentSpanId"),
        ("broken.jsonl", 4, "span[0000000000000004].gen_ai.usage.output_tokens"),
    ]
    messages = [p.message for p in e.value.problems]
    assert (
        messages[1]
        == 'attributes[0] (gen_ai.usage.input_tokens): intValue: expected an integer, got "many"'
    )
    assert messages[3] == "unknown parent span 00000000000000ff: not in trace b1"
    assert messages[4] == "expected a token count (an integer >= 0), got -5"
    loaded = T.from_otel(path, errors="collect")
    assert loaded.runs == [] and loaded.skipped == 5  # 1 unreadable line, 4 traces


def test_a_trace_with_an_unreadable_span_is_left_out_whole(tmp_path):
    spans = [
        {"traceId": "t", "spanId": "a", "name": "root", "status": {"code": 2}},
        {"traceId": "t", "spanId": "b", "parentSpanId": "a", "name": "x", "status": {"code": 9}},
        {"traceId": "u", "spanId": "c", "name": "other", "status": {"code": 1}},
    ]
    path = tmp_path / "spans.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    loaded = T.from_otel(path, errors="collect", ok_means_passed=True)
    assert [r.run for r in loaded.runs] == ["u"] and loaded.skipped == 1
    assert [p.field for p in loaded.problems] == ["span[b].status.code", "trace[t]"]
    assert "not imported: 1 of its spans could not be read" in loaded.problems[1].message


def test_otel_outcomes_are_checked(tmp_path):
    path = DATA / "otel" / "batches.jsonl"
    with pytest.raises(TypeError, match=r"outcomes\['x'\] must be True/False or a finite score"):
        T.from_otel(path, outcomes={"x": math.nan})
    with pytest.raises(TypeError, match="outcomes must be a mapping of trace id"):
        T.from_otel(path, outcomes=[True])
    with pytest.raises(T.TraceError, match=r"outcomes\['nope'\]: no trace has this id"):
        T.from_otel(path, outcomes={"nope": True})
    [run] = T.from_otel(path, outcomes={"0af7651916cd43dd8448eb211c80319c": False})
    assert run.passed is False  # the mapping overrides the root's OK status
    spans = [{"traceId": "t", "spanId": "a", "parentSpanId": "b", "name": "a"},
             {"traceId": "t", "spanId": "b", "parentSpanId": "a", "name": "b"}]  # fmt: skip
    (tmp_path / "cycle.json").write_text(
        json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
    )
    with pytest.raises(T.TraceError, match=r"span\[a\]\.parentSpanId: trace t has no root span"):
        T.from_otel(tmp_path / "cycle.json")
    spans.append({"traceId": "t", "spanId": "r", "name": "root"})
    (tmp_path / "cycle.json").write_text(
        json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
    )
    with pytest.raises(T.TraceError, match=r"span\[a\]\.parentSpanId: its ancestors form a cycle"):
        T.from_otel(tmp_path / "cycle.json", outcomes={"t": False})


# ----------------------------------------------------------------------------- OpenInference


def test_openinference_decision_spans_become_decision_steps(tmp_path):
    [run] = T.from_openinference(DATA / "openinference" / "router.json")
    assert run.passed is False  # root status STATUS_CODE_ERROR
    assert [(s.name, s.agent, s.parents) for s in run.steps] == [
        ("RouterGraph", None, ()),
        ("planner", "Planner", ("RouterGraph",)),
        ("ChatOpenAI", "Planner", ("planner",)),
        ("route", "Planner", ("planner",)),
        ("Researcher", "Researcher", ("RouterGraph",)),  # an AGENT span without agent.name
        ("web_search", "Researcher", ("Researcher",)),
        ("pick_source", "Researcher", ("Researcher",)),
    ]
    assert [s.name for s in run.decisions] == ["route", "pick_source"]
    route, pick = run.steps[3], run.steps[6]
    assert route.options == ("search", "answer", "ask")
    assert route.logits == {
        "factual": (math.log(0.75), math.log(0.25), -math.inf),
        "fix": (math.log(0.125), math.log(0.875), -math.inf),
    }
    assert (route.choice, route.accept) == ("search", ("answer",))
    assert route.extra["attributes"] == {"openinference.span.kind": "DECISION"}
    assert pick.options == ("wiki", "news")  # lists given as JSON strings
    assert pick.logits == {"factual": (math.log(0.5), math.log(0.5))} and pick.choice == "news"
    llm = run.steps[2]
    assert (llm.output, llm.tokens) == ("route: search", {"input": 50, "output": 10})
    assert llm.extra["attributes"]["llm.model_name"] == "gpt-4o-mini"
    assert run.steps[0].output == "Brazil"
    assert run.steps[0].extra["attributes"] == {
        "openinference.span.kind": "CHAIN", "input.value": "Who won in 1998?"}  # fmt: skip
    assert run.steps[1].extra["attributes"]["graph.node.id"] == "planner"
    T.write(tmp_path / "runs.jsonl", [run])
    assert T.validate(tmp_path / "runs.jsonl") == []
    assert T.read(tmp_path / "runs.jsonl") == [run]
    assert '"-inf"' in (tmp_path / "runs.jsonl").read_text()


def test_broken_openinference_decisions_name_the_span_and_attribute():
    loaded = T.from_openinference(DATA / "openinference" / "broken.jsonl", errors="collect")
    assert loaded.runs == [] and loaded.skipped == 7
    expected = [
        (1, "span[0000000000000011].decision.options", r"a DECISION span needs its options"),
        (2, "span[0000000000000012].decision.probabilities", r"expected 2 probabilities \(one per option\), got 1"),
        (3, "span[0000000000000013].decision.choice", r'expected one of the options \["a", "b"\], got "c"'),
        (4, "span[0000000000000014].decision.probabilities", r"every probability is 0"),
        (5, "span[0000000000000015].decision.probabilities[0]", r"expected a probability in \[0, 1\], got 1.5"),
        (6, "span[0000000000000016].options[1]", r'duplicate "a"'),
        (7, "span[0000000000000017].decision.probabilities", r"missing: a decision with options needs the probabilities"),
    ]  # fmt: skip
    assert [(p.line, p.field) for p in loaded.problems] == [(line, f) for line, f, _ in expected]
    for p, (_, _, pattern) in zip(loaded.problems, expected):
        assert re.search(pattern, p.message), p.message


def test_every_imported_run_passes_the_json_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(T.SCHEMA_PATH.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    runs = [
        *T.from_whowhen(DATA / "whowhen" / "hand-crafted-1.json"),
        *T.from_whowhen(DATA / "whowhen" / "broken", errors="collect").runs,
        *T.from_otel(DATA / "otel" / "genai.json", outcomes={UNSET_TRACE: True}),
        *T.from_otel(DATA / "otel" / "batches.jsonl", ok_means_passed=True),
        *T.from_openinference(DATA / "openinference" / "router.json"),
    ]
    if WHOWHEN.is_dir():
        runs += T.from_whowhen(WHOWHEN)
    T.write(tmp_path / "all.jsonl", runs)
    lines = (tmp_path / "all.jsonl").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == len(runs)
    for line in lines:
        errors = list(validator.iter_errors(json.loads(line)))
        assert not errors, errors[0].message


def test_openinference_output_messages_are_joined_in_index_order(tmp_path):
    attributes = [
        {"key": f"llm.output_messages.{i}.message.content", "value": {"stringValue": text}}
        for i, text in [(10, "third"), (2, "second"), (0, "first")]
    ]
    spans = [{"traceId": "t", "spanId": "s", "name": "llm", "attributes": attributes}]
    path = tmp_path / "spans.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    [run] = T.from_openinference(path, outcomes={"t": 0.0})
    assert run.steps[0].output == "first\nsecond\nthird" and run.score == 0.0
