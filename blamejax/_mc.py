"""Monte Carlo Shapley values: random orders of the steps, anytime-valid confidence
intervals and adaptive stopping, vectorized over failures.

One **sample** is one random order of the n steps (or, with `antithetic=True`, an order and
its reverse, averaged: the pair is then the unit every bound counts). Fixing the steps one at
a time in that order scores the n + 1 prefixes of the order; the differences of consecutive
prefixes give one marginal contribution per step, and they telescope to `v(all) - v(empty)`,
so every estimate adds up exactly. The empty and the full coalition are the same for every
order: they are scored once per failure, and each order costs the n - 1 prefixes in between.

**Budget.** Counted in coalition evaluations (one pipeline run of one coalition in one
world): `2 W` for the empty and full coalitions, then `W (n - 1)` per order (`2 W (n - 1)`
per antithetic pair), W the number of worlds. `MCResult.evaluations` is exactly that count.

**Worlds.** With W worlds per failure, every order is scored in all W worlds (with the same
noise across the order's prefixes: common random numbers) and a coalition's value is their
mean, as in `exact_blame`. So the estimates target exactly the values `exact_blame` computes,
add up to its `v(all) - v(empty)`, and a marginal still lies in an interval of width
`2 (s_max - s_min)`. Each sample then costs W times more; pass fewer worlds to sample faster.

**Host loop.** All failures advance together from checkpoint to checkpoint
(`blamejax.checkpoints`). At each checkpoint one compiled call (per group of at most
`chunk_size` failures) advances the still-active failures, packed into the first slots of a
fixed number of failure slots (a power of two), with a `lax.fori_loop` over iterations of a
fixed number of sample lanes inside. The lanes are shared out among the active failures, so
when some stop the others get more lanes each and the loop needs fewer iterations: wall time
follows the work left, a failure that has stopped spends nothing more, and the same compiled
function serves every checkpoint (compile time does not depend on the number of samples or
of active failures). A vmapped `while_loop` would instead run every failure until the slowest
had converged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.extend.random as jax_random_ext
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, UInt32

from . import _bounds
from ._evaluate import mask_plan, run_score
from ._exact import _check_score_range, _from_host, _to_host, check_worlds, resolve_players
from ._pipeline import Hard, World, world_noise
from ._structure import Structure, check_finite_logits, discover_batch
from ._worlds import _leading_size, as_key

_PERM_TAG = 0x5045524D  # "PERM": keeps the order stream apart from the noise streams
RADII = ("bernstein", "hoeffding", "normal")
RULE_NAMES = ("budget",) + _bounds.RULES
_TARGET_LANES = 16384  # coalition evaluations per loop iteration (all lanes together)
_MIN_SLOTS = 32  # failure slots of the smallest compiled call

# Number of times each compiled function has been traced (tests guard recompiles).
TRACE_COUNTS: dict = {}
_CACHE: dict = {}
_NOISE_CACHE: dict = {}


# --------------------------------------------------------------------------------------
# The estimator for one failure: pure functions.
# --------------------------------------------------------------------------------------


def _mask_scores(pipeline, structure, case, world, noise, players, fixes, masks, mode):
    """Scores of boolean coalition masks `[M, n]` in one world whose site noise is given
    (`blamejax.mask_values` with the noise computed once outside the sampling loop)."""

    def one(mask):
        plan = mask_plan(structure, players, fixes, mask)
        return run_score(pipeline, structure, case, world, plan, mode, noise)

    return jax.vmap(one)(masks)


def _scorer(pipeline, structure, case, worlds, noises, players, fixes, mode):
    """`masks [M, n] -> (mean over worlds [M], min score, max score)` for one failure."""

    def score(masks):
        per_world = jax.vmap(
            lambda world, noise: _mask_scores(
                pipeline, structure, case, world, noise, players, fixes, masks, mode
            )
        )(worlds, noises)  # [W, M]
        return per_world.mean(axis=0), per_world.min(), per_world.max()

    return score


def order_seed(key: PRNGKeyArray) -> UInt32[Array, " 2"]:
    """The two words that address the random orders drawn with `key`."""
    tagged = jr.fold_in(key, _PERM_TAG)
    data = jr.key_data(tagged)
    if data.shape == (2,) and data.dtype == jnp.uint32:
        return data
    return jr.bits(tagged, (2,), jnp.uint32)


def _ranks(seed: UInt32[Array, " 2"], units: Int[Array, " B"], n: int) -> Int[Array, "B n"]:
    """`rank[b, j]`: the position of step j in the order of sample `units[b]`.

    The order of sample p ranks n Threefry-2x32 words drawn at counters `p n + j` under
    `seed` (a counter-based generator: one hash per word, nothing carried between samples),
    so it depends only on (seed, p), never on how samples are batched. Ties between two
    32-bit words (probability below n^2 / 2^33) are broken by step index. Counters wrap
    after 2^32 / n samples per failure."""

    def one(p):
        counter = (p.astype(jnp.uint32) * jnp.uint32(n)) + jnp.arange(n, dtype=jnp.uint32)
        words = jax_random_ext.threefry_2x32(seed, counter)
        # rank_j = #{k : (w_k, k) < (w_j, j)}: n^2 comparisons, much cheaper than sorting
        # on a CPU for the n of a pipeline.
        index = jnp.arange(n)
        before = (words[None, :] < words[:, None]) | (
            (words[None, :] == words[:, None]) & (index[None, :] < index[:, None])
        )
        return before.sum(axis=1, dtype=jnp.int32)

    return jax.vmap(one)(units)


def _samples(score, ranks, empty, full, antithetic: bool):
    """One marginal vector per sample: `[B, n]` (the pair mean when antithetic), and the
    min and max score seen."""
    num, n = ranks.shape
    if antithetic:
        ranks = jnp.concatenate([ranks, (n - 1) - ranks], axis=0)
    sizes = jnp.arange(1, n, dtype=jnp.int32)
    masks = ranks[:, None, :] < sizes[None, :, None]  # [U B, n-1, n]: interior prefixes
    values, low, high = score(masks.reshape(-1, n))
    values = values.reshape(ranks.shape[0], n - 1)
    dtype = values.dtype
    column = jnp.ones((ranks.shape[0], 1), dtype)
    prefix = jnp.concatenate(
        [empty.astype(dtype) * column, values, full.astype(dtype) * column], axis=1
    )
    after = jnp.take_along_axis(prefix, ranks + 1, axis=1)
    before = jnp.take_along_axis(prefix, ranks, axis=1)
    marginals = after - before  # [U B, n]
    if antithetic:
        marginals = 0.5 * (marginals[:num] + marginals[num:])
    return marginals, low, high


def _ends(score, n: int):
    """v(empty) and v(all), mean over worlds, and the min and max score seen."""
    masks = jnp.stack([jnp.zeros((n,), bool), jnp.ones((n,), bool)])
    values, low, high = score(masks)
    return values[0], values[1], low, high


class MCEstimate(NamedTuple):
    """A fixed-budget Monte Carlo estimate for one failure.

    - `values`: `Float[Array, "n"]`, the mean marginal contribution of each step (sums to
      `v(all) - v(empty)` up to float rounding).
    - `variance`: `Float[Array, "n"]`, the sample variance of one sample (t - 1 denominator).
    """

    values: Float[Array, " n"]
    variance: Float[Array, " n"]


def mc_shapley_fixed(
    pipeline: Callable,
    structure: Structure,
    case,
    worlds: World,
    key: PRNGKeyArray,
    num_samples: int,
    players: Sequence[int],
    fix_variants: Sequence[int],
    *,
    antithetic: bool = False,
    mode=Hard(),
) -> MCEstimate:
    """Permutation-sampling Shapley values of one failure with a fixed number of samples:
    a pure function (a `lax.scan` over samples, no data-dependent stopping), so it can be
    jitted, vmapped over failures and differentiated (e.g. with respect to the logits in
    `Relaxed` mode).

    Sample p uses the order addressed by `(key, p)`, exactly as failure f of `mc_shapley`
    does with `key = jax.random.fold_in(root_key, f)`; the two agree up to float rounding.

    **Arguments:**
    - `pipeline`, `structure`: the pipeline and its `discover`ed structure.
    - `case`: one case (no failure axis).
    - `worlds`: a `World` whose key has shape `[W]` (this failure's worlds).
    - `key`: a typed key for the orders.
    - `num_samples`: t, the number of orders (antithetic pairs when `antithetic`), >= 2.
    - `players`, `fix_variants`: the steps to blame (indices) and their fix variants
      (see `blamejax.resolve_players`).
    - `antithetic`: sample each order together with its reverse.
    - `mode`: `Hard()` or `Relaxed(tau)`.

    **Returns:** an `MCEstimate`. It costs `2 W + t W (n - 1)` evaluations (twice the
    last term when antithetic).
    """
    players = tuple(int(p) for p in players)
    fix_variants = tuple(int(f) for f in fix_variants)
    n = len(players)
    if n < 2:
        raise ValueError(f"Monte Carlo Shapley needs at least 2 steps, got {n}; use exact_blame")
    if not isinstance(num_samples, (int, np.integer)) or num_samples < 2:
        raise ValueError(f"`num_samples` must be an int >= 2, got {num_samples!r}")
    if worlds.key.ndim != 1:
        raise ValueError(f"`worlds.key` must have shape [W] (one failure), got {worlds.key.shape}")
    noises = jax.vmap(lambda w: world_noise(structure, w))(worlds)
    score = _scorer(pipeline, structure, case, worlds, noises, players, fix_variants, mode)
    empty, full, _, _ = _ends(score, n)
    seed = order_seed(key)

    def body(carry, p):
        ranks = _ranks(seed, p[None], n)
        marginals, _, _ = _samples(score, ranks, empty, full, antithetic)
        return carry, marginals[0]

    _, xs = jax.lax.scan(body, None, jnp.arange(int(num_samples), dtype=jnp.int32))
    return MCEstimate(values=xs.mean(axis=0), variance=xs.var(axis=0, ddof=1))


# --------------------------------------------------------------------------------------
# Compiled chunks over failures.
# --------------------------------------------------------------------------------------


def _kahan(total, compensation, x):
    """Compensated summation, so that long float32 sums keep their precision."""
    y = x - compensation
    new = total + y
    return new, (new - total) - y


def _advance_function(pipeline, structure, players, fixes, mode, antithetic, lanes):
    """The compiled function that advances a group of failures by some samples (cached per
    pipeline and settings; traced once per number of failure slots).

    It takes S failure *slots* (a static size, the same for a whole run) and runs `lanes`
    samples per loop iteration, spread over the first `num_active` slots: slot
    `l % num_active` gets lane l, so each active failure gets `lanes // num_active` samples
    per iteration. As failures stop, the survivors get more lanes each and the loop needs
    fewer iterations: one compiled function serves every number of active failures, and the
    loop runs as long as the samples need, not longer. On the first call (`t_start == 0`)
    it also scores the empty and the full coalition of every slot.
    """
    cache_key = (pipeline, structure, players, fixes, mode, antithetic, lanes)
    if cache_key in _CACHE:
        return _CACHE[cache_key]
    n = len(players)

    def advance(cases, worlds, noises, empty, full, seeds, shift, num_active, t_start, t_end):
        TRACE_COUNTS[cache_key] = TRACE_COUNTS.get(cache_key, 0) + 1
        num_slots = empty.shape[0]

        def score_ends(_):
            def one(case, world, noise):
                return _ends(
                    _scorer(pipeline, structure, case, world, noise, players, fixes, mode), n
                )

            return jax.vmap(one)(cases, worlds, noises)

        def given_ends(_):
            inf = jnp.full((num_slots,), jnp.inf, empty.dtype)
            return empty, full, inf, -inf

        empty, full, end_low, end_high = jax.lax.cond(t_start == 0, score_ends, given_ends, None)
        lane = jnp.arange(lanes, dtype=jnp.int32)
        slot = lane % num_active
        per_slot = lanes // num_active
        offset = lane // num_active  # the lane's sample within its slot's share
        used = offset < per_slot
        num_iterations = (t_end - t_start + per_slot - 1) // per_slot
        take = lambda x: x[slot]  # noqa: E731
        lane_cases = jax.tree_util.tree_map(take, cases)
        lane_worlds = jax.tree_util.tree_map(take, worlds)
        lane_args = (lane_cases, lane_worlds, noises[slot], seeds[slot], empty[slot], full[slot])

        def per_lane(case, world, noise, seed, empty_f, full_f, unit):
            score = _scorer(pipeline, structure, case, world, noise, players, fixes, mode)
            x, low, high = _samples(score, _ranks(seed, unit[None], n), empty_f, full_f, antithetic)
            return x[0], low, high

        def body(i, carry):
            s1, c1, s2, c2, low, high = carry
            unit = t_start + i * per_slot + offset
            valid = (used & (unit < t_end))[:, None]
            x, lo, hi = jax.vmap(per_lane)(*lane_args, unit)  # [lanes, n]
            zero = jnp.zeros((), x.dtype)
            sums = jax.ops.segment_sum(jnp.where(valid, x, zero), slot, num_segments=num_slots)
            centred = x - shift[slot].astype(x.dtype)
            squares = jnp.where(valid, centred * centred, zero)
            squares = jax.ops.segment_sum(squares, slot, num_segments=num_slots)
            s1, c1 = _kahan(s1, c1, sums)
            s2, c2 = _kahan(s2, c2, squares)
            return s1, c1, s2, c2, jnp.minimum(low, lo.min()), jnp.maximum(high, hi.max())

        zeros = jnp.zeros((num_slots, n), empty.dtype)
        init = (zeros, zeros, zeros, zeros, end_low.min(), end_high.max())
        s1, _, s2, _, low, high = jax.lax.fori_loop(0, num_iterations, body, init)
        return s1, s2, low, high, num_iterations, empty, full

    function = jax.jit(advance)
    _CACHE[cache_key] = function
    return function


def _noise_function(structure):
    """The compiled addressed noise of every world of a group of failures,
    `World [S, W] -> [S, W, sites, K]` (cached per structure, so it is shared by every
    setting of `mc_shapley` on the same pipeline)."""
    if structure not in _NOISE_CACHE:
        _NOISE_CACHE[structure] = jax.jit(jax.vmap(jax.vmap(lambda w: world_noise(structure, w))))
    return _NOISE_CACHE[structure]


@jax.jit
def _failure_seeds(key, failures):
    """The order seeds of failures `failures` under the root `key`: `fold_in(key, f)`."""
    return jax.vmap(lambda f: order_seed(jr.fold_in(key, f)))(failures)


def _num_slots(num_failures: int, chunk_size: int) -> int:
    """Failure slots per compiled call: the smallest power of two >= F and >= `_MIN_SLOTS`,
    capped at the chunk size. Fixed for a whole run, so the run compiles once; and batches of
    up to `_MIN_SLOTS` failures share one compiled function. Unused slots cost almost
    nothing: lanes go to active failures only."""
    return min(chunk_size, max(_MIN_SLOTS, 1 << max(0, (num_failures - 1).bit_length())))


def _num_lanes(num_slots: int, unit_cost: int, lanes: int | None) -> int:
    """Samples per loop iteration: about `_TARGET_LANES` evaluations per iteration (so a
    few failures are not dominated by loop overhead), a power of two, at least the slots."""
    if lanes is None:
        lanes = max(1, _TARGET_LANES // unit_cost)
        lanes = 1 << (lanes.bit_length() - 1)
    return max(lanes, num_slots)


# --------------------------------------------------------------------------------------
# Results.
# --------------------------------------------------------------------------------------


class MCHistory(eqx.Module):
    """What each failure's estimate and intervals were at every checkpoint (NaN once the
    failure had stopped).

    - `t`: `Int[Array, "K"]`, the sample count of each checkpoint.
    - `values`, `variance`, `lower`, `upper`: `Float[Array, "F K n"]`.
    """

    t: Int[Array, " K"]
    values: Float[Array, "F K n"]
    variance: Float[Array, "F K n"]
    lower: Float[Array, "F K n"]
    upper: Float[Array, "F K n"]


class MCResult(eqx.Module):
    """Monte Carlo Shapley values of F failures over the n steps in `steps`.

    - `steps`: the step names (static), the order of every `n` axis.
    - `values`: `Float[Array, "F n"]`, the estimates (they add up to `full - empty`).
    - `lower`, `upper`: `Float[Array, "F n"]`, the intervals at the checkpoint where the
      failure stopped. With `radius="bernstein"` or `"hoeffding"`, with probability at least
      1 - delta *per failure*, every interval of that failure at every checkpoint contains
      the exact value; `"normal"` intervals have no such guarantee (asymptotic only).
    - `variance`: `Float[Array, "F n"]`, the sample variance of one sample.
    - `empty`, `full`: `Float[Array, "F"]`, v(empty) and v(all) (mean over worlds).
    - `num_samples`: `Int[Array, "F"]`, the samples t used (orders, or antithetic pairs).
    - `evaluations`: `Int[Array, "F"]`, the coalition evaluations spent on the failure.
    - `converged`: `Bool[Array, "F"]`, a requested stopping rule held (not just the budget).
    - `rule`: `Int[Array, "F"]`, which rule stopped the failure, an index into `rule_names`.
    - `checkpoint`: `Int[Array, "F"]`, the 1-based checkpoint at which it stopped.
    - `history`: an `MCHistory`, or `None` unless requested.
    - static settings: `antithetic`, `radius`, `delta`, `epsilon`, `stop`, `score_range`,
      `rule_names`, `evaluations_computed` (every evaluation the compiled calls ran,
      including idle lanes and padding slots, which no failure is charged for).
    """

    steps: tuple[str, ...] = eqx.field(static=True)
    values: Float[Array, "F n"]
    lower: Float[Array, "F n"]
    upper: Float[Array, "F n"]
    variance: Float[Array, "F n"]
    empty: Float[Array, " F"]
    full: Float[Array, " F"]
    num_samples: Int[Array, " F"]
    evaluations: Int[Array, " F"]
    converged: Bool[Array, " F"]
    rule: Int[Array, " F"]
    checkpoint: Int[Array, " F"]
    history: MCHistory | None
    antithetic: bool = eqx.field(static=True)
    radius: str = eqx.field(static=True)
    delta: float = eqx.field(static=True)
    epsilon: float = eqx.field(static=True)
    stop: tuple[str, ...] = eqx.field(static=True)
    score_range: tuple[float, float] = eqx.field(static=True)
    evaluations_computed: int = eqx.field(static=True)
    rule_names: tuple[str, ...] = eqx.field(static=True, default=RULE_NAMES)

    @property
    def num_failures(self) -> int:
        return int(self.values.shape[0])

    @property
    def total(self) -> Float[Array, " F"]:
        """The total repair `v(all) - v(empty)` per failure (the estimates sum to it)."""
        return self.full - self.empty

    @property
    def num_permutations(self) -> Int[Array, " F"]:
        """Orders evaluated per failure (twice `num_samples` when antithetic)."""
        return self.num_samples * (2 if self.antithetic else 1)

    @property
    def rule_fired(self) -> list[str]:
        """The name of the rule that stopped each failure."""
        return [self.rule_names[int(r)] for r in np.asarray(self.rule)]

    def table(self, failure: int = 0, digits: int = 4) -> str:
        """A plain-text table of one failure's estimates and intervals."""
        if not 0 <= failure < self.num_failures:
            raise ValueError(f"`failure` must be in [0, {self.num_failures}), got {failure}")
        width = max(8, *(len(s) for s in self.steps))
        head = f"{'step':<{width}}  {'estimate':>9}  {'lower':>9}  {'upper':>9}"
        lines = [head, "-" * len(head)]
        for i, step in enumerate(self.steps):
            lines.append(
                f"{step:<{width}}  {float(self.values[failure, i]):>9.{digits}f}  "
                f"{float(self.lower[failure, i]):>9.{digits}f}  {float(self.upper[failure, i]):>9.{digits}f}"
            )
        unit = "antithetic pairs" if self.antithetic else "orders"
        level = (
            "asymptotic, no finite-sample guarantee"
            if self.radius == "normal"
            else "valid at every checkpoint"
        )
        lines.append(
            f"{int(self.num_samples[failure])} {unit}, {int(self.evaluations[failure])} evaluations; "
            f"stopped by: {self.rule_fired[failure]}"
            + ("" if bool(self.converged[failure]) else " (no requested rule held)")
        )
        lines.append(
            f"{self.radius} intervals at 1 - delta = {1 - self.delta:g} per failure ({level}); "
            f"v(empty) = {float(self.empty[failure]):.{digits}f}, v(all) = {float(self.full[failure]):.{digits}f}"
        )
        return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The adaptive estimator.
# --------------------------------------------------------------------------------------


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


def _radius(kind, t, variance, value_range, delta):
    if kind == "bernstein":
        return _bounds.bernstein_radius(t, variance, value_range, delta)
    if kind == "hoeffding":
        return _bounds.hoeffding_radius(t, value_range, delta) * np.ones_like(variance)
    return _bounds.normal_radius(t, variance, delta)


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
    `W (n - 1)` per order, `2 W (n - 1)` per antithetic pair (W worlds, n steps).

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
    num_failures = _leading_size(cases)
    low_decl, high_decl = _check_score_range(score_range)
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
    unit_cost = num_worlds * (n - 1) * (2 if antithetic else 1)
    fixed_cost = 2 * num_worlds
    if not isinstance(max_evaluations, (int, np.integer)) or isinstance(max_evaluations, bool):
        raise TypeError(f"`max_evaluations` must be an int, got {max_evaluations!r}")
    if not isinstance(t1, (int, np.integer)) or isinstance(t1, bool) or t1 < 2:
        raise ValueError(f"`t1` must be an int >= 2 (the first checkpoint), got {t1!r}")
    budget = (int(max_evaluations) - fixed_cost) // unit_cost
    if budget < t1:
        need = fixed_cost + t1 * unit_cost
        raise ValueError(
            f"`max_evaluations` = {max_evaluations} does not reach the first checkpoint: "
            f"t1 = {t1} samples cost {need} evaluations here (2 W + t1 W (n - 1)"
            f"{' x 2' if antithetic else ''}, n = {n}, W = {num_worlds})"
        )
    schedule = _bounds.checkpoints(t1, gamma, budget) if names else (budget,)
    value_range = 2.0 * (high_decl - low_decl)

    host_cases = jax.tree_util.tree_map(np.asarray, cases)
    host_worlds = _to_host(worlds)
    padded = 1 << max(0, (num_failures - 1).bit_length())  # few shapes, few compiles
    seeds = np.asarray(_failure_seeds(key, jnp.arange(padded)))[:num_failures]
    num_slots = _num_slots(num_failures, chunk_size)
    num_lanes = _num_lanes(num_slots, unit_cost, lanes)
    advance = _advance_function(pipeline, structure, players, variants, mode, antithetic, num_lanes)

    def packed(active):
        """The active failures in groups of at most S, each padded to S slots."""
        for start in range(0, len(active), num_slots):
            part = active[start : start + num_slots]
            index = np.concatenate([part, np.full(num_slots - len(part), part[0])])
            take = lambda x: x[index]  # noqa: E731
            cases_s = jax.tree_util.tree_map(take, host_cases)
            worlds_s = _from_host(jax.tree_util.tree_map(take, host_worlds))
            yield part, index, cases_s, worlds_s

    # The addressed noise of every world of every failure, computed once.
    noise_fn = _noise_function(structure)
    noise = None
    for part, _, _, worlds_s in packed(np.arange(num_failures)):
        values = np.asarray(noise_fn(worlds_s))
        if noise is None:
            noise = np.zeros((num_failures,) + values.shape[1:], values.dtype)
        noise[part] = values[: len(part)]

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
        for part, index, cases_s, worlds_s in packed(active):
            shift = mean[index].astype(np.float32)
            s1, s2, lo, hi, iterations, ends_empty, ends_full = advance(
                cases_s,
                worlds_s,
                noise[index],
                empty[index].astype(np.float32),
                full[index].astype(np.float32),
                seeds[index],
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
            computed += int(iterations) * num_lanes * unit_cost
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
        half = _radius(radius, t_k, variance, value_range, _bounds.checkpoint_delta(delta, n, k))
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
    return MCResult(
        steps=tuple(structure.steps[p] for p in players),
        values=jnp.asarray(mean, jnp.float32),
        lower=jnp.asarray(lower, jnp.float32),
        upper=jnp.asarray(upper, jnp.float32),
        variance=jnp.asarray(variance, jnp.float32),
        empty=jnp.asarray(empty, jnp.float32),
        full=jnp.asarray(full, jnp.float32),
        num_samples=jnp.asarray(count, jnp.int32),
        evaluations=jnp.asarray(evaluations, jnp.int32),
        converged=jnp.asarray(converged),
        rule=jnp.asarray(rule, jnp.int32),
        checkpoint=jnp.asarray(stopped_at, jnp.int32),
        history=None
        if not history
        else MCHistory(
            t=jnp.asarray(schedule, jnp.int32),
            **{name: jnp.asarray(value, jnp.float32) for name, value in hist.items()},
        ),
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


# --------------------------------------------------------------------------------------
# Exact sampling variances from a full coalition table.
# --------------------------------------------------------------------------------------


class SamplingVariance(NamedTuple):
    """Exact variances of the permutation-sampling estimator of one game, per step.

    - `plain`: `[n]`, the variance of one order's marginal contribution.
    - `antithetic`: `[n]`, the variance of one antithetic pair's mean.
    - `correlation`: `[n]`, the correlation of a step's marginals in an order and its
      reverse (NaN for a step whose marginal never varies).

    A pair costs twice an order, so antithetic sampling gives narrower intervals for the
    same evaluations when `2 * antithetic < plain`, i.e. when the correlation is negative.
    """

    plain: np.ndarray
    antithetic: np.ndarray
    correlation: np.ndarray


def sampling_variance(values) -> SamplingVariance:
    """Exact per-step variances of plain and antithetic permutation sampling for one game,
    computed from its full table of coalition values (no sampling).

    A step i's marginal in a uniform random order is `v(S + i) - v(S)` with S its
    predecessors, of probability `|S|! (n - |S| - 1)! / n!`; in the reversed order its
    predecessors are the complement `N - S - i`. So both moments are Shapley-weighted sums
    over the table, in float64.

    **Arguments:**
    - `values`: `[2**n]`, `v[m]` with bit i of m set when step i runs its fix (the
      coalition index of `coalition_values`; average over worlds first).

    **Returns:** a `SamplingVariance`.
    """
    from ._shapley import shapley_weights

    v = np.asarray(values, np.float64)
    size = v.shape[-1]
    n = size.bit_length() - 1
    if v.ndim != 1 or n < 1 or 1 << n != size:
        raise ValueError(f"`values` must be a 1-D table of length 2**n, got shape {v.shape}")
    masks = np.arange(size)
    popcount = np.array([bin(m).count("1") for m in range(size)])
    weights = shapley_weights(n)
    full = size - 1
    plain, pair, corr = np.zeros(n), np.zeros(n), np.full(n, np.nan)
    for i in range(n):
        bit = 1 << i
        without = masks[(masks & bit) == 0]
        marginal = v[without | bit] - v[without]
        complement = full & ~(without | bit)
        reverse = v[complement | bit] - v[complement]
        w = weights[popcount[without]]
        mean = w @ marginal
        second = w @ marginal**2
        cross = w @ (marginal * reverse)
        plain[i] = max(second - mean**2, 0.0)
        cov = cross - mean**2
        pair[i] = max(0.5 * (plain[i] + cov), 0.0)
        if plain[i] > 0:
            corr[i] = cov / plain[i]
    return SamplingVariance(plain=plain, antithetic=pair, correlation=corr)
