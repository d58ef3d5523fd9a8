"""Single-step interventions (the do-operators of Causal Agent Replay) as plans.

Every intervention here returns a `Plan` for the existing `Context`: no pipeline is
changed. Each builder starts from `plan` (default: the factual plan) and changes only
the fields it names, so interventions compose by passing one builder's plan to the next:

```python
s = bj.discover(pipeline, case)
plan = bj.interventions.do_action(s, "retriever", 1)                 # force option 1 at the retriever
plan = bj.interventions.do_resample(s, "reviewer", 3, plan=plan)     # and re-draw the reviewer (stream 3)
score = bj.pipeline.run_score(pipeline, s, case, world, plan)
```

Steps before the intervened step k are untouched by every builder, so they replay the
factual run exactly (same noise, same outputs). What the steps *after* k do is chosen
with `downstream`:

- `"held"` (default): later steps keep the world's noise (recorded or abducted) and react
  to k's new output: a counterfactual total effect for this run.
- `"fresh"`: later steps re-draw from fresh noise stream `stream`: interventional, the
  semantics of Causal Agent Replay; it also credits step k with the luck of every later step.
- `"direct"`: later draws are forced to their factual choices (`factual`, from
  `bj.pipeline.trace_run(...)["choice"]`): only k's direct effect on the score remains.

"Later" means later in the pipeline's step order (`Structure.steps`, the order of first
draw); for `do_observation`, the steps whose first draw comes after the deterministic site.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..pipeline import (
    Plan,
    Structure,
    ValuePlan,
    after_step,
    downstream_plan,
    scalar_index,
    set_step,
    start_of,
)


# -- the do-operators ---------------------------------------------------------------------
def do_resample(
    structure: Structure,
    step,
    stream,
    *,
    downstream: str = "held",
    factual=None,
    plan: Plan | None = None,
) -> Plan:
    """Re-draw step `step` from its unchanged policy, with fresh noise stream `stream`.

    **Arguments:**
    - `structure`: the pipeline's `Structure` (`bj.discover(pipeline, case)`).
    - `step`: the step's index k or name.
    - `stream`: which fresh noise stream (an int >= 0; one per rollout: rollout r uses r).
    - `downstream`: `"held"`, `"fresh"` (later steps also use `stream`) or `"direct"`.
    - `factual`: with `"direct"`, the factual choice of every draw site.
    - `plan`: the plan to build on (default: the factual plan).

    **Returns:** a `Plan`.

    **Raises:** `ValueError`/`TypeError` naming the argument (unknown step, k out of range,
    negative stream, bad `downstream`).

    ```python
    import jax
    import blamejax as bj
    case = jax.tree_util.tree_map(lambda x: x[0], bj.demos.refund_cases(1))
    structure = bj.discover(bj.demos.refund_pipeline, case)
    plan = bj.interventions.do_resample(structure, "writer", stream=0, downstream="fresh")
    ```
    """
    plan = start_of(structure, plan)
    k = structure.step_index(step, "step")
    stream = scalar_index(stream, None, "`stream`")
    plan = set_step(plan, k, noise=stream)
    later_steps, later_sites = after_step(structure, k)
    return downstream_plan(
        structure, plan, later_steps, later_sites, downstream, stream, factual, own_stream=True
    )


def do_action(
    structure: Structure,
    step,
    option,
    *,
    downstream: str = "held",
    stream=None,
    factual=None,
    plan: Plan | None = None,
) -> Plan:
    """Force option `option` at step `step` (in every draw slot of the step).

    **Arguments:** as `do_resample`, with `option` an int in [0, K) of that step, and
    `stream` needed only for `downstream="fresh"`.

    **Returns:** a `Plan`.

    **Raises:** `ValueError` for an option out of range, naming the step and its K.

    ```python
    import jax
    import blamejax as bj
    case = jax.tree_util.tree_map(lambda x: x[0], bj.demos.refund_cases(1))
    structure = bj.discover(bj.demos.refund_pipeline, case)
    plan = bj.interventions.do_action(structure, "planner", 0)   # the planner picks option 0
    ```
    """
    plan = start_of(structure, plan)
    k = structure.step_index(step, "step")
    option = scalar_index(
        option, structure.num_options[k], f"`option` of step {structure.steps[k]!r}"
    )
    plan = set_step(plan, k, forced=option)
    later_steps, later_sites = after_step(structure, k)
    return downstream_plan(structure, plan, later_steps, later_sites, downstream, stream, factual)


def do_context(
    structure: Structure,
    step,
    shift,
    *,
    downstream: str = "held",
    stream=None,
    factual=None,
    plan: Plan | None = None,
) -> Plan:
    """Change what step `step` decides from: add `shift` to every logits row it sees.

    The step keeps its own noise (the same luck, a different input). A shift models a
    changed input, e.g. a prompt that makes option 2 `e` times more likely (`shift[2] = 1`);
    `-inf` removes an option. Only this step's logits change: upstream outputs, and the
    inputs of other steps, stay as they were.

    **Arguments:** as `do_resample`, with `shift` a float array of shape `[K]` (K = the
    step's number of options), real or `-inf`. A second `do_context` on the same step
    replaces the first shift.

    **Returns:** a `Plan`.

    **Raises:** `ValueError` for a shift of the wrong shape, or holding NaN or `+inf`.

    ```python
    import jax
    import blamejax as bj
    case = jax.tree_util.tree_map(lambda x: x[0], bj.demos.refund_cases(1))
    structure = bj.discover(bj.demos.refund_pipeline, case)
    import jax.numpy as jnp
    plan = bj.interventions.do_context(structure, "writer", jnp.array([0.0, -jnp.inf, 0.0]))  # K = 3
    ```
    """
    plan = start_of(structure, plan)
    k = structure.step_index(step, "step")
    num_options = structure.num_options[k]
    shift = jnp.asarray(shift)
    name = structure.steps[k]
    if shift.shape != (num_options,) or not jnp.issubdtype(shift.dtype, jnp.floating):
        raise ValueError(
            f"`shift` of step {name!r} must be a float array of shape [{num_options}] (one "
            f"entry per option), got {shift.dtype}{list(shift.shape)}"
        )
    if not isinstance(shift, jax.core.Tracer):
        values = np.asarray(shift)
        if np.isnan(values).any() or np.isposinf(values).any():
            raise ValueError(
                f"`shift` of step {name!r} must be real or -inf (an impossible option), got {values}"
            )
    plan = set_step(plan, k, shift=shift)
    later_steps, later_sites = after_step(structure, k)
    return downstream_plan(structure, plan, later_steps, later_sites, downstream, stream, factual)


def do_policy(
    structure: Structure,
    step,
    variant,
    *,
    downstream: str = "held",
    stream=None,
    factual=None,
    plan: Plan | None = None,
) -> Plan:
    """Switch step `step` and every later step to variant `variant` (a model swap from k on).

    With `downstream="held"` every switched step keeps its noise (the same luck under the
    new model); with `"fresh"` the steps after k re-draw; with `"direct"` they are held at
    their factual outputs, so only step k's switch acts.

    **Arguments:** as `do_resample`, with `variant` an int; every step from k on must have it.

    **Returns:** a `Plan`.

    **Raises:** `ValueError` naming the first step from k on that lacks the variant.

    ```python
    import jax
    import blamejax as bj
    case = jax.tree_util.tree_map(lambda x: x[0], bj.demos.refund_cases(1))
    structure = bj.discover(bj.demos.refund_pipeline, case)
    plan = bj.interventions.do_policy(structure, "writer", 1)   # writer and reviewer run variant 1
    ```
    """
    plan = start_of(structure, plan)
    k = structure.step_index(step, "step")
    variant = scalar_index(variant, None, "`variant`")
    for j in range(k, structure.num_steps):
        count = structure.num_variants[j]
        if not isinstance(variant, jax.core.Tracer) and int(variant) >= count:
            raise ValueError(
                f"`variant` = {int(variant)} does not exist at step {structure.steps[j]!r}, which "
                f"has {count} variant(s) (0..{count - 1}); do_policy switches step "
                f"{structure.steps[k]!r} and every later step, so each needs it"
            )
        plan = set_step(plan, j, variant=variant)
    later_steps, later_sites = after_step(structure, k)
    return downstream_plan(structure, plan, later_steps, later_sites, downstream, stream, factual)


def do_observation(
    structure: Structure,
    name: str,
    value,
    *,
    downstream: str = "held",
    stream=None,
    factual=None,
    plan: Plan | None = None,
) -> Plan:
    """Replace what a deterministic site (a tool, `ctx.deterministic(name, ...)`) returned.

    **Arguments:**
    - `name`: the deterministic site's name.
    - `value`: the value it returns instead, of the site's shape (cast to its dtype).
    - `downstream`, `stream`, `factual`, `plan`: as `do_resample`; "later" means the steps
      whose first draw comes after the site.

    **Returns:** a `Plan`.

    **Raises:** `ValueError` when `name` is a step that samples (use `do_action`), is
    unknown, or `value` has the wrong shape.

    ```python
    import jax.numpy as jnp
    import blamejax as bj

    def pipeline(ctx, case):
        query = ctx.choose("query", case["query"])                         # logits [V=1, K=3]
        results = ctx.deterministic("search_results", case["index"][query.index])  # a tool, [3]
        answer = ctx.choose("answer", case["answer"] + results[None, :])   # [V=1, K=3]
        return answer.take(jnp.array([1.0, 0.0, 0.0]))

    case = dict(query=jnp.zeros((1, 3)), index=jnp.eye(3), answer=jnp.zeros((1, 3)))
    structure = bj.discover(pipeline, case)
    plan = bj.interventions.do_observation(structure, "search_results", jnp.zeros(3))
    ```
    """
    plan = start_of(structure, plan)
    names = [v.name for v in structure.values]
    if not isinstance(name, str):
        raise TypeError(f"`name` must be the name (str) of a deterministic site, got {name!r}")
    if name not in names:
        if name in structure.steps:
            raise ValueError(
                f"`name` = {name!r} is a step that samples (ctx.choose), not a deterministic "
                f"site (ctx.deterministic); do_observation replaces a tool's output. To force "
                f"one of the step's options use do_action. Deterministic sites: {names}"
            )
        raise ValueError(
            f"`name` = {name!r} is not a deterministic site of this pipeline; its sites are {names}"
        )
    index = names.index(name)
    site = structure.values[index]
    value = jnp.asarray(value)
    if tuple(value.shape) != tuple(site.shape):
        raise ValueError(
            f"`value` for deterministic site {name!r} must have shape {list(site.shape)}, got "
            f"{list(value.shape)}"
        )
    values = list(plan.values)
    values[index] = ValuePlan(active=np.bool_(True), value=value.astype(site.dtype))
    plan = plan._replace(values=tuple(values))
    if site.position < 0:
        if downstream != "held":
            raise ValueError(
                f"the position of deterministic site {name!r} among the draws is unknown, so "
                "downstream must be 'held'; rediscover the structure with bj.discover"
            )
        return plan
    later_sites = list(range(site.position, len(structure.sites)))
    first_site = {}
    for i, s in enumerate(structure.sites):
        first_site.setdefault(s.step, i)
    later_steps = [j for j, step in enumerate(structure.steps) if first_site[step] >= site.position]
    return downstream_plan(structure, plan, later_steps, later_sites, downstream, stream, factual)
