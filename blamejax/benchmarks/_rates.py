"""Hit rates with their Wilson score intervals: the one way both benchmarks state how often
a method is right."""

from __future__ import annotations

import numpy as np

from ..stats import wilson_interval


def rate_interval(count: int, total: int, delta: float = 0.05) -> tuple[float, float]:
    """The Wilson score interval `(low, high)` at level `1 - delta` of `count` hits in `total`
    trials, as Python floats."""
    low, high = wilson_interval(count, total, delta)
    return float(low), float(high)


def proportion(hits, delta: float = 0.05) -> dict:
    """`{"hits", "total", "rate", "low", "high"}`: a hit rate with its Wilson interval."""
    hits = np.asarray(hits, bool)
    count, total = int(hits.sum()), int(hits.size)
    low, high = rate_interval(count, total, delta)
    return dict(hits=count, total=total, rate=count / total, low=low, high=high)
