"""Fixes scored for recorded decisions: a decision step whose factual logits came with the
run (from the LLM call's log-probabilities, or recorded in the user's code) gets its fix
variant from a scorer, so the run can be blamed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..traces import Run
from ._scorer import Scorer
from ._trace_rows import ask_row, check_row_request, check_scorer, check_step_names


def score_fixes(runs, scorer: Scorer, request: Callable, *, fix: str = "fix", steps=None) -> list:
    """Give every recorded decision its fix's logits, scored by `scorer` in one batch.

    **Arguments:**
    - `runs`: `bj.traces.Run`s. The steps filled are the decision steps with factual logits
      and no `fix` variant yet (all of them, or only those named in `steps`).
    - `scorer`: a `bj.scorers.Scorer` (a model asked with the fixed prompt, a better model, a
      function).
    - `request`: `request(run, step, variant, parent) -> Request`, as in `fill_lazily`:
      `variant` is `fix`; `parent` is each option of the step's `given` step in turn (one
      row of the table each), or `None` for a step without `given`. Its `options` must be
      the step's.
    - `fix`: the name of the variant written; `steps`: step names to fill, or `None`.

    **Returns:** the runs (a new list), each filled step's `logits` holding `fix` after
    `"factual"`; other steps and runs unchanged.

    **Raises:** `TypeError` for runs that are not `Run`s, a scorer that is not a `Scorer`;
    `ValueError` for no step to fill, a request with other options than its step's.

    ```python
    import numpy as np
    import blamejax as bj
    from blamejax.scorers import FunctionScorer, Request, score_fixes
    plan = bj.traces.Step("plan", options=("search", "answer"), accept=("search",),
                          logits={"factual": (-1.5, -0.25)}, choice="answer")
    runs = [bj.traces.Run("r0", (plan,), passed=False)]
    def request(run, step, variant, parent):
        return Request(step.name, variant, "the question", step.options)
    [run] = score_fixes(runs, FunctionScorer(lambda r: np.array([0.0, -3.0])), request)
    assert run.steps[0].logits == {"factual": (-1.5, -0.25), "fix": (0.0, -3.0)}
    assert float(bj.traces.blame_runs([run], num_worlds=4).result.shapley[0, 0]) > 0
    ```
    """
    scorer = check_scorer(scorer)
    request = check_row_request(request)
    if not isinstance(fix, str) or fix == "factual":
        raise ValueError(f"`fix` must be the name of a fix variant (not 'factual'), got {fix!r}")
    if (
        isinstance(runs, Run)
        or not isinstance(runs, list | tuple)
        or not all(isinstance(r, Run) for r in runs)
    ):
        raise TypeError(f"`runs` must be a list of bj.traces.Run, got {runs!r:.80}")
    steps = check_step_names(steps, "steps")
    wanted = None if steps is None else set(steps)
    rows, requests = [], []  # rows: (run index, step index, parent option index or None)
    for r, run in enumerate(runs):
        by_name = {s.name: s for s in run.steps}
        for s, step in enumerate(run.steps):
            if step.options is None or step.logits is None or fix in step.logits:
                continue
            if wanted is not None and step.name not in wanted:
                continue
            parents = [None] if step.given is None else list(by_name[step.given].options)
            for g, parent in enumerate(parents):
                where = f"step {step.name!r} of run {run.run!r}"
                requests.append(ask_row(request, run, step, fix, parent, where))
                rows.append((r, s, None if parent is None else g))
    if not requests:
        which = "" if wanted is None else f" among {sorted(wanted)}"
        raise ValueError(
            f"no decision step{which} has factual logits without a {fix!r} variant: nothing to score"
        )
    answers = scorer.score(requests)
    tables: dict = {}
    for (r, s, g), row in zip(rows, answers):
        values = tuple(float(x) for x in row)
        if g is None:
            tables[r, s] = values
        else:
            tables.setdefault((r, s), []).append(values)
    out = []
    for r, run in enumerate(runs):
        new = [
            dataclasses.replace(step, logits={**step.logits, fix: tuple(tables[r, s])})
            if (r, s) in tables
            else step
            for s, step in enumerate(run.steps)
        ]
        out.append(dataclasses.replace(run, steps=tuple(new)))
    return out
