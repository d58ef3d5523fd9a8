"""Binomial intervals for the contrastive estimator, and the point of commitment.

The Wilson score interval of one proportion, Newcombe's hybrid score interval for a
difference of two independent proportions, and the point of commitment (the last step whose
effect interval excludes zero). They are plain numpy functions of counts and intervals.
Their main user is the contrastive estimator (`blamejax.interventions.contrastive`).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from .._arguments import check_delta


def _z(delta: float) -> float:
    return NormalDist().inv_cdf(1.0 - delta / 2.0)


def wilson_interval(successes, trials, delta: float = 0.05):
    """The Wilson score interval of a binomial proportion at level `1 - delta`.

    **Arguments:**
    - `successes`: int array (any shape), the counts x.
    - `trials`: int array broadcastable to it, the numbers of trials n >= 1.
    - `delta`: the error level, in (0, 1).

    **Returns:** `(low, high)`, float64 numpy arrays in [0, 1]; `low` is exactly 0 when
    x = 0 and `high` exactly 1 when x = n.

    ```python
    import blamejax as bj
    low, high = bj.stats.wilson_interval(81, 263)  # (0.2553, 0.3662)
    ```
    """
    check_delta(delta)
    x = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n < 1) or np.any(x < 0) or np.any(x > n):
        raise ValueError(
            f"need 0 <= successes <= trials and trials >= 1, got {successes!r} of {trials!r}"
        )
    z = _z(delta)
    center = (x + z * z / 2) / (n + z * z)
    half = z / (n + z * z) * np.sqrt(x * (n - x) / n + z * z / 4)
    low = np.where(x == 0, 0.0, np.clip(center - half, 0.0, 1.0))
    high = np.where(x == n, 1.0, np.clip(center + half, 0.0, 1.0))
    return low, high


def newcombe_interval(successes1, trials1, successes2, trials2, delta: float = 0.05):
    """Newcombe's hybrid score interval (his method 10) for `p1 - p2`, two independent
    binomial proportions, at level `1 - delta`, built from their Wilson intervals.

    **Returns:** `(low, high)`, float64 numpy arrays in [-1, 1].

    ```python
    import blamejax as bj
    low, high = bj.stats.newcombe_interval(56, 70, 48, 80)  # (0.0524, 0.3339)
    ```
    """
    l1, u1 = wilson_interval(successes1, trials1, delta)
    l2, u2 = wilson_interval(successes2, trials2, delta)
    p1 = np.asarray(successes1, np.float64) / np.asarray(trials1, np.float64)
    p2 = np.asarray(successes2, np.float64) / np.asarray(trials2, np.float64)
    diff = p1 - p2
    low = diff - np.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = diff + np.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return np.clip(low, -1.0, 1.0), np.clip(high, -1.0, 1.0)


def point_of_commitment(low, high) -> np.ndarray:
    """The index of the last step whose effect interval `[low, high]` excludes zero, or -1
    when no step's does. `low`, `high`: arrays `[..., n]` (steps on the last axis)."""
    low, high = np.asarray(low), np.asarray(high)
    significant = (low > 0) | (high < 0)
    order = np.arange(significant.shape[-1])
    return np.max(np.where(significant, order, -1), axis=-1)
