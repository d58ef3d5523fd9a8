"""Differentiable blame: Shapley values, total repair and batch means as pure functions of
the logits, for `jax.grad`/`jax.jacrev` in relaxed mode, and fitting fixes with optax.

Gradients flow through the relaxed (Gumbel-softmax) choices `softmax((l + g) / tau)` with
the same addressed noise as the exact evaluation. In hard mode a gradient with respect to
logits raises (argmax has zero gradient almost everywhere). Abducted noise (inferred worlds)
is data: it enters through `stop_gradient`, so gradients never flow into the posterior.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, PyTree

from .._checks import check_mode, resolve_players
from ..coalitions import coalition_values
from ..pipeline import Relaxed, World, discover
from ..reduction import Attribution, attribute


def _structure_and_players(pipeline, case, steps, fixes, mode=None, worlds=None, num_failures=None):
    """The eager checks the differentiable functions share; `worlds` must have keys with
    `[W]` (one case) or, given `num_failures`, `[F, W]` keys."""
    if mode is not None:
        check_mode(mode)
    if worlds is not None:
        if not isinstance(worlds, World):
            raise TypeError(
                f"`worlds` must be a blamejax.World (e.g. one case's row of bj.fresh_worlds), got {type(worlds).__name__}"
            )
        if isinstance(worlds.key, jax.core.Tracer):
            pass  # checked by the caller's own shapes
        elif worlds.key.ndim != (1 if num_failures is None else 2) or (
            num_failures is not None and worlds.key.shape[0] != num_failures
        ):
            want = (
                "[W] (one case's worlds)"
                if num_failures is None
                else f"[F, W] = [{num_failures}, W]"
            )
            raise ValueError(f"`worlds.key` must have shape {want}, got {tuple(worlds.key.shape)}")
    structure = discover(pipeline, case)
    players, variants = resolve_players(structure, steps, fixes)
    return structure, players, variants


def shapley_values(
    pipeline: Callable,
    case,
    worlds: World,
    *,
    steps: Sequence[str] | None = None,
    fixes: dict | None = None,
    mode=Relaxed(0.5),
    interactions: bool = False,
) -> Attribution:
    """Exact attributions of one case, averaged over its worlds, as a pure function.

    Differentiable with respect to every floating leaf of `case` in `Relaxed` mode; `vmap` it
    over failures (see `batch_mean_shapley`).

    **Arguments:**
    - `pipeline`: `pipeline(ctx, case) -> score`.
    - `case`: one case (no failure axis).
    - `worlds`: a `World` with a leading world axis `[W]` on every leaf (e.g. one row of
      `fresh_worlds(...)`: `jax.tree_util.tree_map(lambda x: x[f], worlds)`).
    - `steps`, `fixes`: the players and their fix variants (see `exact_blame`).
    - `mode`: `Relaxed(tau)`, `Relaxed(tau, straight_through=True)` or `Hard()` (values only).
    - `interactions`: also the pairwise interaction index.

    **Returns:** an `Attribution` (`shapley`, `banzhaf`, `fix_alone`, `leave_one_out`,
    `interactions`, `empty`, `full`), each over the players in order.

    ```python
    import jax, blamejax as bj
    cases = bj.demos.refund_cases(1)
    case = jax.tree_util.tree_map(lambda x: x[0], cases)
    worlds = jax.tree_util.tree_map(lambda x: x[0], bj.fresh_worlds(0, range(1), 4))
    grad = jax.jit(jax.grad(lambda c: bj.shapley_values(bj.demos.refund_pipeline, c, worlds).shapley[0]))(case)
    ```
    """
    structure, players, variants = _structure_and_players(
        pipeline, case, steps, fixes, mode, worlds
    )
    values = jax.vmap(
        lambda w: coalition_values(pipeline, structure, case, w, players, variants, mode)
    )(worlds)
    return attribute(values.mean(axis=0), interactions=interactions)


def total_repair(
    pipeline: Callable, case, worlds: World, *, steps=None, fixes=None, mode=Relaxed(0.5)
) -> Float[Array, ""]:
    """`v(all) - v(empty)` of one case averaged over its worlds (differentiable in relaxed
    mode). Only the two runs are evaluated, not the whole coalition table."""
    structure, players, variants = _structure_and_players(
        pipeline, case, steps, fixes, mode, worlds
    )
    from ..coalitions import mask_values

    masks = np.array([[False] * len(players), [True] * len(players)])
    values = jax.vmap(
        lambda w: mask_values(pipeline, structure, case, w, players, variants, masks, mode)
    )(worlds)
    mean = values.mean(axis=0)
    return mean[1] - mean[0]


def batch_mean_shapley(
    pipeline: Callable, cases, worlds: World, *, steps=None, fixes=None, mode=Relaxed(0.5)
) -> Float[Array, " n"]:
    """Mean Shapley value over failures (`cases` with a leading failure axis, `worlds` with
    keys `[F, W]`), a pure and differentiable function."""
    first = jax.tree_util.tree_map(lambda x: x[0], cases)
    num_failures = jax.tree_util.tree_leaves(cases)[0].shape[0]
    _structure_and_players(
        pipeline, first, steps, fixes, mode, worlds, num_failures
    )  # eager checks
    per_failure = jax.vmap(
        lambda c, w: shapley_values(pipeline, c, w, steps=steps, fixes=fixes, mode=mode).shapley
    )
    return per_failure(cases, worlds).mean(axis=0)


class FitResult(eqx.Module):
    """The outcome of `fit_fixes`.

    - `params`: the fitted parameters (same structure as the initial ones).
    - `losses`: `Float[Array, "num_steps"]`, the objective before each update.
    """

    params: PyTree
    losses: Float[Array, " num_steps"]


def fit_fixes(
    objective: Callable[[PyTree], Float[Array, ""]],
    params: PyTree,
    optimizer: optax.GradientTransformation | None = None,
    num_steps: int = 200,
    *,
    project: Callable[[PyTree], PyTree] | None = None,
) -> FitResult:
    """Minimise `objective(params)` with an optax optimiser (the whole loop is one compiled
    `lax.scan`).

    Typical use: `params` are the logits of one or more fixes (or shifts added to the
    factual logits), and `objective` evaluates blame in `Relaxed` mode — e.g. minus the
    fraction of failures the fix repairs plus a penalty on how far the fix moves, or a chosen
    step's Shapley value to make it vanish. `project` (e.g. a projection onto an l2 ball with
    `optax.projections.projection_l2_ball`) is applied after every update, for constraints.

    **Arguments:**
    - `objective`: a scalar function of `params`, differentiable (use relaxed mode).
    - `params`: the initial parameters, a pytree of float arrays.
    - `optimizer`: an optax `GradientTransformation` (default `optax.adam(0.05)`); compose
      schedules and clipping with `optax.chain` as usual.
    - `num_steps`: the number of updates.
    - `project`: an optional function applied to the parameters after each update.

    **Returns:** a `FitResult` with the fitted `params` and the loss curve.

    **Raises:** `ValueError` if `num_steps < 1`; the objective's own errors (e.g. a hard-mode
    gradient) surface at the first step.

    ```python
    import jax.numpy as jnp, optax, blamejax as bj
    fit = bj.fit_fixes(lambda p: jnp.sum((p - 3.0) ** 2), jnp.zeros(2), optax.adam(0.1), 300)
    ```
    """
    if not isinstance(num_steps, (int, np.integer)) or num_steps < 1:
        raise ValueError(f"`num_steps` must be a positive int, got {num_steps!r}")
    if optimizer is None:
        optimizer = optax.adam(0.05)
    if not (hasattr(optimizer, "init") and hasattr(optimizer, "update")):
        raise TypeError(
            f"`optimizer` must be an optax GradientTransformation (e.g. optax.adam(0.05)), got {optimizer!r}"
        )
    params = jax.tree_util.tree_map(jnp.asarray, params)
    for leaf in jax.tree_util.tree_leaves(params):
        if not jnp.issubdtype(leaf.dtype, jnp.floating):
            raise TypeError(
                f"`params` must hold floating-point arrays, got a leaf of dtype {leaf.dtype}"
            )
    out = jax.eval_shape(objective, params)
    if not hasattr(out, "shape") or tuple(out.shape) != ():
        raise TypeError(
            f"`objective` must return a scalar (the loss), got {getattr(out, 'shape', type(out).__name__)}"
        )
    value_and_grad = jax.value_and_grad(objective)

    def step(carry, _):
        p, state = carry
        loss, grads = value_and_grad(p)
        updates, state = optimizer.update(grads, state, p)
        p = optax.apply_updates(p, updates)
        if project is not None:
            p = project(p)
        return (p, state), loss

    @jax.jit
    def run(p):
        (p, _), losses = jax.lax.scan(step, (p, optimizer.init(p)), None, length=int(num_steps))
        return p, losses

    # optax's own arithmetic relies on standard dtype promotion; a user's strict setting
    # must not break it.
    with jax.numpy_dtype_promotion("standard"):
        fitted, losses = run(params)
    return FitResult(params=fitted, losses=losses)
