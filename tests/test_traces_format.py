"""The trace format (`bj.traces`): round trips, the validator and the JSON Schema.

Fixtures (tests/data/traces/): `valid.jsonl` (every line valid), `invalid.jsonl` (one problem
kind per line, the last line with many), `folder/` (a good file and a file with good and bad
lines, plus a non-trace file that is not read).
"""

import json
import math
import random
import re
from pathlib import Path

import pytest

import blamejax as bj

T = bj.traces
DATA = Path(__file__).parent / "data" / "traces"
VALID = DATA / "valid.jsonl"
INVALID = DATA / "invalid.jsonl"

# line of invalid.jsonl -> (every expected problem as (field, regex of the message),
#                           whether the JSON Schema rejects the line too)
EXPECTED = {
    1: ([("", r"not valid JSON: .* at column 61")], True),
    2: ([("steps", r"missing; expected a non-empty list")], True),
    3: ([("steps[1].parents[0]", r'unknown parent "z"')], False),
    4: ([("steps[0].logits.factual", r"expected 3 logits \(one per option\), got 2")], False),
    5: ([("steps[0].choice", r'"w" is not one of the options \["x", "y"\]')], False),
    6: ([("steps[0].logits.factual[0]", r'expected a finite number or "-inf", got NaN')], True),
    7: ([("steps[0].logits.factual[0]", r'got a string "inf"')], True),
    8: ([("steps[0].logits.factual", r"every logit is -inf")], True),
    9: ([("steps[1].name", r'duplicate step name "a"')], False),
    11: ([("run", r"duplicate run id 'twice' \(first at .*invalid.jsonl:10\)")], False),
    12: ([("steps", r"empty run")], True),
    13: ([("format", r'"blamejax-trace/2" is a newer format .* upgrade blamejax')], True),
    14: ([("run", r"expected a non-empty string, got an integer 5"),
          ("passed", r'expected true or false, got a string "no"')], True),
    15: ([("score", r"a run needs 'score' \(a number\), 'passed' \(a boolean\) or both")], True),
    16: ([("steps[0].logits", r"only a decision step \(one with 'options'\)")], True),
    17: ([("steps[1].given", r"must be one of this step's parents")], False),
    18: ([("labels.decisive_step", r"1 is past the last step")], False),
    19: ([("pased", r"unknown run field"), ("score", r"a run needs")], True),
    20: ([("steps[0].tokens.input", r"expected an integer >= 0, got an integer -1")], True),
    21: ([("steps[1].logits.factual", r"expected 2 rows .*, got 1")], False),
    22: ([("steps[0].logits.factual[0]", r'got -Infinity \(write -inf as the string "-inf"\)')],
         True),
    23: ([("steps[0].logits", r'"factual" must come first')], False),
    24: ([("steps[0].options[1]", r'duplicate "x"')], True),
    25: ([("steps[0].parents[0]", r'"b" is not an earlier step')], False),
    26: ([("score", r"expected a finite number"),
          ("steps[0].agent", r"expected a string or null, got an integer 3"),
          ("steps[0].logits.factual", r"expected 1 logits"),
          ("steps[0].choice", r'"y" is not one of the options'),
          ("steps[0].output", r"expected a string, got an integer 7"),
          ("steps[1].name", r'duplicate step name "a"')], True),
}  # fmt: skip


def _by_line(problems):
    out = {}
    for p in problems:
        out.setdefault(p.line, []).append(p)
    return out


def test_valid_fixture_has_no_problem():
    assert T.validate(VALID) == []
    runs = T.read(VALID)
    assert [r.run for r in runs] == [
        "plan-then-act",
        "impossible-option",
        "free-text",
        "no-agent",
    ]
    first = runs[0]
    assert first.agents == ("Planner", "Worker")
    assert [s.name for s in first.decisions] == ["plan", "act"]
    assert first.steps[1].logits["fix"] == ((0.0, -3.0), (0.0, -3.0))
    assert first.steps[0].tokens == {"input": 120, "output": 35}
    assert (first.decisive_agent, first.decisive_step, first.passed) == ("Planner", 0, False)
    assert runs[1].steps[0].logits["factual"] == (0.0, -math.inf, -0.5)
    assert runs[2].steps[0].output == "Grüße — 日本語 ✓"
    assert runs[2].score == 0.25 and runs[2].passed is None
    assert runs[2].decisions == ()


def test_every_problem_of_every_line_is_reported():
    """Each line's problems, all of them, with the file, the line and the field."""
    problems = T.validate(INVALID)
    assert all(p.file == str(INVALID) for p in problems)
    got = _by_line(problems)
    assert sorted(got) == sorted(EXPECTED)
    for line, (expected, _) in EXPECTED.items():
        assert [p.field for p in got[line]] == [field for field, _ in expected], line
        for p, (_, pattern) in zip(got[line], expected):
            assert re.search(pattern, p.message), (line, p.message)


def test_read_raises_with_every_problem_and_collect_keeps_the_good():
    with pytest.raises(T.TraceError, match=r"32 problems in trace data \(25 items could not") as e:
        T.read(INVALID)
    assert len(e.value.problems) == 32
    assert f"{INVALID}:5: steps[0].choice:" in str(e.value)
    loaded = T.read(INVALID, errors="collect")
    assert isinstance(loaded, T.Loaded)
    assert [r.run for r in loaded.runs] == ["twice"]  # line 10; line 11 repeats its id
    assert loaded.skipped == 25 and loaded.problems == e.value.problems
    assert T.read_report(INVALID) == loaded


def test_a_folder_with_one_bad_file_loads_the_rest():
    folder = DATA / "folder"
    with pytest.raises(T.TraceError, match="mixed.jsonl:3: not valid JSON"):
        T.read(folder)
    loaded = T.read_report(folder)
    assert [r.run for r in loaded.runs] == ["good-1", "good-2", "mixed-ok"]
    assert loaded.skipped == 3
    assert [(Path(p.file).name, p.line, p.field) for p in loaded.problems] == [
        ("mixed.jsonl", 2, "run"),
        ("mixed.jsonl", 3, ""),
        ("mixed.jsonl", 4, "steps[0].choice"),
    ]
    assert "first at" in loaded.problems[0].message and "good.jsonl:1" in loaded.problems[0].message
    assert T.validate(folder) == loaded.problems


def _random_run(rng: random.Random, index: int) -> T.Run:
    """A random valid run: decision and free-text steps, -inf logits, given tables, fixes,
    tokens, unicode text and nested extras."""
    steps = []
    for i in range(rng.randint(1, 5)):
        name = rng.choice(["s", "étape ", "步骤 "]) + str(i)
        earlier = [s for s in steps]
        parents = tuple(s.name for s in earlier if rng.random() < 0.5)
        kwargs = dict(
            agent=rng.choice([None, "Planner", "WebSurfer", "Ärztin"]),
            parents=parents,
            output=rng.choice([None, "", 'text ✓\nwith a newline and "quotes"']),
            extra=rng.choice([{}, {"role": "user", "n": [1, 2.5, None, True], "d": {"k": "v"}}]),
        )
        if rng.random() < 0.7:
            k = rng.randint(1, 4)
            options = tuple(f"o{j}" for j in range(k))
            given = [s for s in earlier if s.options is not None and s.name in parents]

            def row():
                values = [rng.choice([-math.inf, rng.uniform(-5, 5)]) for _ in range(k)]
                values[rng.randrange(k)] = rng.uniform(-5, 5)  # never all -inf
                return tuple(values)

            parent = rng.choice(given) if given and rng.random() < 0.5 else None
            variants = ["factual"] + rng.sample(["fix", "fix2"], rng.randint(0, 2))
            if parent is None:
                logits = {v: row() for v in variants}
            else:
                logits = {v: tuple(row() for _ in parent.options) for v in variants}
            kwargs.update(
                options=options,
                given=None if parent is None else parent.name,
                logits=logits if rng.random() < 0.8 else None,
                accept=tuple(rng.sample(options, rng.randint(0, k))),
                choice=rng.choice(options),
                tokens=rng.choice([None, {"input": rng.randint(0, 999), "output": 3}]),
            )
        steps.append(T.Step(name, **kwargs))
    passed = rng.choice([None, True, False])
    return T.Run(
        run=f"run-{index} ✓",
        steps=tuple(steps),
        score=rng.uniform(-1, 1) if passed is None or rng.random() < 0.5 else None,
        passed=passed,
        decisive_agent=rng.choice([None, "Planner"]),
        decisive_step=rng.choice([None, 0]),
        extra=rng.choice([{}, {"question": "¿Cuántos? 日本", "level": "2", "ids": [1, 2]}]),
    )


@pytest.mark.parametrize("seed", range(5))
def test_write_then_read_gives_equal_runs(tmp_path, seed):
    rng = random.Random(seed)
    runs = [_random_run(rng, i) for i in range(20)]
    path = tmp_path / "runs.jsonl"
    T.write(path, runs)
    assert T.validate(path) == []
    assert T.read(path) == runs
    for run in runs:
        assert T.from_record(json.loads(json.dumps(T.to_record(run)))) == run
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") == len(runs) and "Infinity" not in text and "NaN" not in text
    T.write(path, T.read(path))
    assert path.read_text(encoding="utf-8") == text  # a second round trip is byte for byte


def test_the_fixtures_round_trip(tmp_path):
    runs = T.read(VALID)
    T.write(tmp_path / "again.jsonl", runs)
    assert T.read(tmp_path / "again.jsonl") == runs
    for line in VALID.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        for step in record["steps"]:
            if step.get("agent", "") is None:
                del step["agent"]  # an explicit null agent is written by leaving it out
        assert T.to_record(T.from_record(json.loads(line))) == record


def test_line_separators_inside_strings_do_not_split_a_line(tmp_path):
    """JSON strings may hold U+2028, U+2029 and U+0085 unescaped (and `write` writes them so);
    only "\\n" ends a line. A byte-order mark and CRLF line ends are read too."""
    text = "a\u2028b\u2029c\x85d\x1ce\r\nf"
    run = T.Run("sep", (T.Step("s\u2028", output=text, extra={"k\x85": text}),), passed=False)
    path = tmp_path / "runs.jsonl"
    T.write(path, [run])
    assert "\u2028" in path.read_text(encoding="utf-8")  # written as it is
    assert T.read(path) == [run]
    record = json.dumps(T.to_record(run), ensure_ascii=False)
    path.write_bytes(
        ("\ufeff" + record + "\r\n" + record.replace('"sep"', '"sep2"') + "\r\n").encode()
    )
    assert [r.run for r in T.read(path)] == ["sep", "sep2"]


def test_write_checks_every_run_and_writes_nothing_on_a_problem(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text("old\n")
    good = T.Run("a", (T.Step("s"),), passed=False)
    bad = T.Run("b", (T.Step("s", options=("x",), choice="y"), T.Step("s")), score=math.nan)
    with pytest.raises(T.TraceError) as e:
        T.write(path, [good, bad, good])
    assert [(p.line, p.field) for p in e.value.problems] == [
        (2, "score"),
        (2, "steps[0].choice"),
        (2, "steps[1].name"),
        (3, "run"),
    ]
    assert path.read_text() == "old\n"
    with pytest.raises(TypeError, match=r"runs\[1\] must be a bj.traces.Run, got dict"):
        T.write(path, [good, T.to_record(good)])
    with pytest.raises(T.TraceError, match=r"extra.x: NaN is not strict JSON"):
        T.write(path, [T.Run("a", (T.Step("s"),), passed=False, extra={"x": math.nan})])


def test_from_record_and_bad_arguments():
    with pytest.raises(T.TraceError, match=r"<record>: steps: empty run"):
        T.from_record({"format": T.FORMAT, "run": "r", "steps": [], "passed": False})
    with pytest.raises(T.TraceError, match=r"<record>: expected a run object .* got a list"):
        T.from_record([])
    with pytest.raises(ValueError, match=r"errors must be 'raise' or 'collect', got 'ignore'"):
        T.read(VALID, errors="ignore")
    with pytest.raises(FileNotFoundError, match=r"no such trace file or folder"):
        T.read(DATA / "missing.jsonl")
    with pytest.raises(FileNotFoundError, match=r"a folder with no .jsonl trace files"):
        T.read(DATA / "whowhen")
    with pytest.raises(TypeError, match=r"path_or_lines must be a path or an iterable"):
        T.validate(3)
    with pytest.raises(TypeError, match=r"path_or_lines\[0\] must be a str, got bytes"):
        T.validate([b"{}"])
    assert T.validate(["", "   "]) == []  # blank lines hold no run
    with pytest.raises(T.TraceError) as e:  # every problem kept; the message quotes 50
        T.from_record({"format": T.FORMAT, "run": "r", "steps": [{"name": 1}] * 60, "score": 0})
    assert len(e.value.problems) == 60 and len(str(e.value).splitlines()) == 1 + 50 + 1
    assert str(e.value).endswith("... and 10 more (all of them in .problems)")


def test_the_schema_ships_in_the_package():
    schema = json.loads(T.SCHEMA_PATH.read_text(encoding="utf-8"))
    assert T.SCHEMA_PATH.parent == Path(T.__file__).parent
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["format"] == {"const": T.FORMAT}


def _schema_accepts(validator, text: str) -> bool:
    def strict(token):
        raise ValueError(token)

    try:
        obj = json.loads(text, parse_constant=strict)
    except ValueError:
        return False  # not strict JSON: no schema can accept it
    return validator.is_valid(obj)


def test_the_schema_and_the_validator_agree_on_every_fixture():
    """Every valid line passes both; a line the schema rejects the validator rejects; the
    lines only the validator rejects are exactly those whose problems compare two fields
    (listed in the schema's description)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(T.SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    files = [VALID, *sorted((DATA / "folder").glob("*.jsonl")), INVALID]
    checked = 0
    for path in files:
        lines = path.read_text(encoding="utf-8").splitlines()
        problems = _by_line(T.validate(path))
        for number, text in enumerate(lines, start=1):
            valid = number not in problems
            schema_ok = _schema_accepts(validator, text)
            if path == INVALID:
                expected_schema_ok = number not in EXPECTED or not EXPECTED[number][1]
                assert schema_ok == expected_schema_ok, (path.name, number)
            elif valid:
                assert schema_ok, (path.name, number)
            assert schema_ok or not valid, (path.name, number)
            checked += 1
    assert checked == 4 + 2 + 4 + 26
