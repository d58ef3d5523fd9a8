"""Traces as agent frameworks write them, produced here by the real packages (the
`traces-test` extra pins them) against a loopback model server (tests/scorer_server.py):
LangGraph traced by OpenInference's LangChain instrumentation, and pydantic-ai's own
OpenTelemetry instrumentation. Each pipeline is planner -> researcher -> writer; each agent
answers with one word. The spans are exported as OTLP JSON lines (the SDK's protobuf encoder
and `MessageToJson`), imported, and blamed:

- with the log-probabilities the calls kept (LangChain's `LLMResult` in `output.value`,
  read by `decisions_from_logprobs` through the same reply-to-logits rule as a chat
  completion);
- from a plain trace (no log-probabilities, no `record_decision`): decisions declared by
  agent (`declare_decisions`), the factual variant scored from the recorded prompt and the
  fix from a corrected one (`score_decisions`, `score_fixes`), by an `OpenAIScorer` asking
  the same loopback server.
"""

import asyncio
import json
import os
import pathlib
import re
import warnings

import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from scorer_server import FakeAPI, Reply, chat, openai_scorer
from test_traces_instrumented import OTLPJsonLines

import blamejax as bj
from blamejax.scorers import Cache, Request, score_fixes

QUESTION = "When did the museum reopen?"
# (agent, options, accepted options)
AGENTS = (
    ("planner", ("search", "answer"), ("search",)),
    ("researcher", ("web", "archive"), ("web",)),
    ("writer", ("cite", "guess"), ("cite",)),
)
OPTIONS = {agent: options for agent, options, _ in AGENTS}
ACCEPT = {agent: accept for agent, _, accept in AGENTS}
# Each agent's first-token log-probabilities: the planner prefers the wrong option.
FACTUAL = {
    "planner": {"answer": -0.2, "search": -1.7},
    "researcher": {"web": -0.1, "archive": -2.4},
    "writer": {"cite": -0.3, "guess": -1.4},
}
# What the scorer answers (letters A, B for the options in order): for the recorded prompt,
# and for the corrected prompt ("Check first." added), which fixes the planner only.
SCORED = {
    "planner": {"A": -1.7, "B": -0.2},
    "researcher": {"A": -0.1, "B": -2.4},
    "writer": {"A": -0.3, "B": -1.4},
}
FIXED = {
    "planner": {"A": -0.0001, "B": -12.0},
    "researcher": {"A": -0.1, "B": -2.4},
    "writer": {"A": -0.3, "B": -1.4},
}


def system(agent):
    options = OPTIONS[agent]
    return f"You are the {agent}. Answer with one word: {' or '.join(options)}."


def model_of(failing=(), prefer=None):
    """The loopback model: the agents' calls answer by their system prompt (with the
    log-probabilities when asked); the scorer's requests ("Which option should this step
    choose?") answer with letters, from SCORED, or FIXED when the prompt was corrected.
    An agent in `failing` gets an HTTP 500; `prefer` overrides an agent's table."""
    tables = {**FACTUAL, **(prefer or {})}

    def model(body):
        texts = " ".join(str(m.get("content")) for m in body.get("messages", []))
        if "Which option should this step choose?" in texts:
            agent = re.search(r"You are the (\w+)\.", texts).group(1)
            table = (FIXED if "Check first." in texts else SCORED)[agent]
            return Reply(chat(max(table, key=table.get), table))
        agent = re.search(r"You are the (\w+)\.", texts).group(1)
        if agent in failing:
            return Reply({"error": {"message": "the model is down"}}, status=500)
        ranked = dict(sorted(tables[agent].items(), key=lambda kv: -kv[1]))
        best = next(iter(ranked))
        if not body.get("logprobs"):
            return Reply(chat(best))
        return Reply(chat(best, dict(list(ranked.items())[: body.get("top_logprobs") or 1])))

    return model


@pytest.fixture
def tracer_to(tmp_path):
    """`tracer_to(path, instrument)`: a tracer of the real SDK exporting OTLP JSON lines to
    `path`, with `instrument(provider)` applied; every instrumentation undone after."""
    made = []

    def make(path, instrument=None):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLines(path)))
        undo = instrument(provider) if instrument is not None else None
        made.append((provider, undo))
        return provider.get_tracer("pipeline")

    try:
        yield make
    finally:
        for provider, undo in made:
            if undo is not None:
                undo()
            provider.shutdown()


def corrected(run, step, variant, parent):
    """The fix: the recorded prompt with a corrected system message."""
    messages = bj.traces.prompt_of(step)
    messages = [
        {**m, "content": m["content"] + " Check first."} if m["role"] == "system" else m
        for m in messages
    ]
    return Request(step.name, variant, {"agent": step.agent, "messages": messages}, step.options)


def check_planner_blamed(runs, api, tmp_path, *, score_factual):
    """Fixes (and, for a plain trace, the factual variant) scored by an OpenAIScorer on the
    loopback server; exact blame names the planner's call."""
    scorer = openai_scorer(api, cache=Cache(str(tmp_path / "scores.sqlite")))
    if score_factual:
        runs = bj.traces.score_decisions(runs, scorer)
        for step in runs[0].decisions:
            table = SCORED[step.agent]
            assert step.logits == {"factual": (table["A"], table["B"])}
    [filled] = score_fixes(runs, scorer, corrected)
    out = bj.traces.blame_runs([filled], num_worlds=16)
    who = bj.traces.readout(out.result, out.cases.agent_map)
    assert who.who == ("planner",)
    assert who.earliest_repair == filled.decisions[0].name
    assert out.outside == () and out.mismatched == ()
    return out


# LangGraph, traced by OpenInference's LangChain instrumentation.


def langgraph_app(api, *, logprobs, agent_span_tracer=None):
    from typing import TypedDict

    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    options = dict(logprobs=True, top_logprobs=5) if logprobs else {}
    llm = ChatOpenAI(
        model="test-model",
        base_url=f"{api.url}/v1",
        api_key="test",
        max_retries=0,
        timeout=5.0,
        max_tokens=1,
        **options,
    )

    class State(TypedDict, total=False):
        question: str
        planner: str
        researcher: str
        writer: str

    def node(agent):
        def run(state):
            messages = [("system", system(agent)), ("user", state["question"])]
            if agent == "planner" and agent_span_tracer is not None:  # the user's own span
                attributes = {"openinference.span.kind": "AGENT", "agent.name": "Planner"}
                with agent_span_tracer.start_as_current_span("Planner", attributes=attributes):
                    return {agent: llm.invoke(messages).content}
            return {agent: llm.invoke(messages).content}

        return run

    graph = StateGraph(State)
    previous = START
    for agent, _, _ in AGENTS:
        graph.add_node(agent, node(agent))
        graph.add_edge(previous, agent)
        previous = agent
    graph.add_edge(previous, END)
    return graph.compile()


def langchain_instrument(provider):
    from openinference.instrumentation.langchain import LangChainInstrumentor

    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    return instrumentor.uninstrument


def run_langgraph(api, tracer_to, path, *, logprobs, agent_span=False):
    tracer = tracer_to(path, langchain_instrument)
    app = langgraph_app(api, logprobs=logprobs, agent_span_tracer=tracer if agent_span else None)
    try:
        with tracer.start_as_current_span("pipeline") as root:
            app.invoke({"question": QUESTION})
    except openai.InternalServerError:  # the root span records it: status ERROR
        pass
    return format(root.get_span_context().trace_id, "032x")


def llm_steps(run):
    """The model calls: OpenInference LLM spans, GenAI chat spans."""
    kinds = [
        (s, (s.extra.get("attributes") or {}).get("openinference.span.kind")) for s in run.steps
    ]
    return [
        s
        for s, kind in kinds
        if kind == "LLM"
        or (s.extra.get("attributes") or {}).get("gen_ai.operation.name") == "chat"
        or (s.extra.get("attributes") or {}).get("llm.request.type") == "chat"
    ]


def test_langgraph_nodes_name_the_agents_and_logprobs_reach_blame(tmp_path, tracer_to):
    """Each LangGraph node is an agent (`metadata.langgraph_node`); each ChatOpenAI span keeps
    LangChain's LLMResult, whose log-probabilities decisions_from_logprobs reads."""
    api = FakeAPI(model_of())
    try:
        path = tmp_path / "spans.jsonl"
        tid = run_langgraph(api, tracer_to, path, logprobs=True)
        [run] = bj.traces.from_openinference(path, outcomes={tid: False})
        assert [(s.agent, s.output, s.tokens) for s in llm_steps(run)] == [
            ("planner", "answer", {"input": 11, "output": 1}),
            ("researcher", "web", {"input": 11, "output": 1}),
            ("writer", "cite", {"input": 11, "output": 1}),
        ]
        assert run.agents == ("planner", "researcher", "writer")
        [run] = bj.traces.decisions_from_logprobs([run], OPTIONS, accept=ACCEPT)
        for step in run.decisions:
            table = FACTUAL[step.agent]
            assert step.logits == {"factual": tuple(table[o] for o in OPTIONS[step.agent])}
        check_planner_blamed([run], api, tmp_path, score_factual=False)
    finally:
        api.close()


def test_langgraph_call_beside_the_users_agent_span(tmp_path, tracer_to):
    """OpenInference parents a LangChain call by LangChain's run tree, so the ChatOpenAI span
    made inside the user's AGENT span is not under it; it started while that span ran, and
    takes its agent."""
    api = FakeAPI(model_of())
    try:
        path = tmp_path / "spans.jsonl"
        tid = run_langgraph(api, tracer_to, path, logprobs=False, agent_span=True)
        [run] = bj.traces.from_openinference(path, outcomes={tid: False})
        by_name = {s.name: s for s in run.steps}
        agent_step = by_name["Planner"]
        [call] = [s for s in llm_steps(run) if s.output == "answer"]
        assert call.agent == "Planner"
        assert agent_step.name not in call.parents  # beside it, not under it
        assert [s.agent for s in llm_steps(run)][1:] == ["researcher", "writer"]
    finally:
        api.close()


def test_langgraph_plain_trace_reaches_blame_through_declared_decisions(tmp_path, tracer_to):
    """No log-probabilities asked, nothing recorded: the decisions are declared by agent and
    scored from the prompts the trace kept."""
    api = FakeAPI(model_of())
    try:
        path = tmp_path / "spans.jsonl"
        tid = run_langgraph(api, tracer_to, path, logprobs=False)
        runs = bj.traces.from_openinference(path, outcomes={tid: False})
        with pytest.raises(
            ValueError,
            match="step .ChatOpenAI.: .*carries no log-probabilities.*declare the decisions with bj.traces.declare_decisions",
        ):
            bj.traces.decisions_from_logprobs(runs, OPTIONS)
        runs = bj.traces.declare_decisions(runs, OPTIONS, accept=ACCEPT)
        assert [(s.agent, s.choice) for s in runs[0].decisions] == [
            ("planner", "answer"),
            ("researcher", "web"),
            ("writer", "cite"),
        ]
        assert bj.traces.prompt_of(runs[0].decisions[0]) == [
            {"role": "system", "content": system("planner")},
            {"role": "user", "content": QUESTION},
        ]
        check_planner_blamed(runs, api, tmp_path, score_factual=True)
    finally:
        api.close()


def test_a_failure_outside_the_decisions_names_no_culprit(tmp_path, tracer_to):
    """The writer's call raised (HTTP 500); the planner and the researcher chose accepted
    options. The run fails (status ERROR), the failure lies outside the declared decisions:
    a warning in a trace user's words, `outside` names the run, readout names no one."""
    api = FakeAPI(
        model_of(failing=("writer",), prefer={"planner": {"search": -0.1, "answer": -2.5}})
    )
    try:
        path = tmp_path / "spans.jsonl"
        run_langgraph(api, tracer_to, path, logprobs=False)
        [run] = bj.traces.from_openinference(path)
        assert run.passed is False and run.extra["outcome_from"] == "status ERROR"
        with pytest.raises(ValueError, match="kept no reply text to read the choice from"):
            bj.traces.declare_decisions([run], OPTIONS)  # the writer's call has no reply
        declared = {k: v for k, v in OPTIONS.items() if k != "writer"}
        runs = bj.traces.declare_decisions([run], declared, accept=ACCEPT)
        scorer = openai_scorer(api, cache=Cache(str(tmp_path / "scores.sqlite")))
        runs = score_fixes(bj.traces.score_decisions(runs, scorer), scorer, corrected)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = bj.traces.blame_runs(runs, num_worlds=8)
        messages = [str(w.message) for w in caught]
        assert [w.category for w in caught] == [bj.traces.FailureOutsideDecisionsWarning]
        assert "chose an accepted option at every declared decision" in messages[0]
        assert "score_range" not in messages[0] and "worlds" not in messages[0]
        assert out.outside == (run.run,)
        read = bj.traces.readout(out.result, out.cases.agent_map)
        assert (read.who, read.when, read.earliest_repair) == ((), (), None)
        assert "not a failure at these steps" in read.repair_note
    finally:
        api.close()


# pydantic-ai's own instrumentation (invoke_agent spans, GenAI messages on the chat spans).


def run_pydantic_ai(api, path):
    """The three agents run by pydantic-ai, each instrumented with the SDK's tracer provider
    (content included); returns the trace id."""
    from pydantic_ai import Agent, InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLines(path)))
    settings = InstrumentationSettings(tracer_provider=provider, include_content=True)
    model = OpenAIChatModel(
        "test-model", provider=OpenAIProvider(base_url=f"{api.url}/v1", api_key="test")
    )
    try:
        with provider.get_tracer("pipeline").start_as_current_span("pipeline") as root:
            for agent, _, _ in AGENTS:
                runner = Agent(model, name=agent, system_prompt=system(agent))
                runner.instrument = settings
                # asyncio.run closes its event loop (run_sync would leave one open)
                asyncio.run(runner.run(QUESTION, model_settings={"max_tokens": 1}))
    finally:
        provider.shutdown()
    return format(root.get_span_context().trace_id, "032x")


def test_pydantic_ai_invoke_agent_spans_to_blame(tmp_path):
    """pydantic-ai writes `invoke_agent <name>` spans around each agent's `chat` spans, with
    the GenAI messages and tokens: agents, texts and tokens import; the plain trace reaches
    blame through declared decisions scored from the recorded prompts."""
    api = FakeAPI(model_of())
    try:
        path = tmp_path / "spans.jsonl"
        tid = run_pydantic_ai(api, path)
        runs = bj.traces.from_otel(path, outcomes={tid: False})
        [run] = runs
        assert [s.agent for s in run.steps if s.name.startswith("invoke_agent")] == [
            "planner",
            "researcher",
            "writer",
        ]
        assert [(s.agent, s.output, s.tokens) for s in llm_steps(run)] == [
            ("planner", "answer", {"input": 11, "output": 1}),
            ("researcher", "web", {"input": 11, "output": 1}),
            ("writer", "cite", {"input": 11, "output": 1}),
        ]
        runs = bj.traces.declare_decisions(runs, OPTIONS, accept=ACCEPT)
        assert [s.name for s in runs[0].decisions] == [s.name for s in llm_steps(run)]
        check_planner_blamed(runs, api, tmp_path, score_factual=True)
    finally:
        api.close()


# Traceloop (OpenLLMetry). Its `traceloop-sdk` 0.62.4 cannot be installed beside the pins
# above (it requires every opentelemetry-instrumentation-* package, of which the registry
# here has versions that need other OpenTelemetry releases), so the model calls are traced by
# its OpenAI instrumentation (`opentelemetry-instrumentation-openai` 0.62.4, part of the
# extra) and each agent's span is written as the SDK's `@agent` decorator writes it
# (traceloop/sdk/decorators/base.py of traceloop-sdk 0.62.4: the span named
# "<name>.agent", with `traceloop.span.kind` "agent" and `traceloop.entity.name`).


TRACELOOP_PIPELINE = """
import os, sys
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
import openai
from opentelemetry.instrumentation.openai import OpenAIInstrumentor

url, path, question = sys.argv[1:4]
agents = {"planner": "search or answer", "researcher": "web or archive", "writer": "cite or guess"}

class Lines(SpanExporter):
    def export(self, spans):
        with open(path, "a", encoding="utf-8") as f:
            f.write(MessageToJson(encode_spans(spans), indent=None) + "\\n")
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(Lines()))
OpenAIInstrumentor().instrument(tracer_provider=provider)
tracer = provider.get_tracer("pipeline")
client = openai.OpenAI(base_url=url, api_key="test", timeout=5.0, max_retries=0)
workflow = {"traceloop.span.kind": "workflow", "traceloop.entity.name": "pipeline"}
with tracer.start_as_current_span("pipeline.workflow", attributes=workflow) as root:
    for agent, options in agents.items():
        attributes = {"traceloop.span.kind": "agent", "traceloop.entity.name": agent}
        with tracer.start_as_current_span(agent + ".agent", attributes=attributes):
            system = f"You are the {agent}. Answer with one word: {options}."
            client.chat.completions.create(
                model="test-model",
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": question}],
                max_tokens=1,
            )
provider.shutdown()
print(format(root.get_span_context().trace_id, "032x"))
"""


def run_traceloop(api, path):
    """The pipeline in a child process (bounded in time): Traceloop's `uninstrument` leaves
    the `openai` client wrapped, so the instrumentation must not outlive the run."""
    import subprocess
    import sys

    assert all(system(a).endswith(f"{' or '.join(OPTIONS[a])}.") for a in OPTIONS)
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-c",
            TRACELOOP_PIPELINE,
            f"{api.url}/v1",
            str(path),
            QUESTION,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRACELOOP_TRACE_CONTENT": "true"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_traceloop_agent_spans_to_blame(tmp_path):
    """Traceloop's agent spans name the agents (not its workflow); its OpenAI
    instrumentation's `openai.chat` spans carry the GenAI messages and tokens; the plain
    trace reaches blame through declared decisions."""
    api = FakeAPI(model_of())
    try:
        path = tmp_path / "spans.jsonl"
        tid = run_traceloop(api, path)
        runs = bj.traces.from_otel(path, outcomes={tid: False})
        [run] = runs
        assert run.agents == ("planner", "researcher", "writer")
        assert [(s.agent, s.output, s.tokens) for s in llm_steps(run)] == [
            ("planner", "answer", {"input": 11, "output": 1}),
            ("researcher", "web", {"input": 11, "output": 1}),
            ("writer", "cite", {"input": 11, "output": 1}),
        ]
        assert run.steps[0].agent is None  # the workflow is not an agent
        runs = bj.traces.declare_decisions(runs, OPTIONS, accept=ACCEPT)
        check_planner_blamed(runs, api, tmp_path, score_factual=True)
    finally:
        api.close()


def test_traceloop_0_47_older_genai_names(tmp_path):
    """Traceloop's OpenAI instrumentation 0.47.5 writes the GenAI conventions' older names:
    `gen_ai.prompt.<i>.content`, `gen_ai.completion.<i>.content`, `gen_ai.usage.prompt_tokens`
    and `completion_tokens`. It needs OpenTelemetry 1.38 or older, which cannot share this
    environment, so the file was written by the real package with
    tests/data/traces/traceloop/make_traceloop_0_47.py (the versions are in its docstring)."""
    path = (
        pathlib.Path(__file__).parent / "data" / "traces" / "traceloop" / "traceloop-0.47.5.jsonl"
    )
    runs = bj.traces.from_otel(path)
    [run] = runs
    assert run.passed is False and run.extra["outcome_from"] == "outcome attributes"
    assert run.agents == ("planner", "researcher", "writer")
    calls = llm_steps(run)
    assert [(s.agent, s.output, s.tokens) for s in calls] == [
        ("planner", "answer", {"input": 11, "output": 1}),
        ("researcher", "web", {"input": 11, "output": 1}),
        ("writer", "cite", {"input": 11, "output": 1}),
    ]
    assert bj.traces.prompt_of(calls[0]) == [
        {"role": "system", "content": system("planner")},
        {"role": "user", "content": QUESTION},
    ]
    api = FakeAPI(model_of())
    try:
        runs = bj.traces.declare_decisions(runs, OPTIONS, accept=ACCEPT)
        check_planner_blamed(runs, api, tmp_path, score_factual=True)
    finally:
        api.close()


# MLflow 3.x: `Trace.to_json()`. The full `mlflow` package is needed to record (162 s and
# 858 MB to install here), so its files were written by the real package with
# tests/data/traces/mlflow/make_mlflow.py (the versions are in its docstring).
MLFLOW = pathlib.Path(__file__).parent / "data" / "traces" / "mlflow"


def test_mlflow_traces_to_blame(tmp_path):
    """Two traces, one per line: the planner chose wrongly (its outcome given by MLflow's
    "tr-" trace id), and the writer's call raised (status ERROR). AGENT spans name the agents;
    the autologged calls keep their replies, tokens and prompts; the first run is blamed on
    the planner, the second fails outside its declared decisions."""
    lines = (MLFLOW / "mlflow-3.17.2.jsonl").read_text(encoding="utf-8").splitlines()
    wrong, raised = (json.loads(line)["info"]["trace_id"] for line in lines)
    runs = bj.traces.from_mlflow(MLFLOW / "mlflow-3.17.2.jsonl", outcomes={wrong: False})
    assert [r.run for r in runs] == [wrong.removeprefix("tr-"), raised.removeprefix("tr-")]
    assert [(r.passed, r.extra["outcome_from"]) for r in runs] == [
        (False, "outcomes"),
        (False, "status ERROR"),
    ]
    first, second = runs
    assert first.agents == ("planner", "researcher", "writer")
    assert [
        (s.agent, s.output, s.tokens) for s in first.steps if s.name.startswith("Completions")
    ] == [
        ("planner", "answer", {"input": 11, "output": 1}),
        ("researcher", "web", {"input": 11, "output": 1}),
        ("writer", "cite", {"input": 11, "output": 1}),
    ]
    [one] = bj.traces.from_mlflow(MLFLOW / "mlflow-3.17.2-one.json", outcomes={wrong: False})
    assert one == first  # one trace in a file reads as the same run
    # the kept reply (mlflow.spanOutputs) is found; it was asked without log-probabilities
    with pytest.raises(ValueError, match="step 'Completions': .*carries no log-probabilities"):
        bj.traces.decisions_from_logprobs([first], OPTIONS)
    api = FakeAPI(model_of(prefer={"planner": {"search": -0.1, "answer": -2.5}}))
    try:
        declared = bj.traces.declare_decisions([first], OPTIONS, accept=ACCEPT)
        assert bj.traces.prompt_of(declared[0].decisions[0])[0]["content"] == system("planner")
        check_planner_blamed(declared, api, tmp_path, score_factual=True)
        with pytest.raises(
            ValueError, match="step 'Completions #3': declared a decision, but it kept no reply"
        ):
            bj.traces.declare_decisions([second], OPTIONS)
        declared = bj.traces.declare_decisions(
            [second], {k: OPTIONS[k] for k in ("planner", "researcher")}, accept=ACCEPT
        )
        scorer = openai_scorer(api, cache=Cache(str(tmp_path / "outside.sqlite")))
        scored = score_fixes(bj.traces.score_decisions(declared, scorer), scorer, corrected)
        with pytest.warns(bj.traces.FailureOutsideDecisionsWarning):
            out = bj.traces.blame_runs(scored, num_worlds=8)
        assert out.outside == (second.run,)
    finally:
        api.close()


def test_mlflow_trace_without_a_span_list(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"info": {"trace_id": "tr-1"}, "data": {"spans": {}}}))
    with pytest.raises(
        bj.traces.TraceError, match=r"trace.json: data.spans: expected a list of spans"
    ):
        bj.traces.from_mlflow(path)


def test_traceloop_sdk_0_62_decorators(tmp_path):
    """The real Traceloop SDK 0.62.4 (`@workflow`, `@agent`, its OpenAI instrumentation): its
    agent spans name the agents (and it writes `gen_ai.agent.name` on the calls below them),
    its workflow names none. It cannot share this environment's pins, so the file was written
    by tests/data/traces/traceloop/make_traceloop_0_62.py (the versions are in its
    docstring); the plain trace reaches blame through declared decisions."""
    path = pathlib.Path(__file__).parent / "data" / "traces" / "traceloop"
    runs = bj.traces.from_otel(path / "traceloop-sdk-0.62.4.jsonl")
    [run] = runs
    assert run.passed is False and run.extra["outcome_from"] == "outcome attributes"
    assert [(s.name, s.agent) for s in run.steps if s.name.endswith((".agent", ".workflow"))] == [
        ("pipeline.workflow", None),
        ("planner.agent", "planner"),
        ("researcher.agent", "researcher"),
        ("writer.agent", "writer"),
    ]
    assert [(s.agent, s.output, s.tokens) for s in llm_steps(run)] == [
        ("planner", "answer", {"input": 11, "output": 1}),
        ("researcher", "web", {"input": 11, "output": 1}),
        ("writer", "cite", {"input": 11, "output": 1}),
    ]
    api = FakeAPI(model_of())
    try:
        declared = bj.traces.declare_decisions(runs, OPTIONS, accept=ACCEPT)
        check_planner_blamed(declared, api, tmp_path, score_factual=True)
    finally:
        api.close()
