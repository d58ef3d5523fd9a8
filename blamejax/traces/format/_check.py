"""The rules one trace record follows: every check of one run's JSON object.

`check_run(obj)` returns every problem it finds as a `(field, message)` pair, never stopping
at the first; `_format.py` adds the file and the line. Fields are written as paths into the
record (`steps[1].logits.factual[0]`). The same rules, less the ones that compare two fields,
are in `trace.schema.json`.
"""

import json
import math
import re

FORMAT = "blamejax-trace/1"
"""The trace format's name and version, written in every record."""
RUN_FIELDS = ("format", "run", "steps", "score", "passed", "labels", "extra")
STEP_FIELDS = (
    "name", "agent", "parents", "options", "given", "logits", "accept", "choice", "output",
    "tokens", "extra",
)  # fmt: skip
DECISION_FIELDS = ("given", "logits", "accept", "choice")
LABEL_FIELDS = ("decisive_agent", "decisive_step")
TOKEN_FIELDS = ("input", "output")
NEG_INF = "-inf"
_MISSING = object()


class BadConstant:
    """A `NaN`, `Infinity` or `-Infinity` token in the JSON text (strict JSON has none)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def parse_line(text: str):
    """One line of JSON, with non-standard constants kept as `BadConstant` for the checks."""
    return json.loads(text, parse_constant=BadConstant)


def kind(value) -> str:
    """The JSON name of a value's type, as the messages say it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, BadConstant):
        return f"the non-JSON token {value.text}"
    return type(value).__name__


def shown(value, limit: int = 60) -> str:
    """A short quotation of a value for a message."""
    if isinstance(value, BadConstant):
        return value.text
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _got(value) -> str:
    return f"got {kind(value)} {shown(value)}" if value is not None else "got null"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _string_list(bad, field, value, *, nonempty=False) -> list[str] | None:
    """A list of distinct strings, or None after reporting why not."""
    if not isinstance(value, list | tuple):
        bad(field, f"expected a list of strings, {_got(value)}")
        return None
    good = True
    for i, item in enumerate(value):
        if not isinstance(item, str):
            bad(f"{field}[{i}]", f"expected a string, {_got(item)}")
            good = False
    if nonempty and not value:
        bad(field, "expected a non-empty list of strings, got []")
        good = False
    seen = set()
    for i, item in enumerate(value):
        if isinstance(item, str):
            if item in seen:
                bad(f"{field}[{i}]", f"duplicate {shown(item)}; the entries must be distinct")
                good = False
            seen.add(item)
    return list(value) if good else None


def _logit(bad, field, value) -> float | None:
    """One logit: a finite number or the string "-inf"."""
    if _is_number(value):
        number = float(value)
        if math.isnan(number):
            bad(field, 'NaN is not a logit; expected a finite number or "-inf"')
            return None
        if number == math.inf:
            bad(field, '+inf is not a logit; expected a finite number or "-inf"')
            return None
        return number
    if value == NEG_INF:
        return -math.inf
    if isinstance(value, BadConstant):
        hint = ' (write -inf as the string "-inf")' if value.text == "-Infinity" else ""
        bad(field, f'expected a finite number or "-inf", got {value.text}{hint}')
        return None
    bad(field, f'expected a finite number or "-inf", {_got(value)}')
    return None


def _row(bad, field, value, num_options) -> None:
    if not isinstance(value, list | tuple):
        bad(field, f"expected a list of {num_options} logits (one per option), {_got(value)}")
        return
    if len(value) != num_options:
        bad(
            field,
            f"expected {num_options} logits (one per option), got {len(value)}",
        )
    numbers = [_logit(bad, f"{field}[{i}]", x) for i, x in enumerate(value)]
    if value and all(x == -math.inf for x in numbers):
        bad(field, "every logit is -inf; at least one option must be possible")


def _logits(bad, field, value, num_options, num_given) -> None:
    """`logits`: variant name -> row (or, with `given`, one row per option of the given step)."""
    if not isinstance(value, dict):
        bad(field, f'expected an object of variant -> logits (first "factual"), {_got(value)}')
        return
    names = list(value)
    if "factual" not in value:
        bad(field, 'missing the variant "factual" (what ran), which must come first')
    elif names[0] != "factual":
        bad(field, f'the variant "factual" must come first, got {shown(names)}')
    for variant, table in value.items():
        where = f"{field}.{variant}"
        if not variant:
            bad(field, "a variant name must be a non-empty string")
        if num_given is None:
            _row(bad, where, table, num_options)
            continue
        if not isinstance(table, list | tuple):
            bad(
                where,
                f"expected {num_given} rows (one per option of the given step), {_got(table)}",
            )
            continue
        if num_given >= 0 and len(table) != num_given:
            bad(
                where,
                f"expected {num_given} rows (one per option of the given step), got {len(table)}",
            )
        for i, row in enumerate(table):
            _row(bad, f"{where}[{i}]", row, num_options)


def _plain(bad, field, value) -> None:
    """`extra`: any strict-JSON value, kept verbatim (no NaN or infinity inside)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                bad(field, f"object keys must be strings, got {kind(key)} {shown(key)}")
            _plain(bad, f"{field}.{key}", item)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _plain(bad, f"{field}[{i}]", item)
    elif isinstance(value, float) and not math.isfinite(value) or isinstance(value, BadConstant):
        bad(field, f"{shown(value)} is not strict JSON; write it as a string")
    elif not (value is None or isinstance(value, str | int | float)):
        bad(field, f"expected a JSON value, got {kind(value)}")


def _extra(bad, field, value) -> None:
    if not isinstance(value, dict):
        bad(field, f"expected an object, {_got(value)}")
    else:
        _plain(bad, field, value)


def _step(bad, field, step, names, earlier) -> None:
    """One step. `names`: every step name of the run; `earlier`: name -> options so far."""
    if not isinstance(step, dict):
        bad(field, f"expected a step object, {_got(step)}")
        return
    for key in step:
        if key not in STEP_FIELDS:
            bad(
                f"{field}.{key}",
                f"unknown step field; a step has {', '.join(STEP_FIELDS)} "
                "(keep other data under 'extra')",
            )
    name = step.get("name", _MISSING)
    if name is _MISSING:
        bad(f"{field}.name", "missing; every step needs a name, unique in its run")
    elif not isinstance(name, str) or not name:
        bad(f"{field}.name", f"expected a non-empty string, {_got(name)}")
    elif name in earlier:
        bad(f"{field}.name", f"duplicate step name {shown(name)}; names must be unique in a run")
    agent = step.get("agent")
    if agent is not None and not isinstance(agent, str):
        bad(f"{field}.agent", f"expected a string or null, {_got(agent)}")

    parents = step.get("parents", [])
    parents = _string_list(bad, f"{field}.parents", parents) or []
    for i, parent in enumerate(parents):
        if parent in earlier:
            continue
        if parent in names:
            bad(f"{field}.parents[{i}]", f"{shown(parent)} is not an earlier step of this run")
        else:
            bad(f"{field}.parents[{i}]", f"unknown parent {shown(parent)}: no step has that name")

    options = step.get("options")
    if options is None:
        for key in DECISION_FIELDS:
            if key in step:
                bad(f"{field}.{key}", "only a decision step (one with 'options') may have it")
    else:
        options = _string_list(bad, f"{field}.options", options, nonempty=True)

    given = step.get("given")
    num_given = None
    if given is not None:
        if not isinstance(given, str):
            bad(f"{field}.given", f"expected the name of an earlier decision step, {_got(given)}")
            num_given = -1
        elif given not in parents:
            bad(f"{field}.given", f"{shown(given)} must be one of this step's parents")
            num_given = -1
        elif not earlier.get(given):
            bad(f"{field}.given", f"{shown(given)} is not an earlier decision step")
            num_given = -1
        else:
            num_given = len(earlier[given])

    if options is not None:
        if "logits" in step:
            _logits(bad, f"{field}.logits", step["logits"], len(options), num_given)
        if "accept" in step:
            accept = _string_list(bad, f"{field}.accept", step["accept"])
            for i, label in enumerate(accept or []):
                if label not in options:
                    bad(f"{field}.accept[{i}]", f"{shown(label)} is not one of the options")
        if "choice" in step:
            choice = step["choice"]
            if not isinstance(choice, str):
                bad(f"{field}.choice", f"expected one of the options, {_got(choice)}")
            elif choice not in options:
                bad(
                    f"{field}.choice",
                    f"{shown(choice)} is not one of the options {shown(options)}",
                )

    if "output" in step and not isinstance(step["output"], str):
        bad(f"{field}.output", f"expected a string, {_got(step['output'])}")
    if "tokens" in step:
        tokens = step["tokens"]
        if not isinstance(tokens, dict):
            bad(f"{field}.tokens", f'expected {{"input": int, "output": int}}, {_got(tokens)}')
        else:
            for key, count in tokens.items():
                if key not in TOKEN_FIELDS:
                    bad(f"{field}.tokens.{key}", "unknown token count; expected input or output")
                elif not _is_int(count) or count < 0:
                    bad(f"{field}.tokens.{key}", f"expected an integer >= 0, {_got(count)}")
    if "extra" in step:
        _extra(bad, f"{field}.extra", step["extra"])
    if isinstance(name, str) and name and name not in earlier:
        earlier[name] = options


def check_run(obj) -> list[tuple[str, str]]:
    """Every problem of one run's record, as (field, message) pairs; [] when it is valid."""
    out: list[tuple[str, str]] = []

    def bad(field: str, message: str) -> None:
        out.append((field, message))

    if not isinstance(obj, dict):
        bad("", f"expected a run object (one per line), {_got(obj)}")
        return out
    for key in obj:
        if key not in RUN_FIELDS:
            bad(
                key,
                f"unknown run field; a run has {', '.join(RUN_FIELDS)} "
                "(keep other data under 'extra')",
            )
    fmt = obj.get("format", _MISSING)
    if fmt is _MISSING:
        bad("format", f"missing; expected {shown(FORMAT)}")
    elif fmt != FORMAT:
        match = re.fullmatch(r"blamejax-trace/(\d+)", fmt) if isinstance(fmt, str) else None
        if match and int(match.group(1)) > 1:
            bad(
                "format",
                f"{shown(fmt)} is a newer format than this blamejax reads ({shown(FORMAT)}); "
                "upgrade blamejax",
            )
        else:
            bad("format", f"expected {shown(FORMAT)}, {_got(fmt)}")
    run = obj.get("run", _MISSING)
    if run is _MISSING:
        bad("run", "missing; expected the run id, a non-empty string")
    elif not isinstance(run, str) or not run:
        bad("run", f"expected a non-empty string, {_got(run)}")

    if "score" not in obj and "passed" not in obj:
        bad("score", "a run needs 'score' (a number), 'passed' (a boolean) or both")
    if "score" in obj:
        score = obj["score"]
        if not _is_number(score) or not math.isfinite(score):
            bad("score", f"expected a finite number, {_got(score)}")
    if "passed" in obj and not isinstance(obj["passed"], bool):
        bad("passed", f"expected true or false, {_got(obj['passed'])}")

    steps = obj.get("steps", _MISSING)
    num_steps = None
    if steps is _MISSING:
        bad("steps", "missing; expected a non-empty list of steps")
    elif not isinstance(steps, list | tuple):
        bad("steps", f"expected a non-empty list of steps, {_got(steps)}")
    elif not steps:
        bad("steps", "empty run: expected at least one step")
    else:
        num_steps = len(steps)
        names = {s["name"] for s in steps if isinstance(s, dict) and isinstance(s.get("name"), str)}
        earlier: dict[str, list | None] = {}
        for i, step in enumerate(steps):
            _step(bad, f"steps[{i}]", step, names, earlier)

    if "labels" in obj:
        labels = obj["labels"]
        if not isinstance(labels, dict):
            bad("labels", f"expected an object, {_got(labels)}")
        else:
            for key in labels:
                if key not in LABEL_FIELDS:
                    bad(f"labels.{key}", f"unknown label; expected {' or '.join(LABEL_FIELDS)}")
            agent = labels.get("decisive_agent")
            if "decisive_agent" in labels and not isinstance(agent, str):
                bad("labels.decisive_agent", f"expected a string, {_got(agent)}")
            index = labels.get("decisive_step")
            if "decisive_step" in labels:
                if not _is_int(index) or index < 0:
                    bad("labels.decisive_step", f"expected an integer >= 0, {_got(index)}")
                elif num_steps is not None and index >= num_steps:
                    bad(
                        "labels.decisive_step",
                        f"{index} is past the last step (steps are indexed from 0 to "
                        f"{num_steps - 1})",
                    )
    if "extra" in obj:
        _extra(bad, "extra", obj["extra"])
    return out
