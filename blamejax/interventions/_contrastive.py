"""The contrastive estimator of Causal Agent Replay: the effect of re-deciding each step of a
run, with intervals and the point of commitment.

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

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .._arguments import (
    check_delta,
    check_function,
    check_one_of,
    check_positive_int,
    check_threshold,
)
from .._checks import check_hard_mode, check_steps
from .._compile import cached
from .._game import discover_checked
from ..pipeline import (
    DOWNSTREAM,
    Hard,
    Plan,
    StepPlan,
    Structure,
    full_plan,
    plan_values,
    step_of_site,
    trace_run,
)
from ..report import (
    JSONExport,
    number,
    step_rows,
)
from ..stats import newcombe_interval, point_of_commitment, wilson_interval

BASELINES = ("factual", "rollouts")


class ContrastiveResult(JSONExport, eqx.Module):
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
        """The number of runs analysed, `F`."""
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
        significant = np.asarray(self.significant[failure])
        low, high = (
            number(self.low[failure], digits, sign=True),
            number(self.high[failure], digits, sign=True),
        )
        side = digits + 4  # the width of a signed number with `digits` decimals, as "+0.123"
        columns = [] if factual else [("baseline", 8, number(self.baseline[failure], digits))]
        columns += [
            ("P̂(bad|do)", 10, number(self.p_bad[failure], digits)),
            ("effect", 8, number(self.effect[failure], digits, sign=True)),
            ("interval", 2 * side + 4, lambda i: f"[{low(i):>{side}}, {high(i):>{side}}]"),
            ("", 1, lambda i: "*" if significant[i] else ""),
        ]
        lines += step_rows(self.steps, columns)
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


def _contrastive_function(*key):
    """`_build_rollout_function(*key)`, built once per key: (pipeline, structure, players,
    num_rollouts, downstream, baseline, threshold, mode, intervention)."""
    return cached("contrastive", key, lambda: _build_rollout_function(*key))


def _build_rollout_function(
    pipeline, structure, players, num_rollouts, downstream, baseline, threshold, mode, intervention
):
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

    return jax.jit(jax.vmap(per_failure))


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
    structure, num_failures, num_worlds, players, num_rollouts = rollout_inputs(
        pipeline, cases, worlds, steps, num_rollouts
    )
    downstream = check_one_of(downstream, "downstream", DOWNSTREAM)
    baseline = check_one_of(baseline, "baseline", BASELINES)
    intervention = _check_intervention(intervention, downstream, baseline)
    threshold = check_threshold(threshold)
    delta = check_delta(delta)
    mode = check_hard_mode(mode, "the contrastive estimator counts bad runs")
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
    _check_outcomes(nonfinite, factual_bad if baseline == "factual" else None)
    runs = num_worlds * num_rollouts
    base_count, base, low, high = _effect_intervals(
        bad,
        factual_bad[:, 0],
        base_bad if baseline == "rollouts" else None,
        runs,
        delta / len(players),
    )
    p_bad = bad / runs
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
        intervention=_label(intervention),
    )


def _check_intervention(intervention, downstream: str, baseline: str):
    """`intervention`, `None` or a function `(k, r, factual) -> Plan`; a custom one sets its
    own downstream rule and takes the factual baseline."""
    intervention = check_function(intervention, "intervention", "(k, r, factual) -> Plan")
    if intervention is not None and downstream != "held":
        raise ValueError(
            "`downstream` applies to the default re-draw only; a custom `intervention` sets its "
            "own downstream rule (pass downstream=... to the do_* operators it uses)"
        )
    if intervention is not None and baseline == "rollouts":
        raise ValueError(
            "`baseline='rollouts'` is defined for the default re-draw (its baseline keeps "
            "step k and applies the same downstream rule); use baseline='factual' with a "
            "custom `intervention`"
        )
    return intervention


def _check_outcomes(nonfinite, factual_bad) -> None:
    """Every score finite, and, for the factual baseline (`factual_bad` `[F, W]`, else None),
    every world of a run agreeing on its outcome (else the baseline is not fixed)."""
    if nonfinite.any():
        raise ValueError(
            f"the pipeline returned non-finite scores ({int(nonfinite.sum())} runs); check its "
            "logits and score"
        )
    mixed = [] if factual_bad is None else np.flatnonzero(factual_bad.any(1) & ~factual_bad.all(1))
    if len(mixed):
        f, num_worlds = int(mixed[0]), factual_bad.shape[1]
        raise ValueError(
            f"run {f} is bad in {int(factual_bad[f].sum())} of its {num_worlds} worlds, so "
            "`baseline='factual'` (1[factual run bad]) is not fixed; use worlds that "
            "reproduce the run (recorded or inferred) or `baseline='rollouts'`"
        )


def _label(intervention) -> str:
    """The intervention's label in the result: `do_resample(k)` or the function's name."""
    if intervention is None:
        return "do_resample(k)"
    return getattr(intervention, "__name__", "intervention")


def _effect_intervals(bad, factual_bad, base_bad, runs: int, level: float):
    """The baseline's bad count `[F, n]` and value, and the effect's interval at `level`:
    Wilson's for the fixed baseline `factual_bad` `[F]` (`base_bad=None`), Newcombe's for
    one estimated from `base_bad` `[F, n]` bad runs out of `runs`."""
    if base_bad is None:
        base_count = np.broadcast_to(factual_bad[:, None].astype(np.int32), bad.shape)
        base = base_count.astype(np.float64)
        p_low, p_high = wilson_interval(bad, runs, level)
        return base_count, base, base - p_high, base - p_low
    base_count = base_bad.astype(np.int32)
    low, high = newcombe_interval(base_count, runs, bad, runs, level)
    return base_count, base_count / runs, low, high


def rollout_inputs(pipeline, cases, worlds, steps, num_rollouts):
    """The checks the rollout estimators share: `(structure, F, W, players, num_rollouts)`."""
    structure, num_failures, num_worlds = discover_checked(pipeline, cases, worlds)
    # Names or indices, intervened on in pipeline order.
    players = check_steps(structure, steps, indices=True)
    return (
        structure,
        num_failures,
        num_worlds,
        tuple(sorted(players)),
        check_positive_int(num_rollouts, "num_rollouts"),
    )
