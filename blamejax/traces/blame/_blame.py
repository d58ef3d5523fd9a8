"""From traces to blame: runs whose decision steps carry options and logits become cases
of a pipeline, blamed under noise inferred from their observed choices.

A run's *drawn* steps are its decision steps with `logits` and an observed `choice`. Each
becomes one `ctx.choose(step, table, given=...)` of a pipeline (`TracePipeline`), whose
table is `[V, K]` (or `[V, K_given, K]` with `given`): variant 0 the logits of "factual"
(what ran), variant 1 those of the fix variant (default "fix"). The observed choices are
the data the noise is abducted from (`bj.inferred_worlds`); the estimators then replay the
run with every coalition of fixes under those posterior worlds.

This is a counterfactual only under the Gumbel-max coupling, which data cannot identify:
another coupling with the same interventional behaviour gives different blame. Blame is
relative to the fixes supplied.

What cannot be blamed is said, not dropped: steps without options (free text: they await a
scorer), decision steps without logits, and drawn steps without the fix variant (drawn with
their factual logits, never a player) are listed in `TraceCases.unblamable` with the reason.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax.numpy as jnp
import jax.random as jr
import numpy as np

from ..._checks import NotAFailureWarning, user_stacklevel
from ...estimators import exact_blame, mc_shapley
from ...noise import RUNS_MC_TAG, as_key
from ...report import CAVEAT
from ...worlds import inferred_worlds
from ..format._format import Run, from_record, to_record

NO_OPTIONS = "no options (a free-text step: it awaits a scorer)"
"""Why a step without options is not blamed."""
NO_LOGITS = "options but no logits (nothing to replay it with)"
"""Why a step with options but no logits is not blamed."""


def _no_fix(fix: str) -> str:
    return f"no {fix!r} variant in its logits (drawn with its factual logits, not blamed)"


class _Choices(dict):
    """`{step: Choice}` for a `score` function; a step it does not hold is named in the error."""

    def __missing__(self, step):
        raise KeyError(
            f"`score` asked for the choice of step {step!r}, which is not a drawn step of these runs; "
            f"the drawn steps are {list(self)}"
        )


@dataclasses.dataclass(frozen=True)
class TracePipeline:
    """The pipeline of one group of runs: each drawn step in run order,
    `ctx.choose(step, case["logits"][step], given=...)`, then the score.

    - `steps`: the drawn steps' names; `given`: for each, the index (into `steps`) of the step
      it is given, or `None`.
    - `score`: `score(choices) -> scalar` with `choices` `{step: Choice}` (`choice.index` is
      the option index, in the step's `options` order), or `None` for the default rule: the
      run passes (1.0) iff every drawn step with `accept` labels chooses an accepted option
      (the product of `case["accept"][step][choice]`), else 0.0.

    Frozen and hashable, so blaming the same group twice reuses the compiled functions.
    """

    steps: tuple[str, ...]
    given: tuple[int | None, ...]
    score: Callable | None = None

    def __call__(self, ctx, case):
        made, choices = [], _Choices()
        for name, given in zip(self.steps, self.given):
            parent = None if given is None else made[given]
            choice = ctx.choose(name, case["logits"][name], given=parent)
            made.append(choice)
            choices[name] = choice
        if self.score is not None:
            return self.score(choices)
        value = jnp.ones((), case["accept"][self.steps[0]].dtype)
        for name in self.steps:
            value = value * choices[name].take(case["accept"][name])
        return value


class TraceCases(NamedTuple):
    """A group of runs with the same drawn steps, as cases of one pipeline.

    - `runs`: the run ids, the order of every case axis `F`.
    - `steps`: the drawn steps (run order); `players`: those with the fix variant (the ones
      blamed); `options`, `agents`: each drawn step's option labels and agent.
    - `pipeline`: a `TracePipeline`.
    - `cases`: `{"logits": {step: Float[np.ndarray, "F V K"] or "F V K_given K"},
      "accept": {step: Float[np.ndarray, "F K"]}}` (V = 2 for players, 1 otherwise; accept 1.0
      for an accepted option, all ones for a step without `accept`).
    - `observed`: `Int[np.ndarray, "F steps"]`, the observed option of every drawn step.
    - `passed`: each run's recorded `passed` (or `None`).
    - `unblamable`: `{step: reason}` for every step of the runs that is not a player.
    - `fix`: the fix variant's name.
    """

    runs: tuple[str, ...]
    steps: tuple[str, ...]
    players: tuple[str, ...]
    options: tuple[tuple[str, ...], ...]
    agents: tuple[str | None, ...]
    pipeline: TracePipeline
    cases: dict
    observed: np.ndarray
    passed: tuple[bool | None, ...]
    unblamable: dict
    fix: str

    @property
    def agent_map(self) -> dict:
        """`{player: agent}` for `bj.traces.readout`."""
        return {
            s: a for s, a in zip(self.steps, self.agents) if s in self.players and a is not None
        }


def _drawn(step) -> bool:
    return step.options is not None and step.logits is not None


def _signature(run, fix: str):
    """What two runs must share to be stacked: every drawn step's name, options, given
    step, agent and whether it has the fix variant."""
    return tuple(
        (s.name, tuple(s.options), s.given, s.agent, fix in s.logits)
        for s in run.steps
        if _drawn(s)
    )


def _check_runs(runs) -> list:
    if isinstance(runs, (str, bytes)) or not isinstance(runs, Sequence):
        raise TypeError(f"`runs` must be a list of bj.traces.Run, got {type(runs).__name__}")
    runs = list(runs)
    if not runs:
        raise ValueError("`runs` is empty: nothing to blame")
    for i, run in enumerate(runs):
        if not isinstance(run, Run):
            raise TypeError(f"`runs[{i}]` must be a bj.traces.Run, got {type(run).__name__}")
        from_record(to_record(run), file=f"runs[{i}]")  # the format's own checks, named
    return runs


def _check_fix(fix) -> None:
    if not isinstance(fix, str) or fix == "factual":
        raise ValueError(f"`fix` must be the name of a fix variant (not 'factual'), got {fix!r}")


def group_runs(runs: Sequence, *, fix: str = "fix") -> list[list]:
    """Split `runs` into groups that can be stacked (the same drawn steps: names, options,
    given steps, agents, fix variant present), in order of first appearance. Runs with no
    drawn step at all form no group (see `trace_cases` for why a step is not drawn).

    ```python
    from blamejax.traces import Run, Step, group_runs
    a = Step("s0", options=("x", "y"), logits={"factual": (0.0, 0.0), "fix": (1.0, 0.0)}, choice="y")
    b = Step("t0", options=("x", "y"), logits={"factual": (0.0, 0.0), "fix": (1.0, 0.0)}, choice="y")
    runs = [Run("r0", (a,), passed=False), Run("r1", (b,), passed=False), Run("r2", (a,), passed=False)]
    assert [[r.run for r in g] for g in group_runs(runs)] == [["r0", "r2"], ["r1"]]
    ```
    """
    runs = _check_runs(runs)
    _check_fix(fix)
    groups: dict = {}
    for run in runs:
        signature = _signature(run, fix)
        if signature:
            groups.setdefault(signature, []).append(run)
    return list(groups.values())


def _row(values, run, step, where) -> np.ndarray:
    row = np.asarray(values, np.float64)
    if row.ndim == 0 or row.shape[-1] != len(step.options):
        raise ValueError(
            f"run {run.run!r}, step {step.name!r}: {where} must have {len(step.options)} logits per "
            f"row (one per option), got shape {row.shape}"
        )
    return row


def trace_cases(runs: Sequence, *, fix: str = "fix", score: Callable | None = None) -> TraceCases:
    """Stack runs with the same drawn steps into the cases, observed choices and pipeline
    that blamejax's estimators take.

    **Arguments:**
    - `runs`: `bj.traces.Run`s sharing their drawn steps (see `group_runs` for mixed runs).
    - `fix`: the name of the logits variant that is each step's fix (variant 1).
    - `score`: `score(choices) -> scalar in [0, 1]`, `choices` `{step: Choice}`; default: 1.0
      iff every drawn step with `accept` labels chooses an accepted option.

    **Returns:** a `TraceCases`.

    **Raises:** `ValueError` naming the run and step for runs with different drawn steps,
    a drawn step without an observed choice, a choice whose factual logit is -inf, a step
    given a step that is not drawn, no drawn step, no player, or no `accept` label anywhere
    while `score` is None; `TypeError` for runs that are not `Run`s.

    ```python
    import blamejax as bj
    from blamejax.traces import Run, Step
    s0 = Step("plan", agent="Planner", options=("search", "answer"),
              logits={"factual": (0.0, 0.0), "fix": (3.0, 0.0)}, accept=("search",), choice="answer")
    note = Step("note", agent="Planner", output="free text")
    tc = bj.traces.trace_cases([Run("r0", (s0, note), passed=False)])
    assert tc.players == ("plan",) and tc.unblamable == {"note": bj.traces.NO_OPTIONS}
    assert tc.cases["logits"]["plan"].shape == (1, 2, 2)   # [F, V, K]
    ```
    """
    runs = _check_runs(runs)
    _check_fix(fix)
    if score is not None and not callable(score):
        raise TypeError(f"`score` must be a function of the choices or None, got {score!r}")
    signature = _signature(runs[0], fix)
    for run in runs[1:]:
        if _signature(run, fix) != signature:
            raise ValueError(
                f"runs {runs[0].run!r} and {run.run!r} have different drawn steps (names, options, "
                "given steps, agents or fix variants), so they cannot be stacked; split them with "
                "bj.traces.group_runs(runs) and blame each group"
            )
    if not signature:
        raise ValueError(
            f"run {runs[0].run!r} has no decision step with options, logits and a choice: nothing "
            "can be blamed (free-text steps await a scorer)"
        )
    unblamable = _unblamable(runs, fix)
    names = tuple(entry[0] for entry in signature)
    players = tuple(entry[0] for entry in signature if entry[4])
    if not players:
        raise ValueError(
            f"no drawn step of run {runs[0].run!r} has a {fix!r} logits variant: no step can be blamed"
        )
    given = _given_steps(signature, names, unblamable, runs[0].run)
    if score is None and not any(s.accept for run in runs for s in run.steps if s.name in names):
        raise ValueError(
            "no drawn step has `accept` labels, so the default score (pass iff every step with "
            "`accept` chooses an accepted option) would always pass; give `score=`"
        )
    cases, observed = _stacked(runs, names, given, fix)
    return TraceCases(
        runs=tuple(run.run for run in runs),
        steps=names,
        players=players,
        options=tuple(entry[1] for entry in signature),
        agents=tuple(entry[3] for entry in signature),
        pipeline=TracePipeline(names, tuple(given), score),
        cases=cases,
        observed=observed,
        passed=tuple(run.passed for run in runs),
        unblamable=unblamable,
        fix=fix,
    )


def _unblamable(runs, fix: str) -> dict:
    """`{step: reason}` for the steps that cannot be blamed: no options, no logits, no `fix`
    variant (the first reason met across the runs)."""
    unblamable: dict = {}
    for run in runs:
        for step in run.steps:
            if step.options is None:
                unblamable.setdefault(step.name, NO_OPTIONS)
            elif step.logits is None:
                unblamable.setdefault(step.name, NO_LOGITS)
            elif fix not in step.logits:
                unblamable.setdefault(step.name, _no_fix(fix))
    return unblamable


def _given_steps(signature, names, unblamable, run_id) -> list:
    """Per drawn step, the index of the drawn step it is given (None if none); a step given
    a step that is not drawn cannot be replayed."""
    given = []
    for name, _, parent, _, _ in signature:
        if parent is not None and parent not in names:
            raise ValueError(
                f"run {run_id!r}, step {name!r}: it is given step {parent!r}, which is not drawn "
                f"({unblamable.get(parent, 'not a decision step')}), so its logits cannot be replayed"
            )
        given.append(None if parent is None else names.index(parent))
    return given


def _stacked(runs, names, given, fix: str):
    """The cases (`logits` `[F, V, K]` per step, factual then fix; `accept` `[F, K]`) and the
    observed choices `[F, steps]`, each choice checked against its logits."""
    logits = {name: [] for name in names}
    accept = {name: [] for name in names}
    observed = np.zeros((len(runs), len(names)), np.int32)
    for f, run in enumerate(runs):
        steps = {s.name: s for s in run.steps}
        for i, name in enumerate(names):
            step = steps[name]
            if step.choice is None:
                raise ValueError(
                    f"run {run.run!r}, step {name!r}: it has logits but no observed `choice`; "
                    "the noise can be inferred only from observed choices"
                )
            observed[f, i] = step.options.index(step.choice)
            variants = ["factual"] + ([fix] if fix in step.logits else [])
            table = np.stack([_row(step.logits[v], run, step, f"logits[{v!r}]") for v in variants])
            seen = table[0]
            if given[i] is not None:
                seen = seen[observed[f, given[i]]]
            if seen[observed[f, i]] == -np.inf:
                raise ValueError(
                    f"run {run.run!r}, step {name!r}: the observed choice {step.choice!r} has factual "
                    "logit -inf, so it could not have been chosen; the logits and the choice disagree"
                )
            logits[name].append(table)
            labels = step.accept
            accept[name].append(
                np.ones(len(step.options))
                if not labels
                else np.isin(step.options, labels).astype(np.float64)
            )
    cases = {
        "logits": {name: np.stack(tables) for name, tables in logits.items()},
        "accept": {name: np.stack(rows) for name, rows in accept.items()},
    }
    return cases, observed


class TraceBlame(NamedTuple):
    """The blame of a group of runs.

    - `result`: an `ExactResult` or `MCResult`, one row per run of `cases.runs`.
    - `cases`: the `TraceCases` blamed; `worlds`: the inferred `World` (keys `[F, W]`).
    - `unblamable`: `{step: reason}`, the steps that could not be blamed (as `cases.unblamable`).
    - `mismatched`: the runs whose recorded `passed` disagrees with the score of their
      observed choices (check the score rule, or the trace).
    - `outside`: the failed runs whose decisions all chose accepted options (their observed
      choices score the top): the failure lies outside the declared decisions, so none of
      them is to blame; `readout` names no culprit for them.
    - `caveat`: the sentence every report of this blame must carry.
    """

    result: object
    cases: TraceCases
    worlds: object
    unblamable: dict
    mismatched: tuple[str, ...]
    caveat: str
    outside: tuple[str, ...] = ()


ESTIMATORS = ("exact", "mc")


def blame_runs(
    runs,
    *,
    key=0,
    num_worlds: int = 8,
    estimator: str = "exact",
    fix: str = "fix",
    score: Callable | None = None,
    max_evaluations: int | None = None,
    **options,
) -> TraceBlame:
    """Blame runs of a trace under noise inferred from their observed choices.

    The observed choices are abducted into `num_worlds` posterior worlds per run
    (`bj.inferred_worlds`, world w of run i addressed by `(key, i, w)`), then every
    coalition of fixes is replayed in them: `bj.exact_blame` (`estimator="exact"`) or
    `bj.mc_shapley` (`"mc"`, with `max_evaluations` required and the orders seeded by
    `fold_in(key, 1)`). Counterfactual only under the Gumbel-max coupling.

    **Arguments:**
    - `runs`: `Run`s with the same drawn steps, or a `TraceCases` from `trace_cases`.
    - `key`: int seed or typed key; `num_worlds`: W.
    - `estimator`: `"exact"` or `"mc"`; `max_evaluations`: the Monte Carlo budget per run.
    - `fix`, `score`: as in `trace_cases` (only when `runs` are `Run`s).
    - `**options`: passed on to the estimator (e.g. `interactions=True`, `stop=()`).

    **Returns:** a `TraceBlame`.

    ```python
    import blamejax as bj
    from blamejax.traces import Run, Step
    s0 = Step("plan", agent="Planner", options=("search", "answer"),
              logits={"factual": (0.0, 0.0), "fix": (0.0, float("-inf"))}, accept=("search",), choice="answer")
    out = bj.traces.blame_runs([Run("r0", (s0,), passed=False)], num_worlds=4)
    assert float(out.result.shapley[0, 0]) == 1.0     # the fix always searches
    ```
    """
    if isinstance(runs, TraceCases):
        if score is not None or fix != "fix":
            raise ValueError(
                "`fix` and `score` belong to trace_cases; they cannot be changed for a TraceCases"
            )
        tc = runs
    else:
        tc = trace_cases(runs, fix=fix, score=score)
    if estimator not in ESTIMATORS:
        raise ValueError(f"`estimator` must be one of {ESTIMATORS}, got {estimator!r}")
    if estimator == "mc" and max_evaluations is None:
        raise ValueError(
            "`max_evaluations` (the Monte Carlo budget per run) is required with estimator='mc'"
        )
    if estimator == "exact" and max_evaluations is not None:
        raise ValueError("`max_evaluations` is used only with estimator='mc'")
    key = as_key(key)
    worlds = inferred_worlds(tc.pipeline, tc.cases, tc.observed, key, num_worlds)
    with warnings.catch_warnings():
        # The estimators' warning speaks of worlds and keys, which a trace user never gave;
        # the runs it is about are named below, in a trace user's words.
        warnings.simplefilter("ignore", NotAFailureWarning)
        if estimator == "exact":
            result = exact_blame(tc.pipeline, tc.cases, worlds, steps=tc.players, **options)
        else:
            result = mc_shapley(
                tc.pipeline,
                tc.cases,
                worlds,
                jr.fold_in(key, RUNS_MC_TAG),
                max_evaluations=max_evaluations,
                steps=tc.players,
                **options,
            )
    high = result.score_range[1]
    empty = np.asarray(result.empty, np.float64)
    mismatched = tuple(
        run
        for run, passed, value in zip(tc.runs, tc.passed, empty)
        if passed is not None and bool(passed) != bool(value >= high)
    )
    outside = tuple(
        run
        for run, passed, value in zip(tc.runs, tc.passed, empty)
        if passed is False and value >= high
    )
    if outside:
        warnings.warn(
            FailureOutsideDecisionsWarning(outside_message(outside, tc.players)),
            stacklevel=user_stacklevel(),
        )
    return TraceBlame(result, tc, worlds, dict(tc.unblamable), mismatched, CAVEAT, outside)


class FailureOutsideDecisionsWarning(UserWarning):
    """Runs that failed although every declared decision chose an accepted option: the
    failure lies outside the decisions (a call that raised, a step not declared), so no
    decision is to blame (`TraceBlame.outside` names them; `readout` names no culprit)."""


def outside_message(runs, players) -> str:
    shown = ", ".join(repr(r) for r in runs[:5]) + (", ..." if len(runs) > 5 else "")
    return (
        f"{len(runs)} failed run(s) ({shown}) chose an accepted option at every declared decision "
        f"({', '.join(players)}): the failure lies outside these decisions (a call that raised, "
        "a step not declared as a decision), so none of them is blamed; their blame is zero and "
        "readout names no culprit. Declare the step that failed as a decision to blame it"
    )
