"""Who&When failure logs to runs: one `.json` file is one run, one `history` message one step.

Two dialects are read. In the algorithm-generated half each message has `name` (the agent)
and `role` ("user"/"assistant"), and the outcome is `is_correct`. In the hand-crafted half
there is no `name`: the agent stands in `role`, sometimes with a note in brackets, as in
"Orchestrator (-> WebSurfer)" (agent "Orchestrator", speaking to "WebSurfer") or
"Orchestrator (thought)", and the outcome is spelt `is_corrected`. Every Who&When run is a
failure by construction, so a file with neither flag is a failure. The mapping, field by
field, is in docs/traces.md.
"""

import json
import os
import re
from pathlib import Path

from ..format._check import check_run, shown
from ..format._format import ERRORS, Problem, Run, Step, deliver, list_files, to_record

#: The file fields that become run fields; every other field is kept in the run's `extra`.
MAPPED = ("history", "mistake_agent", "mistake_step", "is_correct", "is_corrected")
#: The outcome flag of each dialect: algorithm-generated, hand-crafted.
OUTCOME_FIELDS = ("is_correct", "is_corrected")
_ROLE = re.compile(r"^(?P<agent>[^()]*?)\s*\((?P<note>[^()]*)\)\s*$")


def _natural(path: Path):
    """Sort key: "2.json" before "10.json"."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def _files(path) -> list[tuple[Path, str]]:
    """`(file, run id prefix)` of every Who&When file under `path`: a file, a folder of them,
    or a folder of such folders (the benchmark's `Who&When/` with both halves), whose runs
    are named "<folder>/<stem>" ("Hand-Crafted/17")."""
    if isinstance(path, str | os.PathLike) and Path(path).is_dir():
        folder = Path(path)
        if not any(p.suffix == ".json" and p.is_file() for p in folder.iterdir()):
            halves = sorted(
                (d for d in folder.iterdir() if d.is_dir() and any(d.glob("*.json"))), key=_natural
            )
            if halves:
                return [
                    (file, f"{half.name}/")
                    for half in halves
                    for file in list_files(half, (".json",), "Who&When", key=_natural)
                ]
    return [(file, "") for file in list_files(path, (".json",), "Who&When", key=_natural)]


def parse_role(role: str) -> tuple[str, dict]:
    """The agent named in a hand-crafted `role`, and what its brackets add.

    "Orchestrator (-> WebSurfer)" -> ("Orchestrator", {"to": "WebSurfer"});
    "Orchestrator (thought)" -> ("Orchestrator", {"note": "thought"}); "WebSurfer" ->
    ("WebSurfer", {}).
    """
    match = _ROLE.match(role)
    if not match or not match.group("agent"):
        return role.strip(), {}
    note = match.group("note").strip()
    if note.startswith("->"):
        return match.group("agent"), {"to": note[2:].strip()}
    return match.group("agent"), {"note": note}


def _step(bad, index: int, message, previous: str | None) -> Step | None:
    field = f"history[{index}]"
    if not isinstance(message, dict):
        bad(field, f"expected a message object, got {shown(message)}")
        return None
    extra = {k: v for k, v in message.items() if k not in ("content", "name")}
    name, role = message.get("name"), message.get("role")
    if name is not None and not isinstance(name, str):
        bad(f"{field}.name", f"expected the agent's name (a string), got {shown(name)}")
        return None
    if role is not None and not isinstance(role, str):
        bad(f"{field}.role", f"expected a string, got {shown(role)}")
        return None
    if name:
        agent = name
    elif role and role.strip():
        agent, note = parse_role(role)
        extra.update(note)
    else:
        bad(field, "no agent: expected a non-empty 'name', or a 'role' naming the agent")
        return None
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        extra["content"] = content  # kept as it is: not text
        content = None
    return Step(
        name=f"{index} {agent}",
        agent=agent,
        parents=() if previous is None else (previous,),
        output=content,
        extra=extra,
    )


def _mistake_step(bad, value, num_steps: int) -> int | None:
    expected = f"a string holding a 0-based index into history (0 to {num_steps - 1})"
    if isinstance(value, str) and value.strip().isdigit():
        index = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        index = value
    else:
        bad("mistake_step", f"expected {expected}, got {shown(value)}")
        return None
    if not 0 <= index < num_steps:
        bad("mistake_step", f"expected {expected}, got {shown(value)}, past the history")
        return None
    return index


def run_from_whowhen(data, run_id: str, *, passed: bool | None = None, file: str = "<record>"):
    """One Who&When record (the parsed JSON of one file) as a `Run`, and its problems.

    **Returns:** `(run, problems)`: `run` is None when there is any problem.
    """
    problems: list[Problem] = []

    def bad(field, message):
        problems.append(Problem(file, None, field, message))

    if not isinstance(data, dict):
        bad("", f"expected a Who&When object with a 'history', got {shown(data)}")
        return None, problems
    history = data.get("history")
    if not isinstance(history, list) or not history:
        bad("history", f"expected a non-empty list of messages, got {shown(history)}")
        return None, problems
    steps, previous = [], None
    for index, message in enumerate(history):
        step = _step(bad, index, message, previous)
        if step is not None:
            steps.append(step)
            previous = step.name
    decisive_step = None
    if "mistake_step" in data and data["mistake_step"] is not None:
        decisive_step = _mistake_step(bad, data["mistake_step"], len(history))
    agent = data.get("mistake_agent")
    if agent is not None and not isinstance(agent, str):
        bad("mistake_agent", f"expected the agent to blame (a string), got {shown(agent)}")
    flags = {k: data[k] for k in OUTCOME_FIELDS if k in data}
    for key, value in flags.items():
        if not isinstance(value, bool):
            bad(key, f"expected true or false, got {shown(value)}")
    if len(set(map(repr, flags.values()))) > 1:
        bad("is_corrected", f"disagrees with is_correct: {shown(flags)}")
    outcome = next(iter(flags.values()), False if passed is None else passed)
    if problems:
        return None, problems
    run = Run(
        run=run_id,
        steps=tuple(steps),
        passed=outcome,
        decisive_agent=agent,
        decisive_step=decisive_step,
        extra={k: v for k, v in data.items() if k not in MAPPED},
    )
    for field, message in check_run(to_record(run)):  # what the format itself refuses
        bad(field, message)
    return (None if problems else run), problems


def from_whowhen(path, *, errors: str = "raise", passed: bool | None = None, prefix: str = ""):
    """Runs from Who&When failure logs: a `.json` file, or every `.json` file of a folder.

    Each file is one run named `prefix` + the file's stem ("17.json" -> "17"); each
    message of its `history` is one free-text step named "<index> <agent>" ("0 Orchestrator"),
    whose parent is the message before it. `mistake_step` (a string holding a 0-based index
    into `history`) becomes `decisive_step`, `mistake_agent` `decisive_agent`, `is_correct`
    (in the hand-crafted half `is_corrected`) `passed`; the other fields (question,
    ground_truth, mistake_reason, system_prompt, level, question_ID, ...) are kept in the
    run's `extra`, and each message's `role` (and any other field) in its step's `extra`. Files are read in natural order ("2.json" before "10.json").

    A folder that holds no `.json` file but folders of them (the benchmark's `Who&When/`,
    with `Algorithm-Generated/` and `Hand-Crafted/`) is read folder by folder, each run named
    "<folder>/<stem>" ("Hand-Crafted/17").

    **Arguments:** `errors`: "raise" or "collect" (as in `read`); `passed`: the outcome of
    files with neither `is_correct` nor `is_corrected` (default False: every Who&When run is
    a failure); `prefix`: put before each run id (say, "hand-" and "algo-" to
    load both halves into one list).

    **Returns:** `list[Run]`, or with errors="collect" `Loaded(runs, problems, skipped)`,
    `skipped` counting files.

    **Raises:** `TraceError` listing every problem of every file, each named by its file and
    field (`history[3].name`, `mistake_step`).

    ```python
    import json
    import blamejax as bj

    record = {"is_correct": False, "mistake_agent": "WebSurfer", "mistake_step": "1",
              "history": [{"role": "Orchestrator (-> WebSurfer)", "content": "Find it."},
                          {"role": "WebSurfer", "content": "Found nothing."}]}
    with open("7.json", "w") as f:
        json.dump(record, f)
    [run] = bj.traces.from_whowhen("7.json")
    assert [s.name for s in run.steps] == ["0 Orchestrator", "1 WebSurfer"]
    assert run.steps[0].extra == {"role": "Orchestrator (-> WebSurfer)", "to": "WebSurfer"}
    assert (run.decisive_agent, run.decisive_step, run.passed) == ("WebSurfer", 1, False)
    ```
    """
    if errors not in ERRORS:
        raise ValueError(f"errors must be 'raise' or 'collect', got {errors!r}")
    if passed is not None and not isinstance(passed, bool):
        raise TypeError(f"passed must be True, False or None, got {passed!r}")
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {type(prefix).__name__}")
    runs, problems, skipped = [], [], 0
    for file, half in _files(path):
        try:
            data = json.loads(file.read_text(encoding="utf-8-sig"))
        except json.JSONDecodeError as e:
            problems.append(
                Problem(str(file), e.lineno, "", f"not valid JSON: {e.msg} at column {e.colno}")
            )
            skipped += 1
            continue
        except (OSError, UnicodeDecodeError) as e:
            problems.append(Problem(str(file), None, "", f"cannot be read as UTF-8 text: {e}"))
            skipped += 1
            continue
        run_id = prefix + half + file.stem  # file names are unique in a folder, so are the ids
        run, found = run_from_whowhen(data, run_id, passed=passed, file=str(file))
        problems += found
        if run is None:
            skipped += 1
        else:
            runs.append(run)
    return deliver(runs, problems, skipped, errors)
