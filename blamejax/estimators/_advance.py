"""Monte Carlo's compiled inner loop: advance a group of failures by some samples.

S failure *slots* (a power of two, static for a whole run) hold the still-active failures,
packed into the first slots; a `lax.fori_loop` runs a fixed number of sample lanes per
iteration, shared out among the active failures. When some stop, the others get more lanes
each and the loop needs fewer iterations; the same compiled function serves every
checkpoint. A vmapped `while_loop` would instead run every failure until the slowest had
converged. Compile time grows with the number of steps: XLA compiles a few kernels per step
(the choice's gather, its table's argmax, the check for a row with no valid option), each on
its own.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._compile import compiled, note_trace
from .._game import Game
from ..pipeline import world_noise
from ._permutation import end_values, order_ranks, order_seed, sample_marginals, scorer
from ._prefixes import block_sizes, ends_in_loop, ends_sizes

_TARGET_LANES = 16384  # coalition evaluations per loop iteration (all lanes together)


_MIN_SLOTS = 32  # failure slots of the smallest compiled call


def _kahan(total, compensation, x):
    """Compensated summation, so that long float32 sums keep their precision."""
    y = x - compensation
    new = total + y
    return new, (new - total) - y


def take_slots(tree, slot):
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
def advance_function(game: Game, antithetic: bool, lanes: int):
    """The compiled function that advances a group of failures by some samples (cached per
    pipeline and settings; traced once per number of failure slots).

    It takes S failure *slots* (a static size, the same for a whole run) and runs `lanes`
    samples per loop iteration, spread over the first `num_active` slots: slot
    `l % num_active` gets lane l, so each active failure gets `lanes // num_active` samples
    per iteration. As failures stop, the survivors get more lanes each and the loop needs
    fewer iterations: one compiled function serves every number of active failures, and the
    loop runs as long as the samples need, not longer. On the first call (`t_start == 0`)
    it also scores the empty and the full coalition of every slot: in a first iteration of
    the loop (iteration -1, one block of prefixes per lane) when `ends_in_loop(n)`,
    otherwise in a separate batch of two coalitions per slot.
    """
    pipeline, structure, players, fixes, mode, _ = game
    n = len(players)
    # With more than one block of prefixes per order (n > 9) the empty and the full
    # coalition are scored by the loop itself, in a first iteration of one block
    # (`ends_sizes`): the compiled program then holds one traced copy of the pipeline, not
    # two, which halves its compile time. With one block, a separate batch of two
    # coalitions per slot costs less than that iteration would.
    in_loop = ends_in_loop(n)
    sizes = jnp.asarray(block_sizes(n))
    first_sizes = jnp.asarray(ends_sizes(n))

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
                return end_values(
                    scorer(pipeline, structure, case, world, noise, players, fixes, mode), n
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
        lane_cases, case_of = take_slots(cases, slot)
        lane_worlds = jax.tree_util.tree_map(lambda x: x[slot], worlds)
        lane_args = (lane_cases, lane_worlds, noises[slot], seeds[slot])

        def per_lane(case, world, noise, seed, empty_f, full_f, unit, counted):
            score = scorer(pipeline, structure, case, world, noise, players, fixes, mode, case_of)
            ranks = order_ranks(seed, unit[None], n)
            if counted is None:
                x, low, high = sample_marginals(score, ranks, empty_f, full_f, antithetic)
                return x[0], low, high, jnp.zeros((2,), x.dtype)
            x, low, high, ends = sample_marginals(
                score, ranks, empty_f, full_f, antithetic, counted
            )
            return x[0], low, high, ends

        def body(i, carry):
            s1, c1, s2, c2, low, high, empty, full = carry
            scoring_ends = i < 0
            unit = t_start + jnp.maximum(i, 0) * per_slot + offset
            valid = (used & (unit < t_end) & ~scoring_ends)[:, None]
            counted = None
            if in_loop:
                counted = (
                    jnp.where(scoring_ends, first_sizes, sizes),
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


def slots_per_call(num_failures: int, block_size: int) -> int:
    """Failure slots per compiled call: the smallest power of two >= F and >= `_MIN_SLOTS`,
    capped at the chunk size. Fixed for a whole run, so the run compiles once; and batches of
    up to `_MIN_SLOTS` failures share one compiled function. Unused slots cost almost
    nothing: lanes go to active failures only."""
    return min(block_size, max(_MIN_SLOTS, 1 << max(0, (num_failures - 1).bit_length())))


def lanes_per_iteration(num_slots: int, unit_cost: int, lanes: int | None) -> int:
    """Samples per loop iteration: about `_TARGET_LANES` evaluations per batch of
    coalitions scored together (so a few failures are not dominated by loop overhead), a
    power of two, at least the slots. `unit_cost`: the evaluations of one sample in one
    batch, i.e. in one block of its prefixes (`prefix_blocks`)."""
    if lanes is None:
        lanes = max(1, _TARGET_LANES // unit_cost)
        lanes = 1 << (lanes.bit_length() - 1)
    return max(lanes, num_slots)
