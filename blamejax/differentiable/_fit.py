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

from .._arguments import check_positive_int
from .._checks import check_mode, check_score_range, resolve_players
from ..coalitions import coalition_values
from ..pipeline import Hard, Relaxed, World, check_finite_logits, discover
from ..reduction import Attribution, attribute
from ..worlds import ExpectedWorlds
from ._expected import expected_attribution


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
    worlds: World | ExpectedWorlds,
    *,
    steps: Sequence[str] | None = None,
    fixes: dict | None = None,
    mode=None,
    interactions: bool = False,
    score_range: tuple[float, float] = (0.0, 1.0),
    max_steps: int = 20,
) -> Attribution:
    """Attributions of one case as a pure function: exact in expectation over the noise
    with `expected_worlds`; with sampled `World`s, in `Relaxed(0.5)` mode unless `mode` says
    otherwise (a relaxed game, not the hard one).

    With one case's row of `bj.expected_worlds(...)` (a tabulated pipeline: the structured
    path), the values are the hard game's, averaged over every world exactly (fresh noise,
    or the posterior given `observed`), and their gradients with respect to the logits are
    exact: no temperature, no bias. With a `World` (sampled worlds), coalitions are
    enumerated (n at most 20) and only a relaxed mode is differentiable: a single world's
    hard argmax has zero gradient almost everywhere. `vmap` it over failures (see
    `batch_mean_shapley`).

    **Arguments:**
    - `pipeline`: `pipeline(ctx, case) -> score`.
    - `case`: one case (no failure axis).
    - `worlds`: a `World` with a leading world axis `[W]` on every leaf (e.g. one row of
      `fresh_worlds(...)`: `jax.tree_util.tree_map(lambda x: x[f], worlds)`).
    - `steps`, `fixes`: the players and their fix variants (see `exact_blame`).
    - `mode`: for a `World`: `Relaxed(tau)` (default `Relaxed(0.5)`),
      `Relaxed(tau, straight_through=True)` or `Hard()` (values only). For
      `ExpectedWorlds`: `None` or `Hard()`.
    - `interactions`: also the pairwise interaction index.
    - `score_range`: the declared range of the score (see `exact_blame`); checked where the
      case is concrete (called eagerly), as are NaN logits.
    - `max_steps`: the largest n enumeration (sampled worlds) is allowed, as in `exact_blame`.

    **Raises:** `ValueError` for more than 20 players with sampled worlds (2^n coalitions,
    the same bound and message as `exact_blame`), NaN logits, scores outside `score_range`
    (eager calls), and `expected_worlds` on a pipeline the structured path does not cover.

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
    if isinstance(worlds, ExpectedWorlds):
        return _expected(pipeline, case, worlds, mode, steps, fixes, interactions, score_range)
    mode = Relaxed(0.5) if mode is None else mode
    check_finite_logits(case, "case")  # where `case` is concrete (not traced), before it runs
    structure, players, variants = _structure_and_players(
        pipeline, case, steps, fixes, mode, worlds
    )
    check_enumerable(len(players), max_steps)
    check_score_range(score_range)
    values = jax.vmap(
        lambda w: coalition_values(pipeline, structure, case, w, players, variants, mode)
    )(worlds)
    _check_values(case, values.min(), values.max(), score_range)
    return attribute(values.mean(axis=0), interactions=interactions)


def total_repair(
    pipeline: Callable,
    case,
    worlds: World | ExpectedWorlds,
    *,
    steps=None,
    fixes=None,
    mode=None,
    score_range: tuple[float, float] = (0.0, 1.0),
) -> Float[Array, ""]:
    """`v(all) - v(empty)` of one case: exact in expectation over the noise with
    `expected_worlds` (exact gradients); with sampled `World`s averaged over them, in
    `Relaxed(0.5)` mode unless `mode` says otherwise. Only the two runs are evaluated, not
    the whole coalition table."""
    if isinstance(worlds, ExpectedWorlds):
        result = _expected(pipeline, case, worlds, mode, steps, fixes, False, score_range)
        return result.full - result.empty
    mode = Relaxed(0.5) if mode is None else mode
    check_finite_logits(case, "case")  # where `case` is concrete (not traced), before it runs
    structure, players, variants = _structure_and_players(
        pipeline, case, steps, fixes, mode, worlds
    )
    from ..coalitions import mask_values

    masks = np.array([[False] * len(players), [True] * len(players)])
    values = jax.vmap(
        lambda w: mask_values(pipeline, structure, case, w, players, variants, masks, mode)
    )(worlds)
    _check_values(case, values.min(), values.max(), score_range)
    mean = values.mean(axis=0)
    return mean[1] - mean[0]


def batch_mean_shapley(
    pipeline: Callable, cases, worlds: World, *, steps=None, fixes=None, mode=Relaxed(0.5)
) -> Float[Array, " n"]:
    """Mean relaxed Shapley value over failures (`cases` with a leading failure axis,
    `worlds` with keys `[F, W]`), a pure and differentiable function (`Relaxed(0.5)` by
    default)."""
    first = jax.tree_util.tree_map(lambda x: x[0], cases)
    num_failures = jax.tree_util.tree_leaves(cases)[0].shape[0]
    _structure_and_players(
        pipeline, first, steps, fixes, mode, worlds, num_failures
    )  # eager checks
    per_failure = jax.vmap(
        lambda c, w: shapley_values(pipeline, c, w, steps=steps, fixes=fixes, mode=mode).shapley
    )
    return per_failure(cases, worlds).mean(axis=0)


def check_enumerable(n: int, max_steps: int) -> None:
    """Refuse 2^n coalitions above `max_steps`, with `exact_blame`'s message, before
    anything is traced."""
    max_steps = check_positive_int(max_steps, "max_steps")
    if n > max_steps:
        raise ValueError(
            f"exact Shapley over n = {n} steps needs 2^{n} coalitions per failure and world, "
            f"above `max_steps` = {max_steps}; with sampled worlds the differentiable functions "
            "enumerate coalitions (bj.expected_worlds takes a tabulated pipeline's structured "
            "path at any n). Use Monte Carlo sampling (blamejax.mc_shapley) or raise "
            "`max_steps` deliberately"
        )


def _expected(pipeline, case, worlds, mode, steps, fixes, interactions, score_range):
    """The attribution under `expected_worlds`, with the eager checks: the lower and higher of
    v(empty) and v(all) against `score_range` (a fix may lower the score)."""
    _check_expected_mode(mode)
    result = expected_attribution(
        pipeline,
        case,
        worlds,
        steps=steps,
        fixes=fixes,
        interactions=interactions,
        score_range=score_range,
    )
    low = jnp.minimum(result.empty, result.full)
    high = jnp.maximum(result.empty, result.full)
    _check_values(case, low, high, score_range, expected=True)
    return result


def _check_expected_mode(mode) -> None:
    if mode is not None and not isinstance(mode, Hard):
        raise ValueError(
            f"`expected_worlds` integrates hard (Gumbel-max) draws exactly, got mode={mode!r}: "
            "leave `mode` out (relaxed modes are for sampled worlds)"
        )


def _check_values(case, low, high, score_range, expected=False) -> None:
    """The eager checks of the other entry points, where `case` is concrete: NaN (or +inf)
    logits, a score outside `score_range`, a NaN score. Under `jit`/`grad` they are
    skipped (the values are tracers)."""
    leaves = jax.tree_util.tree_leaves(case)
    if any(isinstance(x, jax.core.Tracer) for x in leaves + [low, high]):
        return
    check_finite_logits(case, "case")
    low_decl, high_decl = check_score_range(score_range)
    low, high = float(low), float(high)
    if np.isnan(low) or np.isnan(high):
        raise ValueError(
            "a coalition's score is NaN"
            + (" (or a draw from a row with no valid option is reached)" if expected else "")
            + ": the score must be a number in `score_range`"
        )
    if low < low_decl or high > high_decl:
        raise ValueError(
            f"scores must lie in `score_range` = {score_range}, got scores in [{low}, {high}]"
        )


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
    num_steps = check_positive_int(num_steps, "num_steps")
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
