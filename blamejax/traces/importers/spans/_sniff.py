"""Which span or log format a file holds, read from its content, never from its name.

A file is a sequence of JSON values: one (a `.json` export), one per line (JSON Lines, as the
OpenTelemetry Collector's file exporter writes, whatever the file is called), or several
pretty-printed ones one after the other (what the SDK's `ConsoleSpanExporter` prints). Each
value is classified on its own (`kind`); the formats read are in `FORMATS`.
"""

import json
import re
from pathlib import Path

from ...format._check import shown
from ...format._format import Problem, list_files, split_lines
from ._console import console_log, console_span
from ._mlflow import is_mlflow_trace, mlflow_spans
from ._otlp import read_export

#: The formats the span importers read, as their messages name them.
FORMATS = {
    "otlp-spans": 'OTLP JSON spans {"resourceSpans": [...]}',
    "otlp-logs": 'OTLP JSON log records {"resourceLogs": [...]}',
    "console-span": "the spans the OpenTelemetry SDK's ConsoleSpanExporter prints",
    "console-log": "the log records the SDK's ConsoleLogRecordExporter prints",
    "mlflow-trace": 'MLflow traces {"info": {...}, "data": {"spans": [...]}} (Trace.to_json())',
}
#: The folder files a span importer reads (a file named on its own is read whatever its name).
SUFFIXES = (".json", ".jsonl", ".ndjson", ".log")
TRIED = "; ".join(FORMATS.values())

UNREADABLE = object()


def kind(doc) -> str | None:
    """The format of one JSON value: a key of `FORMATS`, "blamejax-trace", "whowhen", or None."""
    if not isinstance(doc, dict):
        return None
    if "resourceSpans" in doc:
        return "otlp-spans"
    if "resourceLogs" in doc:
        return "otlp-logs"
    if is_mlflow_trace(doc):
        return "mlflow-trace"
    context = doc.get("context")
    if isinstance(context, dict) and "trace_id" in context and "span_id" in context:
        return "console-span"
    if "trace_id" in doc and "span_id" in doc and ("body" in doc or "severity_number" in doc):
        return "console-log"
    if isinstance(doc.get("format"), str) and doc["format"].startswith("blamejax-trace"):
        return "blamejax-trace"
    if "history" in doc and ("mistake_agent" in doc or "mistake_step" in doc):
        return "whowhen"
    return None


def unknown(doc) -> str:
    """The message for a JSON value of no span format: what it looks like, what was tried."""
    what = kind(doc)
    if what == "blamejax-trace":
        return "a blamejax trace (one run per line), not spans: read it with bj.traces.read"
    if what == "whowhen":
        return "a Who&When log, not spans: read it with bj.traces.from_whowhen"
    return f"not a span or log format that blamejax reads; tried {TRIED}; got {shown(doc)}"


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _next_value(text: str, position: int) -> int:
    """Where to resume after a value that is not JSON: the next line that starts a value."""
    at = text.find("\n", position)
    while at != -1:
        if text[at + 1 : at + 2] in ("{", "["):
            return at + 1
        at = text.find("\n", at + 1)
    return len(text)


def _lines(text: str, file: Path, problems: list):
    for line, chunk in enumerate(split_lines(text), 1):
        if not chunk.strip():
            continue
        try:
            yield line, json.loads(chunk, parse_constant=str)
        except json.JSONDecodeError as e:
            message = f"not valid JSON: {e.msg} at column {e.colno} (read as JSON Lines: one value per line)"
            problems.append(Problem(str(file), line, "", message))
            yield line, UNREADABLE


def _stream(text: str, file: Path, problems: list):
    decoder, position, end = json.JSONDecoder(parse_constant=str), 0, len(text)
    while True:
        while position < end and text[position] in " \t\r\n":
            position += 1
        if position >= end:
            return
        line = _line_of(text, position)
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as e:
            message = f"not valid JSON: {e.msg} at column {e.colno} (read as JSON documents one after another)"
            problems.append(Problem(str(file), e.lineno, "", message))
            yield line, UNREADABLE
            position = _next_value(text, position)
            continue
        yield line, value


def documents(file: Path, problems: list):
    """`(line, value)` for each JSON value in `file`, `line` the 1-based line it starts on
    (None when the file is one value); `(line, UNREADABLE)` after a problem (appended to `problems`) for what is not JSON.

    JSON Lines when every line is a JSON value on its own, else a stream of values (one
    document, or pretty-printed values one after another); when neither reads cleanly, JSON
    Lines if its first line is a value on its own (each bad line is then a problem), else the
    stream, resumed after a bad value at the next line that starts one."""
    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        problems.append(Problem(str(file), None, "", f"cannot be read as UTF-8 text: {e}"))
        yield None, UNREADABLE
        return
    for reader in (_lines, _stream):
        found: list = []
        values = list(reader(text, file, found))
        if not found:
            if len(values) == 1:  # the file is one document: its problems name no line
                values = [(None, values[0][1])]
            yield from values
            return
    first = next((chunk for chunk in split_lines(text) if chunk.strip()), "")
    try:
        json.loads(first, parse_constant=str)
        reader = _lines
    except json.JSONDecodeError:
        reader = _stream
    yield from reader(text, file, problems)


def _natural(path: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def read_sources(path, problems: list):
    """Every readable span and log record under `path` (a file of any name, or the
    `SUFFIXES` files of a folder, in natural order), flattened.

    **Returns:** `(spans, logs, broken, skipped)`: `broken` counts the unreadable spans of
    each trace id; `skipped` the values, export parts and log records that could not be read
    at all. Values of no known format, and spans in a second span format (OTLP JSON and
    console spans mixed), are problems, their values skipped."""
    spans, logs, broken, skipped = [], [], {}, 0
    span_format = None  # (kind, where first seen)
    for file in list_files(path, SUFFIXES, "span", key=_natural):
        for line, doc in documents(file, problems):
            where = dict(file=str(file), line=line)
            if doc is UNREADABLE:
                skipped += 1
                continue
            what = kind(doc)
            if what not in FORMATS:
                problems.append(Problem(**where, field="", message=unknown(doc)))
                skipped += 1
                continue
            if what in ("otlp-spans", "console-span", "mlflow-trace"):
                shown_at = f"{file}" if line is None else f"{file}:{line}"
                if span_format is None:
                    span_format = (what, shown_at)
                elif span_format[0] != what:
                    message = (
                        f"mixed formats: this holds {FORMATS[what]}, but {span_format[1]} holds "
                        f"{FORMATS[span_format[0]]}; keep one span format in a file or folder"
                    )
                    problems.append(Problem(**where, field="", message=message))
                    skipped += 1
                    continue
            if what == "console-span":
                flat = console_span(doc, where, problems)
                if flat is not None:
                    spans.append(flat)
                else:
                    tid = doc["context"].get("trace_id")
                    if isinstance(tid, str) and tid:
                        tid = tid.removeprefix("0x")
                        broken[tid] = broken.get(tid, 0) + 1
                    else:
                        skipped += 1
            elif what == "mlflow-trace":
                more, lost = mlflow_spans(doc, where, problems, spans)
                for tid, count in more.items():
                    broken[tid] = broken.get(tid, 0) + count
                skipped += lost
            elif what == "console-log":
                flat = console_log(doc, where, problems)
                if flat is not None:
                    logs.append(flat)
                else:
                    skipped += 1
            else:
                more, lost = read_export(doc, what, where, problems, spans, logs)
                for tid, count in more.items():
                    broken[tid] = broken.get(tid, 0) + count
                skipped += lost
    return spans, logs, broken, skipped


def holds_spans(path) -> bool:
    """Whether `path` (a file, or the `SUFFIXES` files of a folder) holds a span or log format
    that the span importers read (its first JSON value is one)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
    else:
        files = [path] if path.is_file() else []
    for file in files[:20]:
        for _, doc in documents(file, []):
            if doc is not UNREADABLE and kind(doc) in FORMATS:
                return True
            break
    return False
