"""Confidence radii for the mean of bounded i.i.d. samples, the looks at which they
are formed, and the stopping rules that read them.

Everything here is a pure function of numbers. The functions accept Python numbers, numpy
arrays (computed in numpy, float64) or JAX arrays (computed in `jax.numpy`, so they can be
used inside `jit`); array arguments broadcast against each other.

**Anytime validity.** A rule that stops "as soon as the intervals separate" looks at the
intervals many times; a plain 1 - delta interval checked at every look fails far more often
than delta. Here intervals are formed only at looks fixed in advance,
`t_k = ceil(first growth^(k-1))` (`looks`, of a `Schedule`), and the interval of one step at look k is
built at level `delta / (n k (k+1))` (`look_delta`). Since `sum_k 1/(k(k+1)) = 1`, the
union bound over the n steps and every look gives: with probability at least 1 - delta,
every interval of one failure, at every look, holds at once, whatever rule decides when
to stop. The guarantee is per failure: over F failures about delta * F of them will have some
interval that misses.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import scipy.special

from .._arguments import check_delta
from ._options import Schedule, looks

RULES = ("top1", "ranking", "width")
"""The stopping rules of Monte Carlo Shapley (`stop=`): the top step separated
(`top1_separated`), the whole ranking separated (`ranking_separated`), or every interval
narrower than epsilon (`widths_below`)."""


def _is_jax(*args) -> bool:
    return any(isinstance(a, (jax.Array, jax.core.Tracer)) for a in args)


def _xp(*args):
    return jnp if _is_jax(*args) else np


def _check_delta_values(delta) -> None:
    """`delta` (a number or a concrete array) must lie in (0, 1); traced values pass. A
    number is checked by `check_delta`, the one definition of a valid delta."""
    if isinstance(delta, jax.core.Tracer):
        return
    if np.ndim(delta) == 0 and not isinstance(delta, (np.ndarray, jax.Array)):
        check_delta(delta)
        return
    values = np.asarray(delta)
    if not np.issubdtype(values.dtype, np.number) or not np.all((values > 0) & (values < 1)):
        raise ValueError(f"`delta` must be an error level in (0, 1), got {delta!r}")


def _check_count(t, minimum: int) -> None:
    """`t` (a number or a concrete array) must be at least `minimum`; traced values pass."""
    if isinstance(t, jax.core.Tracer):
        return
    values = np.asarray(t)
    if not np.issubdtype(values.dtype, np.number) or not np.all(values >= minimum):
        raise ValueError(f"`t` (the number of samples) must be at least {minimum}, got {t!r}")


def hoeffding_radius(t, value_range, delta):
    """Two-sided Hoeffding radius: `R sqrt(ln(2/delta) / (2 t))`.

    With probability at least 1 - delta, the mean of t i.i.d. samples that lie in an
    interval of width R is within this radius of their expectation. It uses only the range.

    **Arguments:**
    - `t`: the number of samples (>= 1).
    - `value_range`: R, the width of the interval the samples lie in. For Shapley marginals
      of a score in [s_min, s_max] this is `2 (s_max - s_min)`: a marginal lies in
      `[-(s_max - s_min), s_max - s_min]`.
    - `delta`: the error probability, in (0, 1).

    **Returns:** the radius (same shape as the broadcast arguments).

    ```python
    import blamejax as bj
    radius = bj.stats.hoeffding_radius(100, 2.0, 0.1)  # 2 * sqrt(ln(20) / 200)
    assert round(float(radius), 6) == 0.244775
    ```
    """
    _check_delta_values(delta)
    _check_count(t, 1)
    xp = _xp(t, value_range, delta)
    t = xp.asarray(t, dtype=float) if xp is np else jnp.asarray(t).astype(jnp.result_type(float))
    return value_range * xp.sqrt(xp.log(2.0 / delta) / (2.0 * t))


def bernstein_radius(t, variance, value_range, delta):
    """Two-sided empirical Bernstein radius (Maurer and Pontil, 2009):
    `sqrt(2 V ln(4/delta) / t) + 7 R ln(4/delta) / (3 (t - 1))`.

    With probability at least 1 - delta, the mean of t >= 2 i.i.d. samples that lie in an
    interval of width R is within this radius of their expectation. The one-sided bound of
    Maurer and Pontil at level delta/2, applied to both tails, gives the `ln(4/delta)`.
    It adapts to the variance: small when the samples vary little.

    **Arguments:**
    - `t`: the number of samples, t >= 2 (at t = 1 the radius is infinite).
    - `variance`: V, the sample variance with the t - 1 denominator.
    - `value_range`: R, the width of the interval the samples lie in, from the declared
      score range, never from the observed values (`2 (s_max - s_min)` for Shapley marginals).
    - `delta`: the error probability, in (0, 1).

    **Returns:** the radius.

    ```python
    import blamejax as bj
    radius = bj.stats.bernstein_radius(101, 0.25, 2.0, 0.1)  # sqrt(0.5 ln 40 / 101) + 14 ln 40 / 300
    assert round(float(radius), 6) == 0.307284
    ```
    """
    _check_delta_values(delta)
    _check_count(t, 2)
    xp = _xp(t, variance, value_range, delta)
    if xp is np:
        t = np.asarray(t, dtype=float)
        variance = np.maximum(np.asarray(variance, dtype=float), 0.0)
    else:
        t = jnp.asarray(t).astype(jnp.result_type(float))
        variance = jnp.maximum(jnp.asarray(variance), 0.0)
    log_term = xp.log(4.0 / delta)
    return xp.sqrt(2.0 * variance * log_term / t) + 7.0 * value_range * log_term / (3.0 * (t - 1.0))


def normal_radius(t, variance, delta):
    """Normal-approximation radius `z_(1 - delta/2) sqrt(V / t)`.

    Asymptotic only: it has **no finite-sample guarantee** and undercovers when t is small
    or the samples are skewed (a step whose marginal is rarely non-zero can show a sample
    variance of 0). Offered because it is what many papers report; prefer
    `bernstein_radius` for decisions.

    **Arguments:**
    - `t`: the number of samples (>= 1).
    - `variance`: V, the sample variance with the t - 1 denominator.
    - `delta`: the error probability, in (0, 1).

    **Returns:** the radius.

    ```python
    import blamejax as bj
    radius = bj.stats.normal_radius(100, 0.25, 0.05)  # 1.959964 * 0.05
    assert round(float(radius), 6) == 0.097998
    ```
    """
    _check_delta_values(delta)
    _check_count(t, 1)
    xp = _xp(t, variance, delta)
    if xp is np:
        z = -scipy.special.ndtri(np.asarray(delta, dtype=float) / 2.0)
        t = np.asarray(t, dtype=float)
        variance = np.maximum(np.asarray(variance, dtype=float), 0.0)
    else:
        z = -jsp.ndtri(jnp.asarray(delta).astype(jnp.result_type(float)) / 2.0)
        t = jnp.asarray(t).astype(jnp.result_type(float))
        variance = jnp.maximum(jnp.asarray(variance), 0.0)
    return z * xp.sqrt(variance / t)


def confidence_radius(kind: str, t, variance, value_range, delta):
    """The radius of rule `kind` (`"bernstein"`, `"hoeffding"` or `"normal"`) for t samples
    of sample variance `variance` (broadcast together), range width `value_range` and level
    `delta`: the one place the estimators pick their radius."""
    if kind not in ("bernstein", "hoeffding", "normal"):
        raise ValueError(
            f"`kind` must be one of ['bernstein', 'hoeffding', 'normal'], got {kind!r}"
        )
    if kind == "bernstein":
        return bernstein_radius(t, variance, value_range, delta)
    if kind == "hoeffding":
        return hoeffding_radius(t, value_range, delta) * np.ones_like(variance)
    return normal_radius(t, variance, delta)


def checkpoints(first_checkpoint: int, growth: float, budget: int) -> tuple[int, ...]:
    """Deprecated: `looks(Schedule(first=first_checkpoint, growth=growth), budget)`.

    ```python
    import warnings
    import blamejax as bj
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert bj.stats.checkpoints(2, 2.0, 20) == (2, 4, 8, 16, 20)
    ```
    """
    warnings.warn(
        "`blamejax.stats.checkpoints(first_checkpoint, growth, budget)` is deprecated and will "
        "be removed; use `blamejax.stats.looks(Schedule(first=first_checkpoint, growth=growth), "
        "budget)`",
        DeprecationWarning,
        stacklevel=2,
    )
    return looks(Schedule(first_checkpoint, growth), budget)


def look_delta(delta, n, k):
    """The error budget of one step's interval at look k: `delta / (n k (k+1))`.

    Summed over the n steps and over k = 1, 2, ... these are at most delta, so every
    interval of one failure at every look holds at once with probability >= 1 - delta.

    **Arguments:**
    - `delta`: the error probability per failure, in (0, 1).
    - `n`: the number of steps (intervals per look), >= 1.
    - `k`: the look number, 1-based (an int or an int array).

    **Returns:** the per-interval delta (a float, or an array like `k`).

    ```python
    import blamejax as bj
    assert bj.stats.look_delta(0.1, 4, 1) == 0.1 / (4 * 1 * 2)  # 0.0125
    ```
    """
    _check_delta_values(delta)
    if isinstance(n, (int, np.integer)) and n < 1:
        raise ValueError(f"`n` (the number of steps) must be at least 1, got {n}")
    if isinstance(k, (int, np.integer)):
        if k < 1:
            raise ValueError(f"`k` (the look number) is 1-based, got {k}")
        return delta / (n * k * (k + 1))
    xp = _xp(k)
    k = xp.asarray(k).astype(float if xp is np else jnp.result_type(float))
    return delta / (n * k * (k + 1.0))


def checkpoint_delta(delta, n, k):
    """Deprecated: `look_delta(delta, n, k)`, the same function under the word the
    options use (a look of a `Schedule`; `checkpoint` names only `blame_batch`'s file)."""
    warnings.warn(
        "`blamejax.stats.checkpoint_delta` is deprecated and will be removed; use "
        "`blamejax.stats.look_delta`",
        DeprecationWarning,
        stacklevel=2,
    )
    return look_delta(delta, n, k)


def top1_separated(values, lower, upper, epsilon=0.0):
    """Whether the step with the largest estimate is separated from every other step.

    The top step i (largest of `values`) is separated from step j when
    `lower[i] > upper[j] - epsilon`: then, if both intervals hold, step i's true value is
    larger than step j's or smaller by less than epsilon. With epsilon = 0 the intervals
    must be disjoint. Steps whose true values are within epsilon of each other therefore
    count as separated once their intervals are about epsilon/2 narrow, so ties do not run
    to the budget.

    **Arguments:**
    - `values`, `lower`, `upper`: `[..., n]` estimates and interval ends.
    - `epsilon`: the indifference margin, >= 0.

    **Returns:** a boolean array `[...]`.
    """
    xp = _xp(values, lower, upper)
    top = xp.argmax(values, axis=-1)[..., None]
    low_top = xp.take_along_axis(lower, top, axis=-1)
    n = values.shape[-1]
    is_top = xp.arange(n) == top
    ok = (low_top > upper - epsilon) | is_top
    return xp.all(ok, axis=-1)


def ranking_separated(values, lower, upper, epsilon=0.0):
    """Whether the full ranking by the estimates is separated: for every pair with
    `values[i] >= values[j]` (i != j), `lower[i] > upper[j] - epsilon` (see `top1_separated`).

    **Returns:** a boolean array `[...]`.
    """
    xp = _xp(values, lower, upper)
    n = values.shape[-1]
    above = values[..., :, None] >= values[..., None, :]  # [..., i, j]: i ranked above j
    ok = lower[..., :, None] > upper[..., None, :] - epsilon
    off_diagonal = ~xp.eye(n, dtype=bool)
    # A pair of equal estimates is checked in both directions, so only epsilon resolves it.
    return xp.all(ok | ~above | ~off_diagonal, axis=(-2, -1))


def widths_below(lower, upper, epsilon):
    """Whether every interval is narrower than epsilon: `upper - lower <= epsilon`.

    **Returns:** a boolean array `[...]`.
    """
    xp = _xp(lower, upper)
    return xp.all(upper - lower <= epsilon, axis=-1)
