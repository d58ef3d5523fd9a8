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
from ._expected_chain import (
    chain_gains_expected,
    chain_reachable_expected,
    chain_transitions,
    chain_values_expected,
)
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
    """

    ops: tuple[SiteOp, ...]
    sizes: tuple[int, ...]
    factors: tuple[tuple[int, ...], ...]
    site_player: tuple[int, ...]
    width: int
    widest: tuple[int, ...]
    chain: bool = False

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


def site_maps(structure: Structure, logits, noise, world) -> tuple:
    """Every site's option for each variant and parent options in one world: `hard_argmax`
    of its table plus the site's Gumbels (the world's override where valid), `[V, *K_parents]`
    int32, -1 for a row with no valid option."""
    maps = []
    for s, (site, table) in enumerate(zip(structure.sites, logits)):
        row = noise[s, : site.num_options]
        if world.overrides is not None:
            row = jnp.where(world.valid[s], world.overrides[s], row)
        maps.append(hard_argmax(table, row, site.step))
    return tuple(maps)


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


@functools.cache
def quadrature(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1] (float64) that integrate a polynomial of
    degree n - 1 exactly: ceil(n / 2) nodes."""
    m = max(1, -(-n // 2))
    x, w = np.polynomial.legendre.leggauss(m)
    return (x + 1) / 2, w / 2


class WorldBlame(NamedTuple):
    """What one failure in one world gives (`n` players).

    - `shapley`, `banzhaf`, `leave_one_out`: `[n]`; `interactions`: `[n, n]` or None.
    - `runs`: `[2 + n]` scores of the direct runs: v(empty), v(all), v({j}).
    - `last`: the last player whose option differs between the failed and the fixed run, -1.
    - `low`, `high`: the lowest and highest score some coalition reaches.

    Where some coalition's score is NaN or draws from a row with no valid option, every value
    is NaN (as on the enumerating path, which the estimators' checks then explain).
    """

    shapley: jax.Array
    banzhaf: jax.Array
    leave_one_out: jax.Array
    interactions: jax.Array | None
    runs: jax.Array
    last: jax.Array
    low: jax.Array
    high: jax.Array


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
    player = jnp.asarray(np.asarray(elim.site_player) >= 0)
    start = jnp.zeros((size,), dtype).at[0].set(1)

    def step(carry, x):
        r, invalid = carry
        f, g, both = x
        bad = (f < 0) | (both & (g < 0))
        invalid = invalid | jnp.any((r > 0) & bad)
        f, g = jnp.maximum(f, 0), jnp.maximum(g, 0)
        pushed = jax.ops.segment_sum(r, f, size) + jnp.where(
            both, jax.ops.segment_sum(r, g, size), 0
        )
        pushed = jnp.minimum(pushed, 1)
        return (pushed, invalid), pushed

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


def _range(masks, tables):
    """The lowest and highest score some coalition can reach, and whether a reached factor
    entry is not finite. One factor: its reached entries' range, exactly. Several: the
    product of their ranges (a bound that holds every reached score)."""
    low = high = None
    bad = jnp.asarray(False)
    for mask, table in zip(masks, tables):
        hit = mask > 0
        bad = bad | jnp.any(hit & ~jnp.isfinite(table))
        lo = jnp.min(jnp.where(hit, table, jnp.inf))
        hi = jnp.max(jnp.where(hit, table, -jnp.inf))
        if low is None:
            low, high = lo, hi
        else:
            ends = jnp.stack([low * lo, low * hi, high * lo, high * hi])
            low, high = ends.min(), ends.max()
    return low, high, bad


def _expected_chain_blame(elim: Elimination, maps, tables, dtype, arrays=None) -> WorldBlame:
    """`world_blame` of a chain with transition matrices (`_expected_chain`): two scans,
    a program that does not grow with n. `arrays`: `(fact, fix)` already stacked
    (`chain_expected_arrays`), else built from `maps`."""
    n = elim.num_players
    nodes, weights = quadrature(n)
    points = np.concatenate([[0.5, 1.0], nodes])
    t = jnp.broadcast_to(jnp.asarray(points, dtype)[:, None], (points.size, n))
    fact, fix = chain_transitions(elim, maps) if arrays is None else arrays
    fact, fix = fact.astype(dtype), fix.astype(dtype)
    reach, invalid = chain_reachable_expected(elim, fact, fix, dtype)
    masks = tuple(
        reach[s[0], : t_.shape[0]] if s else jnp.ones((), dtype)
        for s, t_ in zip(elim.factors, tables)
    )
    low, high, bad = _range(masks, tables)
    bad = bad | invalid
    safe = tuple(jnp.where((m > 0) & jnp.isfinite(x), x, 0) for m, x in zip(masks, tables))
    unary, constant = chain_factors(elim, safe, dtype)
    player = np.asarray(elim.site_player)
    on = jnp.asarray(player >= 0)[:, None]
    site_t = jnp.where(on, t.T[np.maximum(player, 0)], 0)
    per_site = chain_gains_expected(fact, fix, site_t, unary) * constant  # [sites, points]
    gains = (
        jnp.zeros((n, points.size), dtype)
        .at[np.maximum(player, 0)]
        .add(jnp.where(on, per_site, 0))
        .T
    )
    bits = np.concatenate([np.zeros((1, n)), np.ones((1, n)), np.eye(n)]).astype(np.float64)
    site_bits = jnp.where(on, jnp.asarray(bits, dtype).T[np.maximum(player, 0)], 0)
    runs = chain_values_expected(fact, fix, site_bits, unary) * constant
    shapley = jnp.asarray(weights, dtype) @ gains[2:]
    nan = jnp.where(bad, jnp.nan, 0).astype(dtype)
    return WorldBlame(
        shapley=shapley + nan,
        banzhaf=gains[0] + nan,
        leave_one_out=gains[1] + nan,
        interactions=None,
        runs=runs + nan,
        last=jnp.asarray(-1, jnp.int32),
        low=low,
        high=high,
    )


def world_blame(
    elim: Elimination, maps, tables, interactions: bool = False, chain=None
) -> WorldBlame:
    """Exact blame of one failure in one world from its maps and the score's factor tables
    (pure; `vmap` it over worlds and failures). For a chain, `chain` may hold `(fact, fix)`
    made by `chain_maps`; `maps` is then needed only for `interactions`. Floating `maps`
    (`expected_site_maps`), or a floating `chain` (`chain_expected_arrays`), give blame in
    expectation over the noise."""
    n = elim.num_players
    dtype = jnp.result_type(float)
    tables = tuple(table.astype(dtype) for table in tables)
    # Transition matrices (floating `maps`, `expected_site_maps`): the game in expectation
    # over the noise, contracted by the general path (no `last`: -1).
    if chain is not None and jnp.issubdtype(chain[0].dtype, jnp.floating):
        return _expected_chain_blame(elim, None, tables, dtype, arrays=chain)
    expected = maps is not None and jnp.issubdtype(maps[0].dtype, jnp.floating)
    if expected and (elim.chain and not interactions):
        return _expected_chain_blame(elim, maps, tables, dtype)
    if expected and elim.chain:
        elim = elim._replace(chain=False)
    nodes, weights = quadrature(n)
    # Banzhaf's point; t = 1, where the gain is v(N) - v(N - {j}) (a one-hot forward pass
    # and exact scores backward: one rounding, as the enumerating path's difference); then
    # the quadrature's nodes.
    points = np.concatenate([[0.5, 1.0], nodes])
    t = jnp.broadcast_to(jnp.asarray(points, dtype)[:, None], (points.size, n))
    eye = np.eye(n, dtype=bool)
    bits = jnp.asarray(np.concatenate([np.zeros((1, n), bool), np.ones((1, n), bool), eye]))
    if elim.chain:
        fact, fix = chain if chain is not None else chain_arrays(elim, maps)
        reach, invalid = chain_reachable(elim, fact, fix, dtype)
        masks = tuple(
            reach[s[0], : t_.shape[0]] if s else jnp.ones((), dtype)
            for s, t_ in zip(elim.factors, tables)
        )
    elif expected:
        masks, invalid = reachable(elim, tuple((m > 0).astype(dtype) for m in maps), dtype)
    else:
        masks, invalid = reachable(elim, maps, dtype)
    low, high, bad = _range(masks, tables)
    bad = bad | invalid
    safe = tuple(jnp.where((m > 0) & jnp.isfinite(x), x, 0) for m, x in zip(masks, tables))
    if elim.chain:
        unary, constant = chain_factors(elim, safe, dtype)
        player = np.asarray(elim.site_player)
        site_t = jnp.where(jnp.asarray(player >= 0)[:, None], t.T[np.maximum(player, 0)], 0)
        per_site = chain_gains(fact, fix, site_t, unary) * constant  # [sites, points]
        gains = (
            jnp.zeros((n, points.size), dtype)
            .at[np.maximum(player, 0)]
            .add(jnp.where(jnp.asarray(player >= 0)[:, None], per_site, 0))
            .T
        )
        options, run_invalid, runs = chain_runs(elim, fact, fix, unary, constant, bits)
    else:
        gains = jax.grad(lambda t: extension(elim, maps, safe, t).sum())(t)  # [points, n]
        if expected:  # the expected scores of the runs: F at the cube's corners
            runs = extension(elim, maps, safe, bits.astype(dtype))
            options, run_invalid = None, jnp.zeros((), bool)
        else:
            options, run_invalid, runs = direct_runs(elim, maps, safe, bits)
    w = jnp.asarray(weights, dtype)
    shapley = w @ gains[2:]
    banzhaf, leave_one_out = gains[0], gains[1]
    pairs = None
    if interactions:

        def hessian(point):
            return jax.hessian(lambda u: extension(elim, maps, safe, u[None])[0])(point)

        H = jax.vmap(hessian)(t[2:])  # [m, n, n]
        pairs = jnp.einsum("m,mij->ij", w, H)
        pairs = jnp.where(jnp.eye(n, dtype=bool), 0, pairs)
    bad = bad | jnp.any(run_invalid)
    if expected:  # no single failed and fixed run to compare
        last = jnp.asarray(-1, jnp.int32)
    else:
        differs = options[0] != options[1]
        player = np.asarray(elim.site_player)
        differs = differs & jnp.asarray(player >= 0)
        last_site = jnp.max(jnp.where(differs, jnp.arange(player.size), -1))
        last = jnp.where(last_site >= 0, jnp.asarray(player)[jnp.maximum(last_site, 0)], -1)
    nan = jnp.where(bad, jnp.nan, 0).astype(dtype)
    return WorldBlame(
        shapley=shapley + nan,
        banzhaf=banzhaf + nan,
        leave_one_out=leave_one_out + nan,
        interactions=None if pairs is None else pairs + nan,
        runs=runs.astype(dtype) + nan,
        last=last.astype(jnp.int32),
        low=low,
        high=high,
    )
