"""How much common random numbers help Monte Carlo Shapley under fresh noise.

In fresh-noise mode every coalition could be scored under its own independent world. The
permutation estimator instead scores all n+1 prefixes of one order under one shared world
(common random numbers), so the noise cancels in each marginal `v(S + i) - v(S)`. Both
estimate the same interventional Shapley values; this measures the variance of one
permutation's marginals under each scheme, at equal budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

import blamejax as bj

from ..coalitions import mask_plan
from ..noise import NOISE_SHARING_TAG, as_key, world_key
from ..pipeline import Hard, World, run_score


class NoiseSharingGain(eqx.Module):
    """Per-step variance of one permutation's marginal contribution (mean over failures).

    - `steps`: step names (static).
    - `shared`: `Float[Array, "n"]`, every prefix of an order under one fresh world.
    - `independent`: `Float[Array, "n"]`, every coalition under its own fresh world.
    - `ratio`: `independent / shared` (> 1: sharing the noise helps).
    - `mean_shared`, `mean_independent`: the two estimates of the mean Shapley values.
    """

    steps: tuple[str, ...] = eqx.field(static=True)
    shared: Float[Array, " n"]
    independent: Float[Array, " n"]
    ratio: Float[Array, " n"]
    mean_shared: Float[Array, " n"]
    mean_independent: Float[Array, " n"]


def noise_sharing_gain(
    pipeline: Callable,
    cases,
    key,
    *,
    case_ids=None,
    num_permutations: int = 64,
    steps: Sequence[str] | None = None,
    fixes: dict | None = None,
    mode=Hard(),
) -> NoiseSharingGain:
    """Measure the variance cut of sharing fresh noise across a permutation.

    **Arguments:**
    - `pipeline`, `cases`: the pipeline and the failures (leading axis F).
    - `key`: root key or int seed; permutation p of failure f uses fresh world p + 1 of
      `fold_in(key, case_ids[f])` when shared, and its own world per prefix when independent.
    - `case_ids`: the case index of each failure (default 0..F-1), for addressing its noise.
    - `num_permutations`: orders per failure (>= 2).
    - `steps`, `fixes`: the players and their fixes.

    **Returns:** a `NoiseSharingGain`.
    """
    if not isinstance(num_permutations, (int, np.integer)) or num_permutations < 2:
        raise ValueError(f"`num_permutations` must be an int >= 2, got {num_permutations!r}")
    key = as_key(key)
    game = bj.Game.make(pipeline, cases, steps=steps, fixes=fixes)
    num = jax.tree_util.tree_leaves(cases)[0].shape[0]
    ids = np.arange(num) if case_ids is None else np.asarray(case_ids)
    structure, players, variants = game.structure, game.players, game.fixes
    n = len(players)
    prefix = np.tril(np.ones((n + 1, n), bool), k=-1)  # row j: the first j positions fixed

    def one_failure(case, case_id):
        def one_order(p):
            order = jr.permutation(
                jr.fold_in(jr.fold_in(key, NOISE_SHARING_TAG), case_id * 100_003 + p), n
            )
            masks = jnp.zeros((n + 1, n), bool).at[:, order].set(jnp.asarray(prefix))
            shared_world = World(key=world_key(key, case_id, p + 1))
            base = 1 + num_permutations + p * (n + 1)
            own = jax.vmap(lambda j: World(key=world_key(key, case_id, base + j)))(
                jnp.arange(n + 1)
            )

            def score(mask, world):
                return run_score(
                    pipeline,
                    structure,
                    case,
                    world,
                    mask_plan(structure, players, variants, mask),
                    mode,
                )

            shared = jax.vmap(score, in_axes=(0, None))(masks, shared_world)
            independent = jax.vmap(score)(masks, own)
            # marginal of the step at position j is v(prefix j+1) - v(prefix j)
            to_step = lambda d: jnp.zeros(n, d.dtype).at[order].set(d)  # noqa: E731
            return to_step(jnp.diff(shared)), to_step(jnp.diff(independent))

        return jax.vmap(one_order)(jnp.arange(num_permutations))

    shared, independent = jax.jit(jax.vmap(one_failure))(cases, jnp.asarray(ids))
    var_shared = np.asarray(shared).var(axis=1, ddof=1).mean(axis=0)
    var_indep = np.asarray(independent).var(axis=1, ddof=1).mean(axis=0)
    return NoiseSharingGain(
        steps=tuple(structure.steps[p] for p in players),
        shared=jnp.asarray(var_shared),
        independent=jnp.asarray(var_indep),
        ratio=jnp.asarray(var_indep / np.maximum(var_shared, 1e-12)),
        mean_shared=jnp.asarray(np.asarray(shared).mean(axis=(0, 1))),
        mean_independent=jnp.asarray(np.asarray(independent).mean(axis=(0, 1))),
    )
