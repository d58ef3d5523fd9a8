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

The baselines are in `_baselines.py`, blamejax's own answer in `_method.py`, the table and
the command's report in `_report.py`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from .._rates import rate_interval

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


def step_rule_hits(label: int, step: int, substring: bool) -> list[bool]:
    """Whether `step` is right for `label` under each step rule, in `score_names` order."""
    hits = [step == label] + [abs(step - label) <= k for k in WINDOWS]
    if substring:
        hits.append(str(label) in str(step))
    return hits


def score_names(substring: bool) -> list[str]:
    """The names of the step scores: exact, each window of `WINDOWS`, and the substring rule."""
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
    predictions = {"r0": bj.benchmarks.whowhen.Prediction("B", 1), "r1": bj.benchmarks.whowhen.Prediction("A", 0)}
    result = bj.benchmarks.whowhen.evaluate(runs, predictions)
    assert result.score("agent").correct == 1 and result.missing_agent == ("r2", "r3")
    ```
    """
    check_labels(runs)
    substring = bool(substring)
    agent_hits, step_hits = 0, np.zeros(len(score_names(substring)), np.int64)
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
            step_hits += np.asarray(step_rule_hits(run.decisive_step, guess.step, substring))
    total = len(runs)
    counts = [("agent", agent_hits)] + list(zip(score_names(substring), step_hits.tolist()))
    scores = tuple(
        Score(name, float(c), total, *rate_interval(int(c), total)) for name, c in counts
    )
    return Evaluation(method, total, scores, tuple(missing_agent), tuple(missing_step))


def constant_predictions(runs: Sequence, step: int, agent: str | None = None) -> dict:
    """`{run id: Prediction(agent, step)}`: the same answer for every run (a control)."""
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"`step` must be an int, got {step!r}")
    return {run.run: Prediction(agent, step) for run in runs}
