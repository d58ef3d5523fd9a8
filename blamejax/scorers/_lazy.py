"""Lazy tables: score a trace's logits only where the coalitions of fixes reach.

A decision step's table has one row per (variant, parent option): 2 x K_given rows. Blame
needs only the rows some coalition reaches in some world: the factual rows on the observed
path (the noise is abducted from them), then, following in every inferred world the options
each step can reach through the rows known so far (its factual row and, for a player, its fix
row, from every option its given step can reach), each row reached but not yet known; those
are scored in one batch, and the walk repeats until no reached row is missing. A run of n
players costs at most 2 x K_given rows per step, not 2^n replays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

from .._compile import compiled
from ..noise import as_key
from ..pipeline import discover, world_noise
from ..structured import site_logits, site_maps
from ..traces import Run, TraceCases, blame_runs, trace_cases
from ..worlds import inferred_worlds
from ._scorer import Scorer
from ._trace_rows import ask_row, check_row_request, check_scorer, check_step_names


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
            self.cases,
            key=self.key,
            num_worlds=self.num_worlds,
            estimator=estimator,
            max_evaluations=max_evaluations,
            **options,
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
    - `score`: as in `bj.traces.trace_cases`; `max_rounds`: a bound on the batches.

    The rows scored are those some coalition reaches in some world, found by following, in
    each world, the options every step can reach (its factual row and, for a player, its fix
    row, from each option its given step can reach): at most 2 x K_given rows per step and
    run, however many players there are (a step reads at most one given step, so this is
    exactly the set the coalitions reach).

    **Returns:** a `LazyFill`; `fill.blame()` (exact) or `fill.blame(estimator="mc",
    max_evaluations=...)` blames it. Every row a coalition reaches is scored, so the fill
    serves any estimator in these worlds.

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
    scorer = check_scorer(scorer)
    request = check_row_request(request)
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
        raise ValueError(f"`max_rounds` must be an integer >= 1, got {max_rounds!r}")
    runs = _check_runs(runs)
    scored, players = _steps_to_score(runs[0], check_step_names(players, "players"))
    tc = trace_cases([_placeholder(r, players, fix) for r in runs], fix=fix, score=score)
    tables = _Tables(tc, scored)
    ask = _row_asker(request, runs, tc, tables, fix)

    def score_rows(rows):
        tables.fill(rows, scorer.score([ask(row) for row in rows]))
        return len(rows)

    # Round 1: the factual rows on the observed path, from which the noise is abducted.
    calls, rounds = score_rows(_observed_rows(tc, tables)), 1
    key = as_key(key)
    worlds = inferred_worlds(tc.pipeline, tables.cases(), tc.observed, key, num_worlds)
    maps_in = _maps_in_worlds(tc, tables, worlds)
    while rows := _reached_unknown_rows(tc, tables, maps_in()):
        if rounds >= max_rounds:
            raise RuntimeError(
                f"lazy filling did not finish within `max_rounds`={max_rounds} batches"
            )
        calls, rounds = calls + score_rows(rows), rounds + 1
    filled = tc._replace(cases=tables.cases())
    return LazyFill(filled, tables.known, worlds, calls, tables.naive, rounds, key, num_worlds)


def _check_runs(runs) -> list[Run]:
    """`runs`, a non-empty list (or tuple) of `Run`s, as a list."""
    runs = list(runs) if isinstance(runs, (list, tuple)) else runs
    if not isinstance(runs, list) or not runs or not all(isinstance(r, Run) for r in runs):
        got = (
            f"an empty {type(runs).__name__}"
            if isinstance(runs, list) and not runs
            else f"{runs!r:.80}"
        )
        raise TypeError(f"`runs` must be a non-empty list of bj.traces.Run, got {got}")
    return runs


def _steps_to_score(run: Run, players) -> tuple[list[str], set[str]]:
    """The decision steps of `run` to score (options and a choice, no logits) and the players
    among them (every one for `players=None`)."""
    scored = [
        s.name
        for s in run.steps
        if s.options is not None and s.choice is not None and s.logits is None
    ]
    if not scored:
        raise ValueError(f"run {run.run!r} has no decision step without logits: nothing to score")
    players = set(scored if players is None else players)
    unknown = players - set(scored)
    if unknown:
        raise ValueError(
            f"`players` {sorted(unknown)} are not decision steps to score (options and a choice, no logits)"
        )
    return scored, players


class _Tables:
    """The logits tables being filled (float64, rows not yet scored hold 0.0) and which rows
    are known: `logits[step]` `[F, V, K]` or `[F, V, K_given, K]`, `known[step]`
    `[F, V, K_given]` (K_given = 1 without `given`); `given[step]`, the index of the step it
    reads, or None."""

    def __init__(self, tc: TraceCases, scored: list[str]):
        self.tc = tc
        self.logits = {
            name: np.array(table, np.float64) for name, table in tc.cases["logits"].items()
        }
        self.known = {}
        for name in tc.steps:
            table = self.logits[name]
            rows = table.shape[2] if table.ndim == 4 else 1
            self.known[name] = np.full(table.shape[:2] + (rows,), name not in scored)
        self.given = {name: tc.pipeline.given[i] for i, name in enumerate(tc.steps)}
        self.naive = sum(int(k.size) for name, k in self.known.items() if name in scored)

    def fill(self, rows, answers) -> None:
        """Write the scored `answers` into `rows` `(f, step, v, g)` and mark them known."""
        for (f, name, v, g), row in zip(rows, answers):
            table = self.logits[name]
            target = table[f, v] if self.given[name] is None else table[f, v, g]
            target[...] = row
            self.known[name][f, v, g] = True

    def cases(self) -> dict:
        """The trace cases with a copy of the tables as they are now."""
        out = dict(self.tc.cases)
        out["logits"] = {name: table.copy() for name, table in self.logits.items()}
        return out


def _row_asker(request, runs: list[Run], tc: TraceCases, tables: _Tables, fix: str):
    """A function of one row `(f, step, v, g)`: the checked `Request` for it."""
    steps_of = {r.run: (r, {s.name: s for s in r.steps}) for r in runs}

    def ask(row):
        f, name, v, g = row
        run, steps = steps_of[tc.runs[f]]
        given = tables.given[name]
        parent = None if given is None else tc.options[given][g]
        variant = "factual" if v == 0 else fix
        return ask_row(request, run, steps[name], variant, parent, f"step {name!r}")

    return ask


def _observed_rows(tc: TraceCases, tables: _Tables) -> list:
    """The factual rows `(f, step, 0, g)` on each run's observed path not yet known."""
    rows = []
    for f in range(len(tc.runs)):
        for name in tc.steps:
            given = tables.given[name]
            g = 0 if given is None else int(tc.observed[f, given])
            if not tables.known[name][f, 0, g]:
                rows.append((f, name, 0, g))
    return rows


def _maps_in_worlds(tc: TraceCases, tables: _Tables, worlds):
    """A function of no argument: under the rows known so far, what each step chooses in
    each world for every (variant, parent option) row, per step `[F, W, V, *K_given]`
    (unknown rows hold 0.0: their maps are not read)."""
    structure = discover(tc.pipeline, jax.tree_util.tree_map(lambda x: x[0], tables.cases()))
    site_of = {site.step: i for i, site in enumerate(structure.sites)}
    if sorted(site_of) != sorted(tc.steps):
        raise AssertionError(
            f"the trace pipeline's sites {list(site_of)} are not its steps {tc.steps}"
        )
    maps_of = _maps_function(tc.pipeline, structure)

    def maps():
        per_site = [np.asarray(m) for m in maps_of(tables.cases(), worlds)]
        return {name: per_site[site_of[name]] for name in tc.steps}

    return maps


def _reached_unknown_rows(tc: TraceCases, tables: _Tables, maps: dict) -> list:
    """The rows some coalition reaches in some world and that are not known yet, in order of
    run, step, variant and parent option.

    The options each step reaches in some coalition, per world: a trace pipeline's steps read
    at most one given step, so a step reaches what any reached option of its parent leads to
    under its factual row or, for a player, its fix row."""
    needed = set()
    for f in range(len(tc.runs)):
        reach = {}
        for i, name in enumerate(tc.steps):
            parent = tables.given[name]
            best = maps[name][f]  # [W, V] or [W, V, K_given]
            options = np.zeros((best.shape[0], len(tc.options[i])), bool)
            sources = [None] if parent is None else range(reach[tc.steps[parent]].shape[1])
            variants = (0, 1) if name in tc.players else (0,)
            for g in sources:
                worlds_here = (
                    np.ones(best.shape[0], bool) if g is None else reach[tc.steps[parent]][:, g]
                )
                if not worlds_here.any():
                    continue
                for v in variants:
                    gg = 0 if g is None else g
                    if not tables.known[name][f, v, gg]:
                        needed.add((f, name, v, gg))
                        continue
                    chosen = best[:, v] if g is None else best[:, v, g]
                    ok = worlds_here & (chosen >= 0)
                    options[np.flatnonzero(ok), chosen[ok]] = True
            reach[name] = options
    return sorted(needed, key=lambda r: (r[0], tc.steps.index(r[1]), r[2], r[3]))


@compiled("scorers.maps")
def _maps_function(pipeline, structure):
    """Compiled: `(cases [F], worlds [F, W]) -> per site [F, W, V, *K_given]`, each row's
    option in each world (`blamejax.structured.site_maps`; -1 for a row with no valid option)."""

    def one(case, world):
        logits = site_logits(pipeline, structure, case)
        return site_maps(structure, logits, world_noise(structure, world), world)

    return jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0))))
