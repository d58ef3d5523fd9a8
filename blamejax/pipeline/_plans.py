"""Plans: what each step does in one run, and every way blamejax builds one.

A `Plan` holds one `StepPlan` per step (its variant, its noise stream, a forced option, a
shift of its logits), one optional `ValuePlan` per deterministic site, and optionally a
forced option per draw site. The factual run, a coalition's run (a step runs its fix when
its bit is set), a replay of observed choices and the do-operators' edits are all plans,
built here; `full_plan` and `stack_plans` give plans from different builders one pytree
structure and stack them into a batch for `bj.pipeline.plan_values`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ._structure import Structure


class StepPlan(NamedTuple):
    """What one step does in one run. Every field is a scalar array, one per step, so that
    batching one step's plan never batches another step's computation.

    - `variant`: `Int[Array, ""]`, 0 = factual, v >= 1 = fix v.
    - `noise`: `Int[Array, ""]`, -1 = the world's noise (override where valid, otherwise
      addressed); r >= 0 = fresh noise stream r (used to resample a step).
    - `forced`: `Int[Array, ""]`, -1 = sample; a >= 0 = force option a in every slot.
    - `shift`: `None` (the default: no change, no cost) or `Float[Array, "K"]`, added to
      every logits row the step decides from (`do_context`); `-inf` removes an option.
    """

    variant: Int[Array, ""]
    noise: Int[Array, ""]
    forced: Int[Array, ""]
    shift: Float[Array, " K"] | None = None


class ValuePlan(NamedTuple):
    """Override of a deterministic site: `active` (bool scalar) and the `value` to use."""

    active: Bool[Array, ""]
    value: Any


class Plan(NamedTuple):
    """A plan for every step (`steps`, in the structure's order), every deterministic
    site (`values`, `None` entries mean "no override"), and optionally a forced option
    per draw site (`forced_sites`, -1 = not forced; used to replay observed choices), and
    optionally the steps' variants as one array (`variants`, the same values as `steps`)."""

    steps: tuple[StepPlan, ...]
    values: tuple[ValuePlan | None, ...]
    forced_sites: tuple | None = None
    # `None`, or every step's `variant` again as one `Int[Array, "steps"]` (a coalition's
    # plan built from a mask): a context that defers its draws reads the variants of many
    # steps from it in one gather instead of stacking the steps' scalars.
    variants: Int[Array, " steps"] | None = None


def factual_plan(structure) -> Plan:
    """The plan of the run as it happened: every step factual, world noise, no forcing."""
    zero = np.int32(0)
    none = np.int32(-1)
    steps = tuple(StepPlan(zero, none, none) for _ in structure.steps)
    return Plan(steps=steps, values=tuple(None for _ in structure.values))


def coalition_plan(structure: Structure, bits: Sequence, fix_variants: Sequence[int]) -> Plan:
    """The plan in which step i runs fix `fix_variants[i]` when `bits[i]` is 1 and its
    factual variant otherwise. `bits[i]` is `None` for a step that is not a player."""
    none = np.int32(-1)
    steps = []
    for bit, fix in zip(bits, fix_variants):
        variant = np.int32(0) if bit is None else bit * np.int32(fix)
        steps.append(StepPlan(variant=variant, noise=none, forced=none))
    return Plan(steps=tuple(steps), values=tuple(None for _ in structure.values))


def mask_plan(
    structure: Structure, players: Sequence[int], fix_variants: Sequence[int], mask
) -> Plan:
    """The plan of one coalition given as a boolean mask over `players` (`Bool[Array, "n"]`):
    player j runs fix `fix_variants[j]` where `mask[j]`, its factual variant otherwise."""
    bits = [None] * structure.num_steps
    fixes = [0] * structure.num_steps
    # One conversion of the whole mask, then a slice per player; and the variants again as
    # one array (`Plan.variants`), for a context that defers its draws.
    mask = jnp.asarray(mask).astype(jnp.int32)
    for j, (p, f) in enumerate(zip(players, fix_variants)):
        bits[p] = mask[j]
        fixes[p] = f
    plan = coalition_plan(structure, bits, fixes)
    chosen = mask * jnp.asarray(np.asarray(fix_variants, np.int32))
    if list(players) == list(range(structure.num_steps)):  # every step a player, in order
        return plan._replace(variants=chosen)
    variants = jnp.zeros((structure.num_steps,), jnp.int32)
    return plan._replace(variants=variants.at[np.asarray(players, np.int32)].set(chosen))


def observed_plan(structure: Structure, observed: Int[Array, " sites"]) -> Plan:
    """The factual plan with every draw forced to its observed option."""
    plan = factual_plan(structure)
    return plan._replace(forced_sites=tuple(observed[i] for i in range(len(structure.sites))))


# --------------------------------------------------------------------------------------
# The do-operators' plans: a start, one step's fields edited, the downstream rule.
# --------------------------------------------------------------------------------------


DOWNSTREAM = ("held", "fresh", "direct")
"""What the steps after an intervened step may do (`downstream=`): keep the world's noise
(`"held"`), re-draw from a fresh stream (`"fresh"`), or repeat their factual choices
(`"direct"`)."""


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
    """`plan`, or the factual plan of `structure` when `plan` is None."""
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
    """`plan` with the fields of step `index` replaced by `fields` (a new plan)."""
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
    """The steps after step `k` and the draw sites they own (what `downstream=` acts on)."""
    later_steps = range(k + 1, structure.num_steps)
    later_sites = [i for i, s in enumerate(structure.sites) if structure.step_index(s.step) > k]
    return later_steps, later_sites


# --------------------------------------------------------------------------------------
# Batches of plans.
# --------------------------------------------------------------------------------------


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
