"""Running one plan of a pipeline: its score, the scores of a batch of plans, and a trace of
what every draw saw and chose.

All functions here are pure and written for one case x one world; `jax.vmap` them on top.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

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
    out = trace_arrays(pipeline, structure, case, world, plan, mode, noise)
    sizes = [site.num_options for site in structure.sites]
    for name in ("logits", "noise"):
        if not isinstance(out[name], tuple):
            out[name] = tuple(out[name][i, :k] for i, k in enumerate(sizes))
    return out


def trace_arrays(
    pipeline: Callable,
    structure: Structure,
    case,
    world: World,
    plan: Plan | None = None,
    mode=Hard(),
    noise=None,
    defer: bool = True,
):
    """`trace_run` with the rows seen and the noise stacked, for compiled programs over long
    pipelines.

    A compiled program that returns one array per draw site takes minutes to compile at a
    thousand sites (each output is a kernel of its own); this one returns a few stacked
    arrays, which the caller splits outside the program (`bj.replay` does). In hard mode
    the draws are deferred and made as one batch (`Context(defer=True)`): the same choices,
    rows and noise, bit for bit, from a program that does not grow with the number of
    draws (`defer=False`: each draw made on its own).

    **Arguments:** as `trace_run`, and `defer`.

    **Returns:** the dict of `trace_run`, except that `"logits"` and `"noise"` are
    `[sites, K_max]` arrays (row i padded past site i's options with `-inf` logits and zero
    noise), or per-site tuples as in `trace_run` when the sites' logits differ in dtype.

    ```python
    import blamejax as bj
    import jax
    case = jax.tree.map(lambda x: x[0], bj.demos.refund_cases(1))
    structure = bj.discover(bj.demos.refund_pipeline, case)
    world = bj.World(key=bj.noise.world_key(bj.noise.as_key(0), 0, 0))  # case 0's recorded world
    out = bj.pipeline.trace_arrays(bj.demos.refund_pipeline, structure, case, world)
    assert out["logits"].shape[0] == len(structure.sites)
    ```
    """
    if plan is None:
        plan = factual_plan(structure)
    record: dict = {}
    ctx = Context(structure, plan, world, mode, record=record, noise=noise, defer=defer)
    score = _score(ctx, pipeline(ctx, case))
    pieces = []  # (site indices, their records with a leading axis)
    for name, entry in record.items():
        if name[0] == "batch":
            pieces.append((entry["sites"], entry))
        elif name[0] == "site":
            row = {key: jnp.asarray(entry[key])[None] for key in ("choice", "variant", "invalid")}
            row.update(logits=entry["logits"][None], noise=entry["noise"][None])
            pieces.append(((name[1],), row))
    num_sites = len(structure.sites)
    order = [i for sites, _ in pieces for i in sites]
    missing = [structure.sites[i] for i in range(num_sites) if i not in set(order)]
    if missing:
        raise ValueError(
            f"the pipeline skipped draws it made when first traced: {missing}; a pipeline "
            "must make the same draws in every run (use jnp.where, not Python branches on values)"
        )
    permutation = None if order == list(range(num_sites)) else np.argsort(order)

    def stacked(key, pad=None):
        parts = [entry[key] for _, entry in pieces]
        if pad is not None:
            width = max(site.num_options for site in structure.sites)
            parts = [
                jnp.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=pad) for x in parts
            ]
        out = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
        return out if permutation is None else out[permutation]

    def rows(key, pad):
        if len({entry[key].dtype for _, entry in pieces}) == 1:
            return stacked(key, pad)
        per_site = {}
        for sites, entry in pieces:
            for k, i in enumerate(sites):
                per_site[i] = entry[key][k, : structure.sites[i].num_options]
        return tuple(per_site[i] for i in range(num_sites))

    return dict(
        score=score,
        choice=stacked("choice"),
        variant=stacked("variant"),
        invalid=stacked("invalid"),
        logits=rows("logits", -np.inf),
        noise=rows("noise", 0),
        values=tuple(record[("value", i)] for i in range(len(structure.values))),
    )
