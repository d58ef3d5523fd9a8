"""Read-outs of a blame result in the terms of a multi-agent run: which agent is to blame
("who"), which step ("when"), the earliest step whose fix alone repairs the run (the
decisive step as Who&When defines it), and the full ranking.

They read a result only (`ExactResult`, `MCResult` or `BatchResult`); nothing is
recomputed. Ties are named, never broken silently: every step (or agent) within
`tolerance` of the top value is listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from ..._checks import check_threshold
from ...estimators import BatchResult, ExactResult, MCResult


class Readout(NamedTuple):
    """Who and when, for one failure of a blame result.

    - `steps`: the blamed steps (the result's players), in the result's order; `agents`: the
      agent of each (`None` where the mapping has none).
    - `per_step`: `Float[np.ndarray, "n"]`, the step's Shapley value ("when").
    - `per_agent`: `{agent: summed Shapley value of its steps}` ("who"), agents in order of
      their first step; steps without an agent are left out of it (they are in `per_step`).
    - `who`: the agents whose sum is within `tolerance` of the largest (all tied ones);
      empty when the failure's factual replay already scores the top of the score range
      (it failed outside the steps blamed: `repair_note` says so).
    - `when`: the steps whose value is within `tolerance` of the largest (all tied ones);
      empty in the same case.
    - `earliest_repair`: the earliest step (in the result's order) whose fix alone repairs
      the run, `None` if none does or the result cannot tell (see `repair_note`).
    - `repairs`: every step whose fix alone repairs the run, in order.
    - `repair_note`: how "repairs" was decided, or why it could not be.
    - `ranking`: `((step, value), ...)` from the most to the least blamed; `ranks`: the
      1-based rank of each entry, shared by entries within `tolerance` of the first entry
      of their group (competition ranking: 1, 1, 3).
    - `tolerance`: the tie tolerance used.
    """

    steps: tuple[str, ...]
    agents: tuple[str | None, ...]
    per_step: np.ndarray
    per_agent: dict
    who: tuple[str, ...]
    when: tuple[str, ...]
    earliest_repair: str | None
    repairs: tuple[str, ...]
    repair_note: str
    ranking: tuple[tuple[str, float], ...]
    ranks: tuple[int, ...]
    tolerance: float


def _tied_top(names, values, tolerance):
    if not len(values):
        return ()
    top = max(values)
    return tuple(name for name, value in zip(names, values) if value >= top - tolerance)


def _ranks(values, tolerance):
    ranks, head = [], None  # head: the value of the first entry of the current tie group
    for i, value in enumerate(values):
        if i and head - value <= tolerance:
            ranks.append(ranks[-1])
        else:
            ranks.append(i + 1)
            head = value
    return tuple(ranks)


def _result_rows(result, failure: int, threshold):
    """(shapley [n], repairs [n] bool or None, note) of one failure of any result type."""
    if isinstance(result, BatchResult):
        count = result.num_analysed
        values = np.asarray(result.shapley, np.float64)
    elif isinstance(result, ExactResult):
        count = result.num_failures
        values = np.asarray(result.shapley, np.float64)
    elif isinstance(result, MCResult):
        count = result.num_failures
        values = np.asarray(result.values, np.float64)
    else:
        raise TypeError(
            f"`result` must be an ExactResult, MCResult or BatchResult, got {type(result).__name__}"
        )
    if (
        isinstance(failure, bool)
        or not isinstance(failure, (int, np.integer))
        or not 0 <= failure < count
    ):
        raise ValueError(f"`failure` must be an int in [0, {count}), got {failure!r}")
    if threshold is not None and isinstance(result, BatchResult):
        raise ValueError(
            "`threshold` is fixed by blame_batch for a BatchResult (its `threshold` field, "
            f"{result.threshold}); leave it None, got {threshold!r}"
        )
    if threshold is not None and isinstance(result, MCResult):
        raise ValueError(
            "`threshold` decides repairs from fix-alone values, which an MCResult does not carry; "
            f"leave it None, got {threshold!r}"
        )
    if threshold is not None:
        threshold = check_threshold(threshold)
    row = values[failure]
    if isinstance(result, ExactResult):
        level = result.score_range[1] if threshold is None else float(threshold)
        alone = (
            np.asarray(result.empty, np.float64)[failure]
            + np.asarray(result.fix_alone, np.float64)[failure]
        )
        # The score with one fix, averaged over worlds, reaches the level (a float32 sum of
        # ones may round just below it: a relative 1e-6 is allowed).
        repairs = alone >= level - 1e-6 * max(1.0, abs(level))
        note = f"fix alone: mean score over worlds v({{i}}) >= {level:g}"
    elif isinstance(result, BatchResult):
        repairs = np.asarray(result.resolve, np.float64)[failure] >= 1.0
        note = f"fix alone reaches the threshold {result.threshold:g} in every world"
    else:
        repairs = None
        note = "an MCResult carries no fix-alone values; use exact_blame or blame_batch"
    return row, repairs, note


def _passes_factually(result, failure: int) -> str | None:
    """Why `failure` has no culprit, or None: its factual replay (v(empty), averaged over its
    worlds) already scores the top of the score range, so it did not fail at the steps
    blamed (a traced run that failed outside its declared decisions)."""
    if not isinstance(result, ExactResult | MCResult):
        return None
    empty = float(np.asarray(result.empty, np.float64)[failure])
    top = float(result.score_range[1])
    if empty < top - 1e-6 * max(1.0, abs(top)):
        return None
    return (
        f"not a failure at these steps: its factual replay scores {empty:g}, the top of the "
        "score range, so the failure lies outside them and no step is named"
    )


def readout(
    result,
    agents: Mapping[str, str | None] | None = None,
    *,
    failure: int = 0,
    tolerance: float = 1e-6,
    threshold: float | None = None,
) -> Readout:
    """Who, when, the earliest repairing step and the ranking of one failure of `result`.

    **Arguments:**
    - `result`: an `ExactResult`, `MCResult` or `BatchResult`.
    - `agents`: `{step: agent}` for the result's steps (a step left out, or mapped to
      `None`, has no agent); default none.
    - `failure`: which failure (row) of the result.
    - `tolerance`: values within it of the top are tied, and all of them are named.
    - `threshold`: for an `ExactResult`, the score a fix alone must reach on average over
      the worlds to count as a repair (default the top of its score range: for 0/1 scores,
      a repair in every world). A `BatchResult` uses its own threshold and counts a repair
      when the fix alone passes in every world.

    **Returns:** a `Readout`.

    **Raises:** `TypeError` for another kind of result or mapping; `ValueError` for a
    failure index out of range, a negative tolerance, or a mapping naming an unknown step.

    ```python
    import blamejax as bj
    cases = bj.demos.refund_cases(num_cases=1)
    result = bj.exact_blame(bj.demos.refund_pipeline, cases, bj.recorded_worlds(0, range(1)))
    out = bj.traces.readout(result, {"planner": "Planner", "retriever": "Search",
                                     "writer": "Writer", "reviewer": "Writer"})
    assert out.when == ("planner", "retriever")          # 5/12 each: a tie, both named
    assert out.who == ("Planner", "Search")
    assert out.earliest_repair == "planner"              # its fix alone repairs the run
    ```
    """
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, (int, float))
        or not 0 <= tolerance < np.inf
    ):
        raise ValueError(f"`tolerance` must be a finite number >= 0, got {tolerance!r}")
    steps = tuple(result.steps) if hasattr(result, "steps") else ()
    agents = {} if agents is None else agents
    if not isinstance(agents, Mapping):
        raise TypeError(f"`agents` must be a mapping {{step: agent}}, got {type(agents).__name__}")
    row, repairs, note = _result_rows(result, failure, threshold)
    unknown = sorted(set(agents) - set(steps))
    if unknown:
        raise ValueError(
            f"`agents` names steps {unknown} that are not among the result's steps {list(steps)}"
        )
    step_agents = tuple(agents.get(step) for step in steps)
    per_agent: dict = {}
    for agent, value in zip(step_agents, row):
        if agent is not None:
            per_agent[agent] = per_agent.get(agent, 0.0) + float(value)
    order = sorted(range(len(steps)), key=lambda i: (-row[i], i))  # stable: pipeline order in ties
    ranking = tuple((steps[i], float(row[i])) for i in order)
    repairing = () if repairs is None else tuple(s for s, r in zip(steps, repairs) if r)
    passes = _passes_factually(result, failure)
    if passes is not None:  # nothing failed at the steps blamed: no culprit, no repair
        repairing, note = (), passes
    return Readout(
        steps=steps,
        agents=step_agents,
        per_step=row,
        per_agent=per_agent,
        who=() if passes else _tied_top(list(per_agent), list(per_agent.values()), tolerance),
        when=() if passes else _tied_top(steps, list(row), tolerance),
        earliest_repair=repairing[0] if repairing else None,
        repairs=repairing,
        repair_note=note,
        ranking=ranking,
        ranks=_ranks([value for _, value in ranking], tolerance),
        tolerance=float(tolerance),
    )
