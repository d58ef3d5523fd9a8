"""Exact blame of one failure in one world (`world_blame`): the multilinear extension's
gains integrated over t (Shapley), at t = 1/2 (Banzhaf) and at t = 1 (leave-one-out), by the
general contraction (`_multilinear`) or, for a chain, by its two scans (`_chain`,
`_expected_chain` in expectation over the noise)."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._chain import chain_arrays, chain_factors, chain_gains, chain_reachable, chain_runs
from ._expected_chain import (
    chain_gains_expected,
    chain_reachable_expected,
    chain_transitions,
    chain_values_expected,
)
from ._multilinear import Elimination, direct_runs, extension, quadrature, reachable
from ._scan import scan_extension, scan_layout, scan_reachable, scan_runs, stack_maps, stack_unary


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
    layout = scan_layout(elim) if elim.scan and not elim.chain else None
    stacked = None if layout is None else stack_maps(layout, elim, maps)
    if elim.chain:
        fact, fix = chain if chain is not None else chain_arrays(elim, maps)
        reach, invalid = chain_reachable(elim, fact, fix, dtype)
        masks = tuple(
            reach[s[0], : t_.shape[0]] if s else jnp.ones((), dtype)
            for s, t_ in zip(elim.factors, tables)
        )
    elif layout is not None:  # one scan over the draws (`_scan`)
        seen = (stacked > 0).astype(dtype) if expected else stacked
        masks, invalid = scan_reachable(layout, elim, seen, dtype)
    elif expected:
        masks, invalid = reachable(elim, tuple((m > 0).astype(dtype) for m in maps), dtype)
    else:
        masks, invalid = reachable(elim, maps, dtype)
    low, high, bad = _range(masks, tables)
    bad = bad | invalid
    safe = tuple(jnp.where((m > 0) & jnp.isfinite(x), x, 0) for m, x in zip(masks, tables))
    if layout is not None:
        rows = stack_unary(layout, safe, dtype)
        forward = functools.partial(scan_extension, layout, elim, stacked, rows, safe)
    else:
        forward = functools.partial(extension, elim, maps, safe)
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
        gains = jax.grad(lambda t: forward(t).sum())(t)  # [points, n]
        if expected:  # the expected scores of the runs: F at the cube's corners
            runs = forward(bits.astype(dtype))
            options, run_invalid = None, jnp.zeros((), bool)
        elif layout is not None:
            options, run_invalid, runs = scan_runs(layout, elim, stacked, safe, bits)
        else:
            options, run_invalid, runs = direct_runs(elim, maps, safe, bits)
    w = jnp.asarray(weights, dtype)
    shapley = w @ gains[2:]
    banzhaf, leave_one_out = gains[0], gains[1]
    pairs = None
    if interactions:

        def hessian(point):
            return jax.hessian(lambda u: forward(u[None])[0])(point)

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
