"""The compiled programs of `blame_batch`: the front (every case run once as it happened), the
selection of the failures with their fully fixed runs, the fixed-budget Monte Carlo of a
block, and every coalition's table for the interactive page. Each is built once per game and
kept in the compile cache (`blamejax._compile.compiled`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._compile import compiled
from .._game import Game
from ..coalitions import coalition_values, last_step_blame, mask_plan, mask_values
from ..noise import world_key
from ..pipeline import World, trace_run
from ._permutation import mc_shapley_fixed


@compiled("batch.coalitions")
def coalition_function(game: Game):
    """Compiled: `(cases [A], worlds [A, W], recorded [A, 1]) -> (scores [A, W, 2^n],
    choices [A, 2^n, sites])`, coalition m fixing player j when bit j of m is set."""
    pipeline, structure, players, variants, mode, _ = game
    n = len(players)
    masks = np.array([[(m >> j) & 1 for j in range(n)] for m in range(1 << n)], bool)

    def one(case, worlds, recorded):
        scores = jax.vmap(
            lambda w: coalition_values(pipeline, structure, case, w, players, variants, mode)
        )(worlds)
        world = jax.tree_util.tree_map(lambda x: x[0], recorded)

        def choices(mask):
            plan = mask_plan(structure, players, variants, mask)
            return trace_run(pipeline, structure, case, world, plan, mode)["choice"]

        return scores, jax.vmap(choices)(jnp.asarray(masks))

    return jax.jit(jax.vmap(one))


@compiled("batch.mc")
def mc_function(game: Game, num_permutations: int):
    """Compiled: a fixed number of permutations per failure (`mc_shapley_fixed`, vmapped over
    failures), v(empty), v(all), last-step blame, and the share of worlds in which fixing each
    player alone reaches `threshold`."""
    pipeline, structure, players, variants, mode, _ = game
    n = len(players)
    masks = np.concatenate([np.zeros((1, n), bool), np.ones((1, n), bool), np.eye(n, dtype=bool)])

    def one(case, worlds, key, threshold):
        estimate = mc_shapley_fixed(
            pipeline, structure, case, worlds, key, num_permutations, players, variants, mode=mode
        )
        v = jax.vmap(
            lambda w: mask_values(pipeline, structure, case, w, players, variants, masks, mode)
        )(worlds)
        last = jax.vmap(
            lambda w: last_step_blame(pipeline, structure, case, w, players, variants, mode)
        )(worlds)
        resolve = (v[:, 2:] >= threshold).mean(axis=0)  # [n]: each player's fix alone
        low = jnp.minimum(estimate.low, v.min())  # every score computed, for the range check
        high = jnp.maximum(estimate.high, v.max())
        nan = jnp.isnan(v).any() | jnp.isnan(estimate.values).any()  # min/max may skip NaN
        return estimate, v[:, 0].mean(), v[:, 1].mean(), last, resolve, low, high, nan

    def batch(cases, worlds, key, threshold, start):
        num = worlds.key.shape[0]
        keys = jax.vmap(lambda f: jr.fold_in(key, f))(start + jnp.arange(num, dtype=jnp.int32))
        return jax.vmap(one, in_axes=(0, 0, 0, None))(cases, worlds, keys, threshold)

    return jax.jit(batch)


@compiled("batch.front")
def front_function(pipeline, structure, mode):
    """Compiled: every case's recorded world and its factual run,
    `(cases, key) -> (World [C, 1], score [C], choice [C, sites])` (world 0 of
    `fold_in(key, case)`, as `recorded_worlds`): it decides which cases failed."""

    def front(cases, key):
        num_cases = jax.tree_util.tree_leaves(cases)[0].shape[0]
        ids = jnp.arange(num_cases, dtype=jnp.uint32)
        worlds = World(key=world_key(key, ids[:, None], 0))
        run = jax.vmap(lambda case, world: trace_run(pipeline, structure, case, world, mode=mode))
        out = run(cases, jax.tree_util.tree_map(lambda x: x[:, 0], worlds))
        return worlds, out["score"], out["choice"]

    return jax.jit(front)


@compiled("batch.observed_front")
def observed_front_function(pipeline, structure, mode):
    """Compiled: every case's run in its given world (one per case, replaying a log's observed
    choices), `(cases, World [C, 1]) -> (score [C], choice [C, sites])`."""

    def front(cases, worlds):
        run = jax.vmap(lambda case, world: trace_run(pipeline, structure, case, world, mode=mode))
        out = run(cases, jax.tree_util.tree_map(lambda x: x[:, 0], worlds))
        return out["score"], out["choice"]

    return jax.jit(front)


@compiled("batch.select")
def select_function(game: Game):
    """Compiled: the rows `rows` of the cases and of their recorded worlds, and the choices of
    each selected case's fully fixed run under its recorded noise (the drill-down's other
    side), `(cases, worlds, rows) -> (cases [A], World [A, 1], choice [A, sites])`."""
    pipeline, structure, players, variants, mode, _ = game
    full = np.ones(len(players), bool)

    def select(cases, worlds, rows):
        cases, worlds = jax.tree_util.tree_map(lambda x: x[rows], (cases, worlds))

        def fixed(case, world):
            plan = mask_plan(structure, players, variants, full)
            return trace_run(pipeline, structure, case, world, plan, mode)["choice"]

        return (
            cases,
            worlds,
            jax.vmap(fixed)(cases, jax.tree_util.tree_map(lambda x: x[:, 0], worlds)),
        )

    return jax.jit(select)
