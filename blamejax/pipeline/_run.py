"""Running one plan of a pipeline: its score, the scores of a batch of plans, and a trace of
what every draw saw and chose.

All functions here are pure and written for one case x one world; `jax.vmap` them on top.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ._context import Context, World, world_noise
from ._modes import Hard
from ._plans import Plan, factual_plan
from ._structure import Structure


def run_score(
    pipeline: Callable,
    structure: Structure,
    case,
    world: World,
    plan: Plan,
    mode=Hard(),
    noise=None,
    rows_per_world=False,
    defer=False,
):
    """The score of one run: one case, one world, one plan. Returns a float scalar.
    `noise` is the world's site noise if already computed (see `world_noise`);
    `rows_per_world` and `defer`, see `Context`."""
    ctx = Context(
        structure, plan, world, mode, noise=noise, rows_per_world=rows_per_world, defer=defer
    )
    return _score(ctx, pipeline(ctx, case))


def _score(ctx: Context, score):
    """The pipeline's score as a float, NaN when some draw had no valid option."""
    score = jnp.asarray(score, dtype=jnp.result_type(float))
    if ctx.invalid is None:
        return score
    return jnp.where(ctx.invalid, jnp.nan, score)


def plan_values(
    pipeline: Callable, structure: Structure, case, world: World, plans: Plan, mode=Hard()
):
    """The score of each plan in a batched `Plan` (leading axis on every leaf), for one case
    and one world, with the world's addressed noise computed once."""
    noise = world_noise(structure, world)
    return jax.vmap(lambda plan: run_score(pipeline, structure, case, world, plan, mode, noise))(
        plans
    )


def trace_run(
    pipeline: Callable,
    structure: Structure,
    case,
    world: World,
    plan: Plan | None = None,
    mode=Hard(),
    noise=None,
):
    """Run one plan and return what every draw saw and chose.

    **Returns:** a dict with
    - `"score"`: the run's score;
    - `"choice"`: `Int[Array, "sites"]`, the option chosen at each site (`Structure.sites` order);
    - `"variant"`: `Int[Array, "sites"]`, the variant each site ran;
    - `"invalid"`: `Bool[Array, "sites"]`, whether a site drew from a row with no valid
      option (all `-inf`, or NaN/`+inf`; the score is then NaN);
    - `"logits"`, `"noise"`: tuples (one `[K]` array per site), the logits row the draw saw
      and the Gumbels added to it;
    - `"values"`: tuple of the deterministic sites' values.
    """
    if plan is None:
        plan = factual_plan(structure)
    record: dict = {}
    ctx = Context(structure, plan, world, mode, record=record, noise=noise)
    score = _score(ctx, pipeline(ctx, case))
    num_sites = len(structure.sites)
    missing = [structure.sites[i] for i in range(num_sites) if ("site", i) not in record]
    if missing:
        raise ValueError(
            f"the pipeline skipped draws it made when first traced: {missing}; a pipeline "
            "must make the same draws in every run (use jnp.where, not Python branches on values)"
        )
    sites = [record[("site", i)] for i in range(num_sites)]
    return dict(
        score=score,
        choice=jnp.stack([s["choice"] for s in sites]),
        variant=jnp.stack([s["variant"] for s in sites]),
        invalid=jnp.stack([jnp.asarray(s["invalid"]) for s in sites]),
        logits=tuple(s["logits"] for s in sites),
        noise=tuple(s["noise"] for s in sites),
        values=tuple(record[("value", i)] for i in range(len(structure.values))),
    )
