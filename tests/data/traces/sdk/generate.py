"""Writes the fixtures in this folder with the real OpenTelemetry SDK, its exporters' encoders
and the official instrumentation packages (the `traces-test` extra), so that the importer
tests read what these tools write. Run from the repository root:

    .venv/bin/python tests/data/traces/sdk/generate.py

A two-agent run (a planner, then a writer, each one `openai` chat call) against a loopback
server (tests/scorer_server.py), traced twice:

- `opentelemetry-instrumentation-openai-v2` with the latest GenAI conventions and content
  captured as events (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=EVENT_ONLY`), the
  agent spans made by the user's code: `collector/spans.json` and `collector/logs.json` (one
  OTLP/JSON export per line, hex ids, as the Collector's file exporter writes),
  `protobuf/spans.json` and `protobuf/logs.json` (protobuf's `MessageToJson` of the same
  requests: base64 ids), `console/spans.log` and `console/logs.log` (what `ConsoleSpanExporter`
  and `ConsoleLogRecordExporter` print);
- `openinference-instrumentation-openai`: `openinference/spans.ndjson` (JSON Lines).

Times and ids come from the SDK, so every run of this script writes other values; the tests
read the structure, not the ids.
"""

import base64
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[2]))  # tests/, for scorer_server

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "EVENT_ONLY"

import openai  # noqa: E402
from google.protobuf.json_format import MessageToDict, MessageToJson  # noqa: E402
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.sdk._logs import LoggerProvider  # noqa: E402
from opentelemetry.sdk._logs.export import (  # noqa: E402
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from scorer_server import FakeAPI, Reply, chat  # noqa: E402

ANSWERS = {"Plan": "Search the 1998 final, then write one line.", "Write": "Brazil won in 1998."}


def model(body):
    text = body["messages"][-1]["content"]
    return Reply(chat(next(v for k, v in ANSWERS.items() if text.startswith(k)), None, 20, 9))


def pipeline(tracer, client):
    with tracer.start_as_current_span(
        "invoke_agent Planner",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Planner"},
    ):
        client.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": "Plan: who won in 1998?"}]
        )
        with tracer.start_as_current_span(
            "invoke_agent Writer",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Writer"},
        ):
            client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "Write the answer."}]
            )


def hex_ids(value):
    """MessageToDict's base64 ids as OTLP/JSON's hex ids (what the Collector writes)."""
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex()
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
            else hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [hex_ids(v) for v in value]
    return value


def lines(requests):
    return "".join(
        json.dumps(hex_ids(MessageToDict(r, use_integers_for_enums=True))) + "\n" for r in requests
    )


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def otel_v2(api):
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    resource = Resource.create({"service.name": "two-agents"})
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, logger_provider=logger_provider)
    try:
        client = openai.OpenAI(base_url=api.url + "/v1", api_key="test", max_retries=0)
        pipeline(tracer_provider.get_tracer("two-agents"), client)
    finally:
        instrumentor.uninstrument()
    finished, records = spans.get_finished_spans(), logs.get_finished_logs()
    half = len(finished) // 2  # two exports, as a batch processor would make them
    write(
        HERE / "collector" / "spans.json",
        lines([encode_spans(finished[:half]), encode_spans(finished[half:])]),
    )
    write(HERE / "collector" / "logs.json", lines([encode_logs(records)]))
    write(HERE / "protobuf" / "spans.json", MessageToJson(encode_spans(finished)) + "\n")
    write(HERE / "protobuf" / "logs.json", MessageToJson(encode_logs(records)) + "\n")
    write(HERE / "console" / "spans.log", "".join(s.to_json() + os.linesep for s in finished))
    write(HERE / "console" / "logs.log", "".join(r.to_json() + os.linesep for r in records))


def openinference(api):
    from openinference.instrumentation.openai import OpenAIInstrumentor

    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": "two-agents"}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider)
    tracer = tracer_provider.get_tracer("two-agents")
    try:
        client = openai.OpenAI(base_url=api.url + "/v1", api_key="test", max_retries=0)
        with tracer.start_as_current_span(
            "pipeline", attributes={"openinference.span.kind": "AGENT"}
        ):
            for agent, prompt in (
                ("Planner", "Plan: who won in 1998?"),
                ("Writer", "Write the answer."),
            ):
                with tracer.start_as_current_span(
                    agent, attributes={"openinference.span.kind": "AGENT", "agent.name": agent}
                ):
                    client.chat.completions.create(
                        model="test-model", messages=[{"role": "user", "content": prompt}]
                    )
    finally:
        instrumentor.uninstrument()
    write(
        HERE / "openinference" / "spans.ndjson", lines([encode_spans(spans.get_finished_spans())])
    )


if __name__ == "__main__":
    api = FakeAPI(model)
    try:
        otel_v2(api)
        openinference(api)
    finally:
        api.close()
