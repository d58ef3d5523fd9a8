"""The Who&When evaluation: how often a method names the decisive agent and the decisive
step of failed runs with golden labels, with baselines computed offline beside it.

Scoring rules (stated once, used everywhere):

- **agent**: the predicted agent equals the label (exact string match);
- **step**: the predicted step index equals the label (exact integer match);
- **step ±k** (k = 1, 3, 5): `|predicted - label| <= k`;
- **substring** (only on request, labelled so): the original benchmark's rule, a step counts
  as right when the label's decimal text is a substring of the predicted text. A constant
  prediction such as 105 then matches every label 1, 0, 5, 10 and 105.

A run without a prediction counts as wrong, and how many there were is reported. Each rate
comes with a 95 % Wilson interval over the runs; the random baseline is an exact
expectation (no interval: it is not a sample).

Baselines (offline, from the runs alone):

- **random**: an agent drawn uniformly from the distinct agents of the run, a step drawn
  uniformly from its steps; the exact expectation, averaged over runs;
- **first step** / **last step**: step 0 (or the last one) and the agent who took it;
- **most frequent agent**: the agent with the most steps in the run (ties: the one that
  appears first); it names no step.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from ...stats import wilson_interval
from ..blame._blame import blame_runs, group_runs
from ..blame._readout import readout

WINDOWS = (1, 3, 5)


class Prediction(NamedTuple):
    """One method's answer for one run: the agent and the 0-based step (either may be None)."""

    agent: str | None
    step: int | None


class Score(NamedTuple):
    """One rate: `correct` of `total` runs (an expected count for the random baseline),
    with its 95 % Wilson interval `[low, high]` (`None` for an exact expectation)."""

    name: str
    correct: float
    total: int
    low: float | None
    high: float | None

    @property
    def rate(self) -> float:
        """The share of runs the method got right, `correct / total`."""
        return self.correct / self.total


class Evaluation(NamedTuple):
    """A method's scores on labelled runs.

    - `method`: its name; `num_runs`: the labelled runs scored.
    - `scores`: `agent`, `step`, `step ±1`, `step ±3`, `step ±5` (and `step (substring)` when
      asked for), each a `Score` over all `num_runs` runs.
    - `missing_agent`, `missing_step`: the runs the method gave no agent or no step for (they
      count as wrong).
    - `expectation`: the scores are exact expectations (random baseline), not counts.
    """

    method: str
    num_runs: int
    scores: tuple[Score, ...]
    missing_agent: tuple[str, ...]
    missing_step: tuple[str, ...]
    expectation: bool = False

    def score(self, name: str) -> Score:
        """The `Score` named `name`; a `KeyError` naming the scores there are otherwise."""
        for score in self.scores:
            if score.name == name:
                return score
        raise KeyError(f"no score {name!r}; have {[s.name for s in self.scores]}")


def _where(run) -> str:
    source = run.extra.get("file") if isinstance(run.extra, dict) else None
    return f"run {run.run!r}" + (f" ({source})" if source else "")


def check_labels(runs: Sequence) -> None:
    """Raise `ValueError` naming every run without a `decisive_agent` or `decisive_step`."""
    if not runs:
        raise ValueError("`runs` is empty: nothing to evaluate")
    problems = []
    for run in runs:
        for field in ("decisive_agent", "decisive_step"):
            if getattr(run, field) is None:
                problems.append(f"{_where(run)}: missing label `{field}`")
    if problems:
        raise ValueError("runs without golden labels:\n  " + "\n  ".join(problems))


def load_predictions(path, runs: Sequence) -> dict:
    """Read a predictions file: a JSON object `{run id: {"agent": str, "step": int}}`.

    Either key may be left out or null (no prediction of that kind). A run of `runs` the file
    does not name has no prediction (it is counted, not dropped).

    **Raises:** `FileNotFoundError` for a missing file; `ValueError` naming the file and the
    field for invalid JSON, a run id not among `runs`, a step that is not an integer or an
    agent that is not a string.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"predictions file {path!r} is a folder; expected a JSON file")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"predictions file {path!r}: no such file")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(f"predictions file {path!r}: not valid JSON ({error})") from None
    return check_predictions(data, runs, source=path)


def check_predictions(data, runs: Sequence, *, source: str = "predictions") -> dict:
    """Check a predictions mapping `{run id: {"agent": ..., "step": ...}}` against `runs` and
    return `{run id: Prediction}` (see `load_predictions`)."""
    if not isinstance(data, Mapping):
        raise ValueError(
            f'{source}: expected a JSON object {{run id: {{"agent", "step"}}}}, got {type(data).__name__}'
        )
    known = {run.run for run in runs}
    problems, out = [], {}
    for run_id, entry in data.items():
        where = f"{source}: [{run_id!r}]"
        if run_id not in known:
            problems.append(f"{where}: unknown run id (not among the {len(known)} runs)")
            continue
        if not isinstance(entry, Mapping):
            problems.append(
                f'{where}: expected an object {{"agent": ..., "step": ...}}, got {entry!r}'
            )
            continue
        extra = sorted(set(entry) - {"agent", "step"})
        if extra:
            problems.append(f'{where}: unknown fields {extra} (expected "agent" and "step")')
        agent, step = entry.get("agent"), entry.get("step")
        if agent is not None and not isinstance(agent, str):
            problems.append(f"{where}.agent: expected a string or null, got {agent!r}")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            problems.append(f"{where}.step: expected an integer step index or null, got {step!r}")
        out[run_id] = Prediction(agent=agent, step=step)
    if problems:
        raise ValueError("invalid predictions:\n  " + "\n  ".join(problems))
    return out


def _interval(correct: int, total: int) -> tuple[float, float]:
    low, high = wilson_interval(correct, total, delta=0.05)
    return float(low), float(high)


def _step_hits(label: int, step: int, substring: bool) -> list[bool]:
    hits = [step == label] + [abs(step - label) <= k for k in WINDOWS]
    if substring:
        hits.append(str(label) in str(step))
    return hits


def _names(substring: bool) -> list[str]:
    return ["step"] + [f"step ±{k}" for k in WINDOWS] + (["step (substring)"] if substring else [])


def evaluate(
    runs: Sequence, predictions: Mapping, *, method: str = "method", substring: bool = False
) -> Evaluation:
    """Score `predictions` (`{run id: Prediction}`, e.g. from `load_predictions`) on the
    labelled `runs` (see the module docstring for the rules).

    ```python
    import blamejax as bj
    from blamejax.traces import Run, Step
    runs = [Run(run=f"r{i}", steps=(Step("s0", agent="A"), Step("s1", agent="B")), passed=False,
                decisive_agent="B", decisive_step=1) for i in range(4)]
    predictions = {"r0": bj.traces.Prediction("B", 1), "r1": bj.traces.Prediction("A", 0)}
    result = bj.traces.evaluate(runs, predictions)
    assert result.score("agent").correct == 1 and result.missing_agent == ("r2", "r3")
    ```
    """
    check_labels(runs)
    substring = bool(substring)
    agent_hits, step_hits = 0, np.zeros(len(_names(substring)), np.int64)
    missing_agent, missing_step = [], []
    for run in runs:
        guess = predictions.get(run.run, Prediction(None, None))
        if not isinstance(guess, Prediction):
            raise TypeError(f"`predictions[{run.run!r}]` must be a Prediction, got {guess!r}")
        if guess.agent is None:
            missing_agent.append(run.run)
        else:
            agent_hits += guess.agent == run.decisive_agent
        if guess.step is None:
            missing_step.append(run.run)
        else:
            step_hits += np.asarray(_step_hits(run.decisive_step, guess.step, substring))
    total = len(runs)
    counts = [("agent", agent_hits)] + list(zip(_names(substring), step_hits.tolist()))
    scores = tuple(Score(name, float(c), total, *_interval(int(c), total)) for name, c in counts)
    return Evaluation(method, total, scores, tuple(missing_agent), tuple(missing_step))


def random_baseline(runs: Sequence, *, substring: bool = False) -> Evaluation:
    """The exact expected scores of guessing uniformly: the agent among the run's distinct
    agents (`run.agents`), the step among its `len(run.steps)` steps; averaged over runs.

    On the shipped Who&When half (126 runs) this gives 29.10 % agent and 12.00 % step, the
    published random baseline."""
    check_labels(runs)
    substring = bool(substring)
    agent, steps = 0.0, np.zeros(len(_names(substring)))
    for run in runs:
        agents = run.agents
        agent += (run.decisive_agent in agents) / len(agents) if agents else 0.0
        num = len(run.steps)
        hits = np.zeros(len(steps))
        for j in range(num):
            hits += np.asarray(_step_hits(run.decisive_step, j, substring), float)
        steps += hits / num
    total = len(runs)
    counts = [("agent", agent)] + list(zip(_names(substring), steps.tolist()))
    scores = tuple(Score(name, float(c), total, None, None) for name, c in counts)
    return Evaluation("random (expectation)", total, scores, (), (), expectation=True)


def _most_frequent(run) -> str | None:
    counts: dict = {}
    for step in run.steps:
        if step.agent is not None:
            counts[step.agent] = counts.get(step.agent, 0) + 1
    if not counts:
        return None
    return max(counts, key=lambda a: counts[a])  # dicts keep first appearance: ties go to it


def baseline_predictions(runs: Sequence) -> dict:
    """`{baseline name: {run id: Prediction}}` for the first-step, last-step and
    most-frequent-agent baselines (the random one is `random_baseline`)."""
    first = {run.run: Prediction(run.steps[0].agent, 0) for run in runs}
    last = {run.run: Prediction(run.steps[-1].agent, len(run.steps) - 1) for run in runs}
    frequent = {run.run: Prediction(_most_frequent(run), None) for run in runs}
    return {"first step": first, "last step": last, "most frequent agent": frequent}


def baselines(runs: Sequence, *, substring: bool = False) -> list[Evaluation]:
    """Every baseline's `Evaluation` on the labelled `runs`: random (exact expectation),
    first step, last step, most frequent agent."""
    out = [random_baseline(runs, substring=substring)]
    for name, guesses in baseline_predictions(runs).items():
        out.append(evaluate(runs, guesses, method=name, substring=substring))
    return out


def _cell(score: Score) -> str:
    if score.low is None:
        return f"{100 * score.rate:5.2f}"
    return f"{100 * score.rate:5.2f} [{100 * score.low:4.1f}, {100 * score.high:5.1f}]"


def evaluation_table(evaluations: Sequence[Evaluation], *, method_width: int = 22) -> str:
    """A plain-text table: one row per method, one column per score (rate and 95 % Wilson
    interval, in %), then how many runs each method left without an agent or a step ("—"
    in a column: the method names no such thing)."""
    if not evaluations:
        raise ValueError("`evaluations` is empty")
    names = [s.name for s in evaluations[0].scores]
    width = 21
    head = (
        f"{'method':<{method_width}}" + "".join(f"{n:<{width}}" for n in names) + "no agent / step"
    )
    lines = [head, "-" * len(head)]
    for ev in evaluations:
        cells = []
        for name in names:
            missing = ev.missing_agent if name == "agent" else ev.missing_step
            none = not ev.expectation and len(missing) == ev.num_runs  # predicts no such thing
            cells.append(f"{'—' if none else _cell(ev.score(name)):<{width}}")
        missing = "—" if ev.expectation else f"{len(ev.missing_agent)} / {len(ev.missing_step)}"
        lines.append(f"{ev.method[: method_width - 1]:<{method_width}}" + "".join(cells) + missing)
    total = evaluations[0].num_runs
    lines.append(
        f"{total} labelled runs; accuracy in % with its 95 % Wilson interval; the random row is an "
        "exact expectation (no interval). A run without a prediction counts as wrong."
    )
    if any(s.name == "step (substring)" for s in evaluations[0].scores):
        lines.append(
            "step (substring): the original benchmark's rule (the label's digits appear in the "
            "predicted text); it inflates step accuracy and is shown for comparison only."
        )
    return "\n".join(lines)


def constant_predictions(runs: Sequence, step: int, agent: str | None = None) -> dict:
    """`{run id: Prediction(agent, step)}`: the same answer for every run (a control)."""
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"`step` must be an int, got {step!r}")
    return {run.run: Prediction(agent, step) for run in runs}


def load_runs(path) -> list:
    """Runs from `path`: a `.jsonl` trace file or a folder of them (`bj.traces.read`), or a
    Who&When `.json` file or folder of them (`bj.traces.from_whowhen`)."""
    from ..format._format import read
    from ..importers._whowhen import from_whowhen
    from ..importers.spans._sniff import holds_spans

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path!r}: no such file or folder")
    if holds_spans(path):
        raise ValueError(
            f"{path} holds OpenTelemetry or OpenInference spans, not labelled runs (Who&When "
            f"logs or a blamejax trace): blame them with `python -m blamejax blame {path} "
            "--decisions DECISIONS.json --scorer MODEL`, or import them with "
            "bj.traces.from_otel / bj.traces.from_openinference"
        )
    if os.path.isdir(path):
        jsonl = any(name.endswith(".jsonl") for name in os.listdir(path))
    else:
        jsonl = path.endswith(".jsonl")
    return read(path) if jsonl else from_whowhen(path)


def whowhen_report(
    path, *, predictions=None, substring: bool = False, seed: int = 0, num_worlds: int = 8
) -> str:
    """The evaluation table of `python -m blamejax whowhen PATH`: the methods given (a
    predictions file, and blamejax itself on runs whose steps carry options and logits,
    seeded by `seed`) beside the offline baselines, on the labelled runs at `path`."""
    runs = load_runs(path)
    check_labels(runs)
    rows, notes = [], []
    if predictions is not None:
        guesses = load_predictions(predictions, runs)
        rows.append(
            evaluate(
                runs, guesses, method=os.path.basename(os.fspath(predictions)), substring=substring
            )
        )
    ours, left = blame_predictions(runs, key=seed, num_worlds=num_worlds)
    if ours:
        rows.append(evaluate(runs, ours, method=f"blamejax (seed {seed})", substring=substring))
    if left:
        notes.append(
            f"blamejax names no agent or step for {len(left)} of {len(runs)} runs: they have no decision "
            "step with options, logits and a choice (free-text steps await a scorer)."
        )
    rows += baselines(runs, substring=substring)
    header = f"Who&When evaluation of {len(runs)} runs from {os.fspath(path)}"
    return "\n".join([header, "", evaluation_table(rows), *notes])


def blame_predictions(
    runs, *, key=0, num_worlds: int = 8, fix: str = "fix", score=None
) -> tuple[dict, tuple[str, ...]]:
    """blamejax's answer to "who and when" for every run that has drawn steps: each group of
    stackable runs (`group_runs`) is blamed exactly under inferred noise (`blame_runs`), and
    each run's readout gives the agent with the largest summed Shapley value and the
    earliest step whose fix alone repairs the run (the step with the largest Shapley value
    where none does). Ties are broken toward the earliest step (the golden labels of
    Who&When name the earliest decisive step); `step` is an index into `run.steps`.

    **Returns:** `({run id: Prediction}, run ids with no drawn step, left without one)`.
    """
    runs = list(runs)
    predictions = {}
    for group in group_runs(runs, fix=fix):
        out = blame_runs(group, key=key, num_worlds=num_worlds, fix=fix, score=score)
        agents = out.cases.agent_map
        for f, run in enumerate(group):
            read = readout(out.result, agents, failure=f)
            if not read.when:  # it failed outside the steps blamed: no answer
                continue
            step = read.earliest_repair or read.when[0]
            agent = read.who[0] if read.who else None  # ties: the agent who acted first
            index = [s.name for s in run.steps].index(step)
            predictions[run.run] = Prediction(agent=agent, step=index)
    left = tuple(run.run for run in runs if run.run not in predictions)
    return predictions, left
