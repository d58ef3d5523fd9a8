"""Exact attribution from the table of coalition values.

`v[m]` is the score of coalition `m` (bit i of m set = step i runs its fix). Everything
here is a fixed linear map of `v`, computed without a loop over coalitions and without
building a 2^n x n matrix: a divide-and-conquer over the bits keeps, for every step i,
the sum of its marginal contributions grouped by coalition size. Each level only adds
pairs, so float32 rounding grows with log(2^n) = n, not with 2^n, and the total work is
about 6 * 2^n additions (about 26 * 2^n with pairwise interactions). From n = 18 on, a
split into two halves of the steps does the same with two matrix products
(`_split_size_sums`).

Weights such as ``s! (n-s-1)! / n!`` are computed with Python integers and converted once.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from math import comb
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float


def shapley_weights(n: int) -> np.ndarray:
    """``w[s] = s! (n-s-1)! / n! = 1 / (n * C(n-1, s))`` for s = 0..n-1, in float64."""
    return np.array([float(Fraction(1, n * comb(n - 1, s))) for s in range(n)])


def interaction_weights(n: int) -> np.ndarray:
    """``w[s] = s! (n-s-2)! / (n-1)! = 1 / ((n-1) * C(n-2, s))`` for s = 0..n-2."""
    if n < 2:
        return np.zeros((0,))
    return np.array([float(Fraction(1, (n - 1) * comb(n - 2, s))) for s in range(n - 1)])


def _pad_last(x, before: int, after: int):
    widths = [(0, 0)] * (x.ndim - 1) + [(before, after)]
    return jnp.pad(x, widths)


_MATMUL_LEVELS = 7
_SPLIT_FROM = 18  # from this n on, `_split_size_sums` is faster (it reads the table twice)


@functools.cache
def _block_matrix(levels: int) -> np.ndarray:
    """`[2^b, (b+1) + b (b+1)]`: column s of the first part sums the coalitions of popcount s;
    column (i, s) of the second adds v(S + i) and subtracts v(S) for |S| = s, i not in S."""
    size = 1 << levels
    h = np.zeros((size, levels + 1))
    d = np.zeros((size, levels, levels + 1))
    for r in range(size):
        count = bin(r).count("1")
        h[r, count] = 1.0
        for i in range(levels):
            if (r >> i) & 1:
                d[r, i, count - 1] += 1.0
            else:
                d[r, i, count] -= 1.0
    return np.concatenate([h, d.reshape(size, -1)], axis=1)


@functools.cache
def _diagonal_sum(rows: int, cols: int, n: int) -> np.ndarray:
    """`T[p, q, s] = 1` where `p + q = s`: contracts a table over (high size, low size)
    into the total size."""
    out = np.zeros((rows, cols, n))
    for p in range(rows):
        for q in range(cols):
            if p + q < n:
                out[p, q, p + q] = 1.0
    return out


def _split_size_sums(values, n: int):
    """`marginal_size_sums` (no pairs) for large n, by splitting the steps into a low half
    (index r) and a high half (index h), with the table read as ``V[h, r]``.

    For a low step i the grouped marginals are the low-half marginals of
    ``P[p, r] = sum of V[h, r] over h with popcount p``, shifted by p; for a high step,
    symmetrically, the high-half marginals of ``Q[h, q] = sum of V[h, r] over r with
    popcount q``. The two big contractions read the table once each and cost about
    (n + 2) multiply-adds per coalition (the divide-and-conquer's levels past the first
    matrix product cost more at n >= 18); each difference v(S + i) - v(S) is taken between
    sums of at most 2^(n/2) values, and the size weights are applied afterwards.
    """
    low = n // 2
    high = n - low
    dtype = values.dtype
    hi_matrix = jnp.asarray(_block_matrix(high), dtype)  # [2^high, (high+1) + high (high+1)]
    lo_matrix = jnp.asarray(_block_matrix(low), dtype)  # [2^low, (low+1) + low (low+1)]
    table = values.reshape(1 << high, 1 << low)
    dot = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    by_high_size = dot(hi_matrix[:, : high + 1].T, table)  # P: [high+1, 2^low]
    by_low_size = dot(table, lo_matrix[:, : low + 1])  # Q: [2^high, low+1]
    low_marginals = dot(by_high_size, lo_matrix[:, low + 1 :]).reshape(high + 1, low, low + 1)
    high_marginals = dot(hi_matrix[:, high + 1 :].T, by_low_size).reshape(high, high + 1, low + 1)
    to_size = jnp.asarray(_diagonal_sum(high + 1, low + 1, n), dtype)  # [p, q, s]
    highest = jax.lax.Precision.HIGHEST
    d_low = jnp.einsum("piq,pqs->is", low_marginals, to_size, precision=highest)
    d_high = jnp.einsum("jpq,pqs->js", high_marginals, to_size, precision=highest)
    return jnp.concatenate([d_low, d_high], axis=0)


def marginal_size_sums(values: Float[Array, " coalitions"], pairs: bool = False):
    """Sums of marginal contributions grouped by coalition size.

    **Arguments:**
    - `values`: `Float[Array, "2**n"]`.
    - `pairs`: also return the second differences of every pair of steps.

    **Returns:** `D` of shape `[n, n]` with
    ``D[i, s] = sum over S not containing i with |S| = s of v(S + i) - v(S)``
    (entries with s = n - 1 are used; the array is square for convenience), and when
    `pairs`, `E` of shape `[n, n, n]` with, for i != j,
    ``E[i, j, s] = sum over S without i, j, |S| = s of v(S+i+j) - v(S+i) - v(S+j) + v(S)``.
    """
    size = values.shape[-1]
    n = size.bit_length() - 1
    if 1 << n != size:
        raise ValueError(f"`values` must have length 2**n, got {size}")
    dtype = values.dtype
    if not pairs and n >= _SPLIT_FROM:
        return _split_size_sums(values, n)
    # H[b, s]: sum of v over the low-bit coalitions of block b with popcount s.
    # D[b, i, s]: grouped marginals of step i (i below the current level).
    # E[b, i, j, s]: grouped second differences of steps i, j (both below the level).
    first = 0
    if pairs:
        H = values[:, None]
        D = jnp.zeros((size, 0, 1), dtype)
        E = jnp.zeros((size, 0, 0, 1), dtype)
    else:
        # The first levels at once: one matrix product with a fixed 0/+-1 matrix over blocks
        # of 2^b coalitions (b <= 7, so each output sums at most 128 terms).
        first = min(_MATMUL_LEVELS, n)
        out = jnp.matmul(
            values.reshape(size >> first, 1 << first),
            jnp.asarray(_block_matrix(first), dtype),
            precision=jax.lax.Precision.HIGHEST,
        )
        H = out[:, : first + 1]
        D = out[:, first + 1 :].reshape(size >> first, first, first + 1)
        E = None
    for level in range(first, n):
        blocks = size >> (level + 1)
        H = H.reshape(blocks, 2, level + 1)
        D = D.reshape(blocks, 2, level, level + 1)
        HA, HB = H[:, 0], H[:, 1]
        DA, DB = D[:, 0], D[:, 1]
        if pairs:
            E = E.reshape(blocks, 2, level, level, level + 1)
            EA, EB = E[:, 0], E[:, 1]
            old = _pad_last(EA, 0, 1) + _pad_last(EB, 1, 0)  # [b, L, L, L+2]
            new = _pad_last(DB - DA, 0, 1)  # [b, L, L+2]: pair (i, level)
            zero = jnp.zeros((new.shape[0], 1, level + 2), dtype)
            E = jnp.concatenate([old, new[:, None]], axis=1)  # rows i, column j = level missing
            E = jnp.concatenate([E, jnp.concatenate([new, zero], axis=1)[:, :, None]], axis=2)
        D_old = _pad_last(DA, 0, 1) + _pad_last(DB, 1, 0)  # [b, L, L+2]
        D_new = _pad_last(HB - HA, 0, 1)  # [b, L+2]
        D = jnp.concatenate([D_old, D_new[:, None]], axis=1)  # [b, L+1, L+2]
        H = _pad_last(HA, 0, 1) + _pad_last(HB, 1, 0)  # [b, L+2]
    D = D[0, :, :n]
    if pairs:
        return D, E[0, :, :, :n]
    return D


class Attribution(NamedTuple):
    """Exact attributions of one failure (all arrays over steps, in `players` order)."""

    shapley: Float[Array, " n"]
    banzhaf: Float[Array, " n"]
    fix_alone: Float[Array, " n"]  # v({i}) - v(empty)
    leave_one_out: Float[Array, " n"]  # v(N) - v(N - {i})
    interactions: Float[Array, "n n"] | None  # Shapley interaction index, zero diagonal
    empty: Float[Array, ""]  # v(empty): the failed run
    full: Float[Array, ""]  # v(N): the fully fixed run


def attribute(values: Float[Array, " coalitions"], interactions: bool = True) -> Attribution:
    """Shapley, Banzhaf, fix-alone, leave-one-out and pairwise interaction indices from
    the full table `values[2**n]` (a floating-point array). Pure; `vmap` it over failures.
    Compiled once per table length (called eagerly, it would otherwise compile each of its
    operations on its own); `attribute.clear_cache()` forgets the compiled programs."""
    if not hasattr(values, "shape") or not hasattr(values, "dtype") or values.ndim != 1:
        got = f"shape {tuple(values.shape)}" if hasattr(values, "shape") else type(values).__name__
        raise TypeError(f"`values` must be a 1-D array of the 2**n coalition values, got {got}")
    if not jnp.issubdtype(values.dtype, jnp.floating):
        raise TypeError(f"`values` must be floating point, got {values.dtype}")
    return _attribute(values, interactions=interactions)


@functools.partial(jax.jit, static_argnames="interactions")
def _attribute(values, interactions):
    """`attribute`, compiled (its arguments checked)."""
    size = values.shape[-1]
    n = size.bit_length() - 1
    if n < 1 or 1 << n != size:
        raise ValueError(f"`values` must have length 2**n with n >= 1, got {size}")
    dtype = values.dtype
    if interactions and n >= 2:
        D, E = marginal_size_sums(values, pairs=True)
        w2 = jnp.asarray(interaction_weights(n), dtype)
        pair = E[:, :, : n - 1] @ w2
        pair = jnp.where(jnp.eye(n, dtype=bool), 0.0, pair)
    else:
        D = marginal_size_sums(values)
        pair = jnp.zeros((n, n), dtype) if interactions else None
    shapley = D @ jnp.asarray(shapley_weights(n), dtype)
    banzhaf = D.sum(axis=1) * jnp.asarray(1.0 / 2 ** (n - 1), dtype)
    bits = np.array([1 << i for i in range(n)], dtype=np.int64)
    full_index = size - 1
    fix_alone = values[bits] - values[0]
    leave_one_out = values[full_index] - values[full_index - bits]
    return Attribution(
        shapley=shapley,
        banzhaf=banzhaf,
        fix_alone=fix_alone,
        leave_one_out=leave_one_out,
        interactions=pair,
        empty=values[0],
        full=values[full_index],
    )


attribute.clear_cache = _attribute.clear_cache  # forgets the compiled programs (`clear_caches`)
