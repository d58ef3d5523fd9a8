"""Permutation-sampling Shapley values for one failure: random orders of the steps, and the
marginals their prefixes give.

One **sample** is one random order of the n steps (or, with `antithetic=True`, an order and
its reverse, averaged: the pair is then the unit every bound counts). Fixing the steps one at
a time in that order scores the n + 1 prefixes of the order (`blamejax.estimators._prefixes`);
the differences of consecutive prefixes give one marginal contribution per step, and they
telescope to `v(all) - v(empty)`, so every estimate adds up exactly.

**Worlds.** With W worlds per failure, every order is scored in all W worlds (with the same
noise across the order's prefixes: common random numbers) and a coalition's value is their
mean, as in `exact_blame`. So the estimates target exactly the values `exact_blame` computes,
add up to its `v(all) - v(empty)`, and a marginal still lies in an interval of width
`2 (s_max - s_min)`.

**Orders** are addressed, not drawn in sequence: the order of sample p of a failure depends
only on (key, p) (`order_ranks`), so it does not depend on how samples are batched.

Every function here is pure; `mc_shapley_fixed` is the whole estimator for one failure with
a fixed number of samples, which `blame_batch` vmaps over failures and `mc_shapley`'s
compiled loop (`blamejax.estimators._advance`) runs lane by lane.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.extend.random as jax_random_ext
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray, UInt32

from ..coalitions import mask_values
from ..noise import PERM_TAG
from ..pipeline import Hard, Structure, World, world_noise
from ._prefixes import counted_prefix_values, prefix_values

# Pipelines with at least this many draw sites defer their tabulated draws (`Context`: one
# argmax over all the tables and one scan over the chain of gathers). The compiled program then
# stays about the same size whatever the length of the pipeline; below it, draws made one by
# one compile in a few seconds too and evaluate about 1.4x faster
# (`python benchmarks/bench_mc.py --chain-compare`). Read while tracing: `clear_caches()`
# after changing it.
DEFER_FROM = 32


def scorer(pipeline, structure, case, worlds, noises, players, fixes, mode, rebuild=None):
    """`masks [M, n] -> (mean over worlds [M], min score, max score)` for one failure.
    `rebuild`: if given, the case is `rebuild(case)` (`take_slots`), cut apart where it is
    used."""
    defer = len(structure.sites) >= DEFER_FROM

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
    tagged = jr.fold_in(key, PERM_TAG)
    data = jr.key_data(tagged)
    if data.shape == (2,) and data.dtype == jnp.uint32:
        return data
    return jr.bits(tagged, (2,), jnp.uint32)


def order_ranks(seed: UInt32[Array, " 2"], units: Int[Array, " B"], n: int) -> Int[Array, "B n"]:
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


def sample_marginals(score, ranks, empty, full, antithetic: bool, counted=None):
    """One marginal vector per sample: `[B, n]` (the pair mean when antithetic), and the
    min and max score seen. With `counted = (sizes, count)` the prefixes are scored by
    `counted_prefix_values` and the values of the first two prefixes of the first order
    are returned too (the empty and full coalition when `sizes` is `ends_sizes`)."""
    num, n = ranks.shape
    if antithetic:
        ranks = jnp.concatenate([ranks, (n - 1) - ranks], axis=0)
    if counted is None:
        values, low, high = prefix_values(score, ranks)
    else:
        scored, low, high = counted_prefix_values(score, ranks, *counted)
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


def end_values(score, n: int):
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
    score = scorer(pipeline, structure, case, worlds, noises, players, fix_variants, mode)
    empty, full, end_low, end_high = end_values(score, n)
    seed = order_seed(key)

    def body(carry, p):
        low, high = carry
        ranks = order_ranks(seed, p[None], n)
        marginals, lo, hi = sample_marginals(score, ranks, empty, full, antithetic)
        return (jnp.minimum(low, lo), jnp.maximum(high, hi)), marginals[0]

    (low, high), xs = jax.lax.scan(
        body, (end_low, end_high), jnp.arange(int(num_samples), dtype=jnp.int32)
    )
    return MCEstimate(values=xs.mean(axis=0), variance=xs.var(axis=0, ddof=1), low=low, high=high)
