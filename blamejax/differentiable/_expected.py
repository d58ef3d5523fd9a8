"""Differentiable blame in expectation over the noise: one case's attributions under
`expected_worlds`, a pure function of its logits with exact gradients (no relaxation)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._game import make_game
from ..pipeline import Hard
from ..reduction import Attribution
from ..structured import expected_site_maps, factor_tables, site_logits, world_blame
from ..worlds._expected import ExpectedWorlds


def expected_plan(pipeline, case, worlds: ExpectedWorlds, steps, fixes, score_range):
    """The checked game and the structured plan for one case (eager; shapes only, so it
    runs under `jit` and `grad` too)."""
    if worlds.case_id.ndim != 0:
        raise ValueError(
            "`worlds` must be one case's row of bj.expected_worlds(...) (a scalar `case_id`: "
            f"`jax.tree_util.tree_map(lambda x: x[f], worlds)`), got case_id shape "
            f"{tuple(worlds.case_id.shape)}"
        )
    from ..estimators._exact import _expected_method, resolve_method  # noqa: PLC0415

    batch = jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], case)
    game = make_game(
        pipeline, batch, steps=steps, fixes=fixes, mode=Hard(), score_range=score_range
    )
    method = _expected_method(game, "auto")
    _, elim, graph = resolve_method(game, batch, method, max_steps=1)
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
    structure = game.structure
    logits = site_logits(pipeline, structure, case)
    score = factor_tables(pipeline, structure, graph, case, elim.factors)
    maps = expected_site_maps(structure, graph, logits, worlds.observed)
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
