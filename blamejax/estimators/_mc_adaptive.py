"""`mc_shapley`: Monte Carlo Shapley values with anytime-valid intervals and adaptive stopping,
vectorized over failures.

**Budget.** Counted in coalition evaluations (one pipeline run of one coalition in one
world): `2 W` for the empty and full coalitions, then `W (n - 1)` per order (`2 W (n - 1)`
per antithetic pair), W the number of worlds. `MCResult.evaluations` is exactly that count.
Each sample costs W times more than with one world; pass fewer worlds to sample faster. (The
compiled calls pad each order's prefixes with copies of the full coalition, which runs faster;
that padding, like idle lanes, counts in `MCResult.evaluations_computed` only.)

**Host loop.** All failures advance together from checkpoint to checkpoint
(`blamejax.checkpoints`). At each checkpoint one compiled call (per group of at most
`chunk_size` failures, `_mc_advance.py`) advances the still-active failures: wall time
follows the work left, a failure that has stopped spends nothing more, and the same compiled
function serves every checkpoint (compile time does not depend on the number of samples or
of active failures). A vmapped `while_loop` would instead run every failure until the slowest
had converged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import as_key, check_score_range, check_worlds, leading_size, resolve_players
from ..pipeline import Hard, World, check_finite_logits, discover_batch
from ..stats import _anytime as _bounds
from ._exact import _take
from ._mc import scored_prefixes
from ._mc_advance import _advance_function, _num_lanes, _num_slots
from ._mc_result import RADII, MCHistory, MCResult


def _check_stop(stop, epsilon) -> tuple[str, ...]:
    if isinstance(stop, str):
        stop = (stop,)
    try:
        names = tuple(stop)
    except TypeError:
        raise TypeError(f"`stop` must be a rule name or a sequence of them, got {stop!r}") from None
    for name in names:
        if name not in _bounds.RULES + ("budget",):
            raise ValueError(
                f"`stop` names an unknown rule {name!r}; the rules are "
                f"{list(_bounds.RULES)} (and 'budget', always active)"
            )
    names = tuple(dict.fromkeys(s for s in names if s != "budget"))
    if (
        not isinstance(epsilon, (int, float, np.floating, np.integer))
        or not np.isfinite(epsilon)
        or epsilon < 0
    ):
        raise ValueError(f"`epsilon` must be a finite number >= 0, got {epsilon!r}")
    if "width" in names and epsilon <= 0:
        raise ValueError("the 'width' rule needs `epsilon` > 0 (the widest interval allowed)")
    return names


def _rules_hold(names, values, lower, upper, epsilon) -> np.ndarray:
    """`[F, len(names)]` booleans: which requested rules hold for each failure."""
    out = np.zeros((values.shape[0], len(names)), bool)
    for j, name in enumerate(names):
        if name == "top1":
            out[:, j] = _bounds.top1_separated(values, lower, upper, epsilon)
        elif name == "ranking":
            out[:, j] = _bounds.ranking_separated(values, lower, upper, epsilon)
        else:
            out[:, j] = _bounds.widths_below(lower, upper, epsilon)
    return out


def mc_shapley(
    pipeline: Callable,
    cases,
    worlds: World,
    key,
    *,
    max_evaluations: int,
    steps: Sequence[str] | None = None,
    fixes: dict | None = None,
    score_range: tuple[float, float] = (0.0, 1.0),
    delta: float = 0.1,
    radius: str = "bernstein",
    stop: str | Sequence[str] = ("top1",),
    epsilon: float = 0.0,
    t1: int = 16,
    gamma: float = 1.25,
    antithetic: bool = False,
    mode=Hard(),
    chunk_size: int = 1024,
    lanes: int | None = None,
    history: bool = False,
) -> MCResult:
    """Monte Carlo Shapley values of every failure, with confidence intervals valid at every
    checkpoint and adaptive stopping; failures are processed together and each stops on its
    own.

    Intervals are formed, and stopping decided, only at the checkpoints
    `blamejax.checkpoints(t1, gamma, T)` (T the largest sample count `max_evaluations`
    allows; with no stopping rule, T is the only checkpoint), the one of step i at
    checkpoint k at level `blamejax.checkpoint_delta(delta, n, k)`. With the `"bernstein"`
    (default) or `"hoeffding"` radius, for each failure, with probability at least
    1 - delta every interval at every checkpoint contains the exact Shapley value (the one
    `exact_blame` computes), so a decision read off them when stopping is valid. The
    guarantee is per failure: among F failures, about delta * F will have a miss somewhere.
    The range of a marginal, `2 (s_max - s_min)`, comes from `score_range`.

    Stopping rules (`stop`, any that holds stops the failure):
    - `"top1"`: the step with the largest estimate is separated from every other step;
    - `"ranking"`: every pair of steps is separated in the order of their estimates;
    - `"width"`: every interval is at most `epsilon` wide;
    - the budget: always active; a failure also stops at the last checkpoint.
    Steps i above j count as separated when `lower_i > upper_j - epsilon`: if the intervals
    hold, step i is better, or worse by less than epsilon. With `epsilon = 0` (the default)
    tied steps (such as the refund demo's two 5/12 steps) are never separated and run to
    `max_evaluations`; a positive epsilon lets them stop once their intervals are about
    epsilon/2 wide. When several rules hold at once, `MCResult.rule` names the first in
    `stop`. Adaptively stopped estimates are slightly biased (the decision to stop depends
    on them); use a fixed budget (`stop=()`) to average estimates across failures.

    Cost, in coalition evaluations per failure (what `max_evaluations` bounds and
    `MCResult.evaluations` reports): `2 W` for the empty and full coalitions, then
    `W (n - 1)` per order, `2 W (n - 1)` per antithetic pair (W worlds, n steps). The
    work actually run, padding included, is `MCResult.evaluations_computed`.

    **Arguments:**
    - `pipeline`: `pipeline(ctx, case) -> score`, written for one failure, world and plan.
    - `cases`: a pytree of arrays with a leading failure axis F.
    - `worlds`: a `World` with keys `[F, W]`; every sample is scored in all W worlds.
    - `key`: an int seed or a typed key; failure f's orders come from `fold_in(key, f)`.
    - `max_evaluations`: the most coalition evaluations per failure (required).
    - `steps`, `fixes`: the steps to blame and their fixes, as in `exact_blame`.
    - `score_range`: the declared range of the score; a score outside it is an error.
    - `delta`: the error probability per failure, in (0, 1).
    - `radius`: `"bernstein"` (empirical Bernstein, the default), `"hoeffding"` (range
      only) or `"normal"` (asymptotic, no finite-sample guarantee).
    - `stop`: a rule name or a tuple of them (see above); `()` for a fixed budget.
    - `epsilon`: the indifference margin of the rules (and the width of `"width"`).
    - `t1`, `gamma`: the checkpoint schedule (`t1 >= 2`, `gamma > 1`).
    - `antithetic`: sample each order with its reverse; the pair mean is one sample. It
      helps when an order's and its reverse's marginals are negatively correlated and can
      double the variance per evaluation otherwise (see `sampling_variance`).
    - `mode`: `Hard()` or `Relaxed(tau)`.
    - `chunk_size`: the most failures per compiled call (a power of two); more failures
      are processed in several calls of the same compiled function.
    - `lanes`: samples per loop iteration, shared by the active failures (at least the
      number of failure slots); by default about 16384 evaluations' worth.
    - `history`: also return the estimates and intervals at every checkpoint.

    **Returns:** an `MCResult`.

    **Raises:** `ValueError`/`TypeError` that names the argument for malformed inputs, a
    budget too small for the first checkpoint, and scores outside `score_range`.

    ```python
    import blamejax as bj
    cases = bj.demos.refund_cases(num_cases=2)
    worlds = bj.recorded_worlds(0, 2)
    result = bj.mc_shapley(bj.demos.refund_pipeline, cases, worlds, key=1,
                           max_evaluations=100_000, stop="top1", epsilon=0.05)
    print(result.table(0))
    ```
    """
    num_failures = leading_size(cases)
    low_decl, high_decl = check_score_range(score_range)
    structure = discover_batch(pipeline, cases)
    check_finite_logits(cases)
    players, variants = resolve_players(structure, steps, fixes)
    n = len(players)
    if n < 2:
        raise ValueError(
            f"Monte Carlo Shapley needs at least 2 steps, got {n}; with one step its "
            "Shapley value is v(all) - v(empty): use exact_blame"
        )
    num_worlds = check_worlds(worlds, num_failures, structure)
    key = as_key(key)
    if not isinstance(delta, (float, int)) or not 0 < delta < 1:
        raise ValueError(f"`delta` must be in (0, 1), got {delta!r}")
    if radius not in RADII:
        raise ValueError(f"`radius` must be one of {list(RADII)}, got {radius!r}")
    names = _check_stop(stop, epsilon)
    epsilon = float(epsilon)
    if not isinstance(antithetic, bool):
        raise TypeError(f"`antithetic` must be a bool, got {antithetic!r}")
    if not isinstance(chunk_size, int) or chunk_size < 1 or chunk_size & (chunk_size - 1):
        raise ValueError(f"`chunk_size` must be a positive power of two, got {chunk_size!r}")
    if lanes is not None and (not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1):
        raise ValueError(f"`lanes` must be None or a positive int, got {lanes!r}")
    orders_per_sample = 2 if antithetic else 1
    unit_cost = num_worlds * (n - 1) * orders_per_sample
    unit_computed = num_worlds * scored_prefixes(n) * orders_per_sample
    fixed_cost = 2 * num_worlds
    if not isinstance(max_evaluations, (int, np.integer)) or isinstance(max_evaluations, bool):
        raise TypeError(f"`max_evaluations` must be an int, got {max_evaluations!r}")
    if not isinstance(t1, (int, np.integer)) or isinstance(t1, bool) or t1 < 2:
        raise ValueError(f"`t1` must be an int >= 2 (the first checkpoint), got {t1!r}")
    budget = (int(max_evaluations) - fixed_cost) // unit_cost
    # With a fixed budget (`stop=()`) the only checkpoint is the budget: 2 samples (for a
    # sample variance) are enough.
    first = t1 if names else 2
    if budget < first:
        label = f"t1 = {t1}" if names else "2 (a fixed budget needs a sample variance)"
        raise ValueError(
            f"`max_evaluations` = {max_evaluations} does not reach the first checkpoint: "
            f"{label} samples cost {fixed_cost + first * unit_cost} evaluations here (2 W + t W (n - 1)"
            f"{' x 2' if antithetic else ''}, n = {n}, W = {num_worlds})"
        )
    schedule = _bounds.checkpoints(t1, gamma, budget) if names else (budget,)
    value_range = 2.0 * (high_decl - low_decl)

    cases = jax.tree_util.tree_map(jnp.asarray, cases)  # on the device once, sliced there
    num_slots = _num_slots(num_failures, chunk_size)
    num_lanes = _num_lanes(num_slots, unit_computed, lanes)
    advance = _advance_function(pipeline, structure, players, variants, mode, antithetic, num_lanes)

    def packed(active):
        """The active failures in groups of at most S, each padded to S slots."""
        for start in range(0, len(active), num_slots):
            part = active[start : start + num_slots]
            index = np.concatenate([part, np.full(num_slots - len(part), part[0])])
            rows = jnp.asarray(index, jnp.int32)
            cases_s, worlds_s = _take((cases, worlds), rows)
            yield part, index, rows, cases_s, worlds_s

    computed = 0
    empty = np.zeros(num_failures)
    full = np.zeros(num_failures)
    count = np.zeros(num_failures, np.int64)
    mean = np.zeros((num_failures, n))
    m2 = np.zeros((num_failures, n))
    lower = np.full((num_failures, n), -np.inf)
    upper = np.full((num_failures, n), np.inf)
    evaluations = np.full(num_failures, fixed_cost, np.int64)
    converged = np.zeros(num_failures, bool)
    rule = np.zeros(num_failures, np.int32)
    stopped_at = np.zeros(num_failures, np.int32)
    rule_ids = np.asarray([1 + _bounds.RULES.index(s) for s in names] or [0])
    if history:
        shape = (num_failures, len(schedule), n)
        hist = {name: np.full(shape, np.nan) for name in ("values", "variance", "lower", "upper")}
    active = np.arange(num_failures)
    t_prev = 0
    for k, t_k in enumerate(schedule, start=1):
        steps_now = t_k - t_prev
        lows, highs = [], []
        for part, index, rows, cases_s, worlds_s in packed(active):
            shift = mean[index].astype(np.float32)
            s1, s2, lo, hi, iterations, ends_empty, ends_full = advance(
                cases_s,
                worlds_s,
                rows,
                key,
                empty[index].astype(np.float32),
                full[index].astype(np.float32),
                shift,
                np.int32(len(part)),
                np.int32(t_prev),
                np.int32(t_k),
            )
            size = len(part)
            if t_prev == 0:  # the first call also scored the empty and full coalitions
                empty[part] = np.asarray(ends_empty)[:size]
                full[part] = np.asarray(ends_full)[:size]
                computed += num_slots * fixed_cost
            s1 = np.asarray(s1, np.float64)[:size]
            s2 = np.asarray(s2, np.float64)[:size]
            lows.append(float(lo))
            highs.append(float(hi))
            computed += int(iterations) * num_lanes * unit_computed
            # Merge this call's sums into the running mean and sum of squared deviations
            # (Chan et al.'s parallel update, in float64 on the host).
            chunk_mean = s1 / steps_now
            chunk_m2 = np.maximum(s2 - steps_now * (chunk_mean - shift[:size]) ** 2, 0.0)
            t_old = count[part][:, None].astype(np.float64)
            diff = chunk_mean - mean[part]
            mean[part] += diff * steps_now / (t_old + steps_now)
            m2[part] += chunk_m2 + diff**2 * t_old * steps_now / (t_old + steps_now)
        _check_range(lows, highs, low_decl, high_decl, score_range)
        count[active] = t_k
        evaluations[active] += steps_now * unit_cost
        variance = m2[active] / (t_k - 1)
        half = _bounds.confidence_radius(radius, t_k, variance, value_range, _bounds.checkpoint_delta(delta, n, k))
        lower[active] = mean[active] - half
        upper[active] = mean[active] + half
        if history:
            now = dict(
                values=mean[active], variance=variance, lower=lower[active], upper=upper[active]
            )
            for name, value in now.items():
                hist[name][active, k - 1] = value
        holds = _rules_hold(names, mean[active], lower[active], upper[active], epsilon)
        fired = holds.any(axis=1)
        if names:
            rule[active] = np.where(fired, rule_ids[np.argmax(holds, axis=1)], 0)
        converged[active] = fired
        stopped_at[active] = k
        active = active[~(fired | (k == len(schedule)))]
        t_prev = t_k
        if len(active) == 0:
            break

    variance = m2 / np.maximum(count - 1, 1)[:, None]
    # Host NumPy arrays, as computed (float64): nothing is rounded, and no transfer back to
    # the device (which cost small runs a noticeable share of their time).
    arrays = dict(
        values=mean,
        lower=lower,
        upper=upper,
        variance=variance,
        empty=empty,
        full=full,
        num_samples=count.astype(np.int32),
        evaluations=evaluations.astype(np.int32),
        converged=converged,
        rule=rule,
        checkpoint=stopped_at,
    )
    if history:
        arrays["history"] = MCHistory(t=np.asarray(schedule, np.int32), **hist)
    return MCResult(
        steps=tuple(structure.steps[p] for p in players),
        history=arrays.pop("history", None),
        **arrays,
        antithetic=antithetic,
        radius=radius,
        delta=float(delta),
        epsilon=epsilon,
        stop=names,
        score_range=(low_decl, high_decl),
        evaluations_computed=int(computed),
    )


def _check_range(lows, highs, low_decl, high_decl, score_range) -> None:
    low, high = float(min(lows)), float(max(highs))
    if low < low_decl or high > high_decl:
        raise ValueError(
            f"the pipeline returned scores in [{low}, {high}], outside the declared "
            f"`score_range` {score_range}; declare the true range (the confidence bounds use it)"
        )
