"""The options the anytime estimators share, as small values checked once, at construction:
`Schedule` (when intervals are formed and stopping decided) and `Interval` (how they are
formed). `mc_shapley`, `blame_batch` and `looks` take them whole, as diffrax's
`diffeqsolve` takes a `SaveAt`.
"""

from __future__ import annotations

import math

import equinox as eqx

from .._arguments import (
    check_delta,
    check_growth,
    check_int_at_least,
    check_one_of,
    check_option,
)

KINDS = ("bernstein", "hoeffding", "normal")
"""The confidence radii an `Interval` can use (`confidence_radius`)."""


def _check_first(value) -> int:
    return check_int_at_least(value, "first", 2, "the first look, in samples or failures")


def _check_kind(value) -> str:
    return check_one_of(value, "kind", KINDS)


class Schedule(eqx.Module):
    """The looks fixed in advance at which intervals are formed and stopping is decided:
    look k comes after `ceil(first growth^(k-1))` samples (or failures, for `blame_batch`),
    and the budget is the last look (`blamejax.stats.looks`).

    - `first`: the first look, an int >= 2 (the empirical Bernstein radius needs two
      samples).
    - `growth`: the growth factor, a finite number >= 1 + 1e-4. Larger growth: fewer looks
      (a smaller union-bound penalty) but up to a factor `growth` more samples than needed
      when a rule fires.

    Each field is checked once, here: a `ValueError` names it, says what was expected and
    what was received.

    ```python
    import blamejax as bj
    assert bj.stats.looks(bj.stats.Schedule(first=2, growth=2.0), 20) == (2, 4, 8, 16, 20)
    ```
    """

    first: int = eqx.field(static=True, converter=_check_first)
    growth: float = eqx.field(static=True, converter=check_growth)


class Interval(eqx.Module):
    """How a confidence interval is formed at every look, and its error level.

    - `kind`: `"bernstein"` (empirical Bernstein, finite-sample, the default),
      `"hoeffding"` (finite-sample, from the range only) or `"normal"` (asymptotic, no
      finite-sample guarantee). `blame_batch` takes `"bernstein"` or `"normal"`
      (`INTERVAL_RULES`).
    - `delta`: the error probability of all intervals together, in (0, 1) (for
      `mc_shapley`, of one failure's intervals at every look; for `blame_batch`, of every
      interval of the failure stream). The interval of one step at look k is built at
      level `look_delta(delta, n, k)`.

    Each field is checked once, here: a `TypeError`/`ValueError` names it, says what was
    expected and what was received.

    ```python
    import blamejax as bj
    interval = bj.stats.Interval("normal", delta=0.05)
    assert (interval.kind, interval.delta) == ("normal", 0.05)
    ```
    """

    kind: str = eqx.field(static=True, default="bernstein", converter=_check_kind)
    delta: float = eqx.field(static=True, default=0.1, converter=check_delta)


def looks(schedule: Schedule, budget: int) -> tuple[int, ...]:
    """The sample counts at which intervals are formed and stopping is decided, fixed in
    advance: `t_k = ceil(first growth^(k-1))` for k = 1, 2, ..., truncated below `budget`,
    with `budget` itself as the last look.

    Counts that round to the same integer as an earlier one are dropped, and the remaining
    looks are numbered k = 1, 2, ... in order (this only gives each look a larger share of
    delta; the shares still sum to at most delta). A relative tolerance of 1e-9 guards the
    ceiling against float rounding (`10 * 1.1` is 11, not 12).

    **Arguments:**
    - `schedule`: a `Schedule` (its first look and growth factor).
    - `budget`: the largest number of samples, an int >= `schedule.first`.

    **Returns:** a tuple of strictly increasing Python ints ending with `budget`.

    **Raises:** `TypeError` for a `schedule` that is not a `Schedule`; `ValueError` for a
    budget below the first look, or a schedule that would need over a million looks.

    ```python
    import blamejax as bj
    assert bj.stats.looks(bj.stats.Schedule(first=2, growth=2.0), 20) == (2, 4, 8, 16, 20)
    ```
    """
    first, growth = check_option(schedule, "schedule", Schedule).first, schedule.growth
    check_int_at_least(budget, "budget", first, "at least the schedule's first look")
    count = math.log(budget / first) / math.log(growth) if budget > first else 0.0
    if count > 1e6:  # the loop below would take about this many steps
        raise ValueError(
            f"`growth` = {growth!r} is so close to 1 that the schedule from {first} to {budget} "
            f"samples needs about {count:.3g} looks; use a larger growth factor or a smaller budget"
        )
    out: list[int] = []
    k = 0
    while True:
        x = float(first) * float(growth) ** k
        t = int(math.ceil(x * (1.0 - 1e-9)))
        k += 1
        if t >= budget:
            break
        if not out or t > out[-1]:
            out.append(t)
    out.append(int(budget))
    return tuple(out)
