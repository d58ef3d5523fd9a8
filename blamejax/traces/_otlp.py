"""OTLP JSON to flat span records: the files, the exports in them, each span's decoded fields.

An export is `{"resourceSpans": [{"resource", "scopeSpans": [{"scope", "spans": [...]}]}]}`
(the OTLP/JSON encoding: hex ids, int64 values as strings, attributes as
`[{"key", "value": {"stringValue" | "intValue" | "doubleValue" | "boolValue" | "arrayValue" |
"kvlistValue" | "bytesValue": ...}}]`). A `.json` file holds one export, a `.jsonl` file one
per line (as a collector's file exporter writes them).
"""

import json
import re
from pathlib import Path

from ._check import shown
from ._format import Problem, list_files, split_lines

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


def _natural(path: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def _documents(file: Path, problems):
    """(line or None, parsed object) for each OTLP export in a file; a .jsonl file holds one
    per line (as the collector's file exporter writes), a .json file one in all."""
    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        problems.append(Problem(str(file), None, "", f"cannot be read as UTF-8 text: {e}"))
        yield None, _UNREADABLE
        return
    chunks = (
        [(n, t) for n, t in enumerate(split_lines(text), 1) if t.strip()]
        if file.suffix == ".jsonl"
        else [(None, text)]
    )
    for line, chunk in chunks:
        try:
            yield line, json.loads(chunk, parse_constant=str)
        except json.JSONDecodeError as e:
            where = line if line is not None else e.lineno
            problems.append(
                Problem(str(file), where, "", f"not valid JSON: {e.msg} at column {e.colno}")
            )
            yield line, _UNREADABLE


def read_spans(path, problems) -> tuple[list[dict], dict[str, int], int]:
    """Every readable span of every export under `path`, flattened; the number of unreadable
    spans of each trace id; the number of exports (or parts of one) and of spans without a
    trace id that could not be read at all."""
    out, broken, skipped = [], {}, 0
    for file in list_files(path, (".json", ".jsonl"), "span", key=_natural):
        for line, doc in _documents(file, problems):
            where = dict(file=str(file), line=line)
            if doc is _UNREADABLE:
                skipped += 1
                continue
            resources = doc.get("resourceSpans") if isinstance(doc, dict) else None
            if not isinstance(resources, list):
                problems.append(
                    Problem(
                        **where,
                        field="resourceSpans",
                        message=f'expected an OTLP JSON export {{"resourceSpans": [...]}}, got {shown(doc)}',
                    )
                )
                skipped += 1
                continue
            for r, block in enumerate(resources):
                field = f"resourceSpans[{r}]"
                try:
                    block = _object(block, field)
                    resource = decode_attributes(
                        _object(block.get("resource"), f"{field}.resource").get("attributes")
                    )
                    scoped_list = _list_of(block.get("scopeSpans"), f"{field}.scopeSpans")
                except Bad as e:
                    problems.append(Problem(**where, field=field, message=str(e)))
                    skipped += 1
                    continue
                for i, scoped in enumerate(scoped_list):
                    try:
                        scoped = _object(scoped, f"scopeSpans[{i}]")
                        scope = _object(scoped.get("scope"), f"scopeSpans[{i}].scope")
                        spans = _list_of(scoped.get("spans"), f"scopeSpans[{i}].spans")
                    except Bad as e:
                        problems.append(Problem(**where, field=field, message=str(e)))
                        skipped += 1
                        continue
                    for span in spans:
                        item = _flatten(span, resource, scope, where, problems)
                        if item is not None:
                            out.append(item)
                            continue
                        tid = span.get("traceId") if isinstance(span, dict) else None
                        if isinstance(tid, str) and tid:
                            broken[tid] = broken.get(tid, 0) + 1
                        else:
                            skipped += 1
    return out, broken, skipped


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
    status = _STATUS.get(code)
    if status is None:
        found.append(
            Problem(
                **where,
                field=f"{label}.status.code",
                message=f"expected 0/1/2 or STATUS_CODE_UNSET/OK/ERROR, got {shown(code)}",
            )
        )
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
    extra = {k: v for k, v in span.items() if k not in ("traceId", "attributes", "events")}
    if events:
        extra["events"] = events
    if scope:
        extra["scope"] = scope
    return dict(
        trace=span["traceId"],
        id=span["spanId"],
        parent=parent,
        name=span.get("name") or span["spanId"],
        start=start,
        status=status,
        attributes=attributes,
        events=events,
        resource=resource,
        extra=extra,
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
