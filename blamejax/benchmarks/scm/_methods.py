"""The attribution methods that `compare_methods` runs side by side: their names and labels,
the `MethodComparison` result, and the small pieces the comparison is built from (ranking
scores into a named step with ties broken at random, the first and last differing step,
compiled coalition scores, timing).
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int

from ..._compile import compiled
from ...coalitions import mask_values

METHODS = (
    "exact_shapley",
    "exact_shapley_earliest",
    "mc_shapley",
    "fix_alone",
    "leave_one_out",
    "last_step",
    "first_step",
    "commitment_held",
    "commitment_fresh",
    "random",
)
"""The attribution methods `compare_methods` can run, by name (`methods=`)."""
CREDIT_METHODS = ("exact_shapley", "mc_shapley", "fix_alone", "leave_one_out")
"""The methods that give every step a credit (a vector per failure), not only a named step:
their credits are compared with the analytic Shapley split."""
TIE_TOLERANCE = 1e-5


def method_label(name: str, mc_orders: int = 16, num_rollouts: int = 200) -> str:
    """A readable name of a method."""
    labels = {
        "exact_shapley": "exact Shapley, top step (ties at random)",
        "exact_shapley_earliest": "exact Shapley, top step (ties to the earliest)",
        "mc_shapley": f"Monte Carlo Shapley, top step ({mc_orders} orders)",
        "fix_alone": "fix-alone, top step",
        "leave_one_out": "leave-one-out, top step",
        "last_step": "last step that differs (failed vs fully fixed run)",
        "first_step": "first step that differs (failed vs fully fixed run)",
        "commitment_held": f"point of commitment, held downstream noise ({num_rollouts} rollouts)",
        "commitment_fresh": f"point of commitment, fresh downstream noise ({num_rollouts} rollouts)",
        "random": "uniform random guess",
    }
    if name not in labels:
        raise ValueError(f"unknown method {name!r}; the methods are {METHODS}")
    return labels[name]


class MethodComparison(eqx.Module):
    """What each method named on the same F failures, and what it cost.

    - `methods`: the method names (static), the order of every `M` axis.
    - `predicted`: `Int[Array, "M F"]`, the step each method names (-1: it names none).
    - `credits`: per method, `Float[Array, "F n"]` (the scores it ranks steps by: Shapley
      values, fix-alone and leave-one-out gains) or `None` for methods that name a step only.
    - `evaluations`: `Float[Array, "M"]`, pipeline runs per failure (one run = one coalition
      or plan in one world).
    - `seconds`: `Float[Array, "M"]`, wall time of the method's first call on the batch
      (compilation included); `steady_seconds`: the fastest of `repeat` further calls (NaN
      when `repeat = 0`). Methods computed from one call (the two exact-Shapley tie rules;
      first and last differing step) report that call's time.
    - `earliest_repair`: `Int[Array, "F"]`, the earliest step whose fix alone repairs the
      run (-1 if none), the definition of the golden label of injected failures.
    - `mc_orders`, `num_rollouts`: the settings used.
    """

    methods: tuple[str, ...] = eqx.field(static=True)
    predicted: Int[Array, "M F"]
    credits: tuple
    evaluations: Float[Array, " M"]
    seconds: Float[Array, " M"]
    steady_seconds: Float[Array, " M"]
    earliest_repair: Int[Array, " F"]
    mc_orders: int = eqx.field(static=True)
    num_rollouts: int = eqx.field(static=True)

    def index(self, method: str) -> int:
        """The position of `method` on the results' method axis.

        **Raises:** `ValueError` when the method was not run.
        """
        if method not in self.methods:
            raise ValueError(f"method {method!r} was not run; these were: {self.methods}")
        return self.methods.index(method)


# -- helpers ------------------------------------------------------------------------------------
def numpy_rng(key) -> np.random.Generator:
    return np.random.default_rng(np.asarray(jr.key_data(key)).tolist())


def top_step(
    values, rng: np.random.Generator | None = None, tolerance: float = TIE_TOLERANCE
) -> np.ndarray:
    """The index of the largest value in each row; rows with several values within
    `tolerance` of the largest are broken uniformly at random with `rng`, or to the earliest
    index when `rng` is `None`.

    **Arguments:**
    - `values`: `[F, n]` scores.
    - `rng`: a numpy `Generator`, or `None` for the earliest of the tied steps.
    - `tolerance`: how close to the largest value counts as a tie (float rounding).

    **Returns:** `Int[ndarray, "F"]`.
    """
    values = np.asarray(values, np.float64)
    if values.ndim != 2 or values.shape[1] < 1:
        raise ValueError(f"`values` must have shape [F, n] with n >= 1, got {values.shape}")
    tied = values >= values.max(axis=1, keepdims=True) - tolerance
    if rng is None:
        return np.argmax(tied, axis=1).astype(np.int32)
    draw = np.where(tied, rng.random(values.shape), -1.0)
    return np.argmax(draw, axis=1).astype(np.int32)


def differing_steps(choice_a, choice_b, site_step, num_steps):
    """First and last step whose output differs between two runs; -1 when none does."""
    differs = np.asarray(choice_a) != np.asarray(choice_b)  # [F, sites]
    step_differs = np.zeros((differs.shape[0], num_steps), bool)
    for site, step in enumerate(site_step):
        step_differs[:, step] |= differs[:, site]
    any_ = step_differs.any(axis=1)
    first = np.where(any_, np.argmax(step_differs, axis=1), -1)
    last = np.where(any_, num_steps - 1 - np.argmax(step_differs[:, ::-1], axis=1), -1)
    return first.astype(np.int32), last.astype(np.int32)


@compiled("scm.masks")
def mask_function(pipeline, structure, n):
    """Compiled: the scores of a set of coalitions for every failure and world."""
    players, fixes = tuple(range(n)), (1,) * n

    def one(case, world, masks):
        return mask_values(pipeline, structure, case, world, players, fixes, masks)

    per_failure = jax.vmap(one, in_axes=(None, 0, None))
    return jax.jit(jax.vmap(per_failure, in_axes=(0, 0, None)))


def timed_call(function, repeat: int):
    start = time.perf_counter()
    out = jax.block_until_ready(function())
    first = time.perf_counter() - start
    steady = np.nan
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(function())
        elapsed = time.perf_counter() - start
        steady = elapsed if np.isnan(steady) else min(steady, elapsed)
    return out, first, steady
