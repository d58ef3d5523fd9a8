"""Writes traceloop-0.47.5.jsonl beside this script: the planner -> researcher -> writer
pipeline of tests/test_traces_frameworks.py traced by Traceloop's OpenAI instrumentation
`opentelemetry-instrumentation-openai` 0.47.5, which writes the GenAI conventions' older
names (`gen_ai.prompt.<i>.content`, `gen_ai.completion.<i>.content`,
`gen_ai.usage.prompt_tokens`/`completion_tokens`), with each agent's span as Traceloop's
`@agent` decorator writes it, exported as OTLP JSON lines (the SDK's protobuf encoder and
`MessageToJson`). The model is the loopback server of tests/scorer_server.py.

That release needs OpenTelemetry 1.38 or older, which cannot share the test environment, so
the file is committed. It was made in a virtual environment of its own with
opentelemetry-instrumentation-openai 0.47.5, opentelemetry-api/sdk/proto/
exporter-otlp-proto-common 1.38.0, opentelemetry-instrumentation and
opentelemetry-semantic-conventions 0.59b0, openai 3.63.0 and protobuf 6.33.6:

    python tests/data/traces/traceloop/make_traceloop_0_47.py
"""

import os
import pathlib
import sys

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parents[2]))  # tests/, for scorer_server

import openai  # noqa: E402
from google.protobuf.json_format import MessageToJson  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.instrumentation.openai import OpenAIInstrumentor  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from scorer_server import FakeAPI, rules_model  # noqa: E402

QUESTION = "When did the museum reopen?"
AGENTS = {
    "planner": ("search", "answer"),
    "researcher": ("web", "archive"),
    "writer": ("cite", "guess"),
}
REPLIES = {"planner": "answer", "researcher": "web", "writer": "cite"}  # the planner is wrong
OUT = HERE / "traceloop-0.47.5.jsonl"


class Lines(SpanExporter):
    def export(self, spans):
        with open(OUT, "a", encoding="utf-8") as f:
            f.write(MessageToJson(encode_spans(spans), indent=None) + "\n")
        return SpanExportResult.SUCCESS


def system(agent):
    return f"You are the {agent}. Answer with one word: {' or '.join(AGENTS[agent])}."


def main():
    os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
    OUT.unlink(missing_ok=True)
    api = FakeAPI(rules_model([(system(a), {REPLIES[a]: -0.1}) for a in AGENTS]))
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Lines()))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("pipeline")
    client = openai.OpenAI(base_url=f"{api.url}/v1", api_key="test", timeout=5.0, max_retries=0)
    try:
        workflow = {"traceloop.span.kind": "workflow", "traceloop.entity.name": "pipeline"}
        with tracer.start_as_current_span("pipeline.workflow", attributes=workflow) as root:
            for agent in AGENTS:
                attributes = {"traceloop.span.kind": "agent", "traceloop.entity.name": agent}
                with tracer.start_as_current_span(f"{agent}.agent", attributes=attributes):
                    client.chat.completions.create(
                        model="test-model",
                        messages=[
                            {"role": "system", "content": system(agent)},
                            {"role": "user", "content": QUESTION},
                        ],
                        max_tokens=1,
                    )
            root.set_attribute("outcome.passed", False)
    finally:
        provider.shutdown()
        api.close()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
