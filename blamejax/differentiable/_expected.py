"""Differentiable blame in expectation over the noise: one case's attributions under
`expected_worlds`, a pure function of its logits with exact gradients (no relaxation)."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from .._game import make_game
from ..pipeline import Hard
from ..reduction import Attribution
from ..structured import (
    chain_expected_arrays,
    elimination,
    expected_site_maps,
    factor_tables,
    find_graph,
    site_logits,
    world_blame,
)
from ..worlds import ExpectedWorlds

MAX_STATES = 2**16  # the structured path's bound on a frontier or a score table (exact_blame's)


def expected_plan(pipeline, case, worlds: ExpectedWorlds, steps, fixes, score_range):
    """The checked game and the structured plan for one case (eager; shapes only, so it
    runs under `jit` and `grad` too)."""
    if worlds.case_id.ndim != 0:
        raise ValueError(
            "`worlds` must be one case's row of bj.expected_worlds(...) (a scalar `case_id`: "
            f"`jax.tree_util.tree_map(lambda x: x[f], worlds)`), got case_id shape "
            f"{tuple(worlds.case_id.shape)}"
        )
    batch = jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], case)
    game = make_game(
        pipeline, batch, steps=steps, fixes=fixes, mode=Hard(), score_range=score_range
    )
    structure = game.structure
    graph = find_graph(pipeline, structure, batch)
    if graph.free or graph.foreign:
        raise ValueError(
            "`expected_worlds` needs a tabulated pipeline (the structured path): every draw's "
            "logits a table over its `given` parents' options; "
            + (
                f"step {structure.sites[graph.free[0][0]].step!r} computes its logits from "
                "another draw's option by free JAX code"
                if graph.free
                else f"`given` of step {structure.sites[graph.foreign[0]].step!r} holds a "
                "choice its context did not return"
            )
        )
    joint = math.prod(structure.sites[s].num_options for s in graph.scope)
    factors = (graph.scope,) if joint <= MAX_STATES else graph.factors
    elim = elimination(structure, graph, list(game.players), list(game.fixes), factors)
    if elim.width > MAX_STATES or any(
        math.prod(structure.sites[s].num_options for s in f) > MAX_STATES for f in factors
    ):
        raise ValueError(
            f"`expected_worlds`: the structured path's frontier or score table holds more "
            f"than {MAX_STATES:,} joint options for this pipeline (see exact_blame(..., "
            "method='structured') for the details)"
        )
    if worlds.observed is not None and tuple(worlds.observed.shape) != (len(game.structure.sites),):
        raise ValueError(
            f"`worlds.observed` must hold one option per draw site ({len(game.structure.sites)}),"
            f" got shape {tuple(worlds.observed.shape)}"
        )
    return game, elim, graph


def expected_attribution(
    pipeline, case, worlds: ExpectedWorlds, *, steps, fixes, interactions, score_range
) -> Attribution:
    """One case's `Attribution` in expectation over the noise (see `shapley_values`)."""
    game, elim, graph = expected_plan(pipeline, case, worlds, steps, fixes, score_range)
    return _expected_values(game, elim, graph, bool(interactions), case, worlds.observed)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _expected_values(game, elim, graph, interactions, case, observed) -> Attribution:
    """`expected_attribution`, compiled once per game (eager calls would dispatch every
    operation of the contraction on its own)."""
    pipeline, structure = game.pipeline, game.structure
    logits = site_logits(pipeline, structure, case)
    score = factor_tables(pipeline, structure, graph, case, elim.factors)
    arrays = None
    if elim.chain and not interactions:  # stacked: a program flat in n
        arrays = chain_expected_arrays(elim, logits, observed)
    if arrays is not None:
        blame = world_blame(elim, None, score, chain=arrays)
    else:
        maps = expected_site_maps(structure, graph, logits, observed)
        blame = world_blame(elim, maps, score, interactions)
    empty, full = blame.runs[0], blame.runs[1]
    return Attribution(
        shapley=blame.shapley,
        banzhaf=blame.banzhaf,
        fix_alone=blame.runs[2:] - empty,
        leave_one_out=blame.leave_one_out,
        interactions=blame.interactions,
        empty=empty,
        full=full,
    )
