"""CAR's re-draw game: Shapley values when a step's "fix" is a re-draw from its unchanged
policy with fresh noise, every other step keeping the run's noise.

blamejax's own game (`exact_blame`) fixes a step with its better variant under the same noise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._arguments import check_positive_int, check_threshold
from .._compile import compiled
from ..pipeline import Hard, Plan, StepPlan, plan_values
from ..reduction import attribute
from ..report import number, step_rows
from ._contrastive import rollout_inputs


class ResampleShapley(eqx.Module):
    """Shapley values of CAR's game, where a step's "fix" is a re-draw with fresh noise:
    `v(S) = P(good | the steps in S re-drawn, factual noise elsewhere)`.

    - `steps`: the players (static).
    - `values`: `Float[Array, "F 2**n"]`, `v(S)` (bit i of the index set = player i re-drawn).
    - `shapley`, `stderr`: `Float[Array, "F n"]`, the Shapley values and their Monte Carlo
      standard errors (each rollout's game is an i.i.d. unit; its Shapley values are exact).
    - `num_runs`: worlds x rollouts per coalition.
    """

    steps: tuple[str, ...] = eqx.field(static=True)
    values: Float[Array, "F coalitions"]
    shapley: Float[Array, "F n"]
    stderr: Float[Array, "F n"]
    num_runs: int = eqx.field(static=True)

    @property
    def empty(self) -> Float[Array, " F"]:
        """`v(∅)`: no step re-drawn, the factual outcome."""
        return self.values[:, 0]

    @property
    def full(self) -> Float[Array, " F"]:
        """`v(all)`: every player re-drawn."""
        return self.values[:, -1]

    @property
    def total(self) -> Float[Array, " F"]:
        """`v(all) - v(∅)`: the Shapley values add up to it exactly."""
        return self.full - self.empty

    @property
    def fix_alone(self) -> Float[Array, "F n"]:
        """`v({i}) - v(∅)`: re-drawing one step alone."""
        bits = np.array([1 << i for i in range(len(self.steps))])
        return self.values[:, bits] - self.values[:, :1]

    def table(self, failure: int = 0, digits: int = 3) -> str:
        """A plain-text table of one failure: Shapley values, their standard errors and the
        effect of re-drawing each step alone, then `v(∅)`, `v(all)` and their difference.

        **Raises:** `ValueError` when `failure` is not an int in `[0, F)`.
        """
        num = int(self.values.shape[0])
        if not isinstance(failure, int) or not 0 <= failure < num:
            raise ValueError(f"`failure` must be an int in [0, {num}), got {failure!r}")
        lines = step_rows(
            self.steps,
            [
                ("shapley", 8, number(self.shapley[failure], digits)),
                ("± s.e.", 7, number(self.stderr[failure], digits)),
                ("re-draw alone", 13, number(self.fix_alone[failure], digits)),
            ],
        )
        lines.append(
            f"v(∅) = {float(self.empty[failure]):.{digits}f}, v(all) = {float(self.full[failure]):.{digits}f}, "
            f"sum of Shapley = {float(self.total[failure]):.{digits}f} ({self.num_runs} runs per coalition)"
        )
        return "\n".join(lines)


@compiled("resample.game")
def _resample_game_function(pipeline, structure, players, num_rollouts, threshold, mode):
    size = 1 << len(players)
    masks = np.repeat(np.arange(size), num_rollouts)
    streams = np.tile(np.arange(num_rollouts, dtype=np.int32), size)
    none = np.full(size * num_rollouts, -1, np.int32)
    steps = [StepPlan(np.zeros_like(none), none, none) for _ in structure.steps]
    for j, p in enumerate(players):
        redrawn = ((masks >> j) & 1).astype(bool)
        steps[p] = StepPlan(np.zeros_like(none), np.where(redrawn, streams, none), none)
    plans = Plan(tuple(steps), tuple(None for _ in structure.values))

    def per_world(case, world):
        scores = plan_values(pipeline, structure, case, world, plans, mode)
        good = (scores >= threshold).astype(jnp.result_type(float)).reshape(size, num_rollouts)
        shapley = jax.vmap(lambda v: attribute(v, interactions=False).shapley, in_axes=1)(good)
        return good.mean(axis=1), shapley, jnp.sum(~jnp.isfinite(scores))

    return jax.jit(jax.vmap(per_world, in_axes=(None, 0)))


def resample_shapley(
    pipeline: Callable,
    cases,
    worlds,
    *,
    num_rollouts: int = 1000,
    steps: Sequence | None = None,
    threshold: float = 0.5,
    mode=Hard(),
    max_steps: int = 12,
) -> ResampleShapley:
    """Shapley values of CAR's game, in which "fixing" a step means re-drawing it from its
    unchanged policy with fresh noise, every other step keeping the run's noise:
    `v(S) = P(good | the steps in S re-drawn, factual noise elsewhere)`, averaged over the
    fresh draws (`num_rollouts` per world). For a failed run `v(∅) = 0`, and the values add
    up to `v(all) = P(good | every step re-drawn)`. blamejax's own game (`exact_blame`) asks
    a different question: the step's *better variant* under the *same* noise.

    Each rollout r re-draws the steps of every coalition with the same fresh stream r
    (common random numbers across coalitions); its game's Shapley values are exact, and the
    reported value is their mean with a standard error over the W x R rollouts.

    **Arguments:** as `contrastive`; `max_steps` bounds n (2^n x R runs per world).

    **Returns:** a `ResampleShapley`.

    ```python
    import blamejax as bj
    cases = bj.demos.interaction_cases(1)
    worlds = bj.recorded_worlds(0, range(1))
    game = bj.interventions.resample_shapley(bj.demos.interaction_pipeline, cases, worlds, num_rollouts=400)
    ```
    """
    structure, num_failures, num_worlds, players, num_rollouts = rollout_inputs(
        pipeline, cases, worlds, steps, num_rollouts
    )
    max_steps = check_positive_int(max_steps, "max_steps")
    if len(players) > max_steps:
        raise ValueError(
            f"the re-draw game over n = {len(players)} steps runs 2^{len(players)} x num_rollouts "
            f"plans per world, above `max_steps` = {max_steps}; pass fewer `steps` or raise it"
        )
    threshold = check_threshold(threshold)
    if not isinstance(mode, Hard):
        raise ValueError("the re-draw game counts good runs, which needs `mode=Hard()`")
    function = _resample_game_function(pipeline, structure, players, num_rollouts, threshold, mode)
    values, means, errors = [], [], []
    for f in range(num_failures):  # one compiled call per run bounds memory by W x R x 2^n
        case = jax.tree_util.tree_map(lambda x: x[f], cases)
        world = jax.tree_util.tree_map(lambda x: x[f], worlds)
        v, phi, nonfinite = (np.asarray(x) for x in function(case, world))
        if nonfinite.any():
            raise ValueError(f"the pipeline returned non-finite scores for run {f}")
        phi = phi.reshape(-1, len(players)).astype(np.float64)
        values.append(v.mean(axis=0))
        means.append(phi.mean(axis=0))
        units = phi.shape[0]
        errors.append(
            phi.std(axis=0, ddof=1) / np.sqrt(units) if units > 1 else np.full(len(players), np.nan)
        )
    return ResampleShapley(
        steps=tuple(structure.steps[p] for p in players),
        values=jnp.asarray(np.stack(values), jnp.float32),
        shapley=jnp.asarray(np.stack(means), jnp.float32),
        stderr=jnp.asarray(np.stack(errors), jnp.float32),
        num_runs=num_worlds * num_rollouts,
    )
