"""The interval across failures and the stopping rule of `blame_batch`.

`checkpoint_interval` gives every step's mean per-failure value and its anytime-valid
interval at a checkpoint of the failure stream, and whether the top step is separated
from all others.
"""

from __future__ import annotations

import numpy as np

from ._anytime import checkpoint_delta, confidence_radius, top1_separated

INTERVAL_RULES = ("bernstein", "normal")


def checkpoint_interval(values: np.ndarray, k: int, rule: str, delta: float, value_range: float):
    """The interval of every step's mean at checkpoint k of a stream of per-failure values.

    **Arguments:**
    - `values`: `[t, n]`, the per-failure values seen so far (t = the k-th checkpoint).
    - `k`: the checkpoint number (1-based); its intervals are at level `delta / (n k (k+1))`.
    - `rule`: `"bernstein"` (finite-sample; R = `value_range`) or `"normal"` (asymptotic).
    - `delta`: the error probability of all intervals of the stream together.
    - `value_range`: R, the width of the interval the values lie in (`2 (s_max - s_min)`).

    **Returns:** `(mean, lower, upper, top_separated)`.
    """
    n = values.shape[1]
    mean, lower, upper = _interval(values, rule, checkpoint_delta(delta, n, k), value_range)
    return mean, lower, upper, _top_separated(mean, lower, upper)


def _interval(values: np.ndarray, rule: str, delta_k: float, value_range: float):
    if rule not in INTERVAL_RULES:
        raise ValueError(f"`rule` must be one of {INTERVAL_RULES}, got {rule!r}")
    t = values.shape[0]
    mean = values.mean(axis=0)
    if t >= 2:
        radius = confidence_radius(rule, t, values.var(axis=0, ddof=1), value_range, delta_k)
    else:
        radius = np.full_like(mean, np.inf)
    return mean, mean - radius, mean + radius


def _top_separated(mean, lower, upper) -> bool:
    return bool(top1_separated(mean, lower, upper))


def top_separated_at(values: np.ndarray, marks, ks, rule: str, delta: float, value_range: float) -> np.ndarray:
    """Whether the top step is separated at each of several checkpoints, at once.

    The same decision as `checkpoint_interval(values[:t], k, ...)[3]` for every pair
    `(t, k)` of `marks` and `ks`, from running sums (shifted by the first failure's values,
    in float64) instead of one pass over `values[:t]` per checkpoint. A checkpoint with
    t < 2 is never separated.

    **Returns:** `Bool[ndarray, "len(marks)"]`.
    """
    ts = np.asarray(marks, dtype=np.int64)
    n = values.shape[1]
    x = values - values[0]
    s1 = np.cumsum(x, axis=0)[ts - 1]
    s2 = np.cumsum(x * x, axis=0)[ts - 1]
    t = ts[:, None].astype(np.float64)
    mean = values[0] + s1 / t
    ok = ts >= 2
    t = np.where(ok[:, None], t, 2.0)  # t < 2 is masked out below; keep the radii finite
    variance = np.maximum(s2 - s1 * s1 / t, 0.0) / (t - 1.0)
    delta_k = checkpoint_delta(delta, n, np.asarray(ks, dtype=np.float64)[:, None])
    radius = confidence_radius(rule, t, variance, value_range, delta_k)
    return ok & top1_separated(mean, mean - radius, mean + radius)
