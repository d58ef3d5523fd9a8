"""End to end, offline: a three-agent pipeline (planner -> researcher -> writer) calls the
real `openai` client against a loopback server (tests/scorer_server.py), traced by the real
OpenTelemetry SDK and the official instrumentation packages (`opentelemetry-instrumentation-
openai-v2`, `openinference-instrumentation-openai`; the `traces-test` extra pins them),
exported to files as users write them (OTLP JSON through the SDK's protobuf encoder and
`MessageToJson`, one export per line; the SDK's `ConsoleSpanExporter`), imported with
`bj.traces.from_otel` / `from_openinference`, the fixes scored through `bj.scorers`, blamed
exactly and read out (who and when).

Each agent's decision is marked in the pipeline's own code with `bj.traces.record_decision`,
its factual logits read from the call's log-probabilities (`bj.traces.logits_from_response`).
The planner chooses wrongly ("answer" instead of "search"); the others choose rightly.
"""

import math

import numpy as np
import openai
import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    LogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from scorer_server import FakeAPI, openai_scorer, rules_model

import blamejax as bj
from blamejax.scorers import Cache, Request, score_fixes

QUESTION = "When did the museum reopen?"
# (agent, decision step, options, the options that count as right)
AGENTS = (
    ("Planner", "plan", ("search", "answer"), ("search",)),
    ("Researcher", "research", ("web", "archive"), ("web",)),
    ("Writer", "write", ("cite", "guess"), ("cite",)),
)
# The agents' models: first-token log-probabilities (the planner prefers the wrong option).
FACTUAL = {
    "Planner": {"answer": -0.2, "search": -1.7},
    "Researcher": {"web": -0.1, "archive": -2.4},
    "Writer": {"cite": -0.3, "guess": -1.4},
}
# The fixes, as a better prompt scores them (bj.scorers.OpenAIScorer: letters A, B, ...).
FIXES = {
    "plan": {"A": -0.0001, "B": -12.0},
    "research": {"A": -0.1, "B": -2.4},
    "write": {"A": -0.3, "B": -1.4},
}


def system(agent, options):
    return f"You are the {agent}. Answer with one word: {' or '.join(options)}."


def rules():
    agents = [(system(a, o), FACTUAL[a]) for a, _, o, _ in AGENTS]
    return agents + [(f"Step: {step}\n", FIXES[step]) for step in FIXES]


@pytest.fixture
def api():
    server = FakeAPI(rules_model(rules()))
    try:
        yield server
    finally:
        server.close()


class OTLPJsonLines(SpanExporter):
    """Spans as OTLP JSON, one export per line, as users write it: the SDK's protobuf
    encoder and protobuf's `MessageToJson` (which writes the ids in base64)."""

    def __init__(self, path):
        self.path = path

    def export(self, spans):
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(MessageToJson(encode_spans(spans), indent=None) + "\n")
        return SpanExportResult.SUCCESS


class OTLPLogsJsonLines(LogRecordExporter):
    """Log records as OTLP JSON lines, the same way."""

    def __init__(self, path):
        self.path = path

    def export(self, batch):
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(MessageToJson(encode_logs(batch), indent=None) + "\n")
        return LogRecordExportResult.SUCCESS

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def run_pipeline(client, tracer, convention, *, outcome_on_root=False, record=True):
    """The pipeline: each agent asks its model, and its decision is marked. Returns the trace
    id (hex, as the SDK shows it) and whether the run passed, which `outcome_on_root` also
    writes on the root span (`outcome.passed`). `record=False` marks no decision (they are
    read from the traced calls afterwards)."""
    with tracer.start_as_current_span("pipeline") as root:
        passed = True
        for agent, step, options, accept in AGENTS:
            if convention == "otel":
                name = f"invoke_agent {agent}"
                attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}
            else:
                name = agent
                attributes = {"openinference.span.kind": "AGENT", "agent.name": agent}
            with tracer.start_as_current_span(name, attributes=attributes):
                response = client.chat.completions.create(
                    model="test-model",
                    messages=[
                        {"role": "system", "content": system(agent, options)},
                        {"role": "user", "content": QUESTION},
                    ],
                    max_tokens=1,
                    temperature=0.0,
                    logprobs=True,
                    top_logprobs=5,
                )
                choice = bj.traces.choice_from_response(response, options)
                if record:
                    bj.traces.record_decision(
                        step,
                        options,
                        bj.traces.logits_from_response(response, options),
                        choice,
                        accept=accept,
                        tracer=tracer,
                    )
                passed = passed and choice in accept
        if outcome_on_root:
            root.set_attribute("outcome.passed", passed)
        return format(root.get_span_context().trace_id, "032x"), passed


def request(run, step, variant, parent):
    return Request(step.name, variant, {"agent": step.agent, "question": QUESTION}, step.options)


def expected_run():
    """The run as it should import: each decision's factual logits are the log-softmax of its
    options' log-probabilities, the fixes the scorer's letters."""
    steps = []
    for agent, step, options, accept in AGENTS:
        logprobs = np.array([FACTUAL[agent][o] for o in options])
        fix = np.array([FIXES[step][letter] for letter in "AB"])
        steps.append(
            bj.traces.Step(
                step,
                agent=agent,
                options=options,
                accept=accept,
                logits={
                    "factual": tuple(logprobs - np.logaddexp.reduce(logprobs)),
                    "fix": tuple(fix),
                },
                choice=max(options, key=lambda o: FACTUAL[agent][o]),
            )
        )
    return bj.traces.Run("expected", tuple(steps), passed=False)


def check_blame(runs, tid, api, tmp_path):
    """The imported run: its decisions, their fixes scored, exact blame and the read-out."""
    [run] = runs
    assert run.run == tid and run.passed is False
    decisions = {s.name: s for s in run.decisions}
    assert list(decisions) == ["plan", "research", "write"]
    expected = {s.name: s for s in expected_run().steps}
    for name, step in decisions.items():
        assert step.agent == expected[name].agent
        assert (step.options, step.choice, step.accept) == (
            expected[name].options,
            expected[name].choice,
            expected[name].accept,
        )
        np.testing.assert_allclose(
            step.logits["factual"], expected[name].logits["factual"], rtol=1e-9
        )
        assert "fix" not in step.logits
    scorer = openai_scorer(api, cache=Cache(str(tmp_path / "fixes.sqlite")))
    [filled] = score_fixes(runs, scorer, request)
    assert scorer.meter.calls == 3
    out = bj.traces.blame_runs([filled], num_worlds=16)
    reference = bj.traces.blame_runs([expected_run()], num_worlds=16)
    np.testing.assert_allclose(out.result.shapley, reference.result.shapley, atol=1e-6)
    who = bj.traces.readout(out.result, out.cases.agent_map)
    assert who.who == ("Planner",) and who.when == ("plan",)
    assert who.earliest_repair == "plan"
    assert out.mismatched == ()
    return filled, out


@pytest.fixture
def providers(monkeypatch):
    """A tracer provider (and a logger provider) of the real SDK; instrumentors undone after."""
    made = []

    def make(instrumentor, exporter, log_exporter=None, **options):
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        if log_exporter is not None:
            logger_provider = LoggerProvider()
            logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
            options["logger_provider"] = logger_provider
        instrumentor.instrument(tracer_provider=tracer_provider, **options)
        made.append((instrumentor, tracer_provider, options.get("logger_provider")))
        return tracer_provider.get_tracer("pipeline")

    try:
        yield make
    finally:
        for instrumentor, tracer_provider, logger_provider in made:
            instrumentor.uninstrument()
            tracer_provider.shutdown()
            if logger_provider is not None:
                logger_provider.shutdown()


def client_of(api):
    return openai.OpenAI(base_url=f"{api.url}/v1", api_key="test", timeout=5.0, max_retries=0)


@pytest.mark.parametrize("name", ["spans.jsonl", "spans.json"])
def test_openai_v2_spans_to_blame(api, providers, tmp_path, monkeypatch, name):
    """openai-v2 with content on the spans (SPAN_ONLY), OTLP JSON lines (named .json too, as
    the collector's file exporter example names them): imported by from_otel, each chat step
    holds the model's text and tokens; blamed: the planner, at `plan`."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    path = tmp_path / name
    tracer = providers(OpenAIInstrumentor(), OTLPJsonLines(path))
    tid, passed = run_pipeline(client_of(api), tracer, "otel")
    assert passed is False
    runs = bj.traces.from_otel(path, outcomes={tid: False})
    chats = [s for s in runs[0].steps if s.name.startswith("chat")]
    assert [(s.agent, s.output, s.tokens) for s in chats] == [
        ("Planner", "answer", {"input": 11, "output": 1}),
        ("Researcher", "web", {"input": 11, "output": 1}),
        ("Writer", "cite", {"input": 11, "output": 1}),
    ]
    check_blame(runs, tid, api, tmp_path)


def test_openai_v2_log_records_to_blame(api, providers, tmp_path, monkeypatch):
    """openai-v2 with content as events (EVENT_ONLY): the texts are OTLP log records in a
    logs file beside the spans file, joined to their spans by from_otel."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "EVENT_ONLY")
    folder = tmp_path / "export"
    folder.mkdir()
    tracer = providers(
        OpenAIInstrumentor(),
        OTLPJsonLines(folder / "spans.jsonl"),
        OTLPLogsJsonLines(folder / "logs.jsonl"),
    )
    tid, _ = run_pipeline(client_of(api), tracer, "otel")
    assert (folder / "logs.jsonl").read_text(encoding="utf-8").strip()
    runs = bj.traces.from_otel(folder, outcomes={tid: False})
    chats = [s for s in runs[0].steps if s.name.startswith("chat")]
    assert [s.output for s in chats] == ["answer", "web", "cite"]
    check_blame(runs, tid, api, tmp_path)


def test_openinference_spans_to_blame(api, providers, tmp_path):
    """openinference-instrumentation-openai, OTLP JSON lines: imported by from_openinference;
    each LLM step's text comes from llm.output_messages; blamed: the planner, at `plan`."""
    from openinference.instrumentation.openai import OpenAIInstrumentor

    path = tmp_path / "spans.jsonl"
    tracer = providers(OpenAIInstrumentor(), OTLPJsonLines(path))
    tid, _ = run_pipeline(client_of(api), tracer, "openinference")
    runs = bj.traces.from_openinference(path, outcomes={tid: False})
    llm = [
        s
        for s in runs[0].steps
        if s.name == "ChatCompletion" or s.name.startswith("ChatCompletion #")
    ]
    assert [(s.agent, s.output, s.tokens) for s in llm] == [
        ("Planner", "answer", {"input": 11, "output": 1}),
        ("Researcher", "web", {"input": 11, "output": 1}),
        ("Writer", "cite", {"input": 11, "output": 1}),
    ]
    check_blame(runs, tid, api, tmp_path)


def test_openinference_console_to_blame(api, providers, tmp_path):
    """The same run printed by the SDK's ConsoleSpanExporter to a file, as users write it,
    its outcome written on the root span (`outcome.passed`), so no `outcomes=` is needed."""
    from openinference.instrumentation.openai import OpenAIInstrumentor

    path = tmp_path / "spans.log"
    with open(path, "w", encoding="utf-8") as out:
        tracer = providers(OpenAIInstrumentor(), ConsoleSpanExporter(out=out))
        tid, _ = run_pipeline(client_of(api), tracer, "openinference", outcome_on_root=True)
    runs = bj.traces.from_openinference(path)
    check_blame(runs, tid, api, tmp_path)


def test_openinference_logprobs_to_blame(api, providers, tmp_path):
    """No decision marked in the code: OpenInference keeps each response (with its
    log-probabilities) in output.value, and decisions_from_logprobs turns the calls whose
    options are declared into decision steps; the same blame as the recorded decisions."""
    from openinference.instrumentation.openai import OpenAIInstrumentor

    path = tmp_path / "spans.jsonl"
    tracer = providers(OpenAIInstrumentor(), OTLPJsonLines(path))
    tid, _ = run_pipeline(client_of(api), tracer, "openinference", record=False)
    runs = bj.traces.from_openinference(path, outcomes={tid: False})
    assert runs[0].decisions == ()
    runs = bj.traces.decisions_from_logprobs(
        runs,
        {agent: options for agent, _, options, _ in AGENTS},
        accept={agent: accept for agent, _, _, accept in AGENTS},
    )
    names = ("ChatCompletion", "ChatCompletion #2", "ChatCompletion #3")
    assert [(s.name, s.agent) for s in runs[0].decisions] == list(zip(names, FACTUAL))
    for step, (agent, _, options, _) in zip(runs[0].decisions, AGENTS):
        assert step.logits["factual"] == tuple(FACTUAL[agent][o] for o in options)
        assert step.output == step.choice  # the text and the tokens are kept
    steps = {
        "ChatCompletion": "plan",
        "ChatCompletion #2": "research",
        "ChatCompletion #3": "write",
    }

    def fix_request(run, step, variant, parent):
        return Request(
            steps[step.name], variant, {"agent": step.agent, "question": QUESTION}, step.options
        )

    scorer = openai_scorer(api, cache=Cache(str(tmp_path / "fixes.sqlite")))
    [filled] = score_fixes(runs, scorer, fix_request)
    out = bj.traces.blame_runs([filled], num_worlds=16)
    reference = bj.traces.blame_runs([expected_run()], num_worlds=16)
    np.testing.assert_allclose(out.result.shapley, reference.result.shapley, atol=1e-6)
    who = bj.traces.readout(out.result, out.cases.agent_map)
    assert who.who == ("Planner",) and who.when == ("ChatCompletion",)


def test_decisions_from_logprobs_errors():
    call = bj.traces.Step("chat", agent="Planner", output="answer")
    runs = [bj.traces.Run("t", (call,), passed=False)]
    with pytest.raises(
        ValueError,
        match="run 't', step 'chat': options are declared for it, but it kept no chat completion",
    ):
        bj.traces.decisions_from_logprobs(
            runs, lambda run, step: ("search", "answer") if step.name == "chat" else None
        )
    with pytest.raises(  # the Planner's step kept no response: never a silent no-op
        ValueError,
        match=r"the calls of agents \['Planner'\] in runs 't' kept no chat completion with "
        r"log-probabilities: no step became a decision.*bj.traces.declare_decisions",
    ):
        bj.traces.decisions_from_logprobs(runs, {"Planner": ("search", "answer")})
    with pytest.raises(
        TypeError, match=r"`options` must be a mapping \{agent: options\} or a function"
    ):
        bj.traces.decisions_from_logprobs(runs, ("search", "answer"))
    with pytest.raises(
        ValueError,
        match=r"options are declared for agents \['Writer'\], which match no step of runs 't'",
    ):
        bj.traces.decisions_from_logprobs(runs, {"Writer": ("cite", "guess")})


# The two pieces on their own.


def completion(top, content):
    entries = [{"token": t, "logprob": lp} for t, lp in top.items()]
    first = {"token": content, "logprob": top.get(content, -0.01), "top_logprobs": entries}
    return {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": {"content": [first]},
            }
        ],
    }


def test_logits_from_response_rule():
    """First-token candidates whose stripped text starts an option, without case, count for
    it (their probabilities summed); an option no candidate starts is unranked, not
    impossible: an error, or the lowest returned log-probability, never -inf."""
    response = completion({" Se": -1.0, "search": -2.0, "ans": -0.5, "zzz": -4.0}, "ans")
    with pytest.raises(ValueError, match="option 'ask' is not among the returned tokens"):
        bj.traces.logits_from_response(response, ["search", "answer", "ask"])
    logits = bj.traces.logits_from_response(response, ["search", "answer", "ask"], absent="floor")
    assert math.isclose(logits[0], math.log(math.exp(-1.0) + math.exp(-2.0)))
    assert logits[1] == -0.5 and logits[2] == -4.0
    assert bj.traces.choice_from_response(response, ["search", "answer", "ask"]) == "answer"
    assert bj.traces.choice_from_response(completion({"Ans": -0.1}, "Ans"), ["answer"]) == "answer"


def test_logits_from_response_of_the_client(api):
    """The `openai` client's ChatCompletion object is read as its dict is."""
    response = client_of(api).chat.completions.create(
        model="test-model",
        max_tokens=1,
        logprobs=True,
        top_logprobs=5,
        messages=[{"role": "system", "content": system("Planner", ("search", "answer"))}],
    )
    assert bj.traces.logits_from_response(response, ("search", "answer")) == (-1.7, -0.2)
    assert bj.traces.logits_from_response(response.model_dump(), ("search", "answer")) == (
        -1.7,
        -0.2,
    )


def test_logits_from_response_errors():
    with pytest.raises(
        ValueError, match=r"the token 'a' is the start of several options \[\"ask\", \"answer\"\]"
    ):
        bj.traces.logits_from_response(completion({"a": -0.1}, "a"), ["ask", "answer"])
    with pytest.raises(
        ValueError, match="carries no log-probabilities.*logprobs=True, top_logprobs=N"
    ):
        bj.traces.logits_from_response(
            {"choices": [{"message": {"content": "x"}, "logprobs": None}]}, ["x"]
        )
    with pytest.raises(ValueError, match="none of the first token's candidates"):
        bj.traces.logits_from_response(completion({"zzz": -0.1}, "zzz"), ["search", "answer"])
    with pytest.raises(ValueError, match="the reply 'maybe' names no option"):
        bj.traces.choice_from_response(completion({"maybe": -0.1}, "maybe"), ["search", "answer"])
    with pytest.raises(TypeError, match="`options` must be a list of strings"):
        bj.traces.logits_from_response(completion({"a": -0.1}, "a"), "ab")


def test_record_decision_span():
    """record_decision writes one ended child span of the current span, with the decision.*
    attributes the importers read (the logits as their softmax)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("agent") as parent:
        context = bj.traces.record_decision(
            "route",
            ("search", "answer"),
            (math.log(0.25), math.log(0.75)),
            "answer",
            fix_logits=(0.0, -math.inf),
            accept=("search",),
            agent="Router",
            tracer=tracer,
        )
    provider.shutdown()
    route, agent = exporter.get_finished_spans()
    assert route.name == "route" and route.parent.span_id == parent.get_span_context().span_id
    assert route.get_span_context() == context
    a = dict(route.attributes)
    assert a["decision.options"] == ("search", "answer") and a["decision.choice"] == "answer"
    np.testing.assert_allclose(a["decision.probabilities"], (0.25, 0.75))
    assert a["decision.fix.probabilities"] == (1.0, 0.0) and a["decision.accept"] == ("search",)
    assert a["gen_ai.agent.name"] == a["agent.name"] == "Router"


def test_record_decision_errors():
    with pytest.raises(ValueError, match=r"`logits` must have 2 numbers \(one per option\), got 3"):
        bj.traces.decision_attributes(("a", "b"), (0.0, 0.0, 0.0), "a")
    with pytest.raises(
        ValueError, match=r"`choice` must be one of the options \[\"a\", \"b\"\], got \"c\""
    ):
        bj.traces.decision_attributes(("a", "b"), (0.0, 0.0), "c")
    with pytest.raises(ValueError, match="`choice` 'b' has probability 0 under `logits`"):
        bj.traces.decision_attributes(("a", "b"), (0.0, -math.inf), "b")
    with pytest.raises(ValueError, match=r"`fix_logits\[1\]` must be finite or -inf, got nan"):
        bj.traces.decision_attributes(("a", "b"), (0.0, 0.0), "a", fix_logits=(0.0, math.nan))
    with pytest.raises(ValueError, match="`fix_logits`: every option is -inf"):
        bj.traces.decision_attributes(
            ("a", "b"), (0.0, 0.0), "a", fix_logits=(-math.inf, -math.inf)
        )
    with pytest.raises(ValueError, match=r"`accept` names \[\"c\"\], which are not options"):
        bj.traces.decision_attributes(("a", "b"), (0.0, 0.0), "a", accept=("c",))
    with pytest.raises(ValueError, match="`options` must be distinct"):
        bj.traces.decision_attributes(("a", "a"), (0.0, 0.0), "a")


def test_record_decision_without_the_api(monkeypatch):
    """Without opentelemetry-api, recording says what to install (blamejax imports without it)."""
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(
        ImportError, match="needs the OpenTelemetry API: pip install opentelemetry-api"
    ):
        bj.traces.record_decision("route", ("a", "b"), (0.0, 0.0), "a")


def test_score_fixes_errors():
    plan = bj.traces.Step(
        "plan", options=("a", "b"), logits={"factual": (0.0, 0.0), "fix": (1.0, 0.0)}, choice="a"
    )
    scorer = bj.scorers.FunctionScorer(lambda r: np.zeros(2))
    with pytest.raises(
        ValueError, match="no decision step has factual logits without a 'fix' variant"
    ):
        score_fixes([bj.traces.Run("r", (plan,), passed=False)], scorer, request)
    bare = bj.traces.Step("plan", options=("a", "b"), logits={"factual": (0.0, 0.0)}, choice="a")

    def wrong(run, step, variant, parent):
        return Request(step.name, variant, "x", ("b", "a"))

    with pytest.raises(
        ValueError, match=r"`request` returned options \['b', 'a'\] for step 'plan'"
    ):
        score_fixes([bj.traces.Run("r", (bare,), passed=False)], scorer, wrong)


def test_score_fixes_given_table():
    """A step given another gets one fix row per option of the given step, in its order."""
    plan = bj.traces.Step("plan", options=("a", "b"), logits={"factual": (0.0, 0.0)}, choice="a")
    reply = bj.traces.Step(
        "reply",
        parents=("plan",),
        given="plan",
        options=("x", "y", "z"),
        logits={"factual": ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))},
        choice="x",
    )
    run = bj.traces.Run("r", (plan, reply), passed=False)

    def ask(run, step, variant, parent):
        return Request(step.name, variant, {"after": parent}, step.options)

    def logits(r):
        return np.array(
            [1.0, 0.0] if r.step == "plan" else [0.0, 1.0 if r.inputs["after"] == "a" else 2.0, 0.0]
        )

    [filled] = score_fixes([run], bj.scorers.FunctionScorer(logits), ask)
    assert filled.steps[0].logits["fix"] == (1.0, 0.0)
    assert filled.steps[1].logits["fix"] == ((0.0, 1.0, 0.0), (0.0, 2.0, 0.0))
    [only] = score_fixes([run], bj.scorers.FunctionScorer(logits), ask, steps=["reply"])
    assert "fix" not in only.steps[0].logits and "fix" in only.steps[1].logits
