"""Writes traceloop-sdk-0.62.4.jsonl beside this script: the planner -> researcher -> writer
pipeline of tests/test_traces_frameworks.py run under the real Traceloop SDK, its
`@workflow` and `@agent` decorators and its OpenAI instrumentation, exported as OTLP JSON
lines (the SDK's protobuf encoder and `MessageToJson`, through `Traceloop.init(exporter=)`).
The model is the loopback server of tests/scorer_server.py.

traceloop-sdk 0.62.4 requires every opentelemetry-instrumentation-* package, and the
registry here holds `opentelemetry-instrumentation-logging` and `-threading` only at 0.59b0,
which pin other OpenTelemetry releases than the test environment's; so the file is
committed. It was made in a virtual environment of its own with the test environment's
OpenTelemetry pins (api/sdk/proto/exporter-otlp-proto-common 1.45.2,
opentelemetry-instrumentation 0.66b2), opentelemetry-instrumentation-openai 0.62.4,
openai 3.57.0, protobuf 7.36.2, and installed without their dependencies:
traceloop-sdk 0.62.4, opentelemetry-instrumentation-logging and -threading 0.59b0 (the only
modules of the SDK's list that it imports at start), plus colorama, cuid, deprecated,
jinja2, tenacity, aiohttp and opentelemetry-exporter-otlp-proto-http/-grpc 1.45.2:

    TRACELOOP_TELEMETRY=false python tests/data/traces/traceloop/make_traceloop_0_62.py
"""

import os
import pathlib
import sys

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parents[2]))  # tests/, for scorer_server
os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
os.environ["TRACELOOP_TELEMETRY"] = "false"

import openai  # noqa: E402
from google.protobuf.json_format import MessageToJson  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: E402
from scorer_server import FakeAPI, rules_model  # noqa: E402
from traceloop.sdk import Traceloop  # noqa: E402
from traceloop.sdk.decorators import agent, workflow  # noqa: E402
from traceloop.sdk.instruments import Instruments  # noqa: E402

QUESTION = "When did the museum reopen?"
AGENTS = {
    "planner": ("search", "answer"),
    "researcher": ("web", "archive"),
    "writer": ("cite", "guess"),
}
REPLIES = {"planner": "answer", "researcher": "web", "writer": "cite"}  # the planner is wrong
OUT = HERE / "traceloop-sdk-0.62.4.jsonl"


class Lines(SpanExporter):
    def export(self, spans):
        with open(OUT, "a", encoding="utf-8") as f:
            f.write(MessageToJson(encode_spans(spans), indent=None) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def system(name):
    return f"You are the {name}. Answer with one word: {' or '.join(AGENTS[name])}."


def main():
    OUT.unlink(missing_ok=True)
    api = FakeAPI(rules_model([(system(a), {REPLIES[a]: -0.1}) for a in AGENTS]))
    Traceloop.init(
        app_name="pipeline",
        exporter=Lines(),
        disable_batch=True,
        instruments={Instruments.OPENAI},
        telemetry_enabled=False,
    )
    client = openai.OpenAI(base_url=f"{api.url}/v1", api_key="test", timeout=5.0, max_retries=0)

    def agent_step(name):
        @agent(name=name)
        def run(question):
            response = client.chat.completions.create(
                model="test-model",
                messages=[
                    {"role": "system", "content": system(name)},
                    {"role": "user", "content": question},
                ],
                max_tokens=1,
            )
            return response.choices[0].message.content

        return run

    @workflow(name="pipeline")
    def pipeline(question):
        trace.get_current_span().set_attribute("outcome.passed", False)
        return [agent_step(name)(question) for name in AGENTS]

    try:
        pipeline(QUESTION)
    finally:
        api.close()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
