"""The contrastive estimator of Causal Agent Replay, its intervals, the point of
commitment, replay fidelity, and CAR's re-draw game.

For a run and a step k, the **contrastive effect** is

    effect_k = 1[the factual run is bad] - P(bad | do(k)),

where `do(k)` re-draws step k (or applies any other intervention) and `P(bad | do(k))` is
estimated from `num_rollouts` rollouts per world. The baseline `1[factual run bad]` is the
observed outcome of this run: it is fixed, not estimated, so the interval of the effect is
the Wilson score interval of `P(bad | do(k))` reflected through it. When the baseline is
itself estimated (`baseline="rollouts"`: `P(bad | step k kept, later steps under the same
downstream rule)`, from independent rollouts), the interval is Newcombe's hybrid score
interval for a difference of two independent proportions. A positive effect means
re-deciding at k can save the run.

With `downstream="fresh"` the estimated baseline removes the later steps' luck that the
fixed baseline credits to step k, and the effects then telescope: along the pipeline they
add up to `1[factual bad] - P(bad | every step re-drawn)` (the marginal contributions of
re-drawing the steps in pipeline order, one ordering of a Shapley average).

Every step and every rollout is one plan, and all of them run in one vmapped call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import NormalDist

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ._evaluate import plan_values, trace_run
from ._exact import check_worlds
from ._interventions import DOWNSTREAM, full_plan, step_index, step_of_site
from ._pipeline import Hard, Plan, StepPlan
from ._shapley import attribute
from ._structure import Structure, check_finite_logits, discover
from ._worlds import _leading_size

BASELINES = ("factual", "rollouts")
_CACHE: dict = {}


# -- intervals ------------------------------------------------------------------------------
def _z(delta: float) -> float:
    return NormalDist().inv_cdf(1.0 - delta / 2.0)


def wilson_interval(successes, trials, delta: float = 0.05):
    """The Wilson score interval of a binomial proportion at level `1 - delta`.

    **Arguments:**
    - `successes`: int array (any shape), the counts x.
    - `trials`: int array broadcastable to it, the numbers of trials n >= 1.
    - `delta`: the error level, in (0, 1).

    **Returns:** `(low, high)`, float64 numpy arrays in [0, 1]; `low` is exactly 0 when
    x = 0 and `high` exactly 1 when x = n.

    ```python
    >>> low, high = wilson_interval(81, 263)       # (0.2553, 0.3662)
    ```
    """
    _check_delta(delta)
    x = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n < 1) or np.any(x < 0) or np.any(x > n):
        raise ValueError(
            f"need 0 <= successes <= trials and trials >= 1, got {successes!r} of {trials!r}"
        )
    z = _z(delta)
    center = (x + z * z / 2) / (n + z * z)
    half = z / (n + z * z) * np.sqrt(x * (n - x) / n + z * z / 4)
    low = np.where(x == 0, 0.0, np.clip(center - half, 0.0, 1.0))
    high = np.where(x == n, 1.0, np.clip(center + half, 0.0, 1.0))
    return low, high


def newcombe_interval(successes1, trials1, successes2, trials2, delta: float = 0.05):
    """Newcombe's hybrid score interval (his method 10) for `p1 - p2`, two independent
    binomial proportions, at level `1 - delta`, built from their Wilson intervals.

    **Returns:** `(low, high)`, float64 numpy arrays in [-1, 1].

    ```python
    >>> low, high = newcombe_interval(56, 70, 48, 80)   # (0.0524, 0.3339)
    ```
    """
    l1, u1 = wilson_interval(successes1, trials1, delta)
    l2, u2 = wilson_interval(successes2, trials2, delta)
    p1 = np.asarray(successes1, np.float64) / np.asarray(trials1, np.float64)
    p2 = np.asarray(successes2, np.float64) / np.asarray(trials2, np.float64)
    diff = p1 - p2
    low = diff - np.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = diff + np.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return np.clip(low, -1.0, 1.0), np.clip(high, -1.0, 1.0)


def point_of_commitment(low, high) -> np.ndarray:
    """The index of the last step whose effect interval `[low, high]` excludes zero, or -1
    when no step's does. `low`, `high`: arrays `[..., n]` (steps on the last axis)."""
    low, high = np.asarray(low), np.asarray(high)
    significant = (low > 0) | (high < 0)
    order = np.arange(significant.shape[-1])
    return np.max(np.where(significant, order, -1), axis=-1)


def _check_delta(delta) -> float:
    if not isinstance(delta, (float, int)) or isinstance(delta, bool) or not 0 < delta < 1:
        raise ValueError(f"`delta` must be an error level in (0, 1), got {delta!r}")
    return float(delta)


# -- the contrastive estimator ----------------------------------------------------------------
class ContrastiveResult(eqx.Module):
    """Contrastive effects of F runs (usually failures) over the n intervened steps.

    - `steps`: the step names (static), the order of every `n` axis.
    - `num_bad`: `Int[Array, "F n"]`, bad rollouts out of `num_runs` under do(k).
    - `p_bad`: `Float[Array, "F n"]`, `P̂(bad | do(k)) = num_bad / num_runs`.
    - `baseline`: `Float[Array, "F n"]`, `1[factual run bad]` (`baseline_kind="factual"`,
      the same for every step) or, per step, the estimated `P̂(bad | step k kept, later
      steps under the downstream rule)` (`"rollouts"`).
    - `baseline_bad`: `Int[Array, "F n"]`, the bad count behind an estimated baseline (out
      of `num_runs`), or the 0/1 factual outcome.
    - `effect`: `Float[Array, "F n"]`, `baseline - p_bad`.
    - `low`, `high`: `Float[Array, "F n"]`, the effect's interval at level `1 - delta/n`
      (Wilson for a fixed baseline, Newcombe for an estimated one).
    - `commitment`: `Int[Array, "F"]`, the point of commitment (index into `steps`), -1
      when no step's interval excludes zero.
    - `num_runs`: runs per step and run (worlds x rollouts); `delta`; `downstream`;
      `baseline_kind`; `intervention` (a label).
    """

    steps: tuple[str, ...] = eqx.field(static=True)
    num_bad: Int[Array, "F n"]
    p_bad: Float[Array, "F n"]
    baseline: Float[Array, "F n"]
    baseline_bad: Int[Array, "F n"]
    effect: Float[Array, "F n"]
    low: Float[Array, "F n"]
    high: Float[Array, "F n"]
    commitment: Int[Array, " F"]
    num_runs: int = eqx.field(static=True)
    delta: float = eqx.field(static=True)
    downstream: str = eqx.field(static=True)
    baseline_kind: str = eqx.field(static=True)
    intervention: str = eqx.field(static=True)

    @property
    def num_failures(self) -> int:
        return int(self.effect.shape[0])

    @property
    def significant(self) -> Bool[Array, "F n"]:
        """Where the effect interval excludes zero."""
        return (self.low > 0) | (self.high < 0)

    def commitment_step(self, failure: int = 0) -> str | None:
        """The name of the point of commitment of one run, `None` when no step qualifies."""
        self._check_failure(failure)
        index = int(self.commitment[failure])
        return None if index < 0 else self.steps[index]

    def _check_failure(self, failure):
        if not isinstance(failure, int) or not 0 <= failure < self.num_failures:
            raise ValueError(
                f"`failure` must be an int in [0, {self.num_failures}), got {failure!r}"
            )

    def table(self, failure: int = 0, digits: int = 3) -> str:
        """A plain-text table of the effects of one run, with the point of commitment."""
        self._check_failure(failure)
        n = len(self.steps)
        width = max(8, *(len(s) for s in self.steps))
        factual = self.baseline_kind == "factual"
        if factual:
            base = f"1[factual run bad] = {float(self.baseline[failure, 0]):.0f} (fixed; Wilson intervals)"
        else:
            base = "P̂(bad | step k kept, later steps as above), estimated; Newcombe intervals"
        lines = [
            f"effect = baseline - P̂(bad | {self.intervention}); downstream noise: {self.downstream}; "
            f"{self.num_runs} runs per step",
            f"baseline: {base}; intervals at level 1 - {self.delta:g}/{n}",
        ]
        base_head = "" if factual else f"  {'baseline':>8}"
        head = f"{'step':<{width}}{base_head}  {'P̂(bad|do)':>10}  {'effect':>8}  {'interval':>19}"
        lines += [head, "-" * len(head)]
        significant = np.asarray(self.significant[failure])
        for i, step in enumerate(self.steps):
            mark = "  *" if significant[i] else ""
            base_col = "" if factual else f"  {float(self.baseline[failure, i]):>8.{digits}f}"
            lines.append(
                f"{step:<{width}}{base_col}  {float(self.p_bad[failure, i]):>10.{digits}f}  "
                f"{float(self.effect[failure, i]):>+8.{digits}f}  "
                f"[{float(self.low[failure, i]):>+7.{digits}f}, {float(self.high[failure, i]):>+7.{digits}f}]{mark}"
            )
        step = self.commitment_step(failure)
        if step is None:
            lines.append("point of commitment: none (no step's interval excludes zero)")
        else:
            lines.append(
                f"point of commitment: {step} (* = interval excludes zero; the last such step)"
            )
        return "\n".join(lines)


def _resample_plans(
    structure: Structure, players, num_rollouts, downstream, factual, offset=0, redraw_step=True
) -> Plan:
    """The batched plan [n * R]: row (i, r) re-draws step players[i] with fresh stream
    offset + r (or keeps it, when not `redraw_step`: the baseline of that step), later
    steps held, fresh (same stream) or forced to `factual`."""
    n, size = len(players), len(players) * num_rollouts
    k_of = np.repeat(np.asarray(players, np.int32), num_rollouts)
    r_of = np.tile(np.arange(num_rollouts, dtype=np.int32), n) + np.int32(offset)
    none = np.full(size, -1, np.int32)
    steps = []
    for j in range(structure.num_steps):
        redrawn = (k_of <= j) if downstream == "fresh" else (k_of == j)
        if not redraw_step:
            redrawn = redrawn & (k_of != j)
        steps.append(StepPlan(np.zeros(size, np.int32), np.where(redrawn, r_of, none), none))
    forced_sites = None
    if downstream == "direct":
        site_step = step_of_site(structure)
        forced_sites = tuple(
            jnp.where(site_step[i] > k_of, factual[i], -1).astype(jnp.int32)
            for i in range(len(structure.sites))
        )
    return Plan(tuple(steps), tuple(None for _ in structure.values), forced_sites)


def _contrastive_function(
    pipeline, structure, players, num_rollouts, downstream, baseline, threshold, mode, intervention
):
    key = (
        pipeline,
        structure,
        players,
        num_rollouts,
        downstream,
        baseline,
        threshold,
        mode,
        intervention,
    )
    if key in _CACHE:
        return _CACHE[key]
    n = len(players)

    def plans_for(factual):
        if intervention is None:
            return _resample_plans(structure, players, num_rollouts, downstream, factual)
        per_step = []
        for k in players:
            one = lambda r, k=k: full_plan(structure, intervention(k, r, factual))  # noqa: E731
            per_step.append(jax.vmap(one)(jnp.arange(num_rollouts, dtype=jnp.int32)))
        return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *per_step)

    def per_world(case, world):
        trace = trace_run(pipeline, structure, case, world, None, mode)
        scores = plan_values(pipeline, structure, case, world, plans_for(trace["choice"]), mode)
        bad = (scores < threshold).reshape(n, num_rollouts).sum(axis=1)
        nonfinite = jnp.sum(~jnp.isfinite(scores))
        if baseline == "rollouts":
            kept = _resample_plans(
                structure, players, num_rollouts, downstream, trace["choice"], num_rollouts, False
            )
            base = plan_values(pipeline, structure, case, world, kept, mode)
            base_bad = (base < threshold).reshape(n, num_rollouts).sum(axis=1)
            nonfinite = nonfinite + jnp.sum(~jnp.isfinite(base))
        else:
            base_bad = jnp.zeros((n,), jnp.int32)
        return bad, trace["score"] < threshold, base_bad, nonfinite

    def per_failure(case, worlds):
        bad, factual_bad, base_bad, nonfinite = jax.vmap(per_world, in_axes=(None, 0))(case, worlds)
        return bad.sum(0), factual_bad, base_bad.sum(0), nonfinite.sum()

    function = jax.jit(jax.vmap(per_failure))
    _CACHE[key] = function
    return function


def contrastive(
    pipeline: Callable,
    cases,
    worlds,
    *,
    num_rollouts: int = 200,
    downstream: str = "held",
    baseline: str = "factual",
    steps: Sequence | None = None,
    intervention: Callable | None = None,
    threshold: float = 0.5,
    delta: float = 0.05,
    mode=Hard(),
) -> ContrastiveResult:
    """Contrastive effects of every step of every run, with intervals and the point of
    commitment: for each step k, `num_rollouts` rollouts of `do_resample(k)` per world.

    A run is *bad* when its score is below `threshold`. The effect of step k is
    `baseline - P̂(bad | do(k))`, where the baseline is `1[factual run bad]` (default: the
    observed outcome of this run, fixed, so the Wilson interval applies) or, with
    `baseline="rollouts"`, `P̂(bad | step k kept, the later steps under the same downstream
    rule)` from `num_rollouts` further independent rollouts per world (estimated, so
    Newcombe's interval for a difference applies; it differs from the factual outcome only
    with `downstream="fresh"` or worlds that disagree).
    The intervals are at level `1 - delta/n` (one share of `delta` per step), and the
    **point of commitment** is the last step whose interval excludes zero: the last point
    where re-deciding could still save the run (-1 / "none" when no step qualifies).

    The rollouts of one step are independent given the world: with one world per run
    (recorded noise) the interval is for this run's `P(bad | do(k))`. With W worlds
    (`inferred_worlds`), a step's W x R runs are pooled; the rollouts of one world share
    its noise, so with R > 1 the interval treats dependent runs as independent (use R = 1
    and many worlds for an interval over the posterior).

    **Arguments:**
    - `pipeline`, `cases` (`[F, ...]`), `worlds` (`[F, W]`): as in `exact_blame`.
    - `num_rollouts`: R, rollouts per step and world.
    - `downstream`: after step k, `"held"` (later steps keep their noise and react: a
      counterfactual total effect), `"fresh"` (later steps re-draw: interventional, CAR's
      semantics, which credits k with the luck of the later steps) or `"direct"` (later
      draws forced to their factual choices: the direct effect).
    - `baseline`: `"factual"` or `"rollouts"`, see above.
    - `steps`: the steps to intervene on (names or indices), default all, in pipeline order.
    - `intervention`: `None` (re-draw step k: `do_resample(k, r)` with `downstream`), or a
      function `intervention(k, r, factual) -> Plan` giving the plan of rollout r (traced
      int) at step index k from the factual choices `factual` (`Int[Array, "sites"]`),
      built with the `do_*` operators; it then sets its own downstream rule.
    - `threshold`: a run is bad when its score is below it (0/1 scores: any value in (0, 1]).
    - `delta`: the error level shared by the n steps.
    - `mode`: `Hard()` (the counts need hard choices).

    **Returns:** a `ContrastiveResult`; `.table(f)` prints one run.

    **Raises:** `ValueError`/`TypeError` naming the argument; `ValueError` when
    `baseline="factual"` and the worlds of one run disagree on its outcome (then the
    baseline is not fixed).

    ```python
    import blamejax as bj
    cases = bj.demos.pivotal_cases(1)
    result = bj.contrastive(bj.demos.pivotal_pipeline, cases, bj.recorded_worlds(0, [5]))
    print(result.table())
    ```
    """
    num_failures = _leading_size(cases)
    structure = discover(pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    check_finite_logits(cases)
    num_worlds = check_worlds(worlds, num_failures, structure)
    players = _players(structure, steps)
    num_rollouts = _positive_int(num_rollouts, "num_rollouts")
    if downstream not in DOWNSTREAM:
        raise ValueError(f"`downstream` must be one of {DOWNSTREAM}, got {downstream!r}")
    if baseline not in BASELINES:
        raise ValueError(f"`baseline` must be one of {BASELINES}, got {baseline!r}")
    if intervention is not None and not callable(intervention):
        raise TypeError(
            f"`intervention` must be None or a function (k, r, factual) -> Plan, got {intervention!r}"
        )
    if intervention is not None and downstream != "held":
        raise ValueError(
            "`downstream` applies to the default re-draw only; a custom `intervention` sets its "
            "own downstream rule (pass downstream=... to the do_* operators it uses)"
        )
    threshold = _threshold(threshold)
    delta = _check_delta(delta)
    if not isinstance(mode, Hard):
        raise ValueError("the contrastive estimator counts bad runs, which needs `mode=Hard()`")
    function = _contrastive_function(
        pipeline,
        structure,
        players,
        num_rollouts,
        downstream,
        baseline,
        threshold,
        mode,
        intervention,
    )
    bad, factual_bad, base_bad, nonfinite = (np.asarray(x) for x in function(cases, worlds))
    if nonfinite.any():
        raise ValueError(
            f"the pipeline returned non-finite scores ({int(nonfinite.sum())} runs); check its "
            "logits and score"
        )
    n, runs = len(players), num_worlds * num_rollouts
    level = delta / n
    if baseline == "factual":
        mixed = np.flatnonzero(factual_bad.any(axis=1) & ~factual_bad.all(axis=1))
        if mixed.size:
            f = int(mixed[0])
            raise ValueError(
                f"run {f} is bad in {int(factual_bad[f].sum())} of its {num_worlds} worlds, so "
                "`baseline='factual'` (1[factual run bad]) is not fixed; use worlds that "
                "reproduce the run (recorded or inferred) or `baseline='rollouts'`"
            )
        base_count = np.broadcast_to(factual_bad[:, :1].astype(np.int32), bad.shape)
        base = base_count.astype(np.float64)
        p_low, p_high = wilson_interval(bad, runs, level)
        low, high = base - p_high, base - p_low
    else:
        if intervention is not None:
            raise ValueError(
                "`baseline='rollouts'` is defined for the default re-draw (its baseline keeps "
                "step k and applies the same downstream rule); use baseline='factual' with a "
                "custom `intervention`"
            )
        base_count = base_bad.astype(np.int32)
        base = base_count / runs
        low, high = newcombe_interval(base_count, runs, bad, runs, level)
    p_bad = bad / runs
    label = (
        "do_resample(k)"
        if intervention is None
        else getattr(intervention, "__name__", "intervention")
    )
    return ContrastiveResult(
        steps=tuple(structure.steps[p] for p in players),
        num_bad=jnp.asarray(bad, jnp.int32),
        p_bad=jnp.asarray(p_bad, jnp.float32),
        baseline=jnp.asarray(base, jnp.float32),
        baseline_bad=jnp.asarray(base_count, jnp.int32),
        effect=jnp.asarray(base - p_bad, jnp.float32),
        low=jnp.asarray(low, jnp.float32),
        high=jnp.asarray(high, jnp.float32),
        commitment=jnp.asarray(point_of_commitment(low, high), jnp.int32),
        num_runs=runs,
        delta=delta,
        downstream=downstream if intervention is None else "set by the intervention",
        baseline_kind=baseline,
        intervention=label,
    )


def _players(structure: Structure, steps) -> tuple[int, ...]:
    if steps is None:
        return tuple(range(structure.num_steps))
    if isinstance(steps, (str, int)) or not isinstance(steps, Sequence) or not steps:
        raise TypeError(
            f"`steps` must be a non-empty sequence of step names or indices, got {steps!r}"
        )
    players = tuple(step_index(structure, s, "steps") for s in steps)
    if len(set(players)) != len(players):
        raise ValueError(f"`steps` lists a step twice: {list(steps)}")
    return tuple(sorted(players))


def _positive_int(value, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{argument}` must be a positive int, got {value!r}")
    return int(value)


def _threshold(threshold) -> float:
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not np.isfinite(threshold)
    ):
        raise ValueError(f"`threshold` must be a finite number, got {threshold!r}")
    return float(threshold)


# -- replay fidelity --------------------------------------------------------------------------
class ReplayFidelity(eqx.Module):
    """How faithfully a replay reproduces a record of choices.

    - `sites`: the draw sites (static), as "step" or "step[slot]".
    - `per_run`: `Float[Array, "F W"]`, the share of draw sites whose replayed choice
      equals the recorded one (the action-match rate), per run and world.
    - `per_site`: `Float[Array, "sites"]`, the match rate of each site over all runs.
    """

    sites: tuple[str, ...] = eqx.field(static=True)
    per_run: Float[Array, "F W"]
    per_site: Float[Array, " sites"]

    @property
    def rate(self) -> float:
        """The overall action-match rate (1.0 = every choice reproduced)."""
        return float(jnp.mean(self.per_run))


def replay_fidelity(pipeline: Callable, cases, worlds, observed) -> ReplayFidelity:
    """Replay each run from its noise and compare the choices with the record.

    With the run's addressed noise (`recorded_worlds`, where blamejax did the sampling) or
    noise abducted from the record (`inferred_worlds`), the match rate is exactly 1.0; any
    lower rate means the replay does not reproduce the run, and no counterfactual read from
    it can be trusted.

    **Arguments:**
    - `pipeline`, `cases` (`[F, ...]`), `worlds` (`[F, W]`).
    - `observed`: `Int[Array, "F sites"]`, the recorded choice of every draw site.

    **Returns:** a `ReplayFidelity`.

    ```python
    record = bj.replay(pipeline, cases, bj.recorded_worlds(0, F))["choice"][:, 0]
    assert bj.replay_fidelity(pipeline, cases, bj.recorded_worlds(0, F), record).rate == 1.0
    ```
    """
    num_cases = _leading_size(cases)
    structure = discover(pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    observed = jnp.asarray(observed)
    num_sites = len(structure.sites)
    if observed.shape != (num_cases, num_sites) or not jnp.issubdtype(observed.dtype, jnp.integer):
        raise ValueError(
            f"`observed` must be an int array of shape [F, sites] = [{num_cases}, {num_sites}], "
            f"got {observed.dtype}{list(observed.shape)}"
        )
    check_finite_logits(cases)
    check_worlds(worlds, num_cases, structure)
    choice = _choices_function(pipeline, structure)(cases, worlds)  # [F, W, sites]
    match = (choice == observed[:, None, :].astype(choice.dtype)).astype(jnp.float32)
    multi = {s.step for s in structure.sites if s.slot > 0}
    names = tuple(f"{s.step}[{s.slot}]" if s.step in multi else s.step for s in structure.sites)
    return ReplayFidelity(sites=names, per_run=match.mean(-1), per_site=match.mean((0, 1)))


def _choices_function(pipeline, structure):
    """The factual choices of every case under every world, compiled once per pipeline."""
    key = ("choices", pipeline, structure)
    if key not in _CACHE:
        one = lambda case, world: trace_run(pipeline, structure, case, world)["choice"]  # noqa: E731
        _CACHE[key] = jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0))))
    return _CACHE[key]


# -- CAR's game: fix = re-draw with fresh noise --------------------------------------------------
class ResampleShapley(eqx.Module):
    """Shapley values of CAR's game, where a step's "fix" is a re-draw with fresh noise:
    `v(S) = P(good | the steps in S re-drawn, factual noise elsewhere)`.

    - `steps`: the players (static).
    - `values`: `Float[Array, "F 2**n"]`, `v(S)` (bit i of the index set = player i re-drawn).
    - `shapley`, `stderr`: `Float[Array, "F n"]`, the Shapley values and their Monte Carlo
      standard errors (each rollout's game is an i.i.d. unit; its Shapley values are exact).
    - `num_runs`: worlds x rollouts per coalition.
    """

    steps: tuple[str, ...] = eqx.field(static=True)
    values: Float[Array, "F coalitions"]
    shapley: Float[Array, "F n"]
    stderr: Float[Array, "F n"]
    num_runs: int = eqx.field(static=True)

    @property
    def empty(self) -> Float[Array, " F"]:
        return self.values[:, 0]

    @property
    def full(self) -> Float[Array, " F"]:
        return self.values[:, -1]

    @property
    def total(self) -> Float[Array, " F"]:
        """`v(all) - v(∅)`: the Shapley values add up to it exactly."""
        return self.full - self.empty

    @property
    def fix_alone(self) -> Float[Array, "F n"]:
        """`v({i}) - v(∅)`: re-drawing one step alone."""
        bits = np.array([1 << i for i in range(len(self.steps))])
        return self.values[:, bits] - self.values[:, :1]

    def table(self, failure: int = 0, digits: int = 3) -> str:
        num = int(self.values.shape[0])
        if not isinstance(failure, int) or not 0 <= failure < num:
            raise ValueError(f"`failure` must be an int in [0, {num}), got {failure!r}")
        width = max(8, *(len(s) for s in self.steps))
        head = f"{'step':<{width}}  {'shapley':>8}  {'± s.e.':>7}  {'re-draw alone':>13}"
        lines = [head, "-" * len(head)]
        for i, step in enumerate(self.steps):
            lines.append(
                f"{step:<{width}}  {float(self.shapley[failure, i]):>8.{digits}f}  "
                f"{float(self.stderr[failure, i]):>7.{digits}f}  {float(self.fix_alone[failure, i]):>13.{digits}f}"
            )
        lines.append(
            f"v(∅) = {float(self.empty[failure]):.{digits}f}, v(all) = {float(self.full[failure]):.{digits}f}, "
            f"sum of Shapley = {float(self.total[failure]):.{digits}f} ({self.num_runs} runs per coalition)"
        )
        return "\n".join(lines)


def _resample_game_function(pipeline, structure, players, num_rollouts, threshold, mode):
    key = ("game", pipeline, structure, players, num_rollouts, threshold, mode)
    if key in _CACHE:
        return _CACHE[key]
    size = 1 << len(players)
    masks = np.repeat(np.arange(size), num_rollouts)
    streams = np.tile(np.arange(num_rollouts, dtype=np.int32), size)
    none = np.full(size * num_rollouts, -1, np.int32)
    steps = [StepPlan(np.zeros_like(none), none, none) for _ in structure.steps]
    for j, p in enumerate(players):
        redrawn = ((masks >> j) & 1).astype(bool)
        steps[p] = StepPlan(np.zeros_like(none), np.where(redrawn, streams, none), none)
    plans = Plan(tuple(steps), tuple(None for _ in structure.values))

    def per_world(case, world):
        scores = plan_values(pipeline, structure, case, world, plans, mode)
        good = (scores >= threshold).astype(jnp.result_type(float)).reshape(size, num_rollouts)
        shapley = jax.vmap(lambda v: attribute(v, interactions=False).shapley, in_axes=1)(good)
        return good.mean(axis=1), shapley, jnp.sum(~jnp.isfinite(scores))

    function = jax.jit(jax.vmap(per_world, in_axes=(None, 0)))
    _CACHE[key] = function
    return function


def resample_shapley(
    pipeline: Callable,
    cases,
    worlds,
    *,
    num_rollouts: int = 1000,
    steps: Sequence | None = None,
    threshold: float = 0.5,
    mode=Hard(),
    max_steps: int = 12,
) -> ResampleShapley:
    """Shapley values of CAR's game, in which "fixing" a step means re-drawing it from its
    unchanged policy with fresh noise, every other step keeping the run's noise:
    `v(S) = P(good | the steps in S re-drawn, factual noise elsewhere)`, averaged over the
    fresh draws (`num_rollouts` per world). For a failed run `v(∅) = 0`, and the values add
    up to `v(all) = P(good | every step re-drawn)`. blamejax's own game (`exact_blame`) asks
    a different question: the step's *better variant* under the *same* noise.

    Each rollout r re-draws the steps of every coalition with the same fresh stream r
    (common random numbers across coalitions); its game's Shapley values are exact, and the
    reported value is their mean with a standard error over the W x R rollouts.

    **Arguments:** as `contrastive`; `max_steps` bounds n (2^n x R runs per world).

    **Returns:** a `ResampleShapley`.

    ```python
    cases = bj.demos.interaction_cases(1)
    game = bj.resample_shapley(bj.demos.interaction_pipeline, cases, worlds, num_rollouts=4000)
    ```
    """
    num_failures = _leading_size(cases)
    structure = discover(pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    check_finite_logits(cases)
    num_worlds = check_worlds(worlds, num_failures, structure)
    players = _players(structure, steps)
    num_rollouts = _positive_int(num_rollouts, "num_rollouts")
    max_steps = _positive_int(max_steps, "max_steps")
    if len(players) > max_steps:
        raise ValueError(
            f"the re-draw game over n = {len(players)} steps runs 2^{len(players)} x num_rollouts "
            f"plans per world, above `max_steps` = {max_steps}; pass fewer `steps` or raise it"
        )
    threshold = _threshold(threshold)
    if not isinstance(mode, Hard):
        raise ValueError("the re-draw game counts good runs, which needs `mode=Hard()`")
    function = _resample_game_function(pipeline, structure, players, num_rollouts, threshold, mode)
    values, means, errors = [], [], []
    for f in range(num_failures):  # one compiled call per run bounds memory by W x R x 2^n
        case = jax.tree_util.tree_map(lambda x: x[f], cases)
        world = jax.tree_util.tree_map(lambda x: x[f], worlds)
        v, phi, nonfinite = (np.asarray(x) for x in function(case, world))
        if nonfinite.any():
            raise ValueError(f"the pipeline returned non-finite scores for run {f}")
        phi = phi.reshape(-1, len(players)).astype(np.float64)
        values.append(v.mean(axis=0))
        means.append(phi.mean(axis=0))
        units = phi.shape[0]
        errors.append(
            phi.std(axis=0, ddof=1) / np.sqrt(units) if units > 1 else np.full(len(players), np.nan)
        )
    return ResampleShapley(
        steps=tuple(structure.steps[p] for p in players),
        values=jnp.asarray(np.stack(values), jnp.float32),
        shapley=jnp.asarray(np.stack(means), jnp.float32),
        stderr=jnp.asarray(np.stack(errors), jnp.float32),
        num_runs=num_worlds * num_rollouts,
    )
