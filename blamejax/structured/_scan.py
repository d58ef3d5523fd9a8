"""The general contraction (`_multilinear`) as one `lax.scan` over the draws, a program that
does not grow with n.

The frontier is carried as a tensor of fixed shape: `S` site slots of `K` options each (K the
most options of any draw) and `Sb` fix-bit slots of 2, over a batch axis. The frontier's sites
fill the first slots in pipeline order, its bits the first bit slots in the order they opened;
a slot not in use holds all its mass at option 0. Each draw is then described, in slot
positions, by a static *signature*: how many slots are in use, which hold its parents, which
bit it reads or opens, which slots survive it, whether a player's fix and a unary factor are
attached. Draws of a repeating pattern (a skip-chain, a step that draws twice) share a few
signatures; the scan's body is a `lax.switch` over them, and every draw's maps are stacked
(padded to `K` options, `P` parents). The contraction is the same as `extension`'s, only
reorganised, so the values agree with it up to rounding.

It applies (`scan_layout`) when every factor of the score reads at most one site (the
constant factors are multiplied in at the end); otherwise the general contraction runs
draw by draw.
"""

from __future__ import annotations

import functools
import string
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._multilinear import Elimination, stack


class Signature(NamedTuple):
    """One kind of draw, in slot positions (static, hashable).

    - `sites`, `bits`: the site and bit slots in use before the draw.
    - `parents`: the slots of its parents (in the order of its table's axes).
    - `player`: whether a player's fix switches it; `bit`: the bit slot it reads (after
      opening), -1 for none; `opens`: whether it opens that bit.
    - `keep_sites`: the positions of `(frontier sites..., new draw)` that survive it;
      `keep_bits`: the positions of the bits (after opening) that survive it.
    - `unary`: whether a factor over the new draw is multiplied in.
    """

    sites: int
    bits: int
    parents: tuple[int, ...]
    player: bool
    bit: int
    opens: bool
    keep_sites: tuple[int, ...]
    keep_bits: tuple[int, ...]
    unary: bool


class ScanLayout(NamedTuple):
    """The frontier's slots and the draws' signatures (static, hashable).

    - `slots`, `bit_slots`: S and Sb; `size`: K; `parents`: P, the most parents of a draw.
    - `signatures`: the distinct signatures; `kinds`: each draw's index into them.
    - `unary_of`: per draw, the factors over that draw alone (multiplied in at it);
      `constant`: the factors that read no site.
    """

    slots: int
    bit_slots: int
    size: int
    parents: int
    signatures: tuple[Signature, ...]
    kinds: tuple[int, ...]
    unary_of: tuple[tuple[int, ...], ...]
    constant: tuple[int, ...]

    @property
    def states(self) -> int:
        """The entries of the carried frontier (per batch row)."""
        return self.size**self.slots * 2**self.bit_slots


@functools.cache
def scan_layout(elim: Elimination) -> ScanLayout | None:
    """The slot layout of `elim`'s contraction, or None when a factor of the score reads more
    than one site (that contraction runs draw by draw)."""
    if any(len(scope) > 1 for scope in elim.factors):
        return None
    num_sites = len(elim.ops)
    size = max(elim.sizes[:num_sites], default=1)
    frontier: list[int] = []
    bits: list[int] = []
    signatures: dict[Signature, int] = {}
    kinds, unary_of = [], []
    slots = bit_slots = 0
    for op in elim.ops:
        opened = bits + ([op.bit] if op.opens else [])
        sites = frontier + [op.site]
        unary = tuple(k for k in op.factors if elim.factors[k])
        signature = Signature(
            sites=len(frontier),
            bits=len(bits),
            parents=tuple(frontier.index(p) for p in op.parents),
            player=op.player >= 0,
            bit=opened.index(op.bit) if op.bit >= 0 else -1,
            opens=op.opens,
            keep_sites=tuple(i for i, v in enumerate(sites) if v in op.out),
            keep_bits=tuple(i for i, v in enumerate(opened) if v in op.out),
            unary=bool(unary),
        )
        kinds.append(signatures.setdefault(signature, len(signatures)))
        unary_of.append(unary)
        frontier = [sites[i] for i in signature.keep_sites]
        bits = [opened[i] for i in signature.keep_bits]
        slots, bit_slots = max(slots, len(frontier)), max(bit_slots, len(bits))
    constant = tuple(k for k, scope in enumerate(elim.factors) if not scope)
    return ScanLayout(
        slots,
        bit_slots,
        size,
        max((len(op.parents) for op in elim.ops), default=0),
        tuple(signatures),
        tuple(kinds),
        tuple(unary_of),
        constant,
    )


# Einsum letters: the batch, the site slots (the new draw is the one after the frontier's),
# the bit slots.
_BATCH = "z"
_SITE = string.ascii_lowercase[:25]
_BIT = string.ascii_uppercase


def stack_maps(layout: ScanLayout, elim: Elimination, maps):
    """Every draw's factual and fix map, `[sites, 2, K^P]` int32 (-1 past a parent's options
    and for a row with no valid option; a non-player's fix is its factual map), or for
    transition tensors `[sites, 2, K^P, K]` (0 past the options). A draw with fewer than P
    parents holds its rows at option 0 of the missing parent axes. Draws whose maps share a
    shape are stacked together (a few operations per group, one per draw)."""
    size, num = layout.size, layout.parents
    grouped = getattr(maps, "grouped", None)  # `SiteMaps`: stacked already
    if grouped is None:
        groups: dict = {}
        for op in elim.ops:
            best = maps[op.site]
            groups.setdefault((best.shape, best.dtype), []).append(op.site)
        grouped = [(sites, stack([maps[s] for s in sites])) for sites in groups.values()]
    parts, order = [], []
    for sites, group in grouped:  # [G, V, *K_parents(, K)]
        sites = list(sites)
        shape, dtype = group.shape[1:], group.dtype
        parent_axes = len(elim.ops[sites[0]].parents)
        floating = jnp.issubdtype(dtype, jnp.floating)
        fixes = np.asarray(
            [max(elim.ops[s].fix, 0) if elim.ops[s].player >= 0 else 0 for s in sites]
        )
        pair = jnp.stack([group[:, 0], group[np.arange(len(sites)), fixes]], axis=1)
        lead = pair.shape[: 2 + parent_axes]
        pair = pair.reshape(lead + (1,) * (num - parent_axes) + pair.shape[2 + parent_axes :])
        pad = [(0, 0), (0, 0)] + [(0, size - k) for k in shape[1 : 1 + parent_axes]]
        pad += [(0, size - 1)] * (num - parent_axes)
        if floating:
            pad += [(0, size - shape[-1])]
        parts.append(jnp.pad(pair, pad, constant_values=0 if floating else -1))
        order += sites
    stacked = jnp.concatenate(parts) if len(parts) > 1 else parts[0]
    if order == sorted(order):
        return stacked
    return stacked[np.argsort(np.asarray(order))]


def stack_unary(layout: ScanLayout, tables, dtype):
    """Every draw's unary factors multiplied together, `[sites, K]` (1 where it has none; 0
    past its options)."""
    rows = jnp.ones((len(layout.unary_of), layout.size), dtype)
    groups: dict = {}
    for s, unary in enumerate(layout.unary_of):
        for k in unary:
            groups.setdefault(tables[k].shape, []).append((s, k))
    for shape, members in groups.items():
        group = stack([tables[k].astype(dtype) for _, k in members])
        group = jnp.pad(group, [(0, 0), (0, layout.size - shape[0])])
        rows = rows.at[np.asarray([s for s, _ in members])].multiply(group)
    return rows


def _constant(layout: ScanLayout, tables, dtype):
    value = jnp.ones((), dtype)
    for k in layout.constant:
        value = value * tables[k].astype(dtype)
    return value


def _used(layout: ScanLayout, sig: Signature, T):
    """`T` (padded layout) with its unused slots taken at option 0."""
    index = (slice(None),)
    index += tuple(slice(None) if i < sig.sites else 0 for i in range(layout.slots))
    index += tuple(slice(None) if i < sig.bits else 0 for i in range(layout.bit_slots))
    return T[index]


def _padded(layout: ScanLayout, T, num_sites: int, num_bits: int):
    """`T` over `[B, kept sites, kept bits]` back to the padded layout."""
    batch = T.shape[:1]
    sites, bits = T.shape[1 : 1 + num_sites], T.shape[1 + num_sites :]
    free_sites, free_bits = layout.slots - num_sites, layout.bit_slots - num_bits
    T = T.reshape(batch + sites + (1,) * free_sites + bits + (1,) * free_bits)
    pad = [(0, 0)] * (1 + num_sites) + [(0, layout.size - 1)] * free_sites
    pad += [(0, 0)] * num_bits + [(0, 1)] * free_bits
    return jnp.pad(T, pad)


def _lift(w, ndim):
    return w.reshape(w.shape + (1,) * (ndim - 1))


def _contract(layout: ScanLayout, sig: Signature, T, pair, unary, weights, out=None):
    """One draw on the used part of `T`: times the draw's tensor (`pair`: factual and fix,
    floating, over `[2, *parents, K]` with P parent axes) and its unary factor, summed to the
    surviving slots (or to `out`, letters). `weights`: `(1 - t_j, t_j)` per batch row, or None
    (both 1: the reachability pass). Returns the result and its letters."""
    sites = [_SITE[i] for i in range(sig.sites)]
    bits = [_BIT[i] for i in range(sig.bits)]
    new = _SITE[sig.sites]
    pair = pair[
        (slice(None),) * (1 + len(sig.parents)) + (0,) * (layout.parents - len(sig.parents))
    ]
    table = "".join(sites[p] for p in sig.parents) + new
    if sig.opens:
        if weights is None:
            T = jnp.stack([T, T], axis=-1)
        else:
            T = jnp.stack([T * _lift(weights[0], T.ndim), T * _lift(weights[1], T.ndim)], axis=-1)
        bits = bits + [_BIT[sig.bits]]
    ins = _BATCH + "".join(sites) + "".join(bits)
    if out is None:
        letters = sites + [new]
        out = _BATCH + "".join(letters[i] for i in sig.keep_sites)
        out += "".join(bits[i] for i in sig.keep_bits)
    extra = [] if unary is None or not sig.unary else [unary]
    extra_spec = "," + new if extra else ""
    if not sig.player:
        return jnp.einsum(f"{ins},{table}{extra_spec}->{out}", T, pair[0], *extra)
    if sig.bit >= 0:
        spec = f"{ins},{bits[sig.bit]}{table}{extra_spec}->{out}"
        return jnp.einsum(spec, T, pair, *extra)
    spec = f"{ins},{table}{extra_spec}->{out}"
    a = jnp.einsum(spec, T, pair[0], *extra)
    b = jnp.einsum(spec, T, pair[1], *extra)
    if weights is None:
        return a + b
    return _lift(weights[0], a.ndim) * a + _lift(weights[1], b.ndim) * b


def _floating(layout: ScanLayout, pair, dtype):
    """The draw's maps as floating tensors `[2, *parents, K]`."""
    if jnp.issubdtype(pair.dtype, jnp.floating):
        return pair.astype(dtype)
    return jax.nn.one_hot(pair, layout.size, dtype=dtype)


def _start(layout: ScanLayout, batch: int, dtype):
    shape = (batch,) + (layout.size,) * layout.slots + (2,) * layout.bit_slots
    return jnp.zeros(shape, dtype).at[(slice(None),) + (0,) * (len(shape) - 1)].set(1)


def _switch(layout: ScanLayout, branch, kind, *args):
    branches = [functools.partial(branch, sig) for sig in layout.signatures]
    if len(branches) == 1:
        return branches[0](*args)
    return jax.lax.switch(kind, branches, *args)


def scan_extension(layout: ScanLayout, elim: Elimination, pairs, unary, tables, t):
    """`extension(elim, maps, tables, t)` by one scan: `F(t)` for a batch of points `t`
    (`[B, n]`): `[B]`. `pairs`: `stack_maps`; `unary`: `stack_unary`."""
    dtype = t.dtype
    player = np.asarray([max(op.player, 0) for op in elim.ops])
    site_t = t.T[player]  # [sites, B]

    def branch(sig, T, pair, row, tj):
        T = _used(layout, sig, T)
        weights = (1 - tj, tj) if sig.player else None
        T = _contract(layout, sig, T, _floating(layout, pair, dtype), row, weights)
        return _padded(layout, T, len(sig.keep_sites), len(sig.keep_bits))

    @jax.checkpoint
    def body(T, x):
        kind, pair, row, tj = x
        return _switch(layout, branch, kind, T, pair, row, tj), None

    kinds = jnp.asarray(np.asarray(layout.kinds, np.int32))
    T, _ = jax.lax.scan(body, _start(layout, t.shape[0], dtype), (kinds, pairs, unary, site_t))
    return _used(layout, layout.signatures[0]._replace(sites=0, bits=0), T) * _constant(
        layout, tables, dtype
    )


def scan_reachable(layout: ScanLayout, elim: Elimination, pairs, dtype):
    """`reachable(elim, maps, dtype)` by one scan: the 0/1 masks of the factors' options that
    some coalition reaches, and whether some coalition draws from a row with no valid
    option."""

    def branch(sig, carry, pair):
        T, invalid = carry
        T = _used(layout, sig, T)
        if jnp.issubdtype(pair.dtype, jnp.floating):
            bad = (pair.sum(-1) <= 0.5).astype(dtype)
        else:
            bad = (pair < 0).astype(dtype)  # [2, *parents]
        bad = bad[
            (slice(None),) * (1 + len(sig.parents)) + (0,) * (layout.parents - len(sig.parents))
        ]
        sites = "".join(_SITE[i] for i in range(sig.sites))
        bits = "".join(_BIT[i] for i in range(sig.bits))
        rows = "".join(_SITE[p] for p in sig.parents)
        if sig.opens:
            T = jnp.stack([T, T], axis=-1)
            bits += _BIT[sig.bits]
        ins = _BATCH + sites + bits
        if sig.bit >= 0:
            hit = jnp.einsum(f"{ins},{_BIT[sig.bit]}{rows}->", T, bad)
        else:
            hit = jnp.einsum(f"{ins},{rows}->", T, bad.sum(0) if sig.player else bad[0])
        if sig.opens:  # `_contract` opens the bit itself
            T = T[..., 0]
        pair = _floating(layout, pair, dtype)
        mask = jnp.zeros((layout.size,), dtype)
        if sig.unary:
            new = _SITE[sig.sites]
            mask = jnp.minimum(_contract(layout, sig, T, pair, None, None, _BATCH + new)[0], 1)
        T = jnp.minimum(_contract(layout, sig, T, pair, None, None), 1)
        T = _padded(layout, T, len(sig.keep_sites), len(sig.keep_bits))
        return (T, invalid | (hit > 0)), mask

    def body(carry, x):
        kind, pair = x
        return _switch(layout, branch, kind, carry, pair)

    kinds = jnp.asarray(np.asarray(layout.kinds, np.int32))
    start = (_start(layout, 1, dtype), jnp.asarray(False))
    (_, invalid), masks = jax.lax.scan(body, start, (kinds, pairs))
    out = tuple(
        masks[scope[0], : elim.sizes[scope[0]]] if scope else jnp.ones((), dtype)
        for scope in elim.factors
    )
    return out, invalid


def scan_runs(layout: ScanLayout, elim: Elimination, pairs, tables, bits):
    """`direct_runs(elim, maps, tables, bits)` by one scan over the draws (hard maps):
    the options of the first two runs `[2, sites]`, whether a draw of each run had no valid
    option `[B]`, and the score `[B]`."""
    num_sites = len(elim.ops)
    parents = np.full((num_sites, layout.parents), num_sites, np.int32)  # past the end: 0
    for op in elim.ops:
        parents[op.site, : len(op.parents)] = op.parents
    player = np.asarray([max(op.player, 0) for op in elim.ops], np.int32)
    switched = np.asarray([op.player >= 0 for op in elim.ops])
    batch = bits.shape[0]
    bits = bits.astype(jnp.int32)

    def body(carry, x):
        options, invalid = carry
        site, pair, reads, j, on = x
        variant = jnp.where(on, bits[:, j], 0)
        chosen = pair[(variant,) + tuple(options[:, reads[i]] for i in range(layout.parents))]
        options = options.at[:, site].set(jnp.maximum(chosen, 0))
        return (options, invalid | (chosen < 0)), None

    start = (jnp.zeros((batch, num_sites + 1), jnp.int32), jnp.zeros((batch,), bool))
    xs = (
        jnp.arange(num_sites),
        pairs,
        jnp.asarray(parents),
        jnp.asarray(player),
        jnp.asarray(switched),
    )
    (options, invalid), _ = jax.lax.scan(body, start, xs)
    options = options[:, :num_sites]
    values = None
    for table, scope in zip(tables, elim.factors):
        value = table[options[:, scope[0]]] if scope else jnp.broadcast_to(table, (batch,))
        values = value if values is None else values * value
    return options[:2], invalid, values
