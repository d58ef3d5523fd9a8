"""The Who&When baselines, computed offline from the runs alone.

- **random**: an agent drawn uniformly from the distinct agents of the run, a step drawn
  uniformly from its steps; the exact expectation, averaged over runs;
- **first step** / **last step**: step 0 (or the last one) and the agent who took it;
- **most frequent agent**: the agent with the most steps in the run (ties: the one that
  appears first); it names no step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._evaluate import (
    Evaluation,
    Prediction,
    Score,
    check_labels,
    evaluate,
    score_names,
    step_rule_hits,
)


def random_baseline(runs: Sequence, *, substring: bool = False) -> Evaluation:
    """The exact expected scores of guessing uniformly: the agent among the run's distinct
    agents (`run.agents`), the step among its `len(run.steps)` steps; averaged over runs.

    On the shipped Who&When half (126 runs) this gives 29.10 % agent and 12.00 % step, the
    published random baseline."""
    check_labels(runs)
    substring = bool(substring)
    agent, steps = 0.0, np.zeros(len(score_names(substring)))
    for run in runs:
        agents = run.agents
        agent += (run.decisive_agent in agents) / len(agents) if agents else 0.0
        num = len(run.steps)
        hits = np.zeros(len(steps))
        for j in range(num):
            hits += np.asarray(step_rule_hits(run.decisive_step, j, substring), float)
        steps += hits / num
    total = len(runs)
    counts = [("agent", agent)] + list(zip(score_names(substring), steps.tolist()))
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
