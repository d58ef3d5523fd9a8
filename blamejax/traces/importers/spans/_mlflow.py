"""MLflow 3.x traces as `Trace.to_json()` writes them (one per file, or one per line):
`{"info": {"trace_id": "tr-<hex>", "state", "trace_metadata", "tags", ...}, "data": {"spans":
[{"trace_id" (base64), "span_id" (base64), "parent_span_id", "name", "start_time_unix_nano",
"end_time_unix_nano", "status": {"code"}, "events", "attributes": {key: JSON text}}]}}`.

Each span is flattened as the other span formats are (`_sniff.py`); its attribute values,
which MLflow stores as JSON text, are decoded. `mlflow_fields` reads MLflow's own attributes:
`mlflow.spanType` (AGENT spans name agents, CHAT_MODEL/LLM spans are model calls),
`mlflow.spanOutputs` (the reply's text), `mlflow.chat.tokenUsage` (tokens).
"""

from __future__ import annotations

import json

from ...format._check import shown
from ...format._format import Problem
from ._attributes import agent_of, step_fields
from ._otlp import hex_id

_STATUS = {
    "STATUS_CODE_UNSET": "UNSET", "STATUS_CODE_OK": "OK", "STATUS_CODE_ERROR": "ERROR",
    "UNSET": "UNSET", "OK": "OK", "ERROR": "ERROR", 0: "UNSET", 1: "OK", 2: "ERROR",
}  # fmt: skip
MODEL_SPAN_TYPES = ("CHAT_MODEL", "LLM")


def is_mlflow_trace(doc) -> bool:
    data = doc.get("data") if isinstance(doc, dict) else None
    return isinstance(doc.get("info"), dict) and isinstance(data, dict) and "spans" in data


def _decoded(value):
    """An MLflow attribute value: JSON text, decoded (text that is not JSON stays as it is)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def mlflow_spans(doc, where, problems, spans) -> tuple[dict, int]:
    """The spans of one MLflow trace, flattened and appended to `spans`; returns the count of
    unreadable spans of the trace (by trace id) and of values that could not be read."""
    info, data = doc["info"], doc["data"]
    items = data.get("spans")
    if not isinstance(items, list):
        message = f"expected a list of spans, got {shown(items)}"
        problems.append(Problem(**where, field="data.spans", message=message))
        return {}, 1
    broken: dict = {}
    for i, span in enumerate(items):
        label = f"data.spans[{i}]"
        found = []
        if not isinstance(span, dict):
            problems.append(
                Problem(**where, field=label, message=f"expected a span, got {shown(span)}")
            )
            continue
        ids = {}
        for key, size in (("trace_id", 16), ("span_id", 8), ("parent_span_id", 8)):
            value = span.get(key)
            if value is None and key == "parent_span_id":
                continue
            if not isinstance(value, str) or not value:
                found.append(f"{key}: expected an id string, got {shown(value)}")
                continue
            ids[key] = hex_id(value, size)
        status = _STATUS.get((span.get("status") or {}).get("code", "STATUS_CODE_UNSET"))
        if status is None:
            found.append(
                f"status.code: expected STATUS_CODE_UNSET/OK/ERROR, got {shown(span['status'])}"
            )
        attributes = span.get("attributes") or {}
        if not isinstance(attributes, dict):
            found.append(f"attributes: expected an object, got {shown(attributes)}")
            attributes = {}
        try:
            start = int(span.get("start_time_unix_nano") or 0)
            end = max(int(span.get("end_time_unix_nano") or start), start)
        except (TypeError, ValueError):
            found.append(
                f"start_time_unix_nano: expected nanoseconds, got {shown(span.get('start_time_unix_nano'))}"
            )
        if found:
            sid = span.get("span_id")
            for message in found:
                field, _, text = message.partition(": ")
                problems.append(Problem(**where, field=f"span[{sid}].{field}", message=text))
            if "trace_id" in ids:
                broken[ids["trace_id"][0]] = broken.get(ids["trace_id"][0], 0) + 1
            continue
        extra = {k: v for k, v in span.items() if k not in ("trace_id", "attributes", "events")}
        extra.update({k: v for k, (v, _) in ids.items()})
        events = [e for e in span.get("events") or [] if isinstance(e, dict)]
        if events:
            extra["events"] = events
        spans.append(
            dict(
                trace=ids["trace_id"][0],
                id=ids["span_id"][0],
                parent=ids["parent_span_id"][0] if "parent_span_id" in ids else None,
                name=span.get("name") or ids["span_id"][0],
                start=start,
                end=end,
                status=status,
                attributes={k: _decoded(v) for k, v in attributes.items()},
                events=events,
                resource={"mlflow.trace_id": info.get("trace_id")} if info.get("trace_id") else {},
                extra=extra,
                base64=any(b for _, b in ids.values()),
                **where,
            )
        )
    return broken, 0


def _reply(outputs) -> str | None:
    """The text of a model span's outputs: a chat completion's (or LangChain's) message, or
    the outputs themselves when they are text."""
    if isinstance(outputs, str):
        return outputs
    if isinstance(outputs, dict):
        from ._langchain import as_chat_completion

        try:
            text = as_chat_completion(outputs)["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            return None
        return text if isinstance(text, str) and text else None
    return None


def mlflow_fields(span, above, used) -> dict:
    """Step fields from MLflow's span attributes (`used`: the attributes consumed). An AGENT
    span (`mlflow.spanType`) names its agent by its span name; the rest of the agent rule is
    `agent_of`'s. The output is `mlflow.spanOutputs` (a reply's text; text as it is); the
    tokens `mlflow.chat.tokenUsage` (`input_tokens`, `output_tokens`)."""
    a = span["attributes"]
    kind = a.get("mlflow.spanType")
    agent_span = kind == "AGENT"
    agent, from_agent_span = agent_of(
        span, above, None, agent_span, span["name"] if agent_span else None, used, ""
    )
    output = _reply(a.get("mlflow.spanOutputs"))
    usage = a.get("mlflow.chat.tokenUsage")
    tokens = None
    if isinstance(usage, dict):
        tokens = {
            name: usage[key]
            for name, key in (("input", "input_tokens"), ("output", "output_tokens"))
            if isinstance(usage.get(key), int)
            and not isinstance(usage.get(key), bool)
            and usage[key] >= 0
        } or None
        used.add("mlflow.chat.tokenUsage")
    model_call = kind in MODEL_SPAN_TYPES
    return step_fields(a, used, agent, output, tokens, from_agent_span, agent_span, model_call)
