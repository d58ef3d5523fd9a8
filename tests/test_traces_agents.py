"""The agent rule of the span importers on hand-written spans: the cases the frameworks'
own files (tests/test_traces_frameworks.py) do not reach: concurrent agent spans, LangGraph's
own nodes, precedence between a span's own name and the agent running beside it, and the
warning for runs with model calls but no agent."""

import json
import warnings

import pytest

import blamejax as bj


def attribute(key, value):
    kind = "intValue" if isinstance(value, int) else "stringValue"
    return {"key": key, "value": {kind: value}}


def span(sid, name, parent=None, start=0, end=0, **attributes):
    out = {
        "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
        "spanId": sid.rjust(16, "0"),
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [attribute(k.replace("__", "."), v) for k, v in attributes.items()],
    }
    if parent is not None:
        out["parentSpanId"] = parent.rjust(16, "0")
    return out


def imported(tmp_path, spans, importer=bj.traces.from_otel):
    path = tmp_path / "spans.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    [run] = importer(path, outcomes={"4bf92f3577b34da6a3ce929d0e0e4736": False})
    return {s.name: s.agent for s in run.steps}


def test_traceloop_agent_spans_and_workflow(tmp_path):
    agents = imported(
        tmp_path,
        [
            span("1", "pipeline.workflow", traceloop__span__kind="workflow", traceloop__entity__name="pipeline"),
            span("2", "planner.agent", "1", 1, 9, traceloop__span__kind="agent", traceloop__entity__name="planner"),
            span("3", "openai.chat", "2", 2, 3, gen_ai__operation__name="chat"),
            span("4", "critic.agent", "1", 10, 19, traceloop__span__kind="agent"),  # no entity name
        ],
    )  # fmt: skip
    assert agents == {
        "pipeline.workflow": None,
        "planner.agent": "planner",
        "openai.chat": "planner",
        "critic.agent": "critic",
    }


def test_a_call_beside_an_agent_span_takes_the_one_running(tmp_path):
    """OpenInference's LangChain spans: the call is not under the AGENT span but started
    while it ran; a span's own agent.name wins over the one beside; two agent spans running
    at once (neither holding the other) name none."""
    kind = {"openinference__span__kind": "AGENT"}
    agents = imported(
        tmp_path,
        [
            span("1", "pipeline", None, 0, 100),
            span("2", "Planner", "1", 10, 20, agent__name="Planner", **kind),
            span("3", "LangGraph", "1", 5, 90),
            span("4", "ChatOpenAI", "3", 12, 15, openinference__span__kind="LLM"),
            span("5", "ChatOpenAI", "3", 13, 14, openinference__span__kind="LLM", agent__name="Own"),
            span("6", "A", "1", 30, 50, agent__name="A", **kind),
            span("7", "B", "1", 35, 55, agent__name="B", **kind),
            span("8", "ChatOpenAI", "3", 40, 41, openinference__span__kind="LLM"),
            span("9", "ChatOpenAI", "3", 60, 61, openinference__span__kind="LLM"),
        ],
        bj.traces.from_openinference,
    )  # fmt: skip
    assert agents["ChatOpenAI"] == "Planner"
    assert agents["ChatOpenAI #2"] == "Own"
    assert agents["ChatOpenAI #3"] is None  # A and B ran at once: the time cannot tell
    assert agents["ChatOpenAI #4"] is None  # no agent span running


def test_langgraph_nodes_name_agents_but_not_its_own(tmp_path):
    def meta(node):
        return json.dumps({"langgraph_node": node, "langgraph_step": 1})

    agents = imported(
        tmp_path,
        [
            span("1", "LangGraph", None, 0, 100, openinference__span__kind="CHAIN"),
            span("2", "__start__", "1", 1, 2, metadata=meta("__start__")),
            span("3", "planner", "1", 3, 10, metadata=meta("planner")),
            span("4", "ChatOpenAI", "3", 4, 5, metadata=meta("planner"), openinference__span__kind="LLM"),
        ],
        bj.traces.from_openinference,
    )  # fmt: skip
    assert agents == {
        "LangGraph": None,
        "__start__": None,
        "planner": "planner",
        "ChatOpenAI": "planner",
    }


def test_model_calls_without_agents_warn(tmp_path):
    spans = [
        span("1", "pipeline", None, 0, 10),
        span("2", "chat gpt", "1", 1, 2, gen_ai__operation__name="chat"),
    ]
    with pytest.warns(
        bj.traces.NoAgentsWarning,
        match=r"1 run\(s\) \(4bf92f3577b34da6a3ce929d0e0e4736\) have model calls but no agent",
    ):
        imported(tmp_path, spans)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        named = [span("1", "invoke_agent Planner", None, 0, 10), spans[1]]
        assert imported(tmp_path, named)["chat gpt"] == "Planner"  # no warning
        no_calls = [span("1", "pipeline", None, 0, 10)]
        assert imported(tmp_path, no_calls) == {"pipeline": None}  # no model call: no warning


def test_older_genai_names(tmp_path):
    agents_and_steps = [
        span(
            "1",
            "openai.chat",
            gen_ai__agent__name="Planner",
            llm__request__type="chat",
            gen_ai__prompt__0__role="user",
            gen_ai__prompt__0__content="Plan.",
            gen_ai__completion__1__content="second",
            gen_ai__completion__0__content="first",
            gen_ai__usage__prompt_tokens=11,
            gen_ai__usage__completion_tokens=2,
        )
    ]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": agents_and_steps}]}]}))
    [run] = bj.traces.from_otel(path, outcomes={"4bf92f3577b34da6a3ce929d0e0e4736": True})
    [step] = run.steps
    assert (step.agent, step.output, step.tokens) == (
        "Planner",
        "first\nsecond",
        {"input": 11, "output": 2},
    )
    assert bj.traces.prompt_of(step) == [{"role": "user", "content": "Plan."}]
