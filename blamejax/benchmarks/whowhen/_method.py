"""blamejax as a method of the Who&When evaluation: who and when, read from exact blame of
each run under inferred noise."""

from __future__ import annotations

from ...traces.blame import blame_runs, group_runs, readout
from ._evaluate import Prediction


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
