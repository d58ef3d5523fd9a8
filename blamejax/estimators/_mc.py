"""Monte Carlo Shapley values of many failures, each with intervals valid at every
look and stopping on its own (`mc_shapley`).

**Budget.** Counted in coalition evaluations (one pipeline run of one coalition in one
world): `2 W` for the empty and full coalitions, then `W (n - 1)` per order (`2 W (n - 1)`
per antithetic pair). `MCResult.evaluations` is exactly that count. (The compiled calls
score each order's prefixes in blocks of at most 8, padded with copies of the full
coalition, which runs faster; that padding, like idle lanes and, for n > 9, the rest of
the block that scores the empty and full coalition in every lane, counts in
`MCResult.evaluations_computed` only.)

**The driver** is a host loop over looks fixed in advance
(`blamejax.stats.looks`), written as `_mc_init` / `_mc_step` / `_mc_finish` over an
`MCState`. At each look one compiled call per group of at most `block_size` failures
(`blamejax.estimators._advance`) advances the still-active failures: wall time follows the
work left, and a failure that has stopped spends nothing more. The estimator for one
failure is in `_permutation.py`, the blocks of an order's prefixes in `_prefixes.py`, the
result types in `_results.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PRNGKeyArray

from .._arguments import (
    check_bool,
    check_finite_number,
    check_option,
    check_positive_int,
    check_power_of_two,
    renamed_keywords,
)
from .._checks import (
    as_key,
    check_scores_in_range,
    check_worlds,
    leading_size,
    split_case_ids,
    warn_not_failures,
)
from .._game import Game, make_game
from ..pipeline import Hard, World, check_finite_logits
from ..stats import (
    RULES,
    Interval,
    Schedule,
    confidence_radius,
    look_delta,
    looks,
    ranking_separated,
    top1_separated,
    widths_below,
)
from ._advance import advance_function, lanes_per_iteration, slots_per_call
from ._checkpoint import defers_interrupts, interrupt_notice, interrupted
from ._devices import failure_sharding, num_shards, slot_layout, split_over_devices, take_rows
from ._exact import explain_nan
from ._prefixes import ends_in_loop, prefix_blocks, scored_prefixes
from ._results import MCHistory, MCResult


class MCSettings(NamedTuple):
    """What an `mc_shapley` run was asked for, checked once (static for the whole run)."""

    game: Game
    key: PRNGKeyArray
    num_failures: int
    stop: tuple[str, ...]  # the requested stopping rules (the budget is always active)
    epsilon: float
    interval: Interval
    antithetic: bool
    schedule: tuple[int, ...]  # the looks, in samples
    value_range: float  # the width of the interval a marginal lies in
    unit_cost: int  # evaluations charged per sample
    unit_computed: int  # evaluations computed per sample (prefix padding included)
    fixed_cost: int  # evaluations of the empty and the full coalition
    num_slots: int  # failure slots per compiled call
    num_lanes: int  # samples per loop iteration (per device)
    history: bool
    devices: int = 1  # devices the failure slots are split over
    case_ids: np.ndarray | None = None  # shape=(F,), the case id of each failure (from the worlds)


class MCState(NamedTuple):
    """Where every failure's estimate stands: host arrays, one row per failure (float64
    statistics). `_mc_step` returns a new state; it never changes the one it is given."""

    empty: np.ndarray  # shape=(F,), v(empty) (mean over worlds)
    full: np.ndarray  # shape=(F,), v(all)
    count: np.ndarray  # shape=(F,), dtype=int64, samples taken
    mean: np.ndarray  # shape=(F, n), running mean of the marginals
    m2: np.ndarray  # shape=(F, n), running sum of squared deviations
    lower: np.ndarray  # shape=(F, n), the interval at the last look reached
    upper: np.ndarray  # shape=(F, n)
    evaluations: np.ndarray  # shape=(F,), dtype=int64, evaluations charged
    converged: np.ndarray  # shape=(F,), dtype=bool, a requested rule held
    rule: np.ndarray  # shape=(F,), dtype=int32, index into RULE_NAMES of the rule that stopped it
    look: np.ndarray  # shape=(F,), dtype=int32, 1-based look at which it stopped
    active: np.ndarray  # shape=(A,), the failures still sampling
    t_prev: int  # samples every active failure has taken
    computed: int  # evaluations the compiled calls ran, padding and idle lanes included
    history: dict | None  # name -> shape=(F, K, n), or None unless requested


def _check_stop(stop, epsilon) -> tuple[str, ...]:
    if isinstance(stop, str):
        stop = (stop,)
    try:
        names = tuple(stop)
    except TypeError:
        raise TypeError(f"`stop` must be a rule name or a sequence of them, got {stop!r}") from None
    for name in names:
        if name not in RULES + ("budget",):
            raise ValueError(
                f"`stop` names an unknown rule {name!r}; the rules are "
                f"{list(RULES)} (and 'budget', always active)"
            )
    names = tuple(dict.fromkeys(s for s in names if s != "budget"))
    check_finite_number(epsilon, "epsilon", at_least=0)
    if "width" in names and epsilon <= 0:
        raise ValueError("the 'width' rule needs `epsilon` > 0 (the widest interval allowed)")
    return names


def _rules_hold(names, values, lower, upper, epsilon) -> np.ndarray:
    """`[F, len(names)]` booleans: which requested rules hold for each failure."""
    out = np.zeros((values.shape[0], len(names)), bool)
    for j, name in enumerate(names):
        if name == "top1":
            out[:, j] = top1_separated(values, lower, upper, epsilon)
        elif name == "ranking":
            out[:, j] = ranking_separated(values, lower, upper, epsilon)
        else:
            out[:, j] = widths_below(lower, upper, epsilon)
    return out


@renamed_keywords(
    interval={"radius": "kind", "delta": "delta"},
    schedule={"first_checkpoint": "first", "growth": "growth"},
)
@defers_interrupts  # Ctrl-C is honoured between looks, never inside XLA
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
    interval: Interval = Interval("bernstein", delta=0.1),
    stop: str | Sequence[str] = ("top1",),
    epsilon: float = 0.0,
    schedule: Schedule = Schedule(first=16, growth=1.25),
    antithetic: bool = False,
    mode=Hard(),
    block_size: int = 1024,
    lanes: int | None = None,
    history: bool = False,
    devices: Sequence | None = None,
) -> MCResult:
    """Monte Carlo Shapley values of every failure, with confidence intervals valid at every
    look and adaptive stopping; failures are processed together and each stops on its own.

    Intervals are formed, and stopping decided, only at the looks
    `blamejax.stats.looks(schedule, T)` (T the largest sample count `max_evaluations`
    allows; with no stopping rule, T is the only look). With a `"bernstein"` or
    `"hoeffding"` interval, for each failure, with probability at least 1 - delta every
    interval at every look contains the exact Shapley value (the one `exact_blame`
    computes), so a decision read off them when stopping is valid. The guarantee is per
    failure: among F failures, about delta * F will have a miss somewhere.

    Stopping rules (`stop`, any that holds stops the failure; `blamejax.stats.RULES`):
    `"top1"` (the top step separated from every other), `"ranking"` (every pair separated
    in the order of the estimates), `"width"` (every interval at most `epsilon` wide); the
    budget is always active. Steps i above j count as separated when
    `lower_i > upper_j - epsilon`: with `epsilon = 0` tied steps never separate and run to
    `max_evaluations`. When several rules hold at once, `MCResult.rule` names the first in
    `stop`. Adaptively stopped estimates are slightly biased; use a fixed budget
    (`stop=()`) to average estimates across failures.

    **Arguments:**
    - `pipeline`: `pipeline(ctx, case) -> score`, written for one failure, world and plan.
    - `cases`: a pytree of arrays with a leading failure axis F.
    - `worlds`: a `World` with keys `[F, W]`; every sample is scored in all W worlds.
    - `key`: an int seed or a typed key; failure f's orders come from `fold_in(key, f)`.
    - `max_evaluations`: the most coalition evaluations per failure (required): `2 W` for
      the empty and full coalitions, then `W (n - 1)` per order (`2 W (n - 1)` per
      antithetic pair), as `MCResult.evaluations` reports. It bounds a budget; the batch's
      `num_permutations` counts orders instead.
    - `steps`, `fixes`: the steps to blame and their fixes, as in `exact_blame`.
    - `score_range`: the declared range of the score; a score outside it is an error
      (the range of a marginal, `2 (s_max - s_min)`, comes from it).
    - `interval`: a `blamejax.stats.Interval` (its kind, and `delta` per failure).
    - `stop`: a rule name or a tuple of them (see above); `()` for a fixed budget.
    - `epsilon`: the indifference margin of the rules (and the width of `"width"`).
    - `schedule`: a `blamejax.stats.Schedule`, the looks in samples.
    - `antithetic`: sample each order with its reverse; the pair mean is one sample (see
      `blamejax.reduction.sampling_variance` for when it helps).
    - `mode`: `Hard()` or `Relaxed(tau)`.
    - `block_size`: the most failures per compiled call (a power of two).
    - `lanes`: samples per loop iteration, shared by the active failures (at least the
      number of failure slots); by default about 16384 evaluations' worth.
    - `history`: also return the estimates and intervals at every look.
    - `devices`: the devices to split the failures over (default: every device of every
      process; see docs/scaling.md); a failure's samples do not depend on the split.

    **Returns:** an `MCResult`.

    **Raises:** `ValueError`/`TypeError` that names the argument for malformed inputs, a
    budget too small for the first look, and scores outside `score_range`.

    ```python
    import blamejax as bj
    cases = bj.demos.refund_cases(num_cases=1)  # customer 0's reply was wrong: a failure
    worlds = bj.recorded_worlds(0, range(1))
    result = bj.mc_shapley(bj.demos.refund_pipeline, cases, worlds, key=1,
                           max_evaluations=100_000, stop="top1", epsilon=0.05)
    print(result.table(0))
    ```
    """
    game = make_game(pipeline, cases, steps=steps, fixes=fixes, mode=mode, score_range=score_range)
    check_finite_logits(cases)
    settings = _mc_settings(
        game,
        cases,
        worlds,
        as_key(key),
        max_evaluations,
        stop=_check_stop(stop, epsilon),
        epsilon=float(epsilon),
        interval=check_option(interval, "interval", Interval),
        schedule=check_option(schedule, "schedule", Schedule),
        antithetic=check_bool(antithetic, "antithetic"),
        block_size=check_power_of_two(block_size, "block_size"),
        lanes=check_positive_int(lanes, "lanes", allow_none=True),
        history=check_bool(history, "history"),
    )
    worlds, case_ids = split_case_ids(worlds)  # the ids travel to the result, not the programs
    settings = settings._replace(case_ids=case_ids)
    cases = jax.tree_util.tree_map(jnp.asarray, cases)  # on the device once, sliced there
    advance = _advance_program(settings, devices)
    settings = settings._replace(devices=advance.devices, num_lanes=advance.num_lanes)
    state = _mc_init(settings)
    interrupt_notice("mc_shapley: Ctrl-C received; stopping at the end of the current look")
    for k, t_k in enumerate(settings.schedule, start=1):
        state = _mc_step(settings, advance.function, state, cases, worlds, k, t_k)
        if interrupted():
            raise _interrupted(_mc_finish(settings, state), k, len(settings.schedule))
        if len(state.active) == 0:
            break
    result = _mc_finish(settings, state)
    warn_not_failures(result.empty, game.score_range, case_ids=result.case_ids)
    return result


class _Advance(NamedTuple):
    function: Callable  # the compiled advance of one group of failure slots
    devices: int  # devices the failure slots are split over
    num_lanes: int  # samples per loop iteration, per device


def _advance_program(settings: MCSettings, devices) -> _Advance:
    """The compiled advance, split over `devices` when more than one: each device takes its
    share of the failures and of the lanes."""
    sharding = failure_sharding(devices)
    if sharding is None:
        function = advance_function(settings.game, settings.antithetic, settings.num_lanes)
        return _Advance(function, 1, settings.num_lanes)
    width = num_shards(sharding)
    num_lanes = -(-settings.num_lanes // width)
    function = split_over_devices(
        advance_function(settings.game, settings.antithetic, num_lanes),
        sharding,
        (0, 0, 0, None, 0, 0, 0, "device", None, None),
        (0, 0, "device", "device", "device", 0, 0),
    )
    return _Advance(function, width, num_lanes)


def _interrupted(result: MCResult, k: int, num_looks: int) -> KeyboardInterrupt:
    """The `KeyboardInterrupt` of a Ctrl-C at look k, carrying the result so far."""
    error = KeyboardInterrupt(
        f"mc_shapley stopped by Ctrl-C at look {k} of {num_looks}; the estimates so "
        "far, with intervals valid at that look, are kept in this exception's `result` "
        "(`except KeyboardInterrupt as stop: partial = stop.result`)"
    )
    error.result = result
    return error


def _mc_settings(
    game: Game,
    cases,
    worlds: World,
    key,
    max_evaluations,
    *,
    stop: tuple[str, ...],
    epsilon: float,
    interval: Interval,
    schedule: Schedule,
    antithetic: bool,
    block_size: int,
    lanes: int | None,
    history: bool,
) -> MCSettings:
    """Check what `mc_shapley`'s arguments must agree on (cases, worlds, the budget) and fix
    the schedule and the compiled shapes; the keyword arguments come checked one by one."""
    num_failures = leading_size(cases)
    n = game.num_players
    if n < 2:
        raise ValueError(
            f"Monte Carlo Shapley needs at least 2 steps, got {n}; with one step its "
            "Shapley value is v(all) - v(empty): use exact_blame"
        )
    num_worlds = check_worlds(worlds, num_failures, game.structure)
    orders_per_sample = 2 if antithetic else 1
    unit_cost = num_worlds * (n - 1) * orders_per_sample
    unit_computed = num_worlds * scored_prefixes(n) * orders_per_sample
    fixed_cost = 2 * num_worlds
    if not isinstance(max_evaluations, (int, np.integer)) or isinstance(max_evaluations, bool):
        raise TypeError(f"`max_evaluations` must be an int, got {max_evaluations!r}")
    budget = (int(max_evaluations) - fixed_cost) // unit_cost
    # With a fixed budget (`stop=()`) the only look is the budget: 2 samples (for a
    # sample variance) are enough.
    first = schedule.first if stop else 2
    if budget < first:
        label = (
            f"the schedule's first look = {schedule.first}"
            if stop
            else "2 (a fixed budget needs a sample variance)"
        )
        raise ValueError(
            f"`max_evaluations` = {max_evaluations} does not reach the first look: "
            f"{label} samples cost {fixed_cost + first * unit_cost} evaluations here (2 W + t W (n - 1)"
            f"{' x 2' if antithetic else ''}, n = {n}, W = {num_worlds})"
        )
    marks = looks(schedule, budget) if stop else (budget,)
    low, high = game.score_range
    num_slots = slots_per_call(num_failures, block_size)
    return MCSettings(
        game=game,
        key=key,
        num_failures=num_failures,
        stop=stop,
        epsilon=epsilon,
        interval=interval,
        antithetic=antithetic,
        schedule=tuple(marks),
        value_range=2.0 * (high - low),
        unit_cost=unit_cost,
        unit_computed=unit_computed,
        fixed_cost=fixed_cost,
        num_slots=num_slots,
        num_lanes=lanes_per_iteration(num_slots, unit_computed // prefix_blocks(n)[0], lanes),
        history=history,
    )


def _mc_init(settings: MCSettings) -> MCState:
    """Every failure before its first sample: active, nothing estimated."""
    num_failures, n = settings.num_failures, settings.game.num_players
    history = None
    if settings.history:
        shape = (num_failures, len(settings.schedule), n)
        history = {
            name: np.full(shape, np.nan) for name in ("values", "variance", "lower", "upper")
        }
    return MCState(
        empty=np.zeros(num_failures),
        full=np.zeros(num_failures),
        count=np.zeros(num_failures, np.int64),
        mean=np.zeros((num_failures, n)),
        m2=np.zeros((num_failures, n)),
        lower=np.full((num_failures, n), -np.inf),
        upper=np.full((num_failures, n), np.inf),
        evaluations=np.full(num_failures, settings.fixed_cost, np.int64),
        converged=np.zeros(num_failures, bool),
        rule=np.zeros(num_failures, np.int32),
        look=np.zeros(num_failures, np.int32),
        active=np.arange(num_failures),
        t_prev=0,
        computed=0,
        history=history,
    )


def _mc_step(
    settings: MCSettings, advance, state: MCState, cases, worlds, k: int, t_k: int
) -> MCState:
    """Advance every active failure to `t_k` samples (look k), form its intervals and
    apply the stopping rules; the failures that stop leave `active`."""
    n = settings.game.num_players
    state = state._replace(  # copies: the state given is left as it was
        **{
            name: getattr(state, name).copy()
            for name in (
                "empty",
                "full",
                "count",
                "mean",
                "m2",
                "lower",
                "upper",
                "evaluations",
                "converged",
                "rule",
                "look",
            )
        },
        history=None
        if state.history is None
        else {name: x.copy() for name, x in state.history.items()},
    )
    empty, full, count, mean, m2 = state.empty, state.full, state.count, state.mean, state.m2
    active, t_prev, computed = state.active, state.t_prev, state.computed
    steps_now = t_k - t_prev
    dtype = jnp.result_type(float)  # the scores' dtype: float32, or float64 under x64
    lows, highs = [], []
    for part, index, rows, num_active, positions in _packed(
        active, settings.num_slots, settings.devices
    ):
        cases_s, worlds_s = take_rows((cases, worlds), rows)
        shift = mean[index].astype(dtype)
        s1, s2, lo, hi, iterations, ends_empty, ends_full = advance(
            cases_s,
            worlds_s,
            rows,
            settings.key,
            empty[index].astype(dtype),
            full[index].astype(dtype),
            shift,
            num_active,
            np.int32(t_prev),
            np.int32(t_k),
        )
        if t_prev == 0:  # the first call also scored the empty and full coalitions
            empty[part] = np.asarray(ends_empty)[positions]
            full[part] = np.asarray(ends_full)[positions]
            computed += _ends_computed(settings, len(index))
        s1 = np.asarray(s1, np.float64)[positions]
        s2 = np.asarray(s2, np.float64)[positions]
        lows.append(float(np.min(lo)))  # one per device when split
        highs.append(float(np.max(hi)))
        computed += int(np.sum(iterations)) * settings.num_lanes * settings.unit_computed
        # Merge this call's sums into the running mean and sum of squared deviations
        # (Chan et al.'s parallel update, in float64 on the host).
        chunk_mean = s1 / steps_now
        chunk_m2 = np.maximum(s2 - steps_now * (chunk_mean - shift[positions]) ** 2, 0.0)
        t_old = count[part][:, None].astype(np.float64)
        diff = chunk_mean - mean[part]
        mean[part] += diff * steps_now / (t_old + steps_now)
        m2[part] += chunk_m2 + diff**2 * t_old * steps_now / (t_old + steps_now)
    # A NaN score makes a marginal, v(empty) or v(all) NaN: tested on the sums, which is
    # reliable where the compiled min/max are not.
    nan = np.isnan(mean).any(axis=1) | np.isnan(empty) | np.isnan(full)
    check_scores_in_range(
        np.min(lows),
        np.max(highs),
        settings.game.score_range,
        lambda: explain_nan(settings.game, cases, worlds, nan),
        nan=bool(nan[active].any()),
    )
    count[active] = t_k
    state.evaluations[active] += steps_now * settings.unit_cost
    variance = m2[active] / (t_k - 1)
    delta_k = look_delta(settings.interval.delta, n, k)
    half = confidence_radius(settings.interval.kind, t_k, variance, settings.value_range, delta_k)
    state.lower[active] = mean[active] - half
    state.upper[active] = mean[active] + half
    if state.history is not None:
        now = dict(
            values=mean[active],
            variance=variance,
            lower=state.lower[active],
            upper=state.upper[active],
        )
        for name, value in now.items():
            state.history[name][active, k - 1] = value
    holds = _rules_hold(
        settings.stop, mean[active], state.lower[active], state.upper[active], settings.epsilon
    )
    fired = holds.any(axis=1)
    if settings.stop:
        rule_ids = np.asarray([1 + RULES.index(s) for s in settings.stop])
        state.rule[active] = np.where(fired, rule_ids[np.argmax(holds, axis=1)], 0)
    state.converged[active] = fired
    state.look[active] = k
    active = active[~(fired | (k == len(settings.schedule)))]
    return state._replace(active=active, t_prev=t_k, computed=computed)


def _ends_computed(settings: MCSettings, num_slots: int) -> int:
    """The evaluations a first call runs to score the empty and the full coalition: one
    block of prefixes in every lane of every device (`ends_in_loop`), or 2 W per slot."""
    n = settings.game.num_players
    if ends_in_loop(n):
        per_lane = settings.unit_computed // prefix_blocks(n)[0]
        return settings.devices * settings.num_lanes * per_lane
    return num_slots * settings.fixed_cost


def _packed(active, num_slots: int, num_devices: int = 1):
    """The active failures in groups of at most S, each padded to S slots with copies of
    its first failure (split over several devices, each device's share packed into its own
    slots: `slot_layout`): `(failures, padded index, padded rows on the device, active slots
    (one count per device when split), the slot of each failure)`."""
    for start in range(0, len(active), num_slots):
        part = active[start : start + num_slots]
        if num_devices > 1:
            slots = -(-num_slots // num_devices) * num_devices
            index, num_active, positions = slot_layout(part, slots, num_devices)
        else:
            index = np.concatenate([part, np.full(num_slots - len(part), part[0])])
            num_active, positions = np.int32(len(part)), np.arange(len(part))
        yield part, index, jnp.asarray(index, jnp.int32), num_active, positions


def _mc_finish(settings: MCSettings, state: MCState) -> MCResult:
    """The result: host NumPy arrays, as computed (float64; nothing rounded, and no transfer
    back to the device, which cost small runs a noticeable share of their time)."""
    variance = state.m2 / np.maximum(state.count - 1, 1)[:, None]
    # A Shapley value lies where its marginals do, in [-(high - low), high - low]: the
    # reported bounds go no further (the stopping rules saw the unclipped ones).
    bound = settings.value_range / 2
    history = None
    if state.history is not None:
        recorded = dict(state.history)
        for name in ("lower", "upper"):
            recorded[name] = np.clip(recorded[name], -bound, bound)
        history = MCHistory(t=np.asarray(settings.schedule, np.int32), **recorded)
    num_failures = state.mean.shape[0]
    return MCResult(
        steps=settings.game.steps,
        values=state.mean,
        lower=np.clip(state.lower, -bound, bound),
        upper=np.clip(state.upper, -bound, bound),
        variance=variance,
        empty=state.empty,
        full=state.full,
        num_samples=state.count.astype(np.int32),
        evaluations=state.evaluations.astype(np.int32),
        converged=state.converged,
        rule=state.rule,
        look=state.look,
        history=history,
        antithetic=settings.antithetic,
        interval=settings.interval.kind,
        delta=settings.interval.delta,
        epsilon=settings.epsilon,
        stop=settings.stop,
        score_range=settings.game.score_range,
        evaluations_computed=int(state.computed),
        case_ids=np.arange(num_failures) if settings.case_ids is None else settings.case_ids,
    )
