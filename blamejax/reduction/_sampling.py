"""The exact sampling variance of permutation-sampling Shapley estimates, read from a full
coalition table: what plain and antithetic Monte Carlo would cost for one game, without
sampling.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._shapley import shapley_weights


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
