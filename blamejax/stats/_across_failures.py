"""The interval across failures and the stopping rule of `blame_batch`.

`look_interval` gives every step's mean per-failure value and its anytime-valid
interval at a look of the failure stream, and whether the top step is separated
from all others. `batch_intervals` gives every interval a batch report shows: the
fixed-sample Student t interval (`student_t_interval`), the asymptotic and the finite-sample
anytime intervals, and the fix-alone rate's interval, each clipped to the range its quantity
can take (`clip_interval`).
"""

from __future__ import annotations

import warnings

import equinox as eqx
import numpy as np
import scipy.special

from .._arguments import renamed_keywords
from ._anytime import confidence_radius, look_delta, top1_separated
from ._binomial import wilson_interval

INTERVAL_RULES = ("bernstein", "normal")
"""The anytime intervals of a mean across failures (`rule=`): empirical Bernstein
(finite-sample) or normal (asymptotic, no finite-sample guarantee)."""


def look_interval(values: np.ndarray, k: int, rule: str, delta: float, value_range: float):
    """The interval of every step's mean at look k of a stream of per-failure values.

    **Arguments:**
    - `values`: `[t, n]`, the per-failure values seen so far (t = the k-th look).
    - `k`: the look number (1-based); its intervals are at level `delta / (n k (k+1))`.
    - `rule`: `"bernstein"` (finite-sample; R = `value_range`) or `"normal"` (asymptotic).
    - `delta`: the error probability of all intervals of the stream together.
    - `value_range`: R, the width of the interval the values lie in (`2 (s_max - s_min)`).

    **Returns:** `(mean, lower, upper, top_separated)`.
    """
    n = values.shape[1]
    mean, lower, upper = _interval(values, rule, look_delta(delta, n, k), value_range)
    return mean, lower, upper, _top_separated(mean, lower, upper, value_range)


def checkpoint_interval(values: np.ndarray, k: int, rule: str, delta: float, value_range: float):
    """Deprecated: `look_interval(values, k, rule, delta, value_range)`, the same function
    under the word the options use (a look of a `Schedule`)."""
    warnings.warn(
        "`blamejax.stats.checkpoint_interval` is deprecated and will be removed; use "
        "`blamejax.stats.look_interval`",
        DeprecationWarning,
        stacklevel=2,
    )
    return look_interval(values, k, rule, delta, value_range)


# Per-failure blame is exact up to rounding (float32 on the device, and the two exact paths
# round differently): the top step counts as separated only when its interval clears the
# others' by more than this share of the value range, so that steps tied by symmetry (the
# refund demo's 5/12 and 5/12) never separate on rounding alone when every failure agrees.
ROUNDING = 1e-6


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


def _top_separated(mean, lower, upper, value_range) -> bool:
    margin = ROUNDING * value_range
    return bool(top1_separated(mean, lower - margin, upper + margin))


def top_separated_at(
    values: np.ndarray, marks, ks, rule: str, delta: float, value_range: float
) -> np.ndarray:
    """Whether the top step is separated at each of several looks, at once.

    The same decision as `look_interval(values[:t], k, ...)[3]` for every pair
    `(t, k)` of `marks` and `ks`, from running sums (shifted by the first failure's values,
    in float64) instead of one pass over `values[:t]` per look. A look with
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
    delta_k = look_delta(delta, n, np.asarray(ks, dtype=np.float64)[:, None])
    radius = confidence_radius(rule, t, variance, value_range, delta_k) + ROUNDING * value_range
    return ok & top1_separated(mean, mean - radius, mean + radius)


# --------------------------------------------------------------------------------------
# The intervals a batch report shows.
# --------------------------------------------------------------------------------------

FIXED_SAMPLE_METHOD = (
    "Student t over the per-failure values: mean +- t_(1-a/2, t-1) s / sqrt(t), s the sample "
    "standard deviation. It assumes the analysed failures are independent draws from the "
    "population of failures (the seeded visiting order picks them at random from the test "
    "set's failures) and a number of failures fixed in advance; it is exact for normal "
    "values and otherwise asymptotic, with no finite-sample guarantee, and it is not valid "
    "after stopping early on a look at the data."
)
"""What the fixed-sample interval of a batch report is and assumes, in the words every
report prints beside it."""


def student_t_interval(values: np.ndarray, level: float):
    """The fixed-sample Student t interval of every column's mean, at level `level`.

    `mean +- t_(1 - a/2, t - 1) s / sqrt(t)` with `a = 1 - level`, t the number of rows and s
    the sample standard deviation (t - 1 denominator). Valid at a sample size fixed in advance
    for independent draws (exact for normal values, asymptotic otherwise); with t < 2 rows the
    interval is infinite.

    **Arguments:**
    - `values`: `Float[ndarray, "t n"]`, one row per failure.
    - `level`: the coverage, in (0, 1).

    **Returns:** `(mean, lower, upper)`, float64 arrays `[n]`.

    ```python
    import numpy as np
    import blamejax as bj
    mean, lower, upper = bj.stats.student_t_interval(np.array([[0.0], [1.0], [2.0]]), 0.95)
    assert round(float(upper[0]), 4) == 3.4841  # 1 + 4.3027 * 1 / sqrt(3)
    ```
    """
    _check_level(level)
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(
            f"`values` must be a 2-D array [failures, steps], got shape {values.shape}"
        )
    t = values.shape[0]
    mean = values.mean(axis=0) if t else np.full(values.shape[1], np.nan)
    if t < 2:
        return mean, np.full_like(mean, -np.inf), np.full_like(mean, np.inf)
    quantile = scipy.special.stdtrit(t - 1, 0.5 + level / 2.0)
    radius = quantile * values.std(axis=0, ddof=1) / np.sqrt(t)
    return mean, mean - radius, mean + radius


def _check_level(level) -> None:
    if (
        isinstance(level, bool)
        or not isinstance(level, (int, float, np.floating))
        or not 0 < level < 1
    ):
        raise ValueError(f"`level` must be a number in (0, 1) (e.g. 0.95), got {level!r}")


def clip_interval(lower, upper, low: float, high: float):
    """`[lower, upper]` clipped to `[low, high]`, the range the quantity can take, and
    whether each bound was clipped.

    **Returns:** `(lower, upper, clipped)`: float64 arrays like `lower`, and a bool array
    `[..., 2]` (lower bound clipped, upper bound clipped).
    """
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    clipped = np.stack([lower < low, upper > high], axis=-1)
    return np.clip(lower, low, high), np.clip(upper, low, high), clipped


class BatchIntervals(eqx.Module):
    """Every interval a batch report shows, per step (arrays `[n]`, float64), each clipped to
    the range its quantity can take; `*_clipped`: `Bool[ndarray, "n 2"]`, whether the lower
    and the upper bound were clipped.

    - `fixed_*`: the fixed-sample interval of the mean Shapley value at `level`
      (`fixed_method`: `"student-t"`, see `FIXED_SAMPLE_METHOD`), clipped to `shapley_range`.
    - `normal_*`: the asymptotic anytime interval (normal radius at level
      `delta / (n k (k+1))`, k = `look`), at `1 - delta` for all looks together.
    - `bernstein_*`: the finite-sample anytime interval (empirical Bernstein, width
      `2 (s_max - s_min)`), at the same look and level.
    - `resolve_*`: the fixed-sample interval of the fix-alone resolve rate at `level`
      (`resolve_method`: `"wilson"`, the Wilson score interval of a proportion, when every
      per-failure value is 0 or 1; else `"student-t"`), clipped to [0, 1].
    - `look`: k, the look (1-based) of the failure stream at which the anytime intervals
      were formed, 0 when unknown (`checkpoint`, its old name, is deprecated).
    """

    level: float = eqx.field(static=True)
    delta: float = eqx.field(static=True)
    look: int = eqx.field(static=True)
    fixed_method: str = eqx.field(static=True)
    resolve_method: str = eqx.field(static=True)
    shapley_range: tuple[float, float] = eqx.field(static=True)
    fixed_lower: np.ndarray
    fixed_upper: np.ndarray
    fixed_clipped: np.ndarray
    normal_lower: np.ndarray
    normal_upper: np.ndarray
    normal_clipped: np.ndarray
    bernstein_lower: np.ndarray
    bernstein_upper: np.ndarray
    bernstein_clipped: np.ndarray
    resolve_lower: np.ndarray
    resolve_upper: np.ndarray
    resolve_clipped: np.ndarray

    @property
    def checkpoint(self) -> int:
        """Deprecated: `look`, the look at which the anytime intervals were formed."""
        warnings.warn(
            "`BatchIntervals.checkpoint` is deprecated and will be removed; use "
            "`BatchIntervals.look`",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.look


@renamed_keywords(look={"checkpoint": lambda k: k})  # the old keyword, its value as it is
def batch_intervals(
    shapley: np.ndarray,
    resolve: np.ndarray,
    *,
    level: float,
    delta: float,
    look: int,
    score_range: tuple[float, float],
) -> BatchIntervals:
    """The intervals of a batch report from the per-failure values.

    **Arguments:**
    - `shapley`: `Float[ndarray, "t n"]`, per-failure Shapley values (the failures looked at).
    - `resolve`: `Float[ndarray, "t n"]`, per failure the share of worlds in which the step's
      fix alone reaches the threshold.
    - `level`: the fixed-sample intervals' coverage, in (0, 1).
    - `delta`: the anytime intervals' error probability (all looks together).
    - `look`: k, the look (1-based) of the failure stream at which the anytime intervals are
      formed (`checkpoint=`, its old name, is deprecated).
    - `score_range`: `(s_min, s_max)`; a mean Shapley value lies in `[-(s_max - s_min),
      s_max - s_min]`.

    **Returns:** a `BatchIntervals` (NaN bounds when t = 0, and for the anytime intervals
    when `look` is 0, unknown).

    ```python
    import numpy as np
    import blamejax as bj
    shapley = np.array([[1.0, 0.0], [0.5, 0.5], [1.0, 0.0]])
    resolve = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    out = bj.stats.batch_intervals(shapley, resolve, level=0.95, delta=0.1, look=1,
                                   score_range=(0.0, 1.0))
    assert out.fixed_upper[0] == 1.0 and out.fixed_clipped[0, 1]  # clipped at +1
    assert out.resolve_method == "wilson" and out.resolve_lower[1] == 0.0
    ```
    """
    _check_level(level)
    shapley = np.asarray(shapley, np.float64)
    resolve = np.asarray(resolve, np.float64)
    t, n = shapley.shape
    width = float(score_range[1]) - float(score_range[0])
    reach = (-width, width)
    _, lo, hi = student_t_interval(shapley, level)
    fixed = clip_interval(lo, hi, *reach)
    anytime = {}
    for rule in INTERVAL_RULES:
        if t >= 1 and look >= 1:
            _, lo, hi = _interval(shapley, rule, look_delta(delta, n, look), 2.0 * width)
        else:
            lo = hi = np.full(n, np.nan)
        anytime[rule] = clip_interval(lo, hi, *reach)
    binary = t >= 1 and bool(np.all((resolve == 0.0) | (resolve == 1.0)))
    if binary:
        successes = resolve.sum(axis=0)
        lo, hi = wilson_interval(np.rint(successes).astype(np.int64), t, 1.0 - level)
        resolve_method = "wilson"
    else:
        _, lo, hi = student_t_interval(resolve, level)
        resolve_method = "student-t"
    fix_alone = clip_interval(lo, hi, 0.0, 1.0)
    if t == 0:  # nothing analysed: no interval at all
        nan = np.full(n, np.nan)
        fixed = anytime["normal"] = anytime["bernstein"] = fix_alone = (
            nan,
            nan,
            np.zeros((n, 2), bool),
        )
    return BatchIntervals(
        level=float(level),
        delta=float(delta),
        look=int(look),
        fixed_method="student-t",
        resolve_method=resolve_method,
        shapley_range=reach,
        fixed_lower=fixed[0],
        fixed_upper=fixed[1],
        fixed_clipped=fixed[2],
        normal_lower=anytime["normal"][0],
        normal_upper=anytime["normal"][1],
        normal_clipped=anytime["normal"][2],
        bernstein_lower=anytime["bernstein"][0],
        bernstein_upper=anytime["bernstein"][1],
        bernstein_clipped=anytime["bernstein"][2],
        resolve_lower=fix_alone[0],
        resolve_upper=fix_alone[1],
        resolve_clipped=fix_alone[2],
    )
