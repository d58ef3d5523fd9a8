"""A chain's contraction: when every draw reads only the draw before it, the multilinear
extension's forward and reverse passes become two `lax.scan`s over the draws (`chain_gains`),
a program that does not grow with n. The arrays here are each draw's factual and fix map
stacked `[sites, K]` (`chain_arrays`, `chain_maps`) and the score's factors stacked the same
way (`chain_factors`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..pipeline import Structure, hard_argmax
from ._multilinear import Elimination, site_maps


def chain_arrays(elim: Elimination, maps):
    """A chain's maps as arrays: the factual and the fix map of every draw `[sites, K]` (K the
    most options of any draw; a root's rows all equal, rows past the parent's options 0; a
    non-player's fix is its factual map), -1 for no valid option."""
    size = max(elim.sizes[: len(elim.ops)])
    fact, fix = [], []
    for op in elim.ops:
        best = maps[op.site]
        f, g = best[0], best[op.fix] if op.player >= 0 else best[0]
        if f.ndim:  # pad the parent's axis to K
            f, g = (jnp.pad(x, (0, size - x.shape[0])) for x in (f, g))
        fact.append(jnp.broadcast_to(f, (size,)))
        fix.append(jnp.broadcast_to(g, (size,)))
    return jnp.stack(fact), jnp.stack(fix)


def chain_maps(structure: Structure, elim: Elimination, logits, noise, world):
    """`chain_arrays(elim, site_maps(...))` with one `hard_argmax` for every draw after the
    root, their tables stacked (when they all have one shape), so that the compiled program
    holds a few operations per draw instead of a dozen."""
    rest = logits[1:]
    parents = [op.parents for op in elim.ops[1:]]
    if (
        not rest
        or len({table.shape for table in rest}) != 1
        or len({t.dtype for t in rest}) != 1
        or any(p == () for p in parents)
    ):
        return chain_arrays(elim, site_maps(structure, logits, noise, world))
    size = elim.sizes[0]
    rows = noise[:, :size]
    if world.overrides is not None:
        rows = jnp.where(jnp.stack(world.valid)[:, None], jnp.stack(world.overrides), rows)
    root = hard_argmax(logits[0], rows[0], structure.sites[0].step)  # [V0]
    best = hard_argmax(
        jnp.stack(rest), rows[1:, None, None, :], structure.sites[1].step
    )  # [n-1, V, K]
    fixes = np.asarray([op.fix if op.player >= 0 else 0 for op in elim.ops], np.int32)
    first = elim.ops[0]
    fact = jnp.concatenate([jnp.broadcast_to(root[0], (1, size)), best[:, 0]])
    fix_root = root[fixes[0]] if first.player >= 0 else root[0]
    picked = jnp.take_along_axis(best, jnp.asarray(fixes[1:])[:, None, None], axis=1)[:, 0]
    fix = jnp.concatenate([jnp.broadcast_to(fix_root, (1, size)), picked])
    return fact, fix


def chain_factors(elim: Elimination, tables, dtype):
    """A chain's factors as one `[sites, K]` array (the product of the factors of each site,
    0 past its options, 1 where it has none) and the product of the constant factors."""
    size = max(elim.sizes[: len(elim.ops)])
    unary = [jnp.ones((size,), dtype) for _ in elim.ops]
    constant = jnp.ones((), dtype)
    for table, scope in zip(tables, elim.factors):
        if not scope:
            constant = constant * table.astype(dtype)
            continue
        s = scope[0]
        row = jnp.pad(table.astype(dtype), (0, size - table.shape[0]))
        unary[s] = unary[s] * row
    for s, k in enumerate(elim.sizes[: len(elim.ops)]):
        if k < size:
            unary[s] = unary[s] * (jnp.arange(size) < k).astype(dtype)
    return jnp.stack(unary), constant


def chain_gains(fact, fix, weights, unary):
    """`dF/dt` of a chain at a batch of points: `[sites, B]` for `weights [sites, B]`, each
    draw's probability of running its fix (0 for a non-player), and `unary [sites, K]`, the
    score's factor on each draw's option. A forward scan carries the weight of each option of
    the current draw over the points (`[K, B]`), a backward scan the expected rest of the
    score from each option; the gain of draw s is the forward weights before it times the
    difference its fix makes."""
    size, points = fact.shape[1], weights.shape[1]
    dtype = weights.dtype
    start = jnp.zeros((size, points), dtype).at[0].set(1)  # the root's rows are all equal
    fact, fix = jnp.maximum(fact, 0), jnp.maximum(fix, 0)  # -1 rows: the run is NaN anyway

    def push(a, f):  # pushed[k] = sum of a[c] over the options c that f maps to k
        # K one-hot terms, fused by XLA into one pass (as fast as a scatter-add at K = 8).
        return sum(
            jax.nn.one_hot(f[c], size, dtype=dtype)[:, None] * a[c][None, :] for c in range(size)
        )

    def forward(a, x):
        f, g, w, u = x
        w = w[None, :]
        return ((1 - w) * push(a, f) + w * push(a, g)) * u[:, None], a

    _, before = jax.lax.scan(forward, start, (fact, fix, weights, unary))

    def backward(b, x):
        f, g, w, a, u = x
        b = b * u[:, None]
        bf, bg, w = b[f], b[g], w[None, :]
        return (1 - w) * bf + w * bg, (a * (bg - bf)).sum(0)

    end = jnp.ones((size, points), dtype)
    _, gains = jax.lax.scan(backward, end, (fact, fix, weights, before, unary), reverse=True)
    return gains


def chain_reachable(elim: Elimination, fact, fix, dtype):
    """`reachable` for a chain, as a scan over the draws: the options each draw reaches in
    some coalition `[sites, K]`, and whether one reaches a row with no valid option."""
    size = fact.shape[1]

    def push(r, f, g, both):
        bad = (f < 0) | (both & (g < 0))
        f, g = jnp.maximum(f, 0), jnp.maximum(g, 0)
        pushed = jax.ops.segment_sum(r, f, size) + jnp.where(
            both, jax.ops.segment_sum(r, g, size), 0
        )
        return jnp.minimum(pushed, 1), bad

    return reach_scan(elim, fact, fix, dtype, push)


def reach_scan(elim: Elimination, fact, fix, dtype, push):
    """The scan of `chain_reachable` (and of its expected-noise twin): from the root's
    option 0, `push(r, f, g, both) -> (reached, bad)` gives the options the next draw reaches
    from those `r` reaches (`both`: the draw is a player, so its fix map counts too) and
    which of `r`'s rows have no valid option. **Returns:** `(reach [sites, K], invalid)`."""
    size = fact.shape[1]
    player = jnp.asarray(np.asarray(elim.site_player) >= 0)
    start = jnp.zeros((size,), dtype).at[0].set(1)

    def step(carry, x):
        r, invalid = carry
        pushed, bad = push(r, *x)
        return (pushed, invalid | jnp.any((r > 0) & bad)), pushed

    (_, invalid), reach = jax.lax.scan(step, (start, jnp.asarray(False)), (fact, fix, player))
    return reach, invalid


def chain_runs(elim: Elimination, fact, fix, unary, constant, bits):
    """`direct_runs` for a chain."""
    player = np.asarray(elim.site_player)
    site_bits = jnp.where(jnp.asarray(player >= 0)[:, None], bits.T[np.maximum(player, 0)], False)

    def step(carry, x):
        option, invalid, value = carry
        f, g, on, u = x
        chosen = jnp.where(on, g[option], f[option])
        option = jnp.maximum(chosen, 0)
        return (option, invalid | (chosen < 0), value * u[option]), chosen[:2]

    start = (
        jnp.zeros(bits.shape[0], jnp.int32),
        jnp.zeros(bits.shape[0], bool),
        jnp.ones(bits.shape[0], unary.dtype),
    )
    (_, invalid, values), options = jax.lax.scan(step, start, (fact, fix, site_bits, unary))
    return jnp.maximum(options, 0).T, invalid, values * constant
