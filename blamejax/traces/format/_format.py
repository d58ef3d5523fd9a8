"""The trace format: one run per JSON line, its Python data, reading, writing and validation.

A trace file (`.jsonl`) holds one JSON object per line, one line per run (the fields are
described in docs/traces.md and checked by `_check.py`). In Python a run is a frozen `Run` of
`Step`s holding plain Python values; `-inf` logits are `float("-inf")` in Python and the
string `"-inf"` in the file.
"""

import dataclasses
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from ...report import write_atomic
from ._check import FORMAT, NEG_INF, check_run, parse_line

ERRORS = ("raise", "collect")
SHOWN = 50  # problems quoted in a TraceError's message


def _tuple(value):
    return tuple(value) if isinstance(value, list | tuple) else value


def _table(value):
    """A logits row or table as tuples (rows of a `given` table become tuples too)."""
    if not isinstance(value, list | tuple):
        return value
    return tuple(_table(x) if isinstance(x, list | tuple) else x for x in value)


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of a run: who ran it, after which steps, and what it chose or produced.

    A *decision step* has `options`; only it may have `logits` (variant -> one logit per
    option, or with `given` one row per option of the given step), `accept`, `choice` and
    `given`. Lists are stored as tuples. See docs/traces.md for every field.
    """

    name: str
    agent: str | None = None
    parents: tuple[str, ...] = ()
    options: tuple[str, ...] | None = None
    given: str | None = None
    logits: dict[str, tuple] | None = None
    accept: tuple[str, ...] | None = None
    choice: str | None = None
    output: str | None = None
    tokens: dict[str, int] | None = None
    extra: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        for name in ("parents", "options", "accept"):
            value = getattr(self, name)
            if isinstance(value, str):  # tuple("ab") would split it into letters
                raise TypeError(
                    f"`{name}` of step {self.name!r} must be a list of strings, got the string {value!r}; "
                    f"write [{value!r}]"
                )
            object.__setattr__(self, name, _tuple(value))
        if isinstance(self.logits, dict):
            logits = {k: _table(v) for k, v in self.logits.items()}
            object.__setattr__(self, "logits", logits)


@dataclasses.dataclass(frozen=True)
class Run:
    """One run: its steps in the order they ran, its outcome and, if known, its labels.

    `score` (a finite number) and/or `passed` say how it went; `decisive_agent` and
    `decisive_step` (a 0-based index into `steps`) are an annotator's answer to "who is to
    blame", when the data has one. `extra` keeps what an importer could not map.
    """

    run: str
    steps: tuple[Step, ...]
    score: float | None = None
    passed: bool | None = None
    decisive_agent: str | None = None
    decisive_step: int | None = None
    extra: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "steps", _tuple(self.steps))

    @property
    def agents(self) -> tuple[str, ...]:
        """The distinct agents of the steps, in the order they first act (None left out)."""
        return tuple(dict.fromkeys(s.agent for s in self.steps if s.agent is not None))

    @property
    def decisions(self) -> tuple[Step, ...]:
        """The decision steps (those with `options`), in order."""
        return tuple(s for s in self.steps if s.options is not None)


class Problem(NamedTuple):
    """One problem found in trace data: where (file, 1-based line or None, field) and what."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


class TraceError(ValueError):
    """Trace data that does not follow the format; `.problems` lists every problem found."""

    def __init__(self, problems: Iterable[Problem], skipped: int = 0):
        self.problems = list(problems)
        self.skipped = skipped
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} in trace data"
        if skipped:
            head += f" ({skipped} item{'s' if skipped != 1 else ''} could not be loaded)"
        shown = [f"  {p}" for p in self.problems[:SHOWN]]
        if count > SHOWN:
            shown.append(f"  ... and {count - SHOWN} more (all of them in .problems)")
        super().__init__(head + ":\n" + "\n".join(shown))


class Loaded(NamedTuple):
    """What `errors="collect"` gives: the good runs, every problem, and how many items were
    skipped because of them: runs (lines) of trace files; files for `from_whowhen`; traces,
    values and exports that could not be parsed, and log records that join no span, for
    `from_otel` and `from_openinference`."""

    runs: list[Run]
    problems: list[Problem]
    skipped: int


def _check_errors(errors) -> None:
    if errors not in ERRORS:
        raise ValueError(f"errors must be 'raise' or 'collect', got {errors!r}")


def deliver(runs, problems, skipped, errors):
    """The result a reader returns: runs, or a `Loaded`, or a `TraceError` (shared by the
    importers)."""
    if errors == "collect":
        return Loaded(list(runs), list(problems), skipped)
    if problems:
        raise TraceError(problems, skipped)
    return list(runs)


def _row_record(row):
    return [
        NEG_INF if x == -math.inf else float(x) if isinstance(x, int | float) else x for x in row
    ]


def _logits_record(table):
    if table and isinstance(table[0], list | tuple):
        return [_row_record(row) for row in table]
    return _row_record(table)


def _step_record(step: Step) -> dict:
    out: dict = {"name": step.name}
    if step.agent is not None:
        out["agent"] = step.agent
    if step.parents:
        out["parents"] = list(step.parents)
    if step.options is not None:
        out["options"] = list(step.options)
    if step.given is not None:
        out["given"] = step.given
    if step.logits is not None:
        out["logits"] = (
            {k: _logits_record(v) for k, v in step.logits.items()}
            if isinstance(step.logits, dict)
            else step.logits
        )
    if step.accept is not None:
        out["accept"] = list(step.accept)
    if step.choice is not None:
        out["choice"] = step.choice
    if step.output is not None:
        out["output"] = step.output
    if step.tokens is not None:
        out["tokens"] = dict(step.tokens)
    if step.extra:
        out["extra"] = step.extra
    return out


def to_record(run: Run) -> dict:
    """One run as the JSON object of its line (`-inf` logits as the string "-inf").

    The record is not checked here; `write` checks every record before it writes.

    ```python
    import blamejax as bj

    run = bj.traces.Run("r1", (bj.traces.Step("s0", options=("a", "b"),
                        logits={"factual": (0.0, float("-inf"))}, choice="a"),), passed=False)
    record = bj.traces.to_record(run)
    assert record["steps"][0]["logits"] == {"factual": [0.0, "-inf"]}
    assert bj.traces.from_record(record) == run
    ```
    """
    if not isinstance(run, Run):
        raise TypeError(f"run must be a bj.traces.Run, got {type(run).__name__}")
    if not isinstance(run.steps, tuple):
        raise TypeError(
            f"`steps` of run {run.run!r} must be a list of bj.traces.Step, got {type(run.steps).__name__}"
        )
    for i, step in enumerate(run.steps):
        if not isinstance(step, Step):
            raise TypeError(
                f"`steps[{i}]` of run {run.run!r} must be a bj.traces.Step, got {step!r:.80}"
            )
    out: dict = {"format": FORMAT, "run": run.run, "steps": [_step_record(s) for s in run.steps]}
    if run.score is not None:
        out["score"] = run.score
    if run.passed is not None:
        out["passed"] = run.passed
    labels = {}
    if run.decisive_agent is not None:
        labels["decisive_agent"] = run.decisive_agent
    if run.decisive_step is not None:
        labels["decisive_step"] = run.decisive_step
    if labels:
        out["labels"] = labels
    if run.extra:
        out["extra"] = run.extra
    return out


def _logit_value(x):
    return -math.inf if x == NEG_INF else float(x)


def _logits_value(table):
    if table and isinstance(table[0], list | tuple):
        return tuple(tuple(_logit_value(x) for x in row) for row in table)
    return tuple(_logit_value(x) for x in table)


def _build(obj: dict) -> Run:
    """A valid record (already checked) as a `Run`."""
    steps = []
    for s in obj["steps"]:
        logits = s.get("logits")
        if logits is not None:
            logits = {k: _logits_value(v) for k, v in logits.items()}
        tokens = s.get("tokens")
        steps.append(
            Step(
                name=s["name"],
                agent=s.get("agent"),
                parents=tuple(s.get("parents", ())),
                options=None if s.get("options") is None else tuple(s["options"]),
                given=s.get("given"),
                logits=logits,
                accept=None if s.get("accept") is None else tuple(s["accept"]),
                choice=s.get("choice"),
                output=s.get("output"),
                tokens=None if tokens is None else dict(tokens),
                extra=dict(s.get("extra", {})),
            )
        )
    labels = obj.get("labels", {})
    score = obj.get("score")
    return Run(
        run=obj["run"],
        steps=tuple(steps),
        score=None if score is None else float(score),
        passed=obj.get("passed"),
        decisive_agent=labels.get("decisive_agent"),
        decisive_step=labels.get("decisive_step"),
        extra=dict(obj.get("extra", {})),
    )


def from_record(obj, *, file: str = "<record>", line: int | None = None) -> Run:
    """One run from the JSON object of its line, checked first.

    **Raises:** `TraceError` listing every problem of the record (named `file`, `line`).
    """
    problems = [Problem(file, line, f, m) for f, m in check_run(obj)]
    if problems:
        raise TraceError(problems, 1)
    return _build(obj)


def _load_lines(lines: Iterable[str], file: str, seen: dict):
    """Runs, problems and the number of skipped lines of one trace file's lines. `seen`
    (run id -> where first seen) is shared across the files of a folder."""
    runs, problems, skipped = [], [], 0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue  # blank lines hold no run
        try:
            obj = parse_line(text)
        except json.JSONDecodeError as e:
            problems.append(
                Problem(file, number, "", f"not valid JSON: {e.msg} at column {e.colno}")
            )
            skipped += 1
            continue
        except ValueError as e:  # e.g. a number too long to convert
            problems.append(Problem(file, number, "", f"not valid JSON: {e}"))
            skipped += 1
            continue
        found = [Problem(file, number, f, m) for f, m in check_run(obj)]
        run_id = obj.get("run") if isinstance(obj, dict) else None
        if isinstance(run_id, str) and run_id:
            if run_id in seen:
                found.append(
                    Problem(
                        file,
                        number,
                        "run",
                        f"duplicate run id {run_id!r} (first at {seen[run_id]})",
                    )
                )
            else:
                seen[run_id] = f"{file}:{number}"
        if found:
            problems.extend(found)
            skipped += 1
        else:
            runs.append(_build(obj))
    return runs, problems, skipped


def split_lines(text: str) -> list[str]:
    """The lines of a JSON Lines text: split at "\\n" only (str.splitlines would also split
    at U+2028 and U+0085, which JSON strings may hold unescaped), a final "\\r" dropped."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def list_files(path, suffixes: tuple[str, ...], what: str, key=None) -> list[Path]:
    """`path` itself, or the files of the folder `path` whose suffix is one of `suffixes`,
    sorted (by `key` if given); a missing path or an empty folder is an error naming it and
    `what` it should hold."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(
            f"`path` must be a {what} file or folder (str or os.PathLike), got {path!r:.80}"
        )
    path = Path(os.fspath(path))
    if path.is_dir():
        files = sorted((p for p in path.iterdir() if p.suffix in suffixes and p.is_file()), key=key)
        if not files:
            raise FileNotFoundError(
                f"path={str(path)!r} is a folder with no {'/'.join(suffixes)} {what} files"
            )
        return files
    if not path.is_file():
        raise FileNotFoundError(f"path={str(path)!r}: no such {what} file or folder")
    return [path]


def _load(path):
    runs, problems, skipped, seen = [], [], 0, {}
    for file in list_files(path, (".jsonl",), "trace"):
        try:
            lines = split_lines(file.read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError) as e:
            problems.append(Problem(str(file), None, "", f"cannot be read as UTF-8 text: {e}"))
            skipped += 1
            continue
        r, p, s = _load_lines(lines, str(file), seen)
        runs += r
        problems += p
        skipped += s
    return runs, problems, skipped


def read(path, *, errors: str = "raise"):
    """The runs of a trace file (`.jsonl`), or of every `.jsonl` file of a folder (by name).

    **Arguments:** `path`, a file or a folder; `errors`: "raise" (the default) or "collect".

    **Returns:** with "raise", `list[Run]`; with "collect", a `Loaded(runs, problems,
    skipped)` holding the good runs, every problem, and the number of lines skipped.

    **Raises:** `TraceError` (a ValueError) listing every problem of every file, with its
    file, line and field; `FileNotFoundError` when there is no such file, or no trace file in
    the folder.

    ```python
    import blamejax as bj

    run = bj.traces.Run("r1", (bj.traces.Step("s0", agent="planner"),), passed=False)
    bj.traces.write("runs.jsonl", [run])
    assert bj.traces.read("runs.jsonl") == [run]
    ```
    """
    _check_errors(errors)
    return deliver(*_load(path), errors)


def read_report(path) -> Loaded:
    """`read(path, errors="collect")`: the good runs, every problem, the count skipped."""
    return read(path, errors="collect")


def validate(path_or_lines) -> list[Problem]:
    """Every problem of a trace file, a folder of them, or an iterable of lines ([] if none).

    A `str` or path-like is a path; any other iterable is taken as the lines of one file,
    named "<lines>" in the problems.

    ```python
    import blamejax as bj

    line = '{"format": "blamejax-trace/1", "run": "r", "steps": [], "passed": false}'
    [problem] = bj.traces.validate([line])
    assert (problem.line, problem.field) == (1, "steps")
    ```
    """
    if isinstance(path_or_lines, str | os.PathLike):
        return _load(path_or_lines)[1]
    if isinstance(path_or_lines, bytes) or not isinstance(path_or_lines, Iterable):
        raise TypeError(
            "path_or_lines must be a path or an iterable of lines (str), "
            f"got {type(path_or_lines).__name__}"
        )
    lines = list(path_or_lines)
    for i, text in enumerate(lines):
        if not isinstance(text, str):
            raise TypeError(f"path_or_lines[{i}] must be a str, got {type(text).__name__}")
    return _load_lines(lines, "<lines>", {})[1]


def dumps(record: dict) -> str:
    """One record as its line of strict JSON (no trailing newline)."""
    return json.dumps(record, ensure_ascii=False, allow_nan=False)


def write(path, runs: Iterable[Run]) -> None:
    """Write runs to a trace file, one line each, atomically (a temporary file, then renamed).

    Every run is checked first (as it would be read back); nothing is written if any fails.

    **Raises:** `TypeError` when an item is not a `Run`; `TraceError` listing every problem
    (the line numbers are those the runs would have in the file).
    """
    if isinstance(runs, Run | str | bytes) or not isinstance(runs, Iterable):
        raise TypeError(
            f"`runs` must be a list of bj.traces.Run, got {type(runs).__name__}"
            + ("; pass [run] for one run" if isinstance(runs, Run) else "")
        )
    runs = list(runs)
    problems, seen, lines = [], {}, []
    for i, run in enumerate(runs):
        if not isinstance(run, Run):
            raise TypeError(f"runs[{i}] must be a bj.traces.Run, got {type(run).__name__}")
        record = to_record(run)
        found = [Problem(str(path), i + 1, f, m) for f, m in check_run(record)]
        if isinstance(run.run, str) and run.run in seen:
            message = f"duplicate run id {run.run!r} (first at runs[{seen[run.run]}])"
            found.append(Problem(str(path), i + 1, "run", message))
        seen.setdefault(run.run, i)
        if not found:
            try:
                lines.append(dumps(record))
            except (TypeError, ValueError) as e:
                found.append(Problem(str(path), i + 1, "", f"cannot be written as JSON: {e}"))
        problems += found
    if problems:
        raise TraceError(problems)
    write_atomic(path, "".join(line + "\n" for line in lines))
