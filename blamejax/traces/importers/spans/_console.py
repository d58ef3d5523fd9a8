"""What the OpenTelemetry SDK's console exporters print, as the flat spans and log records of
`_otlp.py`.

`ConsoleSpanExporter` prints each span as a pretty-printed JSON object (`ReadableSpan.to_json`):
`{"name", "context": {"trace_id": "0x...", "span_id": "0x..."}, "kind", "parent_id",
"start_time", "end_time", "status": {"status_code"}, "attributes": {...}, "events": [...],
"links", "resource": {"attributes"}}`; attributes are plain JSON values, ids hex with `0x`,
times ISO 8601. `ConsoleLogRecordExporter` prints log records the same way (`"body"`,
`"trace_id"`, `"span_id"`, `"event_name"`, ...).
"""

import datetime

from ...format._check import shown
from ...format._format import Problem
from ._otlp import status_of

_STATUS = {"UNSET": "UNSET", "OK": "OK", "ERROR": "ERROR"}


def _id(value) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    value = value[2:] if value.startswith("0x") else value
    return None if not value.strip("0") else value  # all zeros: no context


def _nanoseconds(value) -> int | None:
    if value is None:
        return 0
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (moment - epoch) // datetime.timedelta(microseconds=1) * 1000


def _attributes(value, label, where, found) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        found.append(
            Problem(
                **where,
                field=f"{label}.attributes",
                message=f"expected an object, got {shown(value)}",
            )
        )
        return {}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}


def _resource(doc) -> dict:
    resource = doc.get("resource")
    attributes = resource.get("attributes") if isinstance(resource, dict) else None
    return dict(attributes) if isinstance(attributes, dict) else {}


def console_span(doc: dict, where: dict, problems: list) -> dict | None:
    """One printed span as a flat span (None after appending its problems)."""
    context = doc["context"]
    trace, sid = _id(context.get("trace_id")), _id(context.get("span_id"))
    label = f"span[{sid}]" if sid else "span"
    found = []
    for key, value in (("trace_id", trace), ("span_id", sid)):
        if value is None:
            found.append(
                Problem(
                    **where,
                    field=f"{label}.context.{key}",
                    message=f"expected a hex id string, got {shown(context.get(key))}",
                )
            )
    parent = doc.get("parent_id")
    if parent is not None and _id(parent) is None:
        found.append(
            Problem(
                **where,
                field=f"{label}.parent_id",
                message=f"expected a hex id string or null, got {shown(parent)}",
            )
        )
    attributes = _attributes(doc.get("attributes"), label, where, found)
    events = []
    for i, event in enumerate(doc.get("events") or []):
        if not isinstance(event, dict):
            found.append(
                Problem(
                    **where,
                    field=f"{label}.events[{i}]",
                    message=f"expected an event object, got {shown(event)}",
                )
            )
            continue
        events.append(
            {
                **event,
                "attributes": _attributes(
                    event.get("attributes"), f"{label}.events[{i}]", where, found
                ),
            }
        )
    code = (doc.get("status") or {}).get("status_code", "UNSET")
    field = f"{label}.status.status_code"
    status = status_of(code, _STATUS, "UNSET, OK or ERROR", where, field, found)
    start = _nanoseconds(doc.get("start_time"))
    if start is None:
        found.append(
            Problem(
                **where,
                field=f"{label}.start_time",
                message=f"expected an ISO 8601 time, got {shown(doc.get('start_time'))}",
            )
        )
    if found:
        problems += found
        return None
    extra = {k: v for k, v in doc.items() if k not in ("attributes", "events", "resource")}
    if events:
        extra["events"] = events
    return dict(
        trace=trace,
        id=sid,
        parent=_id(parent),
        name=doc.get("name") or sid,
        start=start,
        end=max(_nanoseconds(doc.get("end_time")) or start, start),
        status=status,
        attributes=attributes,
        events=events,
        resource=_resource(doc),
        extra=extra,
        base64=False,
        **where,
    )


def console_log(doc: dict, where: dict, problems: list) -> dict | None:
    """One printed log record as a flat log record (None after appending its problem)."""
    found: list = []
    attributes = _attributes(doc.get("attributes"), "log record", where, found)
    if found:
        problems += found
        return None
    name = doc.get("event_name") or attributes.get("event.name")
    time = _nanoseconds(doc.get("timestamp") or doc.get("observed_timestamp")) or 0
    kept = {
        k: v
        for k, v in doc.items()
        if k not in ("trace_id", "span_id", "attributes", "body", "resource")
    }
    return dict(
        trace=_id(doc.get("trace_id")),
        span=_id(doc.get("span_id")),
        name=name if isinstance(name, str) else None,
        time=time,
        attributes=attributes,
        body=doc.get("body"),
        record=kept,
        scope={},
        resource=_resource(doc),
        field="log record",
        base64=False,
        **where,
    )
