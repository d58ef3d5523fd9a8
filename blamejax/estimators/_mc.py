"""Monte Carlo Shapley values for one failure: random orders of the steps, as pure functions.

One **sample** is one random order of the n steps (or, with `antithetic=True`, an order and
its reverse, averaged: the pair is then the unit every bound counts). Fixing the steps one at
a time in that order scores the n + 1 prefixes of the order; the differences of consecutive
prefixes give one marginal contribution per step, and they telescope to `v(all) - v(empty)`,
so every estimate adds up exactly. The empty and the full coalition are the same for every
order: they are scored once per failure, and each order costs the n - 1 prefixes in between.

**Worlds.** With W worlds per failure, every order is scored in all W worlds (with the same
noise across the order's prefixes: common random numbers) and a coalition's value is their
mean, as in `exact_blame`. So the estimates target exactly the values `exact_blame` computes,
add up to its `v(all) - v(empty)`, and a marginal still lies in an interval of width
`2 (s_max - s_min)`.

The adaptive estimator over many failures (`mc_shapley`) is in `_mc_adaptive.py`, its compiled
inner loop in `_mc_advance.py` and its result in `_mc_result.py`; the exact sampling variance
of the estimator (`sampling_variance`) is at the end of this module.
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

from ..coalitions import mask_plan
from ..pipeline import Hard, Structure, World, run_score, world_noise

_PERM_TAG = 0x5045524D  # "PERM": keeps the order stream apart from the noise streams


# --------------------------------------------------------------------------------------
# The estimator for one failure: pure functions.
# --------------------------------------------------------------------------------------


def _mask_scores(pipeline, structure, case, world, noise, players, fixes, masks, mode):
    """Scores of boolean coalition masks `[M, n]` in one world whose site noise is given
    (`blamejax.mask_values` with the noise computed once outside the sampling loop)."""

    def one(mask):
        plan = mask_plan(structure, players, fixes, mask)
        return run_score(pipeline, structure, case, world, plan, mode, noise)

    return jax.vmap(one)(masks)


def _scorer(pipeline, structure, case, worlds, noises, players, fixes, mode):
    """`masks [M, n] -> (mean over worlds [M], min score, max score)` for one failure."""

    def score(masks):
        per_world = jax.vmap(
            lambda world, noise: _mask_scores(
                pipeline, structure, case, world, noise, players, fixes, masks, mode
            )
        )(worlds, noises)  # [W, M]
        return per_world.mean(axis=0), per_world.min(), per_world.max()

    return score


def order_seed(key: PRNGKeyArray) -> UInt32[Array, " 2"]:
    """The two words that address the random orders drawn with `key`."""
    tagged = jr.fold_in(key, _PERM_TAG)
    data = jr.key_data(tagged)
    if data.shape == (2,) and data.dtype == jnp.uint32:
        return data
    return jr.bits(tagged, (2,), jnp.uint32)


def _ranks(seed: UInt32[Array, " 2"], units: Int[Array, " B"], n: int) -> Int[Array, "B n"]:
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


_PREFIX_BLOCK = 8


def scored_prefixes(n: int) -> int:
    """How many prefixes of each order are scored: the n - 1 interior ones (the empty and
    full coalition are scored once per failure), padded with copies of the full coalition
    to a multiple of 8 when that adds at most one for every 7 (n = 8, 15, 16, 22..24, ...).
    The padding's scores are not used: with the number of coalitions a multiple of the
    CPU's vector width the compiled pipeline vectorises over them, and an order then takes
    less time although it scores more (at n = 32, about a quarter less; `python
    benchmarks/bench_mc.py --breakdown` prints both); more padding costs more than it saves
    on pipelines with real work per step. It counts in `MCResult.evaluations_computed`,
    never in a failure's budget."""
    interior = n - 1
    padded = -(-interior // _PREFIX_BLOCK) * _PREFIX_BLOCK
    return padded if 7 * (padded - interior) <= interior else interior


def _samples(score, ranks, empty, full, antithetic: bool):
    """One marginal vector per sample: `[B, n]` (the pair mean when antithetic), and the
    min and max score seen."""
    num, n = ranks.shape
    if antithetic:
        ranks = jnp.concatenate([ranks, (n - 1) - ranks], axis=0)
    # The n - 1 interior prefixes, perhaps padded with copies of the full coalition (see
    # `scored_prefixes`).
    num_scored = scored_prefixes(n)
    sizes = jnp.minimum(jnp.arange(1, num_scored + 1, dtype=jnp.int32), n)
    masks = ranks[:, None, :] < sizes[None, :, None]  # [U B, scored, n]
    values, low, high = score(masks.reshape(-1, n))
    values = values.reshape(ranks.shape[0], num_scored)[:, : n - 1]
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
    return marginals, low, high


def _ends(score, n: int):
    """v(empty) and v(all), mean over worlds, and the min and max score seen."""
    masks = jnp.stack([jnp.zeros((n,), bool), jnp.ones((n,), bool)])
    values, low, high = score(masks)
    return values[0], values[1], low, high


class MCEstimate(NamedTuple):
    """A fixed-budget Monte Carlo estimate for one failure.

    - `values`: `Float[Array, "n"]`, the mean marginal contribution of each step (sums to
      `v(all) - v(empty)` up to float rounding).
    - `variance`: `Float[Array, "n"]`, the sample variance of one sample (t - 1 denominator).
    """

    values: Float[Array, " n"]
    variance: Float[Array, " n"]


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
    score = _scorer(pipeline, structure, case, worlds, noises, players, fix_variants, mode)
    empty, full, _, _ = _ends(score, n)
    seed = order_seed(key)

    def body(carry, p):
        ranks = _ranks(seed, p[None], n)
        marginals, _, _ = _samples(score, ranks, empty, full, antithetic)
        return carry, marginals[0]

    _, xs = jax.lax.scan(body, None, jnp.arange(int(num_samples), dtype=jnp.int32))
    return MCEstimate(values=xs.mean(axis=0), variance=xs.var(axis=0, ddof=1))


# --------------------------------------------------------------------------------------
# Exact sampling variances from a full coalition table.
# --------------------------------------------------------------------------------------


class SamplingVariance(NamedTuple):
    """Exact variances of the permutation-sampling estimator of one game, per step.

    - `plain`: `[n]`, the variance of one order's marginal contribution.
    - `antithetic`: `[n]`, the variance of one antithetic pair's mean.
    - `correlation`: `[n]`, the correlation of a step's marginals in an order and its
      reverse (NaN for a step whose marginal never varies).

    A pair costs twice an order, so antithetic sampling gives narrower intervals for the
    same evaluations when `2 * antithetic < plain`, i.e. when the correlation is negative.
    """

    plain: np.ndarray
    antithetic: np.ndarray
    correlation: np.ndarray


def sampling_variance(values) -> SamplingVariance:
    """Exact per-step variances of plain and antithetic permutation sampling for one game,
    computed from its full table of coalition values (no sampling).

    A step i's marginal in a uniform random order is `v(S + i) - v(S)` with S its
    predecessors, of probability `|S|! (n - |S| - 1)! / n!`; in the reversed order its
    predecessors are the complement `N - S - i`. So both moments are Shapley-weighted sums
    over the table, in float64.

    **Arguments:**
    - `values`: `[2**n]`, `v[m]` with bit i of m set when step i runs its fix (the
      coalition index of `coalition_values`; average over worlds first).

    **Returns:** a `SamplingVariance`.
    """
    from ..reduction import shapley_weights

    v = np.asarray(values, np.float64)
    size = v.shape[-1]
    n = size.bit_length() - 1
    if v.ndim != 1 or n < 1 or 1 << n != size:
        raise ValueError(f"`values` must be a 1-D table of length 2**n, got shape {v.shape}")
    masks = np.arange(size)
    popcount = np.array([bin(m).count("1") for m in range(size)])
    weights = shapley_weights(n)
    full = size - 1
    plain, pair, corr = np.zeros(n), np.zeros(n), np.full(n, np.nan)
    for i in range(n):
        bit = 1 << i
        without = masks[(masks & bit) == 0]
        marginal = v[without | bit] - v[without]
        complement = full & ~(without | bit)
        reverse = v[complement | bit] - v[complement]
        w = weights[popcount[without]]
        mean = w @ marginal
        second = w @ marginal**2
        cross = w @ (marginal * reverse)
        plain[i] = max(second - mean**2, 0.0)
        cov = cross - mean**2
        pair[i] = max(0.5 * (plain[i] + cov), 0.0)
        if plain[i] > 0:
            corr[i] = cov / plain[i]
    return SamplingVariance(plain=plain, antithetic=pair, correlation=corr)
