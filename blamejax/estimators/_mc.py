"""Monte Carlo Shapley values: random orders of the steps, for one failure and for many.

One **sample** is one random order of the n steps (or, with `antithetic=True`, an order and
its reverse, averaged: the pair is then the unit every bound counts). Fixing the steps one at
a time in that order scores the n + 1 prefixes of the order; the differences of consecutive
prefixes give one marginal contribution per step, and they telescope to `v(all) - v(empty)`,
so every estimate adds up exactly. The empty and the full coalition are the same for every
order: they are scored once per failure, and each order costs the n - 1 prefixes in between.

**Worlds.** With W worlds per failure, every order is scored in all W worlds (with the same
noise across the order's prefixes: common random numbers) and a coalition's value is their
mean, as in `exact_blame`. So the estimates target exactly the values `exact_blame` computes,
add up to its `v(all) - v(empty)`, and a marginal still lies in an interval of width
`2 (s_max - s_min)`.

**Budget.** Counted in coalition evaluations (one pipeline run of one coalition in one
world): `2 W` for the empty and full coalitions, then `W (n - 1)` per order (`2 W (n - 1)`
per antithetic pair). `MCResult.evaluations` is exactly that count. (The compiled calls
score each order's prefixes in blocks of at most 8, padded with copies of the full
coalition, which runs faster; that padding, like idle lanes and, for n > 9, the rest of
the block that scores the empty and full coalition in every lane, counts in
`MCResult.evaluations_computed` only.)

**Scoring an order.** Its interior prefixes are scored block by block in a loop
(`scored_prefixes`): the compiled program holds one batched pipeline, one block of
coalitions for every lane, whatever n is, and what it keeps alive is one block's work, so
compile time and memory grow with the pipeline (linearly in n), not with the number of
prefixes times n. When an order takes more than one block (n > 9), the empty and the full
coalition are scored by the same loop, in a first iteration of one block
(`_ends_in_loop`), so the pipeline is traced once, not twice: half the program to compile.
Compile time then grows with the number of steps: XLA compiles a few kernels per step
(the choice's gather, its table's argmax, the check for a row with no valid option), each
on its own.

**The driver** (`mc_shapley`) is a host loop over checkpoints fixed in advance
(`blamejax.stats.checkpoints`), written as `_mc_init` / `_mc_step` / `_mc_finish` over an
`MCState`. At each checkpoint one compiled call per group of at most `chunk_size` failures
(`_advance_function`) advances the still-active failures: wall time follows the work left,
a failure that has stopped spends nothing more, and the same compiled function serves every
checkpoint. A vmapped `while_loop` would instead run every failure until the slowest had
converged.

The module reads top to bottom: the estimator for one failure (pure functions), the
compiled inner loop, the driver, the result types, and the exact sampling variance of the
estimator (`sampling_variance`).
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

from .._checks import as_key, check_scores_in_range, check_worlds, leading_size, warn_not_failures
from .._compile import compiled, note_trace
from .._game import Game, make_game
from ..coalitions import mask_values
from ..pipeline import Hard, Structure, World, check_finite_logits, world_noise
from ..report import (
    JSONExport,
    number,
    step_rows,
)
from ..stats import (
    RULES,
    checkpoint_delta,
    checkpoints,
    confidence_radius,
    ranking_separated,
    top1_separated,
    widths_below,
)
from ._checkpoint import defers_interrupts, interrupt_notice, interrupted
from ._devices import failure_sharding, num_shards, slot_layout, split_over_devices
from ._exact import explain_nan, take_rows

_PERM_TAG = 0x5045524D  # "PERM": keeps the order stream apart from the noise streams


# --------------------------------------------------------------------------------------
# The estimator for one failure: pure functions.
# --------------------------------------------------------------------------------------


# Pipelines with at least this many draw sites defer their tabulated draws (`Context`: one
# argmax over all the tables and one scan over the chain of gathers). The compiled program then
# stays about the same size whatever the length of the pipeline; below it, draws made one by
# one compile in a few seconds too and evaluate about 1.4x faster
# (`python benchmarks/bench_mc.py --chain-compare`). Read while tracing: `clear_caches()`
# after changing it.
_DEFER_FROM = 32


def _scorer(pipeline, structure, case, worlds, noises, players, fixes, mode, rebuild=None):
    """`masks [M, n] -> (mean over worlds [M], min score, max score)` for one failure.
    `rebuild`: if given, the case is `rebuild(case)` (`_take_slots`), cut apart where it is
    used."""
    defer = len(structure.sites) >= _DEFER_FROM

    def score(masks):
        whole = case if rebuild is None else rebuild(case)
        per_world = jax.vmap(
            lambda world, noise: mask_values(
                pipeline, structure, whole, world, players, fixes, masks, mode, noise, defer=defer
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


_PREFIX_BLOCK = 8  # prefixes of an order scored together, one block per scan iteration


def _prefix_blocks(n: int) -> tuple[int, int]:
    """`(number of blocks, prefixes per block)` of an order's n - 1 interior prefixes: one
    block when n - 1 <= 8 (padded to 8 when that adds at most one prefix for every 7),
    otherwise ceil((n - 1) / 8) blocks of at most 8, as even as can be (padding: less than
    one prefix per block)."""
    interior = n - 1
    if interior <= _PREFIX_BLOCK:
        padded = 7 * (_PREFIX_BLOCK - interior) <= interior
        return 1, _PREFIX_BLOCK if padded else interior
    num_blocks = -(-interior // _PREFIX_BLOCK)
    return num_blocks, -(-interior // num_blocks)


def scored_prefixes(n: int) -> int:
    """How many prefixes of each order are scored: the n - 1 interior ones (the empty and
    full coalition are scored once per failure), padded with copies of the full coalition
    to fill blocks of at most 8 (at most one padding prefix for every 7 interior ones:
    n = 4, 8, 12, 16, 20, 32, 256 score 3, 8, 12, 16, 21, 32, 256).

    An order's prefixes are scored block by block in a `lax.scan`, so the compiled program
    and the memory it needs do not grow with the number of prefixes, only with the
    pipeline; within a block the coalitions are batched, and with 8 of them the compiled
    pipeline vectorises over them (`python benchmarks/bench_mc.py --breakdown` times the
    same call with all n - 1 prefixes in one unpadded block). The padding's scores are not
    used: it counts in `MCResult.evaluations_computed`, never in a failure's budget."""
    num_blocks, block = _prefix_blocks(n)
    return num_blocks * block


def _block_sizes(n: int) -> np.ndarray:
    """`[blocks, block]`: the prefix sizes scored in each block (`_prefix_blocks`); the
    padding is the full coalition (size n)."""
    num_blocks, block = _prefix_blocks(n)
    sizes = np.minimum(np.arange(1, num_blocks * block + 1, dtype=np.int32), n)
    return sizes.reshape(num_blocks, block)


def _ends_sizes(n: int) -> np.ndarray:
    """`_block_sizes(n)` for the iteration that scores the empty and the full coalition: the
    first block's first two prefixes have sizes 0 and n (the rest is padding, size n)."""
    sizes = np.full_like(_block_sizes(n), n)
    sizes[0, 0] = 0
    return sizes


def _prefix_values(score, ranks):
    """`[U, n - 1]`: the mean score over worlds of the interior prefixes of U orders
    (prefix k fixes the steps of rank < k), scored block by block (`_prefix_blocks`), and
    the min and max score seen (padding included)."""
    units, n = ranks.shape
    sizes = jnp.asarray(_block_sizes(n))
    num_blocks, block = sizes.shape

    def one_block(sizes_b):
        masks = ranks[:, None, :] < sizes_b[None, :, None]  # [U, block, n]
        values, low, high = score(masks.reshape(-1, n))
        return values.reshape(units, block), low, high

    if num_blocks == 1:
        values, low, high = one_block(sizes[0])
        return values[:, : n - 1], low, high

    def body(carry, sizes_b):
        values, low, high = one_block(sizes_b)
        return (jnp.minimum(carry[0], low), jnp.maximum(carry[1], high)), values

    dtype = jnp.result_type(float)
    init = (jnp.asarray(jnp.inf, dtype), jnp.asarray(-jnp.inf, dtype))
    (low, high), values = jax.lax.scan(body, init, sizes)  # values [blocks, U, block]
    values = jnp.moveaxis(values, 0, 1).reshape(units, num_blocks * block)
    return values[:, : n - 1], low, high


def _counted_prefix_values(score, ranks, sizes, count):
    """`_prefix_values` with the block sizes given (`[blocks, block]`, traced) and only the
    first `count` blocks scored (a traced count; the others' values are left at 0): a loop
    whose length is data, so that the same traced pipeline also scores the empty and the
    full coalition (`_ends_sizes`, one block). Returns the values of every scored prefix,
    padding included (`[U, blocks * block]`), and the min and max score seen."""
    units, n = ranks.shape
    num_blocks, block = sizes.shape
    dtype = jnp.result_type(float)

    def body(b, carry):
        values, low, high = carry
        masks = ranks[:, None, :] < sizes[b][None, :, None]  # [U, block, n]
        scored, lo, hi = score(masks.reshape(-1, n))
        values = jax.lax.dynamic_update_index_in_dim(
            values, scored.reshape(units, block).astype(dtype), b, axis=0
        )
        return values, jnp.minimum(low, lo), jnp.maximum(high, hi)

    init = (
        jnp.zeros((num_blocks, units, block), dtype),
        jnp.asarray(jnp.inf, dtype),
        jnp.asarray(-jnp.inf, dtype),
    )
    values, low, high = jax.lax.fori_loop(0, count, body, init)
    return jnp.moveaxis(values, 0, 1).reshape(units, num_blocks * block), low, high


def _samples(score, ranks, empty, full, antithetic: bool, counted=None):
    """One marginal vector per sample: `[B, n]` (the pair mean when antithetic), and the
    min and max score seen. With `counted = (sizes, count)` the prefixes are scored by
    `_counted_prefix_values` and the values of the first two prefixes of the first order
    are returned too (the empty and full coalition when `sizes` is `_ends_sizes`)."""
    num, n = ranks.shape
    if antithetic:
        ranks = jnp.concatenate([ranks, (n - 1) - ranks], axis=0)
    if counted is None:
        values, low, high = _prefix_values(score, ranks)
    else:
        scored, low, high = _counted_prefix_values(score, ranks, *counted)
        values = scored[:, : n - 1]
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
    if counted is None:
        return marginals, low, high
    return marginals, low, high, scored[0, :2]


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
    - `low`, `high`: `Float[Array, ""]`, the lowest and highest score of any coalition
      scored (NaN if any score was NaN): checked against the declared score range.
    """

    values: Float[Array, " n"]
    variance: Float[Array, " n"]
    low: Float[Array, ""] | None = None  # the lowest score of any coalition scored
    high: Float[Array, ""] | None = None  # the highest


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
    last term when antithetic), counted as `mc_shapley` counts its budget; the compiled
    code scores `scored_prefixes(n)` prefixes per order, padding included.
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
    empty, full, end_low, end_high = _ends(score, n)
    seed = order_seed(key)

    def body(carry, p):
        low, high = carry
        ranks = _ranks(seed, p[None], n)
        marginals, lo, hi = _samples(score, ranks, empty, full, antithetic)
        return (jnp.minimum(low, lo), jnp.maximum(high, hi)), marginals[0]

    (low, high), xs = jax.lax.scan(
        body, (end_low, end_high), jnp.arange(int(num_samples), dtype=jnp.int32)
    )
    return MCEstimate(values=xs.mean(axis=0), variance=xs.var(axis=0, ddof=1), low=low, high=high)


# --------------------------------------------------------------------------------------
# The compiled inner loop: advance a group of failures by some samples.
#
# S failure *slots* (a power of two, static for a whole run) hold the still-active failures,
# packed into the first slots; a `lax.fori_loop` runs a fixed number of sample lanes per
# iteration, shared out among the active failures. When some stop, the others get more lanes
# each and the loop needs fewer iterations; the same compiled function serves every checkpoint.
# --------------------------------------------------------------------------------------


def _ends_in_loop(n: int) -> bool:
    """Whether `mc_shapley` scores the empty and the full coalition inside its loop, as the
    first iteration of each run (one block of prefixes per lane, `scored_prefixes(n) //
    blocks` evaluations per lane and world), rather than in a separate batch of two per
    failure slot: when an order's prefixes take more than one block (n > 9)."""
    return _prefix_blocks(n)[0] > 1


_TARGET_LANES = 16384  # coalition evaluations per loop iteration (all lanes together)
_MIN_SLOTS = 32  # failure slots of the smallest compiled call


def _kahan(total, compensation, x):
    """Compensated summation, so that long float32 sums keep their precision."""
    y = x - compensation
    new = total + y
    return new, (new - total) - y


def _take_slots(tree, slot):
    """`tree_map(lambda x: x[slot], tree)` with one gather per dtype, as `(parts, rebuild)`:
    the leaves of a dtype are laid side by side and gathered together (`parts`, one array per
    dtype), and `rebuild(parts)` cuts them apart again. Cutting where the leaves are used
    (inside the sampling loop) lets XLA fuse each cut into its use: a case of n tables then
    costs one gather in the compiled program, not n."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    groups: dict = {}
    for i, leaf in enumerate(leaves):
        groups.setdefault(leaf.dtype, []).append(i)
    groups = list(groups.values())
    num_slots = leaves[0].shape[0] if leaves else 0
    parts = [
        jnp.concatenate(
            [leaves[i].reshape(num_slots, int(np.prod(leaves[i].shape[1:]))) for i in members],
            axis=1,
        )[slot]
        if len(members) > 1
        else leaves[members[0]][slot]
        for members in groups
    ]

    def rebuild(parts):
        out = [None] * len(leaves)
        for members, part in zip(groups, parts):
            if len(members) == 1:
                out[members[0]] = part
                continue
            start = 0
            for i in members:
                shape = leaves[i].shape[1:]
                size = int(np.prod(shape))
                out[i] = part[..., start : start + size].reshape(part.shape[:-1] + shape)
                start += size
        return treedef.unflatten(out)

    return parts, rebuild


@compiled("mc.advance")
def _advance_function(game: Game, antithetic: bool, lanes: int):
    """The compiled function that advances a group of failures by some samples (cached per
    pipeline and settings; traced once per number of failure slots).

    It takes S failure *slots* (a static size, the same for a whole run) and runs `lanes`
    samples per loop iteration, spread over the first `num_active` slots: slot
    `l % num_active` gets lane l, so each active failure gets `lanes // num_active` samples
    per iteration. As failures stop, the survivors get more lanes each and the loop needs
    fewer iterations: one compiled function serves every number of active failures, and the
    loop runs as long as the samples need, not longer. On the first call (`t_start == 0`)
    it also scores the empty and the full coalition of every slot: in a first iteration of
    the loop (iteration -1, one block of prefixes per lane) when `_ends_in_loop(n)`,
    otherwise in a separate batch of two coalitions per slot.
    """
    pipeline, structure, players, fixes, mode, _ = game
    n = len(players)
    # With more than one block of prefixes per order (n > 9) the empty and the full
    # coalition are scored by the loop itself, in a first iteration of one block
    # (`_ends_sizes`): the compiled program then holds one traced copy of the pipeline, not
    # two, which halves its compile time. With one block, a separate batch of two
    # coalitions per slot costs less than that iteration would.
    in_loop = _ends_in_loop(n)
    sizes = jnp.asarray(_block_sizes(n))
    ends_sizes = jnp.asarray(_ends_sizes(n))

    def advance(cases, worlds, ids, key, empty, full, shift, num_active, t_start, t_end):
        note_trace("mc.advance")
        num_slots = empty.shape[0]
        # Every world's addressed noise, and the order seeds of failures `ids`: computed in
        # each call (a few hashes per slot), so nothing but the sums goes back and forth.
        noises = jax.vmap(jax.vmap(lambda w: world_noise(structure, w)))(worlds)
        seeds = jax.vmap(lambda f: order_seed(jr.fold_in(key, f)))(ids)
        inf = jnp.full((num_slots,), jnp.inf, empty.dtype)

        def score_ends(_):
            def one(case, world, noise):
                return _ends(
                    _scorer(pipeline, structure, case, world, noise, players, fixes, mode), n
                )

            return jax.vmap(one)(cases, worlds, noises)

        def given_ends(_):
            return empty, full, inf, -inf

        if in_loop:
            end_low, end_high = inf, -inf
            first = jnp.where(t_start == 0, -1, 0)  # iteration -1 scores the ends
        else:
            empty, full, end_low, end_high = jax.lax.cond(
                t_start == 0, score_ends, given_ends, None
            )
            first = jnp.int32(0)
        if lanes < num_slots:  # every slot needs a lane for its ends
            raise ValueError(f"{lanes} lanes cannot serve {num_slots} failure slots")
        lane = jnp.arange(lanes, dtype=jnp.int32)
        slot = lane % num_active
        per_slot = lanes // num_active
        offset = lane // num_active  # the lane's sample within its slot's share
        used = offset < per_slot
        num_iterations = (t_end - t_start + per_slot - 1) // per_slot
        lane_cases, case_of = _take_slots(cases, slot)
        lane_worlds = jax.tree_util.tree_map(lambda x: x[slot], worlds)
        lane_args = (lane_cases, lane_worlds, noises[slot], seeds[slot])

        def per_lane(case, world, noise, seed, empty_f, full_f, unit, counted):
            score = _scorer(pipeline, structure, case, world, noise, players, fixes, mode, case_of)
            ranks = _ranks(seed, unit[None], n)
            if counted is None:
                x, low, high = _samples(score, ranks, empty_f, full_f, antithetic)
                return x[0], low, high, jnp.zeros((2,), x.dtype)
            x, low, high, ends = _samples(score, ranks, empty_f, full_f, antithetic, counted)
            return x[0], low, high, ends

        def body(i, carry):
            s1, c1, s2, c2, low, high, empty, full = carry
            scoring_ends = i < 0
            unit = t_start + jnp.maximum(i, 0) * per_slot + offset
            valid = (used & (unit < t_end) & ~scoring_ends)[:, None]
            counted = None
            if in_loop:
                counted = (
                    jnp.where(scoring_ends, ends_sizes, sizes),
                    jnp.where(scoring_ends, 1, sizes.shape[0]),
                )
            x, lo, hi, ends = jax.vmap(per_lane, in_axes=(0,) * 7 + (None,))(
                *lane_args, empty[slot], full[slot], unit, counted
            )  # x: [lanes, n]
            # Lane l < num_active is slot l's first lane (the slots after those are
            # padding, whose ends are never read).
            empty = jnp.where(scoring_ends, ends[:num_slots, 0], empty)
            full = jnp.where(scoring_ends, ends[:num_slots, 1], full)
            zero = jnp.zeros((), x.dtype)
            sums = jax.ops.segment_sum(jnp.where(valid, x, zero), slot, num_segments=num_slots)
            centred = x - shift[slot].astype(x.dtype)
            squares = jnp.where(valid, centred * centred, zero)
            squares = jax.ops.segment_sum(squares, slot, num_segments=num_slots)
            s1, c1 = _kahan(s1, c1, sums)
            s2, c2 = _kahan(s2, c2, squares)
            low, high = jnp.minimum(low, lo.min()), jnp.maximum(high, hi.max())
            return s1, c1, s2, c2, low, high, empty, full

        zeros = jnp.zeros((num_slots, n), empty.dtype)
        init = (zeros, zeros, zeros, zeros, end_low.min(), end_high.max(), empty, full)
        s1, _, s2, _, low, high, empty, full = jax.lax.fori_loop(first, num_iterations, body, init)
        return s1, s2, low, high, num_iterations, empty, full

    return jax.jit(advance)


def _num_slots(num_failures: int, chunk_size: int) -> int:
    """Failure slots per compiled call: the smallest power of two >= F and >= `_MIN_SLOTS`,
    capped at the chunk size. Fixed for a whole run, so the run compiles once; and batches of
    up to `_MIN_SLOTS` failures share one compiled function. Unused slots cost almost
    nothing: lanes go to active failures only."""
    return min(chunk_size, max(_MIN_SLOTS, 1 << max(0, (num_failures - 1).bit_length())))


def _num_lanes(num_slots: int, unit_cost: int, lanes: int | None) -> int:
    """Samples per loop iteration: about `_TARGET_LANES` evaluations per batch of
    coalitions scored together (so a few failures are not dominated by loop overhead), a
    power of two, at least the slots. `unit_cost`: the evaluations of one sample in one
    batch, i.e. in one block of its prefixes (`_prefix_blocks`)."""
    if lanes is None:
        lanes = max(1, _TARGET_LANES // unit_cost)
        lanes = 1 << (lanes.bit_length() - 1)
    return max(lanes, num_slots)


# --------------------------------------------------------------------------------------
# The driver: init / step (one checkpoint) / finish over a state of host arrays.
# --------------------------------------------------------------------------------------


class MCSettings(NamedTuple):
    """What an `mc_shapley` run was asked for, checked once (static for the whole run)."""

    game: Game
    key: PRNGKeyArray
    num_failures: int
    stop: tuple[str, ...]  # the requested stopping rules (the budget is always active)
    epsilon: float
    delta: float
    radius: str
    antithetic: bool
    schedule: tuple[int, ...]  # the checkpoints, in samples
    value_range: float  # the width of the interval a marginal lies in
    unit_cost: int  # evaluations charged per sample
    unit_computed: int  # evaluations computed per sample (prefix padding included)
    fixed_cost: int  # evaluations of the empty and the full coalition
    num_slots: int  # failure slots per compiled call
    num_lanes: int  # samples per loop iteration (per device)
    history: bool
    devices: int = 1  # devices the failure slots are split over


class MCState(NamedTuple):
    """Where every failure's estimate stands: host arrays, one row per failure (float64
    statistics). `_mc_step` returns a new state; it never changes the one it is given."""

    empty: np.ndarray  # shape=(F,), v(empty) (mean over worlds)
    full: np.ndarray  # shape=(F,), v(all)
    count: np.ndarray  # shape=(F,), dtype=int64, samples taken
    mean: np.ndarray  # shape=(F, n), running mean of the marginals
    m2: np.ndarray  # shape=(F, n), running sum of squared deviations
    lower: np.ndarray  # shape=(F, n), the interval at the last checkpoint reached
    upper: np.ndarray  # shape=(F, n)
    evaluations: np.ndarray  # shape=(F,), dtype=int64, evaluations charged
    converged: np.ndarray  # shape=(F,), dtype=bool, a requested rule held
    rule: np.ndarray  # shape=(F,), dtype=int32, index into RULE_NAMES of the rule that stopped it
    checkpoint: np.ndarray  # shape=(F,), dtype=int32, 1-based checkpoint at which it stopped
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
            out[:, j] = top1_separated(values, lower, upper, epsilon)
        elif name == "ranking":
            out[:, j] = ranking_separated(values, lower, upper, epsilon)
        else:
            out[:, j] = widths_below(lower, upper, epsilon)
    return out


@defers_interrupts  # Ctrl-C is honoured between checkpoints, never inside XLA
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
    devices: Sequence | None = None,
) -> MCResult:
    """Monte Carlo Shapley values of every failure, with confidence intervals valid at every
    checkpoint and adaptive stopping; failures are processed together and each stops on its
    own.

    Intervals are formed, and stopping decided, only at the checkpoints
    `blamejax.stats.checkpoints(t1, gamma, T)` (T the largest sample count `max_evaluations`
    allows; with no stopping rule, T is the only checkpoint), the one of step i at
    checkpoint k at level `blamejax.stats.checkpoint_delta(delta, n, k)`. With the `"bernstein"`
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
    - `devices`: the devices to split the failures over (default: every device of every
      process; see docs/scaling.md). Each device advances its share of the active
      failures with its share of the lanes; a failure's samples are the same however
      the failures are split.

    **Returns:** an `MCResult`.

    **Raises:** `ValueError`/`TypeError` that names the argument for malformed inputs, a
    budget too small for the first checkpoint, and scores outside `score_range`.

    ```python
    import blamejax as bj
    cases = bj.demos.refund_cases(num_cases=1)  # customer 0's reply was wrong: a failure
    worlds = bj.recorded_worlds(0, 1)
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
        key,
        max_evaluations,
        delta,
        radius,
        stop,
        epsilon,
        t1,
        gamma,
        antithetic,
        chunk_size,
        lanes,
        history,
    )
    cases = jax.tree_util.tree_map(jnp.asarray, cases)  # on the device once, sliced there
    sharding = failure_sharding(devices)
    if sharding is not None:  # each device: its share of the failures and of the lanes
        width = num_shards(sharding)
        settings = settings._replace(devices=width, num_lanes=-(-settings.num_lanes // width))
    advance = _advance_function(game, settings.antithetic, settings.num_lanes)
    if sharding is not None:
        advance = split_over_devices(
            advance,
            sharding,
            (0, 0, 0, None, 0, 0, 0, "device", None, None),
            (0, 0, "device", "device", "device", 0, 0),
        )
    state = _mc_init(settings)
    interrupt_notice("mc_shapley: Ctrl-C received; stopping at the end of the current checkpoint")
    for k, t_k in enumerate(settings.schedule, start=1):
        state = _mc_step(settings, advance, state, cases, worlds, k, t_k)
        if interrupted():
            raise _interrupted(_mc_finish(settings, state), k, len(settings.schedule))
        if len(state.active) == 0:
            break
    result = _mc_finish(settings, state)
    warn_not_failures(result.empty, game.score_range)
    return result


def _interrupted(result: MCResult, k: int, num_checkpoints: int) -> KeyboardInterrupt:
    """The `KeyboardInterrupt` of a Ctrl-C at checkpoint k, carrying the result so far."""
    error = KeyboardInterrupt(
        f"mc_shapley stopped by Ctrl-C at checkpoint {k} of {num_checkpoints}; the estimates so "
        "far, with intervals valid at that checkpoint, are kept in this exception's `result` "
        "(`except KeyboardInterrupt as stop: partial = stop.result`)"
    )
    error.result = result
    return error


def _mc_settings(
    game,
    cases,
    worlds,
    key,
    max_evaluations,
    delta,
    radius,
    stop,
    epsilon,
    t1,
    gamma,
    antithetic,
    chunk_size,
    lanes,
    history,
) -> MCSettings:
    """Check `mc_shapley`'s own arguments and fix the schedule and the compiled shapes."""
    num_failures = leading_size(cases)
    n = game.num_players
    if n < 2:
        raise ValueError(
            f"Monte Carlo Shapley needs at least 2 steps, got {n}; with one step its "
            "Shapley value is v(all) - v(empty): use exact_blame"
        )
    num_worlds = check_worlds(worlds, num_failures, game.structure)
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
    schedule = checkpoints(t1, gamma, budget) if names else (budget,)
    low, high = game.score_range
    num_slots = _num_slots(num_failures, chunk_size)
    return MCSettings(
        game=game,
        key=key,
        num_failures=num_failures,
        stop=names,
        epsilon=epsilon,
        delta=float(delta),
        radius=radius,
        antithetic=antithetic,
        schedule=tuple(schedule),
        value_range=2.0 * (high - low),
        unit_cost=unit_cost,
        unit_computed=unit_computed,
        fixed_cost=fixed_cost,
        num_slots=num_slots,
        num_lanes=_num_lanes(num_slots, unit_computed // _prefix_blocks(n)[0], lanes),
        history=bool(history),
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
        checkpoint=np.zeros(num_failures, np.int32),
        active=np.arange(num_failures),
        t_prev=0,
        computed=0,
        history=history,
    )


def _mc_step(
    settings: MCSettings, advance, state: MCState, cases, worlds, k: int, t_k: int
) -> MCState:
    """Advance every active failure to `t_k` samples (checkpoint k), form its intervals and
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
                "checkpoint",
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
    delta_k = checkpoint_delta(settings.delta, n, k)
    half = confidence_radius(settings.radius, t_k, variance, settings.value_range, delta_k)
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
    state.checkpoint[active] = k
    active = active[~(fired | (k == len(settings.schedule)))]
    return state._replace(active=active, t_prev=t_k, computed=computed)


def _ends_computed(settings: MCSettings, num_slots: int) -> int:
    """The evaluations a first call runs to score the empty and the full coalition: one
    block of prefixes in every lane of every device (`_ends_in_loop`), or 2 W per slot."""
    n = settings.game.num_players
    if _ends_in_loop(n):
        per_lane = settings.unit_computed // _prefix_blocks(n)[0]
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
    history = None
    if state.history is not None:
        history = MCHistory(t=np.asarray(settings.schedule, np.int32), **state.history)
    return MCResult(
        steps=settings.game.steps,
        values=state.mean,
        lower=state.lower,
        upper=state.upper,
        variance=variance,
        empty=state.empty,
        full=state.full,
        num_samples=state.count.astype(np.int32),
        evaluations=state.evaluations.astype(np.int32),
        converged=state.converged,
        rule=state.rule,
        checkpoint=state.checkpoint,
        history=history,
        antithetic=settings.antithetic,
        radius=settings.radius,
        delta=settings.delta,
        epsilon=settings.epsilon,
        stop=settings.stop,
        score_range=settings.game.score_range,
        evaluations_computed=int(state.computed),
    )


# --------------------------------------------------------------------------------------
# The result.
# --------------------------------------------------------------------------------------

RADII = ("bernstein", "hoeffding", "normal")
RULE_NAMES = ("budget",) + RULES


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


class MCResult(JSONExport, eqx.Module):
    """Monte Carlo Shapley values of F failures over the n steps in `steps`. Its arrays
    are host NumPy arrays (the statistics in float64).

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
      including idle lanes, padding slots and the padding of each order's prefixes
      (`blamejax.scored_prefixes`), which no failure is charged for).
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
        """F, the number of failures estimated."""
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

    @classmethod
    def _nested(cls) -> dict:
        return {"history": MCHistory}

    def table(self, failure: int = 0, digits: int = 4) -> str:
        """A plain-text table of one failure's estimates and intervals."""
        if not 0 <= failure < self.num_failures:
            raise ValueError(f"`failure` must be in [0, {self.num_failures}), got {failure}")
        lines = step_rows(
            self.steps,
            [
                ("estimate", 9, number(self.values[failure], digits)),
                ("lower", 9, number(self.lower[failure], digits)),
                ("upper", 9, number(self.upper[failure], digits)),
            ],
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
    from ..reduction import shapley_weights

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
