"""Controlled error injection into synthetic SCM pipelines: failures with golden culprits.

**Controlled injection** (the procedure of Who&When Pro, on an SCM): draw runs of the clean
pipeline with their recorded noise and keep the successful ones; in each, step k's factual
variant becomes a *corrupted* implementation (on a good input it outputs the good option only
with probability `leak`) whose fix is the original implementation. The prefix before k
replays exactly (same variant, same noise); k and the steps after it react. A run is kept
when it now fails and no step before k repairs it by its fix alone; its golden label is k,
the earliest step whose fix alone turns the failure into a success (k's fix always does: it
restores the original, successful run).

Here: `InjectedFailures` and `inject_errors`, with the argument check `check_steps` and the
recorded-noise worlds `recorded_worlds_of` (both also used for multi-culprit cases).
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Int

from ..._compile import cached
from ...coalitions import mask_values
from ...noise import as_key, world_key
from ...pipeline import World, discover, factual_plan, run_score
from ...worlds import recorded_worlds
from ._model import (
    SCM,
    SCMCase,
    clean_case,
    count_of,
    injected_case,
    params_of,
    shape_of,
)


# -- controlled injection ---------------------------------------------------------------------
class InjectedFailures(eqx.Module):
    """Failures with a golden culprit, made by controlled injection (`inject_errors`).

    - `scm`: the `SCM`; `pipeline` is `scm.pipeline`.
    - `cases`: `SCMCase` with a leading axis F.
    - `worlds`: a `World` with keys `[F, 1]`: each run's recorded noise
      (`bj.recorded_worlds(noise_key, candidate_ids)`).
    - `culprit`: `Int[Array, "F"]`, the golden label: the injected step, which is the
      earliest step whose fix alone repairs the run.
    - `candidate_ids`: `Int[Array, "F"]`, each run's id among the candidates drawn.
    - `num_candidates`: clean runs drawn; `num_successful`: how many of them succeeded
      (errors are injected only into these); `num_still_successful`: injections after which
      the run still succeeded; `num_repaired_earlier`: injections that failed but an earlier
      step's fix alone repaired; `num_failures` = kept runs.
    """

    scm: SCM
    cases: SCMCase
    worlds: World
    culprit: Int[Array, " F"]
    candidate_ids: Int[Array, " F"]
    num_candidates: int = eqx.field(static=True)
    num_successful: int = eqx.field(static=True)
    num_still_successful: int = eqx.field(static=True)
    num_repaired_earlier: int = eqx.field(static=True)

    @property
    def pipeline(self):
        """The SCM's pipeline function (`scm.pipeline`)."""
        return self.scm.pipeline

    @property
    def num_failures(self) -> int:
        """The number of failures kept, `F`."""
        return int(self.culprit.shape[0])

    @property
    def rejection_rate(self) -> float:
        """The share of injected successful runs that were not kept (still successful, or
        repaired by an earlier step's fix alone)."""
        return (self.num_successful - self.num_failures) / self.num_successful

    @property
    def culprit_agent(self) -> np.ndarray:
        """The agent of each golden culprit."""
        return np.asarray(self.scm.agents)[np.asarray(self.culprit)]

    def summary(self) -> str:
        """One sentence on how the failures were made: how many runs were kept, injected,
        still successful or repaired by an earlier step's fix, and the rejection rate."""
        return (
            f"{self.num_failures} failures kept from {self.num_candidates} clean runs: "
            f"{self.num_successful} succeeded and received an error; "
            f"{self.num_still_successful} still succeeded, {self.num_repaired_earlier} were "
            f"repaired by an earlier step's fix alone (rejection rate {self.rejection_rate:.3f})"
        )


def check_steps(steps, num_steps: int, name: str) -> tuple[int, ...]:
    if steps is None:
        return tuple(range(num_steps))
    if isinstance(steps, (int, np.integer)) and not isinstance(steps, bool):
        steps = (steps,)
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or not steps:
        raise TypeError(
            f"`{name}` must be None, a step index or a non-empty sequence of them, got {steps!r}"
        )
    out = []
    for s in steps:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
            raise TypeError(f"`{name}` must hold step indices (ints), got {s!r}")
        if not 0 <= s < num_steps:
            raise ValueError(
                f"`{name}` holds step index {int(s)}, beyond this pipeline's {num_steps} steps "
                f"(indices 0..{num_steps - 1})"
            )
        out.append(int(s))
    if len(set(out)) != len(out):
        raise ValueError(f"`{name}` lists a step twice: {out}")
    return tuple(out)


def _screen_function(scm: SCM):
    """Compiled: for a batch of candidate ids, the clean score, the injected step, the
    injected run's score with no fix and with each step's fix alone, and the injected cases."""
    shape = shape_of(scm)
    return cached("scm.screen", shape, lambda: _build_screen(scm, shape))


def _build_screen(scm: SCM, shape):
    pipeline = scm.pipeline
    n = scm.num_steps
    structure = discover(pipeline, clean_case(shape, params_of(scm), jr.key(0)))
    players = tuple(range(n))
    fixes = (1,) * n
    masks = jnp.concatenate([jnp.zeros((1, n), bool), jnp.eye(n, dtype=bool)])

    def one(params, key_tables, key_steps, key_noise, allowed, candidate):
        case_key = jr.fold_in(key_tables, candidate)
        world = World(key=world_key(key_noise, candidate, 0))
        step = allowed[
            jr.randint(jr.fold_in(key_steps, candidate), (), 0, allowed.shape[0], jnp.int32)
        ]
        clean = run_score(
            pipeline, structure, clean_case(shape, params, case_key), world, factual_plan(structure)
        )
        injected = injected_case(shape, params, case_key, step)
        scores = mask_values(pipeline, structure, injected, world, players, fixes, masks)
        return clean, step, scores, injected

    return jax.jit(jax.vmap(one, in_axes=(None, None, None, None, None, 0)))


def recorded_worlds_of(key_noise, ids) -> World:
    """The recorded worlds of candidates `ids` (`bj.recorded_worlds`: keys and case ids)."""
    return recorded_worlds(key_noise, np.asarray(ids))


def inject_errors(
    key,
    scm: SCM,
    num_failures: int,
    *,
    steps=None,
    batch_size: int = 1024,
    max_candidates: int | None = None,
) -> InjectedFailures:
    """Failures with golden culprits, by controlled injection into successful runs.

    Candidate run c (c = 0, 1, 2, ...) has its own tables and recorded noise (world 0 of
    candidate c under the noise key) and an injection step k drawn uniformly from `steps`.
    It is kept when the clean run succeeds, the run with step k corrupted fails, and no step
    before k repairs it by its fix alone (step k's fix always does: it restores the clean
    run). Candidates are screened in batches of `batch_size` until `num_failures` are kept;
    the kept runs are the first ones in candidate order, so a seed gives the same failures.

    **Arguments:**
    - `key`: an int seed or a typed key (split into table, step and noise keys).
    - `scm`: the pipeline (`make_scm`).
    - `num_failures`: how many failures to keep, >= 1.
    - `steps`: the steps an error may be injected at (indices), default every step.
    - `batch_size`: candidates screened per compiled call.
    - `max_candidates`: give up after this many candidates (default `max(100_000,
      200 * num_failures)`).

    **Returns:** an `InjectedFailures` (with the counts behind its rejection rate).

    **Raises:** `ValueError` naming the argument for a step index beyond n, a non-positive
    count; `ValueError` when no candidate run succeeded (nothing to inject into) or too few
    injections were kept within `max_candidates`.

    ```python
    # doctest: slow (compiles the injection screen, about 10 s)
    from blamejax.benchmarks import scm
    model = scm.make_scm(0, num_steps=6)
    failures = scm.inject_errors(1, model, 50)
    print(failures.summary())
    ```
    """
    if not isinstance(scm, SCM):
        raise TypeError(
            f"`scm` must be a blamejax.scm.SCM (see make_scm), got {type(scm).__name__}"
        )
    num_failures = count_of(num_failures, "num_failures", 1)
    batch_size = count_of(batch_size, "batch_size", 1)
    allowed = check_steps(steps, scm.num_steps, "steps")
    if max_candidates is None:
        max_candidates = max(100_000, 200 * num_failures)
    max_candidates = count_of(max_candidates, "max_candidates", 1)
    key_tables, key_steps, key_noise = jr.split(as_key(key), 3)
    screen = _screen_function(scm)
    n = scm.num_steps
    kept_ids, kept_steps, kept_cases = [], [], []
    num_candidates = num_successful = still = earlier = 0
    start = 0
    while start < max_candidates and len(kept_ids) < num_failures:
        ids = np.arange(start, start + batch_size, dtype=np.int32)
        clean, step, scores, cases = screen(
            params_of(scm), key_tables, key_steps, key_noise, jnp.asarray(allowed, jnp.int32), ids
        )
        clean, step, scores = np.asarray(clean), np.asarray(step), np.asarray(scores)
        success = clean >= 0.5
        fails = scores[:, 0] < 0.5
        repairs = scores[:, 1:] >= 0.5  # [B, n]: step j's fix alone repairs
        if np.any(success & fails & ~repairs[np.arange(len(ids)), step]):
            raise RuntimeError(
                "internal error: the injected step's fix did not restore the clean run"
            )
        earliest = np.where(repairs.any(axis=1), repairs.argmax(axis=1), n)
        keep = success & fails & (earliest == step)
        need = num_failures - len(kept_ids)
        cut = len(ids)
        if keep.sum() >= need:
            cut = int(np.flatnonzero(keep)[need - 1]) + 1
        cut = min(cut, max_candidates - start)
        sl = slice(0, cut)
        num_candidates += cut
        num_successful += int(success[sl].sum())
        still += int((success & ~fails)[sl].sum())
        earlier += int((success & fails & (earliest < step))[sl].sum())
        chosen = np.flatnonzero(keep[sl])
        kept_ids.extend(ids[chosen].tolist())
        kept_steps.extend(step[chosen].tolist())
        kept_cases.append(jax.tree_util.tree_map(lambda x: np.asarray(x)[chosen], cases))
        start += batch_size
    if num_successful == 0:
        raise ValueError(
            f"none of the {num_candidates} clean runs succeeded, so there are zero successful "
            "runs to inject an error into; lower `noise`, raise `recovery`, use fewer steps, "
            "or raise `max_candidates`"
        )
    if len(kept_ids) < num_failures:
        raise ValueError(
            f"only {len(kept_ids)} of the {num_failures} failures requested were kept from "
            f"{num_candidates} clean runs ({num_successful} successful; {still} still succeeded "
            f"after the injection, {earlier} were repaired earlier); raise `max_candidates` or "
            "lower `leak` and `recovery`"
        )
    ids = np.asarray(kept_ids, np.int32)
    culprit = np.asarray(kept_steps, np.int32)
    cases = jax.tree_util.tree_map(lambda *xs: jnp.asarray(np.concatenate(xs)), *kept_cases)
    return InjectedFailures(
        scm=scm,
        cases=cases,
        worlds=recorded_worlds_of(key_noise, ids),
        culprit=jnp.asarray(culprit),
        candidate_ids=jnp.asarray(ids),
        num_candidates=num_candidates,
        num_successful=num_successful,
        num_still_successful=still,
        num_repaired_earlier=earlier,
    )
