"""Lazy tables: score a trace's logits only where the coalitions of fixes reach.

A decision step's table has one row per (variant, parent option): 2 x K_given rows. Blame
needs only the rows some coalition reaches in some world: the factual rows on the observed
path (the noise is abducted from them), then, replaying every coalition in the inferred
worlds with the rows known so far, each row a coalition reaches through known rows; those
are scored in one batch, and the replay repeats until no reached row is missing.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..noise import as_key
from ..pipeline import discover
from ..traces import Run, TraceCases, blame_runs, trace_cases
from ..worlds import inferred_worlds, replay
from ._request import check_request
from ._scorer import Scorer


class LazyFill(NamedTuple):
    """Tables filled where the coalitions reach.

    - `cases`: a `bj.traces.TraceCases` whose logits hold the scored rows; a row no
      coalition reaches in these worlds holds 0.0 and is marked false in `known`.
    - `known`: `{step: Bool[np.ndarray, "F V K_given"]}` (K_given = 1 without `given`).
    - `worlds`: the inferred worlds (keys `[F, W]`), from `key` and `num_worlds`.
    - `calls`: rows scored (requests sent to the scorer; its cache may answer some);
      `naive`: every row of every table (runs x steps x variants x parent options);
      `rounds`: the scoring batches.

    The unscored rows are unreached only in these worlds: blame with `fill.blame(...)`,
    which keeps `key` and `num_worlds`; other worlds need another fill.
    """

    cases: TraceCases
    known: dict
    worlds: object
    calls: int
    naive: int
    rounds: int
    key: object
    num_worlds: int

    def blame(self, *, estimator: str = "exact", max_evaluations: int | None = None, **options):
        """`bj.traces.blame_runs` on the filled tables, in the same worlds."""
        return blame_runs(
            self.cases, key=self.key, num_worlds=self.num_worlds, estimator=estimator,
            max_evaluations=max_evaluations, **options,
        )


def _placeholder(run: Run, players, fix: str) -> Run:
    """`run` with zero logits on every step to be scored (fix variant for the players)."""
    steps = {s.name: s for s in run.steps}
    out = []
    for step in run.steps:
        if step.options is None or step.choice is None or step.logits is not None:
            out.append(step)
            continue
        row = (0.0,) * len(step.options)
        table = row if step.given is None else (row,) * len(steps[step.given].options)
        variants = ("factual", fix) if step.name in players else ("factual",)
        out.append(dataclasses.replace(step, logits={v: table for v in variants}))
    return dataclasses.replace(run, steps=tuple(out))


def fill_lazily(
    runs,
    scorer: Scorer,
    request: Callable,
    *,
    key=0,
    num_worlds: int = 8,
    fix: str = "fix",
    players=None,
    score: Callable | None = None,
    max_rounds: int = 100,
    max_players: int = 12,
) -> LazyFill:
    """Score the logits tables of `runs` only where the coalitions reach.

    **Arguments:**
    - `runs`: `bj.traces.Run`s sharing their decision steps; the steps to score have
      `options` and a `choice` but no `logits` (steps with logits are used as they are).
    - `scorer`: a `bj.scorers.Scorer`.
    - `request`: `request(run, step, variant, parent) -> Request`, the question for one row:
      `variant` is `"factual"` or `fix`, `parent` the given step's option (or None). Its
      `options` must be the step's.
    - `key`, `num_worlds`: the inferred worlds (as in `bj.traces.blame_runs`).
    - `players`: the steps that get a fix variant (default: every step scored).
    - `score`: as in `bj.traces.trace_cases`; `max_rounds`: a bound on the batches;
      `max_players`: a bound on the players (all 2^n coalitions are replayed at once).

    **Returns:** a `LazyFill`; `fill.blame()` (exact) or `fill.blame(estimator="mc",
    max_evaluations=...)` blames it. Every coalition is replayed, so the fill serves any
    estimator in these worlds.

    ```python
    import numpy as np
    import blamejax as bj
    from blamejax.scorers import FunctionScorer, Request, fill_lazily
    plan = bj.traces.Step("plan", options=("search", "answer"), accept=("search",), choice="answer")
    reply = bj.traces.Step("reply", parents=("plan",), given="plan", options=("cite", "guess"),
                           accept=("cite",), choice="guess")
    runs = [bj.traces.Run("r0", (plan, reply), passed=False)]
    def request(run, step, variant, parent):
        return Request(step.name, variant, {"after": parent}, step.options)
    def logits(r):
        good = r.variant == "fix" or r.inputs["after"] == "search"
        return np.array([0.0, -1.0] if good else [-1.0, 0.0])
    fill = fill_lazily(runs, FunctionScorer(logits), request, num_worlds=4)
    assert fill.calls <= fill.naive == 6
    out = fill.blame()
    ```
    """
    if not isinstance(scorer, Scorer):
        raise TypeError(f"`scorer` must be a bj.scorers.Scorer, got {scorer!r}")
    if not callable(request):
        raise TypeError(f"`request` must be a function (run, step, variant, parent) -> Request, got {request!r}")
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise ValueError(f"`max_rounds` must be an integer >= 1, got {max_rounds!r}")
    runs = list(runs) if isinstance(runs, (list, tuple)) else runs
    if not isinstance(runs, list) or not runs or not all(isinstance(r, Run) for r in runs):
        got = f"an empty {type(runs).__name__}" if isinstance(runs, list) and not runs else f"{runs!r:.80}"
        raise TypeError(f"`runs` must be a non-empty list of bj.traces.Run, got {got}")
    if isinstance(max_players, bool) or not isinstance(max_players, int) or max_players < 1:
        raise ValueError(f"`max_players` must be an integer >= 1, got {max_players!r}")
    if isinstance(players, str):
        raise TypeError(f"`players` must be a list of step names or None, got the string {players!r}; write [{players!r}]")
    scored = [s.name for s in runs[0].steps if s.options is not None and s.choice is not None and s.logits is None]
    if not scored:
        raise ValueError(f"run {runs[0].run!r} has no decision step without logits: nothing to score")
    players = set(scored if players is None else players)
    unknown = players - set(scored)
    if unknown:
        raise ValueError(f"`players` {sorted(unknown)} are not decision steps to score (options and a choice, no logits)")
    tc = trace_cases([_placeholder(r, players, fix) for r in runs], fix=fix, score=score)
    players_in_order = [name for name in tc.steps if name in tc.players]
    if len(players_in_order) > max_players:
        raise ValueError(
            f"lazy filling replays all 2^n coalitions, and n = {len(players_in_order)} players is more "
            f"than `max_players`={max_players}; pass fewer `players` or raise `max_players`"
        )
    logits = {name: np.array(table, np.float64) for name, table in tc.cases["logits"].items()}
    known = {}
    for name in tc.steps:
        table = logits[name]  # [F, V, K] or [F, V, K_given, K]
        given = table.ndim == 4
        known[name] = np.full(table.shape[:2] + (table.shape[2] if given else 1,), name not in scored)
    fixed = {name: tc.pipeline.given[i] for i, name in enumerate(tc.steps)}
    by_run = {r.run: r for r in runs}
    steps_of = {r.run: {s.name: s for s in r.steps} for r in runs}
    naive = sum(int(k.size) for name, k in known.items() if name in scored)

    def score_rows(rows):
        requests = []
        for f, name, v, g in rows:
            run = by_run[tc.runs[f]]
            step = steps_of[run.run][name]
            parent = None if fixed[name] is None else tc.options[fixed[name]][g]
            made = check_request(request(run, step, "factual" if v == 0 else fix, parent), where="request(...)")
            if made.options != tuple(step.options):
                raise ValueError(
                    f"`request` returned options {list(made.options)} for step {name!r}, expected its options {list(step.options)}"
                )
            requests.append(made)
        for (f, name, v, g), row in zip(rows, scorer.score(requests)):
            target = logits[name][f, v] if fixed[name] is None else logits[name][f, v, g]
            target[...] = row
            known[name][f, v, g] = True

    def cases():
        out = dict(tc.cases)
        out["logits"] = {name: table.copy() for name, table in logits.items()}
        return out

    # Round 1: the factual rows on the observed path, from which the noise is abducted.
    first = []
    for f in range(len(tc.runs)):
        for name in tc.steps:
            g = 0 if fixed[name] is None else int(tc.observed[f, fixed[name]])
            if not known[name][f, 0, g]:
                first.append((f, name, 0, g))
    score_rows(first)
    calls, rounds = len(first), 1
    key = as_key(key)
    worlds = inferred_worlds(tc.pipeline, cases(), tc.observed, key, num_worlds)
    # Every coalition in one replay: coalition c's copy of case f (row c F + f) holds the
    # variant the coalition gives each step in both variant slots, and runs factually.
    coalitions = list(itertools.product((0, 1), repeat=len(players_in_order)))
    size = len(tc.runs)
    tiled_worlds = jax.tree_util.tree_map(lambda x: jnp.concatenate([x] * len(coalitions), axis=0), worlds)
    structure = discover(tc.pipeline, jax.tree_util.tree_map(lambda x: x[0], cases()))
    order = [site.step for site in structure.sites]
    if sorted(order) != sorted(tc.steps):
        raise AssertionError(f"the trace pipeline's sites {order} are not its steps {tc.steps}")
    bit_of = {name: players_in_order.index(name) for name in players_in_order}

    def tiled_cases():
        tables = {}
        for name, table in logits.items():
            if name in bit_of:
                parts = [table[:, [bits[bit_of[name]]] * 2] for bits in coalitions]
            else:
                parts = [table] * len(coalitions)
            tables[name] = np.concatenate(parts, axis=0)
        out = jax.tree_util.tree_map(lambda x: np.concatenate([x] * len(coalitions), axis=0), dict(tc.cases))
        out["logits"] = tables
        return out

    while True:
        needed = set()
        out = replay(tc.pipeline, tiled_cases(), tiled_worlds)
        choices = np.asarray(out["choice"]).reshape((len(coalitions), size) + np.shape(out["choice"])[1:])
        for c, bits in enumerate(coalitions):
            choice = {name: choices[c, ..., j] for j, name in enumerate(order)}  # [F, W]
            valid = {}
            for name in tc.steps:  # run order: a given step comes before the steps it is given to
                parent = fixed[name]
                g = np.zeros_like(choice[name]) if parent is None else choice[tc.steps[parent]]
                reached = np.ones(g.shape, bool) if parent is None else valid[tc.steps[parent]]
                f_index = np.broadcast_to(np.arange(size)[:, None], g.shape)
                v = np.full(g.shape, bits[bit_of[name]] if name in bit_of else 0)
                have = known[name][f_index, v, g]
                for f, vv, gg in zip(*(a[reached & ~have] for a in (f_index, v, g))):
                    needed.add((int(f), name, int(vv), int(gg)))
                valid[name] = reached & have
        if not needed:
            break
        if rounds >= max_rounds:
            raise RuntimeError(f"lazy filling did not finish within `max_rounds`={max_rounds} batches")
        rows = sorted(needed, key=lambda r: (r[0], tc.steps.index(r[1]), r[2], r[3]))
        score_rows(rows)
        calls, rounds = calls + len(rows), rounds + 1
    filled = tc._replace(cases=cases())
    return LazyFill(filled, known, worlds, calls, naive, rounds, key, num_worlds)
