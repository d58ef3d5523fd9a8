"""The plan machinery under the do-operators: argument checks, the downstream rule, batches.

Every do-operator (`do_resample`, `do_action`, `do_context`, `do_policy`,
`do_observation`) starts from a plan (`start_of`), edits one step's
fields (`set_step`) and then applies the downstream-noise rule (`downstream_plan`, one of
`DOWNSTREAM`) to the later steps; those shared pieces live here. So do `full_plan` and
`stack_plans`: they give plans built by different interventions one pytree structure and
stack them into one batch for `bj.pipeline.plan_values`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int

from ..pipeline import Plan, StepPlan, Structure, ValuePlan, factual_plan

DOWNSTREAM = ("held", "fresh", "direct")
"""What the steps after an intervened step may do (`downstream=`): keep the world's noise
(`"held"`), re-draw from a fresh stream (`"fresh"`), or repeat their factual choices
(`"direct"`)."""


# -- argument checks ----------------------------------------------------------------------
def step_index(structure: Structure, step, argument: str = "step") -> int:
    """The index of `step` (an int index or a step name) in `structure.steps`.

    **Raises:** `TypeError` for another type; `ValueError` for an index out of range, an
    unknown name, or the name of a deterministic site (which does not sample).
    """
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer, str)):
        raise TypeError(
            f"`{argument}` must be a step index (int) or a step name (str), got "
            f"{type(step).__name__}: {step!r}"
        )
    names = list(structure.steps)
    if isinstance(step, str):
        if step in names:
            return names.index(step)
        if any(v.name == step for v in structure.values):
            raise ValueError(
                f"`{argument}` = {step!r} is a deterministic site (ctx.deterministic), not a "
                f"step that samples; use do_observation to replace its value. Steps: {names}"
            )
        raise ValueError(
            f"`{argument}` = {step!r} is not a step of this pipeline; its steps are {names}"
        )
    if not 0 <= int(step) < len(names):
        raise ValueError(
            f"`{argument}` = {int(step)} is out of range: this pipeline has {len(names)} steps, "
            f"indices 0..{len(names) - 1} ({names})"
        )
    return int(step)


def scalar_index(value, upper: int | None, label: str):
    """An int32 scalar in [0, upper) (no upper bound when `upper` is None). Concrete values
    are checked eagerly; traced values (inside `vmap`) only for shape and dtype here, and
    when the plan runs: a forced option outside [0, K) makes the run's score NaN, which
    every estimator refuses with an error (it is never clamped to a valid option). `label`
    names the argument in errors, e.g. "`option` of step 'writer'"."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{label} must be an integer, got {value!r}")
    if isinstance(value, jax.core.Tracer):
        if value.shape != () or not jnp.issubdtype(value.dtype, jnp.integer):
            raise TypeError(
                f"{label} must be an integer scalar, got {value.dtype}{list(value.shape)}"
            )
        return value.astype(jnp.int32)
    array = np.asarray(value)
    if array.shape != () or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{label} must be an integer scalar, got {value!r}")
    number = int(array)
    if number < 0 or (upper is not None and number >= upper):
        where = "a non-negative integer" if upper is None else f"in [0, {upper})"
        raise ValueError(f"{label} must be {where}, got {number}")
    return np.int32(number)


def _check_factual(structure: Structure, factual):
    factual = jnp.asarray(factual)
    num_sites = len(structure.sites)
    if factual.shape != (num_sites,) or not jnp.issubdtype(factual.dtype, jnp.integer):
        raise ValueError(
            f"`factual` must be the factual run's choice at every draw site, an int array of "
            f"shape [{num_sites}] (bj.pipeline.trace_run(...)['choice']), got {factual.dtype}{list(factual.shape)}"
        )
    return factual.astype(jnp.int32)


def start_of(structure: Structure, plan: Plan | None) -> Plan:
    if plan is None:
        return factual_plan(structure)
    if not isinstance(plan, Plan):
        raise TypeError(f"`plan` must be a blamejax.Plan (or None), got {type(plan).__name__}")
    if len(plan.steps) != structure.num_steps or len(plan.values) != len(structure.values):
        raise ValueError(
            f"`plan` has {len(plan.steps)} step plans and {len(plan.values)} value plans; this "
            f"pipeline has {structure.num_steps} steps and {len(structure.values)} deterministic sites"
        )
    return plan


def set_step(plan: Plan, index: int, **fields) -> Plan:
    steps = list(plan.steps)
    steps[index] = steps[index]._replace(**fields)
    return plan._replace(steps=tuple(steps))


def downstream_plan(
    structure: Structure,
    plan: Plan,
    later_steps: Sequence[int],
    later_sites: Sequence[int],
    downstream: str,
    stream,
    factual,
    *,
    own_stream: bool = False,
) -> Plan:
    """Apply the downstream-noise rule to the later steps (fresh) or sites (direct)."""
    if downstream not in DOWNSTREAM:
        raise ValueError(f"`downstream` must be one of {DOWNSTREAM}, got {downstream!r}")
    if factual is not None and downstream != "direct":
        raise ValueError(
            f"`factual` is only used with downstream='direct', got downstream={downstream!r}"
        )
    if downstream == "fresh":
        if stream is None:
            raise ValueError(
                "downstream='fresh' needs `stream`, the fresh noise stream of the later steps"
            )
        stream = scalar_index(stream, None, "`stream`")
        for j in later_steps:
            plan = set_step(plan, j, noise=stream)
    elif stream is not None and not own_stream:
        raise ValueError(
            f"`stream` is only used with downstream='fresh', got downstream={downstream!r}"
        )
    if downstream == "direct":
        if factual is None:
            raise ValueError(
                "downstream='direct' needs `factual`, the factual choices to hold the later "
                "steps at (bj.pipeline.trace_run(pipeline, structure, case, world)['choice'])"
            )
        factual = _check_factual(structure, factual)
        num_sites = len(structure.sites)
        forced = plan.forced_sites
        if forced is None:
            forced = tuple(np.int32(-1) for _ in range(num_sites))
        forced = list(forced)
        for i in later_sites:
            forced[i] = factual[i]
        plan = plan._replace(forced_sites=tuple(forced))
    return plan


def after_step(structure: Structure, k: int):
    later_steps = range(k + 1, structure.num_steps)
    later_sites = [i for i, s in enumerate(structure.sites) if structure.step_index(s.step) > k]
    return later_steps, later_sites


# -- batches of plans -----------------------------------------------------------------------
def full_plan(structure: Structure, plan: Plan) -> Plan:
    """`plan` with every optional field filled in (zero shifts, inactive value overrides,
    no forced sites), so that plans built by different interventions share one pytree
    structure and can be stacked into a batch."""
    plan = start_of(structure, plan)
    dtype = jnp.result_type(float)
    steps = []
    for j, step_plan in enumerate(plan.steps):
        shift = step_plan.shift
        if shift is None:
            shift = jnp.zeros((structure.num_options[j],), dtype)
        steps.append(
            StepPlan(
                variant=jnp.asarray(step_plan.variant, jnp.int32),
                noise=jnp.asarray(step_plan.noise, jnp.int32),
                forced=jnp.asarray(step_plan.forced, jnp.int32),
                shift=jnp.asarray(shift, dtype),
            )
        )
    values = []
    for site, value_plan in zip(structure.values, plan.values):
        if value_plan is None:
            value_plan = ValuePlan(active=False, value=jnp.zeros(site.shape, site.dtype))
        values.append(
            ValuePlan(
                active=jnp.asarray(value_plan.active, bool),
                value=jnp.asarray(value_plan.value, site.dtype),
            )
        )
    num_sites = len(structure.sites)
    forced = plan.forced_sites
    if forced is None:
        forced = (-1,) * num_sites
    forced = tuple(jnp.asarray(f, jnp.int32) for f in forced)
    return Plan(steps=tuple(steps), values=tuple(values), forced_sites=forced)


def stack_plans(structure: Structure, plans: Sequence[Plan]) -> Plan:
    """Stack single plans (from any mix of interventions) into one batched `Plan` with a
    leading axis, ready for `bj.pipeline.plan_values` (one vmapped call).

    **Arguments:**
    - `structure`: the pipeline's `Structure`.
    - `plans`: a non-empty sequence of unbatched `Plan`s.

    **Returns:** a `Plan` whose every leaf has a leading axis of length `len(plans)`.

    ```python
    import jax
    import blamejax as bj
    pipeline = bj.demos.refund_pipeline
    case = jax.tree_util.tree_map(lambda x: x[0], bj.demos.refund_cases(1))
    world = bj.World(key=bj.noise.world_key(jax.random.key(0), 0, 0))  # case 0's recorded world
    s = bj.discover(pipeline, case)
    plans = bj.interventions.stack_plans(s, [bj.interventions.do_resample(s, k, 0) for k in range(s.num_steps)])
    scores = bj.pipeline.plan_values(pipeline, s, case, world, plans)  # [num_steps]
    ```
    """
    plans = list(plans)
    if not plans:
        raise ValueError("`plans` is empty; give at least one Plan")
    full = [full_plan(structure, p) for p in plans]
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *full)


def step_of_site(structure: Structure) -> Int[Array, " sites"]:
    """The step index of every draw site (in `Structure.sites` order), as a numpy array."""
    return np.array([structure.step_index(s.step) for s in structure.sites], dtype=np.int32)
