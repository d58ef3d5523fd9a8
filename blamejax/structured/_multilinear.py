"""Exact blame by structure: the game's multilinear extension as a forward recursion.

In one world a tabulated draw is a map from its parents' options to its own option, one map
per variant (`hard_argmax` of its table plus the world's noise). Let every player run its
fix independently with probability `t_j`. The expected score,

    F(t) = sum over coalitions S of prod_{j in S} t_j prod_{j not in S} (1 - t_j) v(S),

is the game's multilinear extension (Owen, 1972). It is a contraction of small tensors: one
per draw (`(1 - t_j) onehot(map_fact) + t_j onehot(map_fix)`, over its parents' options and
its own) and the score table. `extension` contracts them in the pipeline's order, carrying a
tensor over the *frontier*: the draws that a later draw or the score still reads (and, for a
step that draws several times, its fix bit until its last draw). For a chain the frontier is
one draw, so a point `t` costs O(n K^2).

Then `dF/dt_j` (one reverse pass) is player j's expected marginal gain when every other
player is in the coalition with probability t_j, and

- Shapley: `phi_j = integral over t in [0, 1] of dF/dt_j (t, ..., t) dt`, a polynomial of
  degree n - 1 in t, so Gauss-Legendre with ceil(n / 2) nodes is exact up to rounding;
- Banzhaf: `dF/dt_j` at t = 1/2;
- pairwise Shapley interactions: the same integral of `d2F/dt_i dt_j` (Grabisch, 1997).

Fix-alone, leave-one-out, v(empty), v(all) and last-step blame come from single runs made
directly with the maps (`direct_runs`), so they are the scores themselves, as on the
enumerating path.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..pipeline import Structure, hard_argmax
from ._graph import Graph

BATCH = -1  # the einsum label of the quadrature-node axis (site labels are >= 0)


class SiteOp(NamedTuple):
    """One draw of the forward contraction (static).

    - `site`: the draw site; `parents`: the sites its table reads.
    - `player`: the player whose fix switches it, or -1; `fix`: that player's fix variant.
    - `bit`: -1 when the player's fix bit is mixed in at this draw alone; otherwise the
      frontier label of the bit (a step with several draws), opened at its first draw.
    - `opens`: whether this draw opens `bit`.
    - `factors`: the score's factors multiplied in at this draw (indices into
      `Elimination.factors`): those whose last site it is.
    - `out`: the frontier labels after this draw.
    """

    site: int
    parents: tuple[int, ...]
    player: int
    fix: int
    bit: int
    opens: bool
    factors: tuple[int, ...]
    out: tuple[int, ...]


class Elimination(NamedTuple):
    """The order of the contraction and what it carries (static, hashable).

    - `ops`: one `SiteOp` per draw site, in pipeline order.
    - `sizes`: the number of states of every label (a site's K, a bit's 2).
    - `factors`: the sites each factor of the score reads (the whole score as one factor
      when its table is small enough).
    - `site_player`: the player of each site (-1 for none).
    - `width`: the most states the frontier holds at once (per quadrature node).
    - `widest`: the labels of that frontier.
    - `chain`: whether each draw reads at most the draw before it, one draw per step, and
      every factor at most one site: the recursion is then a `lax.scan` over the draws
      (`chain_gains`), and the compiled program does not grow with n.
    - `scan`: whether the general contraction runs as one `lax.scan` over the draws
      (`_scan`; chosen by `structured_plan` for long pipelines), else draw by draw.
    """

    ops: tuple[SiteOp, ...]
    sizes: tuple[int, ...]
    factors: tuple[tuple[int, ...], ...]
    site_player: tuple[int, ...]
    width: int
    widest: tuple[int, ...]
    chain: bool = False
    scan: bool = False

    @property
    def num_players(self) -> int:
        """n, the number of players (steps with a fix bit)."""
        return 1 + max(self.site_player, default=-1)


def elimination(structure: Structure, graph: Graph, players, fixes, factors=None) -> Elimination:
    """The contraction order for `players` (step indices) with fix variants `fixes` and the
    score as `factors` (scopes; default the whole score, `(graph.scope,)`): the draws in
    pipeline order, each factor multiplied in at its last site, each label dropped after its
    last reader."""
    factors = (tuple(graph.scope),) if factors is None else tuple(tuple(f) for f in factors)
    num_sites = len(structure.sites)
    site_player = []
    for site in structure.sites:
        step = structure.step_index(site.step)
        site_player.append(players.index(step) if step in players else -1)
    sizes = [site.num_options for site in structure.sites] + [2] * len(players)
    attach = {s: [] for s in range(num_sites)}
    for k, scope in enumerate(factors):
        attach[max(scope, default=0)].append(k)
    last_read: dict[int, int] = {}
    for s in range(num_sites):
        for p in graph.parents[s]:
            last_read[p] = s
        for k in attach[s]:
            for p in factors[k]:
                last_read[p] = max(last_read.get(p, -1), s)
    draws_of: dict[int, list[int]] = {}
    for s, j in enumerate(site_player):
        if j >= 0:
            draws_of.setdefault(j, []).append(s)
    frontier: list[int] = []
    width, widest = 1, ()
    ops = []
    for s in range(num_sites):
        j = site_player[s]
        several = j >= 0 and len(draws_of[j]) > 1
        bit = num_sites + j if several else -1
        opens = several and draws_of[j][0] == s
        after = frontier + ([bit] if opens else []) + [s]
        states = math.prod(sizes[v] for v in after)
        if states > width:
            width, widest = states, tuple(after)
        drop = {v for v in after if v < num_sites and last_read.get(v, v) <= s}
        if several and draws_of[j][-1] == s:
            drop.add(bit)
        frontier = [v for v in after if v not in drop]
        fix = fixes[j] if j >= 0 else 0
        ops.append(
            SiteOp(
                s, tuple(graph.parents[s]), j, fix, bit, opens, tuple(attach[s]), tuple(frontier)
            )
        )
    chain = all(op.parents in ((), (op.site - 1,)) and op.bit < 0 for op in ops) and all(
        len(scope) <= 1 for scope in factors
    )
    return Elimination(tuple(ops), tuple(sizes), factors, tuple(site_player), width, widest, chain)


class SiteMaps(tuple):
    """`site_maps`' per-site maps (a tuple), carrying in `grouped` the same maps stacked by
    table shape, `((sites, [G, V, *K_parents]), ...)`, for a contraction that stacks them
    again (`_scan.stack_maps`). The unused form is dead code that XLA drops: consuming many
    slices of one stacked array compiles slowly, and so does stacking hundreds of arrays.
    Through a transformation's boundary it becomes a plain tuple."""

    grouped: tuple | None = None


jax.tree_util.register_pytree_node(SiteMaps, lambda m: (tuple(m), None), lambda _, xs: tuple(xs))


def site_maps(structure: Structure, logits, noise, world) -> tuple:
    """Every site's option for each variant and parent options in one world: `hard_argmax`
    of its table plus the site's Gumbels (the world's override where valid), `[V, *K_parents]`
    int32, -1 for a row with no valid option. Also grouped (`SiteMaps`): the sites whose
    tables share a shape and dtype drawn together, one `hard_argmax` over their stacked
    tables (the same integers)."""
    maps = []
    for s, (site, table) in enumerate(zip(structure.sites, logits)):
        row = noise[s, : site.num_options]
        if world.overrides is not None:
            row = jnp.where(world.valid[s], world.overrides[s], row)
        maps.append(hard_argmax(table, row, site.step))
    out = SiteMaps(maps)
    groups: dict = {}
    for s, table in enumerate(logits):
        groups.setdefault((table.shape, table.dtype), []).append(s)
    grouped = []
    for (shape, _), sites in groups.items():
        size = shape[-1]
        rows = noise[np.asarray(sites), :size]  # [G, K]
        if world.overrides is not None:
            valid = stack([world.valid[s] for s in sites])
            overrides = stack([world.overrides[s] for s in sites])
            rows = jnp.where(valid[:, None], overrides, rows)
        tables = stack([logits[s] for s in sites])  # [G, V, *K_parents, K]
        lifted = rows.reshape((len(sites),) + (1,) * (len(shape) - 1) + (size,))
        best = hard_argmax(tables, lifted, structure.sites[sites[0]].step)
        grouped.append((tuple(sites), best))
    out.grouped = tuple(grouped)
    return out


def _step(elim: Elimination, op: SiteOp, T, axes, maps, weights, tables, dtype, out=None):
    """One draw of the contraction: `T` over `[BATCH] + axes` times the draw's tensor and the
    factors attached to it, summed to `out` (default `op.out`). `weights`: `(1 - t_j, t_j)`
    per batch row for the player's bit, or None (both weights 1: the reachability pass)."""
    best = maps[op.site]
    size = elim.sizes[op.site]
    expected = jnp.issubdtype(best.dtype, jnp.floating)  # transition matrices, not maps
    onehot = (
        (lambda x: x.astype(dtype))
        if expected
        else functools.partial(jax.nn.one_hot, num_classes=size, dtype=dtype)
    )
    fact = onehot(best[0])  # [*K_parents, K]; -1: a zero row
    ins = [BATCH] + list(axes)
    table = list(op.parents) + [op.site]
    out = [BATCH] + list(op.out if out is None else out)
    extra = []
    for k in op.factors:
        extra += [tables[k].astype(dtype), list(elim.factors[k])]
    if op.player < 0:
        return jnp.einsum(T, ins, fact, table, *extra, out)
    fix = onehot(best[op.fix])
    if op.bit < 0:
        a = jnp.einsum(T, ins, fact, table, *extra, out)
        b = jnp.einsum(T, ins, fix, table, *extra, out)
        if weights is None:
            return a + b
        lift = (-1,) + (1,) * (len(out) - 1)
        return weights[0].reshape(lift) * a + weights[1].reshape(lift) * b
    both = jnp.stack([fact, fix])  # [2, *K_parents, K]
    return jnp.einsum(T, ins, both, [op.bit] + table, *extra, out)


def _open_bit(T, weights):
    """Give `T` the player's fix bit as a last axis, weighted `(1 - t_j, t_j)`."""
    if weights is None:
        return jnp.stack([T, T], axis=-1)
    lift = (-1,) + (1,) * (T.ndim - 1)
    return jnp.stack([T * weights[0].reshape(lift), T * weights[1].reshape(lift)], axis=-1)


def extension(elim: Elimination, maps, tables, t):
    """`F(t)` for a batch of points `t` (`[B, n]`, the players' probabilities): `[B]`.
    `tables`: the score's factor tables, finite wherever they can be reached (`reachable`)."""
    dtype = t.dtype
    T = jnp.ones((t.shape[0],), dtype)
    axes: tuple[int, ...] = ()
    for op in elim.ops:
        weights = None
        if op.player >= 0:
            tj = t[:, op.player]
            weights = (1 - tj, tj)
        if op.opens:
            T, axes = _open_bit(T, weights), axes + (op.bit,)
        T = _step(elim, op, T, axes, maps, weights if op.bit < 0 else None, tables, dtype)
        axes = op.out
    return T


def reachable(elim: Elimination, maps, dtype):
    """Which options of each factor's sites some coalition reaches (one 0/1 array per factor,
    over its scope) and whether some coalition draws from a row with no valid option: the
    contraction with every weight 1, clipped to 1 after each draw."""
    T = jnp.ones((1,), dtype)
    axes: tuple[int, ...] = ()
    invalid = jnp.asarray(False)
    ones = tuple(jnp.ones([elim.sizes[s] for s in scope], dtype) for scope in elim.factors)
    masks: list = [None] * len(elim.factors)
    for op in elim.ops:
        if op.opens:
            T, axes = _open_bit(T, None), axes + (op.bit,)
        best = maps[op.site]
        rows = jnp.stack([best[0], best[op.fix]]) if op.player >= 0 else best[:1]
        if jnp.issubdtype(rows.dtype, jnp.floating):  # transitions: a row of zeros
            bad = (rows.sum(-1) <= 0.5).astype(dtype)
        else:
            bad = (rows < 0).astype(dtype)  # [variants seen, *K_parents]
        ins = [BATCH] + list(axes)
        if op.bit >= 0:
            hit = jnp.einsum(T, ins, bad, [op.bit] + list(op.parents), [])
        else:
            hit = jnp.einsum(T, ins, bad.sum(0), list(op.parents), [])
        invalid = invalid | (hit > 0)
        bare = op._replace(factors=())
        for k in op.factors:
            masks[k] = jnp.minimum(
                _step(elim, bare, T, axes, maps, None, ones, dtype, out=elim.factors[k])[0], 1
            )
        T = jnp.minimum(_step(elim, bare, T, axes, maps, None, ones, dtype), 1)
        axes = op.out
    return tuple(masks), invalid


def direct_runs(elim: Elimination, maps, tables, bits):
    """Single runs made with the maps: for each row of `bits` (`Bool[Array, "B n"]`, the
    players that run their fix) the options of the first two runs `[2, sites]`, whether a
    draw of each run had no valid option `[B]`, and the score `[B]` (the factors multiplied
    left to right, as the pipeline does)."""
    options, invalid = [], jnp.zeros(bits.shape[0], bool)
    for op in elim.ops:
        best = maps[op.site]
        variant = jnp.zeros(bits.shape[0], jnp.int32)
        if op.player >= 0:
            variant = bits[:, op.player].astype(jnp.int32) * op.fix
        chosen = best[(variant,) + tuple(options[p] for p in op.parents)]
        invalid = invalid | (chosen < 0)
        options.append(jnp.maximum(chosen, 0))
    values = None
    for table, scope in zip(tables, elim.factors):
        value = (
            table[tuple(options[s] for s in scope)]
            if scope
            else jnp.broadcast_to(table, bits.shape[:1])
        )
        values = value if values is None else values * value
    return jnp.stack(options, axis=1)[:2], invalid, values


def stack(arrays):
    """`jnp.stack(arrays)` as a concatenation of reshaped arrays: the same array, but under
    `vmap` XLA compiles a stack of hundreds of arrays in seconds, this in milliseconds."""
    return jnp.concatenate([jnp.reshape(a, (1,) + a.shape) for a in arrays])


@functools.cache
def quadrature(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1] (float64) that integrate a polynomial of
    degree n - 1 exactly: ceil(n / 2) nodes."""
    m = max(1, -(-n // 2))
    x, w = np.polynomial.legendre.leggauss(m)
    return (x + 1) / 2, w / 2
