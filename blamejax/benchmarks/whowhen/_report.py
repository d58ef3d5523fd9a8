"""The Who&When evaluation as a table: one row per method beside the baselines, and the
report of `python -m blamejax whowhen`."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ...traces.importers import load_runs
from ._baselines import baselines
from ._evaluate import Evaluation, Score, check_labels, evaluate, load_predictions
from ._method import blame_predictions


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
