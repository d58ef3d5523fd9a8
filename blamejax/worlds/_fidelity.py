"""Replay fidelity: how faithfully a replay from a run's noise reproduces its recorded
choices (the action-match rate of Causal Agent Replay).

Check it before reading counterfactuals from a replay.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._checks import check_observed
from .._compile import compiled
from .._game import discover_checked
from ..pipeline import trace_run


class ReplayFidelity(eqx.Module):
    """How faithfully a replay reproduces a record of choices.

    - `sites`: the draw sites (static), as "step" or "step[slot]".
    - `per_run`: `Float[Array, "F W"]`, the share of draw sites whose replayed choice
      equals the recorded one (the action-match rate), per run and world.
    - `per_site`: `Float[Array, "sites"]`, the match rate of each site over all runs.
    """

    sites: tuple[str, ...] = eqx.field(static=True)
    per_run: Float[Array, "F W"]
    per_site: Float[Array, " sites"]

    @property
    def rate(self) -> float:
        """The overall action-match rate (1.0 = every choice reproduced)."""
        return float(jnp.mean(self.per_run))


def replay_fidelity(pipeline: Callable, cases, worlds, observed) -> ReplayFidelity:
    """Replay each run from its noise and compare the choices with the record.

    With the run's addressed noise (`recorded_worlds`, where blamejax did the sampling) or
    noise abducted from the record (`inferred_worlds`), the match rate is exactly 1.0; any
    lower rate means the replay does not reproduce the run, and no counterfactual read from
    it can be trusted.

    **Arguments:**
    - `pipeline`, `cases` (`[F, ...]`), `worlds` (`[F, W]`).
    - `observed`: `Int[Array, "F sites"]`, the recorded choice of every draw site.

    **Returns:** a `ReplayFidelity`.

    **Raises:** `TypeError`/`ValueError` naming the argument: malformed `cases` or `worlds`,
    NaN logits, `observed` of the wrong shape or dtype, or an option outside a site's range.

    ```python
    import blamejax as bj
    pipeline, cases = bj.demos.refund_pipeline, bj.demos.refund_cases(8)
    record = bj.replay(pipeline, cases, bj.recorded_worlds(0, range(8)))["choice"][:, 0]
    assert bj.worlds.replay_fidelity(pipeline, cases, bj.recorded_worlds(0, range(8)), record).rate == 1.0
    ```
    """
    structure, num_cases, _ = discover_checked(pipeline, cases, worlds)
    observed = jnp.asarray(check_observed(observed, num_cases, structure))
    choice = _choices_function(pipeline, structure)(cases, worlds)  # [F, W, sites]
    match = (choice == observed[:, None, :].astype(choice.dtype)).astype(jnp.float32)
    multi = {s.step for s in structure.sites if s.slot > 0}
    names = tuple(f"{s.step}[{s.slot}]" if s.step in multi else s.step for s in structure.sites)
    return ReplayFidelity(sites=names, per_run=match.mean(-1), per_site=match.mean((0, 1)))


@compiled("fidelity.choices")
def _choices_function(pipeline, structure):
    """The factual choices of every case under every world, compiled once per pipeline."""
    one = lambda case, world: trace_run(pipeline, structure, case, world)["choice"]  # noqa: E731
    return jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0))))
