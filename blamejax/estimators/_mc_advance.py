"""The compiled inner loop of `mc_shapley`: advance a group of failures by some samples.

S failure *slots* (a power of two, static for a whole run) hold the still-active failures,
packed into the first slots; a `lax.fori_loop` runs a fixed number of sample lanes per
iteration, shared out among the active failures. When some stop, the others get more lanes
each and the loop needs fewer iterations; the same compiled function serves every checkpoint.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr

from .._compile import compiled, note_trace
from ..pipeline import world_noise
from ._mc import _ends, _ranks, _samples, _scorer, order_seed

_TARGET_LANES = 16384  # coalition evaluations per loop iteration (all lanes together)
_MIN_SLOTS = 32  # failure slots of the smallest compiled call



def _kahan(total, compensation, x):
    """Compensated summation, so that long float32 sums keep their precision."""
    y = x - compensation
    new = total + y
    return new, (new - total) - y


@compiled("mc.advance")
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
    n = len(players)

    def advance(cases, worlds, ids, key, empty, full, shift, num_active, t_start, t_end):
        note_trace("mc.advance")
        num_slots = empty.shape[0]
        # Every world's addressed noise, and the order seeds of failures `ids`: computed in
        # each call (a few hashes per slot), so nothing but the sums goes back and forth.
        noises = jax.vmap(jax.vmap(lambda w: world_noise(structure, w)))(worlds)
        seeds = jax.vmap(lambda f: order_seed(jr.fold_in(key, f)))(ids)

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

    return jax.jit(advance)


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
