"""OTLP JSON to flat span and log records: the exports, each span's and log record's fields.

An export is `{"resourceSpans": [{"resource", "scopeSpans": [{"scope", "spans": [...]}]}]}`
(the OTLP/JSON encoding: hex ids, int64 values as strings, attributes as
`[{"key", "value": {"stringValue" | "intValue" | "doubleValue" | "boolValue" | "arrayValue" |
"kvlistValue" | "bytesValue": ...}}]`), or for log records `{"resourceLogs": [{"resource",
"scopeLogs": [{"scope", "logRecords": [...]}]}]}`, flattened the same way, to be joined to
their spans. Which files hold which exports is read from their content by `_sniff.py`.

Ids are hex (OTLP/JSON); the base64 ids protobuf's `MessageToJson` writes are converted to
hex, and the span says so (`base64`).
"""

import base64
import binascii
import re

from ...format._check import shown
from ...format._format import Problem

_STATUS = {
    0: "UNSET", 1: "OK", 2: "ERROR",
    "STATUS_CODE_UNSET": "UNSET", "STATUS_CODE_OK": "OK", "STATUS_CODE_ERROR": "ERROR",
}  # fmt: skip
_VALUE_KEYS = ("stringValue", "boolValue", "intValue", "doubleValue", "arrayValue",
               "kvlistValue", "bytesValue")  # fmt: skip


_UNREADABLE = object()


class Bad(Exception):
    """One problem of one span: (field under the span, message)."""


def decode_value(value):
    """An OTLP JSON `AnyValue` ({"stringValue": "x"}, {"intValue": "3"}, ...) as Python."""
    if not isinstance(value, dict):
        raise Bad(
            f'expected an OTLP value object such as {{"stringValue": ...}}, got {shown(value)}'
        )
    if not value:
        return None  # an empty AnyValue
    key = next((k for k in _VALUE_KEYS if k in value), None)
    if key is None:
        raise Bad(f"expected one of {', '.join(_VALUE_KEYS)}, got {shown(value)}")
    inner = value[key]
    if key == "intValue":
        if isinstance(inner, bool) or not isinstance(inner, int | str):
            raise Bad(f"intValue: expected an integer or a string of one, got {shown(inner)}")
        try:
            return int(inner)
        except ValueError:
            raise Bad(f"intValue: expected an integer, got {shown(inner)}") from None
    if key == "doubleValue" and isinstance(inner, str):
        return inner  # "NaN", "Infinity": kept as written
    if key == "arrayValue":
        return [decode_value(v) for v in (inner or {}).get("values", [])]
    if key == "kvlistValue":
        return decode_attributes((inner or {}).get("values", []))
    return inner


def decode_attributes(items) -> dict:
    """OTLP JSON attributes ([{"key": k, "value": AnyValue}, ...]) as a dict."""
    if items is None:
        return {}
    if not isinstance(items, list):
        raise Bad(f"attributes: expected a list of {{key, value}}, got {shown(items)}")
    out = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise Bad(f'attributes[{i}]: expected {{"key": str, "value": ...}}, got {shown(item)}')
        try:
            out[item["key"]] = decode_value(item.get("value", {}))
        except Bad as e:
            raise Bad(f"attributes[{i}] ({item['key']}): {e}") from None
    return out


def hex_id(value: str, size: int) -> tuple[str, bool]:
    """An id as hex, and whether it was base64: `size` bytes (16 for a trace, 8 for a span)
    written as 2 * size hex digits stay as they are; their base64 (as protobuf's
    `MessageToJson` writes ids) becomes hex; anything else is kept as written."""
    if re.fullmatch(f"[0-9a-fA-F]{{{2 * size}}}", value):
        return value, False
    if len(value) == 4 * -(-size // 3):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return value, False
        if len(raw) == size:
            return raw.hex(), True
    return value, False


def read_export(doc, kind, where, problems, spans, logs) -> tuple[dict[str, int], int]:
    """The spans (kind "otlp-spans") or log records ("otlp-logs") of one OTLP JSON export,
    flattened and appended to `spans` or `logs`; returns the number of unreadable spans of
    each trace id, and the number of parts that could not be read at all."""
    broken, skipped = {}, 0
    top, scoped_key, items_key = (
        ("resourceSpans", "scopeSpans", "spans")
        if kind == "otlp-spans"
        else ("resourceLogs", "scopeLogs", "logRecords")
    )
    resources = doc.get(top)
    if not isinstance(resources, list):
        message = f"expected a list of resource blocks, got {shown(resources)}"
        problems.append(Problem(**where, field=top, message=message))
        return broken, 1
    for r, block in enumerate(resources):
        field = f"{top}[{r}]"
        read = _read_or_report(_resource_block, (block, field, scoped_key), where, field, problems)
        if read is None:
            skipped += 1
            continue
        resource, scoped_list = read
        for i, scoped in enumerate(scoped_list):
            args = (scoped, f"{scoped_key}[{i}]", items_key)
            read = _read_or_report(_scope_block, args, where, field, problems)
            if read is None:
                skipped += 1
                continue
            scope, items = read
            for j, item in enumerate(items):
                if kind == "otlp-logs":
                    record = _flatten_log(
                        item, f"{items_key}[{j}]", resource, scope, where, problems
                    )
                    if record is not None:
                        logs.append(record)
                    else:
                        skipped += 1
                    continue
                flat = _flatten(item, resource, scope, where, problems)
                if flat is not None:
                    spans.append(flat)
                    continue
                tid = item.get("traceId") if isinstance(item, dict) else None
                if isinstance(tid, str) and tid:
                    tid = hex_id(tid, 16)[0]
                    broken[tid] = broken.get(tid, 0) + 1
                else:
                    skipped += 1
    return broken, skipped


def _read_or_report(read, args, where, field, problems):
    """`read(*args)`, or `None` with the problem it raised reported under `field`."""
    try:
        return read(*args)
    except Bad as e:
        problems.append(Problem(**where, field=field, message=str(e)))
        return None


def _resource_block(block, field, scoped_key):
    """One resource block: its decoded resource attributes and its list of scoped blocks."""
    block = _object(block, field)
    resource = decode_attributes(
        _object(block.get("resource"), f"{field}.resource").get("attributes")
    )
    return resource, _list_of(block.get(scoped_key), f"{field}.{scoped_key}")


def _scope_block(scoped, field, items_key):
    """One scoped block: its scope and its list of spans or log records."""
    scoped = _object(scoped, field)
    scope = _object(scoped.get("scope"), f"{field}.scope")
    return scope, _list_of(scoped.get(items_key), f"{field}.{items_key}")


def _object(value, field) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Bad(f"{field}: expected an object, got {shown(value)}")
    return value


def _list_of(value, field) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Bad(f"{field}: expected a list, got {shown(value)}")
    return value


def status_of(code, table: dict, expected: str, where: dict, field: str, found: list):
    """The status ("UNSET", "OK", "ERROR") that a span's status `code` means in its format's
    `table`; `None`, with a problem in `found` naming `field`, for a code the format lacks."""
    status = table.get(code)
    if status is None:
        message = f"expected {expected}, got {shown(code)}"
        found.append(Problem(**where, field=field, message=message))
    return status


def _flatten(span, resource, scope, where, problems) -> dict | None:
    if not isinstance(span, dict):
        problems.append(
            Problem(**where, field="span", message=f"expected a span object, got {shown(span)}")
        )
        return None
    sid = span.get("spanId")
    label = f"span[{sid}]" if isinstance(sid, str) and sid else "span"
    found = []
    for key in ("traceId", "spanId"):
        if not isinstance(span.get(key), str) or not span.get(key):
            found.append(
                Problem(
                    **where,
                    field=f"{label}.{key}",
                    message=f"expected a hex id string, got {shown(span.get(key))}",
                )
            )
    parent = span.get("parentSpanId") or None
    if parent is not None and not isinstance(parent, str):
        found.append(
            Problem(
                **where,
                field=f"{label}.parentSpanId",
                message=f"expected a hex id string, got {shown(parent)}",
            )
        )
    try:
        attributes = decode_attributes(span.get("attributes"))
        events = [
            {**e, "attributes": decode_attributes(e.get("attributes"))}
            if isinstance(e, dict)
            else e
            for e in span.get("events", []) or []
        ]
    except Bad as e:
        found.append(Problem(**where, field=label, message=str(e)))
    code = (span.get("status") or {}).get("code", 0)
    expected = "0/1/2 or STATUS_CODE_UNSET/OK/ERROR"
    status = status_of(code, _STATUS, expected, where, f"{label}.status.code", found)
    start = span.get("startTimeUnixNano", 0)
    try:
        start = int(start)
    except (TypeError, ValueError):
        found.append(
            Problem(
                **where,
                field=f"{label}.startTimeUnixNano",
                message=f"expected nanoseconds (an integer or a string of one), got {shown(start)}",
            )
        )
    if found:
        problems += found
        return None
    trace, from_base64 = hex_id(span["traceId"], 16)
    ids = {"spanId": hex_id(span["spanId"], 8)}
    if parent is not None:
        ids["parentSpanId"] = hex_id(parent, 8)
    from_base64 = from_base64 or any(b for _, b in ids.values())
    extra = {k: v for k, v in span.items() if k not in ("traceId", "attributes", "events")}
    extra.update({k: v for k, (v, _) in ids.items()})
    if events:
        extra["events"] = events
    if scope:
        extra["scope"] = scope
    return dict(
        trace=trace,
        id=ids["spanId"][0],
        parent=ids["parentSpanId"][0] if parent is not None else None,
        name=span.get("name") or ids["spanId"][0],
        start=start,
        end=_end_time(span.get("endTimeUnixNano"), start),
        status=status,
        attributes=attributes,
        events=events,
        resource=resource,
        extra=extra,
        base64=from_base64,
        **where,
    )


def _end_time(value, start: int) -> int:
    """A span's end in nanoseconds (its start when absent or unreadable: a zero-length span)."""
    try:
        return max(int(value), start)
    except (TypeError, ValueError):
        return start


def _flatten_log(record, field, resource, scope, where, problems) -> dict | None:
    """One OTLP log record: its trace and span ids (hex, None when absent), its event name
    (`eventName`, or the older `event.name` attribute), decoded attributes and body."""
    if not isinstance(record, dict):
        problems.append(
            Problem(
                **where, field=field, message=f"expected a log record object, got {shown(record)}"
            )
        )
        return None
    try:
        attributes = decode_attributes(record.get("attributes"))
        body = decode_value(record["body"]) if "body" in record else None
    except Bad as e:
        problems.append(Problem(**where, field=field, message=str(e)))
        return None
    ids = {}
    for key, size in (("traceId", 16), ("spanId", 8)):
        value = record.get(key) or None
        if value is not None and not isinstance(value, str):
            problems.append(
                Problem(
                    **where,
                    field=f"{field}.{key}",
                    message=f"expected a hex id string, got {shown(value)}",
                )
            )
            return None
        ids[key] = None if value is None else hex_id(value, size)
    time = record.get("timeUnixNano") or record.get("observedTimeUnixNano") or 0
    try:
        time = int(time)
    except (TypeError, ValueError):
        time = 0
    name = record.get("eventName") or attributes.get("event.name")
    kept = {k: v for k, v in record.items() if k not in ("traceId", "spanId", "attributes", "body")}
    return dict(
        trace=ids["traceId"] and ids["traceId"][0],
        span=ids["spanId"] and ids["spanId"][0],
        name=name if isinstance(name, str) else None,
        time=time,
        attributes=attributes,
        body=body,
        record=kept,
        scope=scope,
        resource=resource,
        field=field,
        base64=any(v and v[1] for v in ids.values()),
        **where,
    )


def ordered(spans: list[dict]) -> list[dict]:
    """By start time, ties in file order, each parent before its children (clock skew)."""
    by_id = {s["id"]: s for s in spans}
    done, out = set(), []

    def emit(span, trail=()):
        if span["id"] in done or span["id"] in trail:
            return
        parent = by_id.get(span["parent"])
        if parent is not None:
            emit(parent, (*trail, span["id"]))
        done.add(span["id"])
        out.append(span)

    for span in sorted(spans, key=lambda s: s["start"]):
        emit(span)
    return out
