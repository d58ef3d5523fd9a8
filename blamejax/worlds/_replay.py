"""Replaying cases: the score and every draw of each case under each world and one plan."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from .._checks import check_mode, check_plan
from .._compile import compiled
from .._game import discover_checked
from ..pipeline import Hard, Plan, World, trace_arrays


def replay(pipeline: Callable, cases, worlds: World, plan: Plan | None = None, mode=Hard()) -> dict:
    """Run every case under every world with one plan (default: the factual run).

    **Arguments:**
    - `pipeline`: `pipeline(ctx, case) -> score`.
    - `cases`: a pytree with a leading case axis F.
    - `worlds`: a `World` with keys `[F, W]`.
    - `plan`: a `Plan` shared by all runs (default `factual_plan`).
    - `mode`: `Hard()` or `Relaxed(tau)`.

    **Returns:** a dict of arrays with leading axes `[F, W]`: `"score"`, `"choice"` (per
    draw site), `"variant"`, `"logits"` and `"noise"` (tuples, one `[F, W, K]` per site),
    and `"values"` (the deterministic sites).

    ```python
    import blamejax as bj
    cases = bj.demos.refund_cases(8)
    out = bj.replay(bj.demos.refund_pipeline, cases, bj.recorded_worlds(0, range(8)))
    failed = out["score"][:, 0] < 1
    ```

    **Raises:** `TypeError`/`ValueError` naming the argument (`blamejax._checks`): malformed
    `cases` or `worlds`, NaN logits, a `mode` or `plan` of the wrong kind, a plan of another
    pipeline; `ValueError` for a draw with no valid option.
    """
    structure, _, _ = discover_checked(pipeline, cases, worlds)
    mode = check_mode(mode)
    plan = check_plan(plan, structure)
    out = _replay_function(pipeline, structure, mode, _plan_features(plan))(cases, worlds, plan)
    sizes = [site.num_options for site in structure.sites]
    for name in ("logits", "noise"):
        if not isinstance(out[name], tuple):
            out[name] = _split_sites(out[name], sizes)
    invalid = np.asarray(out["invalid"]).any(axis=-1)  # [F, W]: some draw had no valid option
    if invalid.any():
        f, w = (int(i) for i in np.argwhere(invalid)[0])
        site = structure.sites[int(np.flatnonzero(np.asarray(out["invalid"])[f, w])[0])]
        raise ValueError(
            f"the pipeline returned a NaN score: case {f}, world {w}: step {site.step!r} drew from "
            "logits with no valid option (every logit -inf, or NaN/+inf), or was forced to an "
            "option outside [0, K); every draw needs at least one finite logit"
        )
    return out


def _uses(leaves, pred) -> bool:
    """Whether a plan feature is in use: some leaf is traced, or satisfies `pred`."""
    for leaf in leaves:
        if isinstance(leaf, jax.core.Tracer) or np.any(pred(np.asarray(leaf))):
            return True
    return False


def _plan_features(plan: Plan) -> tuple[bool, bool]:
    """(fresh noise used, forcing used): a plan that uses neither compiles without them."""
    fresh = _uses([s.noise for s in plan.steps], lambda x: x >= 0)
    forced = (
        _uses([s.forced for s in plan.steps], lambda x: x >= 0) or plan.forced_sites is not None
    )
    return fresh, forced


@compiled("replay")
def _replay_function(pipeline, structure, mode, features=(True, True)):
    """One compiled replay per (pipeline, structure, mode, plan features); the plan is an
    argument. Features a plan does not use (fresh noise streams, forced options) are left
    out of the compiled code, which roughly halves its compile time."""
    fresh, forced = features
    none = np.int32(-1)

    def one(case, world, plan):
        steps = tuple(
            s._replace(noise=s.noise if fresh else none, forced=s.forced if forced else none)
            for s in plan.steps
        )
        plan = plan._replace(steps=steps)
        return trace_arrays(pipeline, structure, case, world, plan, mode)

    return jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0, None)), in_axes=(0, 0, None)))


@jax.jit
def _site_rows(stacked, site):
    """Site `site`'s rows of a `[F, W, sites, K]` array: one compiled call for every site."""
    return jax.lax.dynamic_index_in_dim(stacked, site, axis=2, keepdims=False)


def _split_sites(stacked, sizes) -> tuple:
    """A `[F, W, sites, K_max]` array as one `[F, W, K]` array per site (`sizes`: each
    site's K). Split here, outside the replay's compiled program: one output per site
    made that program take minutes to compile at a thousand sites."""
    width = stacked.shape[-1]
    rows = [_site_rows(stacked, np.int32(i)) for i in range(len(sizes))]
    return tuple(row if k == width else row[..., :k] for row, k in zip(rows, sizes))
