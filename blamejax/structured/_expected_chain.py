"""A chain in expectation over the noise: the chain's two scans (`chain_gains`) with each
draw's transition matrices in place of its maps, so that the compiled program stays flat in
n (the general contraction is traced draw by draw)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._chain import reach_scan


def chain_transitions(elim, maps):
    """A chain's transition tensors as arrays: the factual and the fix transition of every
    draw `[sites, K, K]` (parent option, own option; K the most options of any draw; a
    root's rows all equal, rows and columns past a draw's options 0; a non-player's fix is
    its factual transition)."""
    size = max(elim.sizes[: len(elim.ops)])
    fact, fix = [], []
    for op in elim.ops:
        best = maps[op.site]  # [V, K_own] for a root, [V, K_parent, K_own] otherwise
        f, g = best[0], best[op.fix] if op.player >= 0 else best[0]
        pad_own = size - f.shape[-1]
        if f.ndim == 1:
            f, g = (jnp.broadcast_to(x, (size, x.shape[-1])) for x in (f, g))
        else:
            f, g = (jnp.pad(x, ((0, size - x.shape[0]), (0, 0))) for x in (f, g))
        f, g = (jnp.pad(x, ((0, 0), (0, pad_own))) for x in (f, g))
        fact.append(f)
        fix.append(g)
    return jnp.stack(fact), jnp.stack(fix)


def _forward(fact, fix, weights, unary):
    """The forward scan: the weight of each option of each draw over the points, before the
    draw (`[sites, K, B]`), and after the last draw (`[K, B]`)."""
    size, points = fact.shape[1], weights.shape[1]
    start = jnp.zeros((size, points), weights.dtype).at[0].set(1)  # the root's rows are equal

    def step(a, x):
        f, g, w, u = x
        w = w[None, :]
        pushed = (1 - w) * jnp.einsum("ck,cb->kb", f, a) + w * jnp.einsum("ck,cb->kb", g, a)
        return pushed * u[:, None], a

    return jax.lax.scan(step, start, (fact, fix, weights, unary))


def chain_gains_expected(fact, fix, weights, unary):
    """`chain_gains` with transition matrices: `dF/dt` at a batch of points, `[sites, B]`."""
    size, points = fact.shape[1], weights.shape[1]
    _, before = _forward(fact, fix, weights, unary)

    def backward(b, x):
        f, g, w, a, u = x
        b = b * u[:, None]
        bf, bg, w = f @ b, g @ b, w[None, :]
        return (1 - w) * bf + w * bg, (a * (bg - bf)).sum(0)

    end = jnp.ones((size, points), weights.dtype)
    _, gains = jax.lax.scan(backward, end, (fact, fix, weights, before, unary), reverse=True)
    return gains


def chain_values_expected(fact, fix, weights, unary):
    """`F` at a batch of points (`weights [sites, B]`): `[B]`."""
    last, _ = _forward(fact, fix, weights, unary)
    return last.sum(0)


def chain_reachable_expected(elim, fact, fix, dtype):
    """`chain_reachable` for transitions: the options each draw reaches with positive
    probability in some coalition `[sites, K]`, and whether a reached row has no valid
    option."""

    def push(r, f, g, both):
        bad = (f.sum(-1) <= 0.5) | (both & (g.sum(-1) <= 0.5))
        hit = (r[:, None] > 0) & ((f > 0) | (both & (g > 0)))
        return hit.any(0).astype(dtype), bad

    return reach_scan(elim, fact, fix, dtype, push)


def chain_expected_arrays(elim, logits, observed=None):
    """`chain_transitions(elim, expected_site_maps(...))` with the tables of every draw after
    the root stacked and their transitions computed in one `vmap` (when they share one shape
    and each reads the draw before it), so the program holds a few operations in all instead
    of a few per draw; `None` when they do not."""
    from ._transitions import posterior_table, prior_transition  # noqa: PLC0415

    rest = logits[1:]
    if (
        not rest
        or len({table.shape for table in rest}) != 1
        or any(op.parents != (op.site - 1,) for op in elim.ops[1:])
        or logits[0].shape[-1] != rest[0].shape[-1]
        or rest[0].shape[-2] != rest[0].shape[-1]
    ):
        return None
    dtype = jnp.result_type(float)
    root = logits[0].astype(dtype)  # [V0, K]
    tables = jnp.stack([t.astype(dtype) for t in rest])  # [n-1, V, K, K]
    if observed is None:
        root_t, trans = prior_transition(root), prior_transition(tables)
    else:
        root_t = posterior_table(root, root[0], observed[0])
        seen = tables[jnp.arange(len(rest)), 0, observed[:-1]]  # [n-1, K]
        trans = jax.vmap(posterior_table)(tables, seen, observed[1:])
    size = root.shape[-1]
    fixes = np.asarray([op.fix if op.player >= 0 else 0 for op in elim.ops], np.int32)
    first = elim.ops[0]
    fact = jnp.concatenate([jnp.broadcast_to(root_t[0], (1, size, size)), trans[:, 0]])
    fix_root = root_t[fixes[0]] if first.player >= 0 else root_t[0]
    picked = jnp.take_along_axis(trans, jnp.asarray(fixes[1:])[:, None, None, None], axis=1)[:, 0]
    fix = jnp.concatenate([jnp.broadcast_to(fix_root, (1, size, size)), picked])
    return fact, fix
