"""The metrics of the SCM benchmark: each method's named step (or credits) scored against
the golden labels. Step@k (the named step is within k steps of the culprit; Step@0 is the
exact step), agent-level accuracy, and for multi-culprit cases whether the named step is a
culprit and how far a method's credit vector is from the analytic Shapley split. Rates with
their Wilson intervals are `proportion` (`benchmarks/_rates.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def step_hits(predicted, culprit, within: int = 0) -> np.ndarray:
    """Step@k hits: `|predicted - culprit| <= within` per failure (a prediction of -1, no
    step named, is a miss). `within = 0` is Step@0, the exact step."""
    if isinstance(within, bool) or not isinstance(within, (int, np.integer)) or within < 0:
        raise ValueError(f"`within` must be a non-negative int, got {within!r}")
    predicted, culprit = np.asarray(predicted), np.asarray(culprit)
    if predicted.shape != culprit.shape:
        raise ValueError(
            f"`predicted` {predicted.shape} and `culprit` {culprit.shape} must have the same shape"
        )
    return (predicted >= 0) & (np.abs(predicted - culprit) <= within)


def agent_hits(predicted, culprit, agents: Sequence[int]) -> np.ndarray:
    """Agent-level hits: the named step belongs to the culprit's agent (`agents[i]` is the
    agent of step i; -1, no step named, is a miss)."""
    agents = np.asarray(agents)
    predicted, culprit = np.asarray(predicted), np.asarray(culprit)
    named = agents[np.maximum(predicted, 0)]
    return (predicted >= 0) & (named == agents[culprit])


def culprit_hits(predicted, culprits) -> np.ndarray:
    """Multi-culprit hits: the named step is one of the culprits (`culprits`: `[F, m]`)."""
    predicted, culprits = np.asarray(predicted), np.asarray(culprits)
    return (predicted[:, None] == culprits).any(axis=1)


def split_error(credits, analytic) -> np.ndarray:
    """How far a credit vector is from the analytic Shapley split, per failure: the total
    variation distance `0.5 * sum_i |p_i - q_i|` between the credits made a distribution
    (negative credits clipped to 0, then normalised; all-zero credits count as the uniform
    split) and the analytic values normalised the same way. 0: the same split; 1: disjoint."""
    credits = np.clip(np.asarray(credits, np.float64), 0.0, None)
    analytic = np.asarray(analytic, np.float64)
    if credits.shape != analytic.shape:
        raise ValueError(
            f"`credits` {credits.shape} and `analytic` {analytic.shape} must have the same shape"
        )
    total = credits.sum(axis=1, keepdims=True)
    p = np.where(total > 0, credits / np.where(total > 0, total, 1.0), 1.0 / credits.shape[1])
    q = analytic / analytic.sum(axis=1, keepdims=True)
    return 0.5 * np.abs(p - q).sum(axis=1)
