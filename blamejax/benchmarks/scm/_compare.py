"""Attribution methods side by side on failures whose culprit is known.

`compare_methods` runs every method on the same failures (the same cases, the same recorded
noise) and returns, per method, the step it names, its credits where it gives any, and what
it cost. Each family of methods is one helper below, called in a fixed order, because the
methods that break ties at random share one stream of tie-breaking numbers. The metrics that
score the answers are in `_metrics.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax.numpy as jnp
import jax.random as jr
import numpy as np

from ...coalitions import mask_plan
from ...estimators import exact_blame, mc_shapley
from ...interventions import contrastive
from ...noise import as_key
from ...pipeline import Structure, World, discover_batch
from ...worlds import replay
from ._methods import (
    METHODS,
    MethodComparison,
    differing_steps,
    mask_function,
    method_label,
    numpy_rng,
    timed_call,
    top_step,
)


# -- the comparison -------------------------------------------------------------------------------
def compare_methods(
    pipeline: Callable,
    cases,
    worlds: World,
    key,
    *,
    methods: Sequence[str] = METHODS,
    mc_orders: int = 16,
    num_rollouts: int = 200,
    delta: float = 0.05,
    repeat: int = 0,
) -> MethodComparison:
    """Run attribution methods side by side on the same failures and the same noise.

    Every step is a player and its fix is variant 1. The methods:
    - `exact_shapley`: the step with the largest exact Shapley value (`exact_blame`), ties
      within 1e-5 broken at random; `exact_shapley_earliest`: the same values, ties broken
      to the earliest step;
    - `mc_shapley`: the largest Monte Carlo Shapley value at a fixed budget of `mc_orders`
      permutations (`mc_shapley` with no stopping rule), ties at random;
    - `fix_alone`, `leave_one_out`: the largest `v({i}) - v(empty)` / `v(all) - v(all - i)`,
      ties at random;
    - `last_step`, `first_step`: the last / first step whose output differs between the
      failed run and the fully fixed run;
    - `commitment_held`, `commitment_fresh`: the point of commitment of `contrastive` (the
      last step whose re-draw effect excludes zero at level `delta / n`) with the later
      steps' noise held or fresh, `num_rollouts` re-draws per step;
    - `random`: a step drawn uniformly.

    The fix-alone, leave-one-out and differing-step answers are computed with their own
    (cheap) runs and checked against `exact_blame`'s by-products where both ran.

    **Arguments:**
    - `pipeline`, `cases` (`[F, ...]`): as in `exact_blame`.
    - `worlds`: one world per failure (`[F, 1]`, the recorded noise).
    - `key`: an int seed or a typed key (Monte Carlo orders, tie-breaking, random guesses).
    - `methods`: which of `METHODS` to run.
    - `mc_orders`, `num_rollouts`, `delta`: the settings above.
    - `repeat`: further calls per method for a steady-state time (0: none).

    **Returns:** a `MethodComparison`.

    **Raises:** `ValueError` naming the argument: unknown methods, worlds other than one
    per failure; `RuntimeError` when two computations of the same quantity disagree.

    ```python
    # doctest: slow (compiles the injection screen, about 10 s)
    from blamejax.benchmarks import scm
    model = scm.make_scm(0, num_steps=6)
    failures = scm.inject_errors(1, model, 50)
    comparison = scm.compare_methods(
        model.pipeline, failures.cases, failures.worlds, key=2, methods=("exact_shapley", "fix_alone")
    )
    hits = scm.step_hits(comparison.predicted[comparison.index("fix_alone")], failures.culprit)
    ```
    """
    methods = _check_comparison(methods, worlds, mc_orders, num_rollouts, repeat)
    key_mc, key_ties, key_random = jr.split(as_key(key), 3)
    batch = _Batch(pipeline, cases, worlds, discover_batch(pipeline, cases), repeat)
    fix_alone, earliest, timing = _fix_alone_gains(batch)
    rng_ties = numpy_rng(key_ties)  # one stream, drawn in the order below
    out: dict[str, _Answer] = {}
    if "fix_alone" in methods:
        out["fix_alone"] = _Answer(top_step(fix_alone, rng_ties), fix_alone, batch.n + 1, *timing)
    if "leave_one_out" in methods:
        out["leave_one_out"] = _leave_one_out(batch, rng_ties)
    if "first_step" in methods or "last_step" in methods:
        out.update(_first_and_last_step(batch))
    if "exact_shapley" in methods or "exact_shapley_earliest" in methods:
        out.update(_exact_shapley(batch, rng_ties, fix_alone, out))
    if "mc_shapley" in methods:
        out["mc_shapley"] = _mc_shapley(batch, key_mc, mc_orders, fix_alone, rng_ties)
    for name, downstream in (("commitment_held", "held"), ("commitment_fresh", "fresh")):
        if name in methods:
            out[name] = _commitment(batch, downstream, num_rollouts, delta)
    if "random" in methods:
        out["random"] = _random_guess(batch, key_random)
    return MethodComparison(
        methods=methods,
        predicted=jnp.asarray(np.stack([out[m].predicted for m in methods]), jnp.int32),
        credits=tuple(
            None if out[m].credits is None else jnp.asarray(out[m].credits, jnp.float32)
            for m in methods
        ),
        evaluations=jnp.asarray([float(out[m].evaluations) for m in methods], jnp.float32),
        seconds=jnp.asarray([out[m].seconds for m in methods], jnp.float32),
        steady_seconds=jnp.asarray([out[m].steady_seconds for m in methods], jnp.float32),
        earliest_repair=jnp.asarray(earliest),
        mc_orders=mc_orders,
        num_rollouts=num_rollouts,
    )


def _check_comparison(methods, worlds, mc_orders, num_rollouts, repeat) -> tuple[str, ...]:
    """`compare_methods`' arguments checked; the methods as a tuple."""
    methods = tuple(methods)
    for name in methods:
        method_label(name)
    if len(set(methods)) != len(methods) or not methods:
        raise ValueError(f"`methods` must be a non-empty sequence without repeats, got {methods}")
    if not isinstance(worlds, World) or worlds.key.ndim != 2 or worlds.key.shape[1] != 1:
        shape = getattr(getattr(worlds, "key", None), "shape", None)
        raise ValueError(
            f"`worlds` must hold one world per failure (keys [F, 1], e.g. the recorded noise), "
            f"got keys of shape {shape}"
        )
    for value, name in ((mc_orders, "mc_orders"), (num_rollouts, "num_rollouts")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise ValueError(f"`{name}` must be an int >= 2, got {value!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 0:
        raise ValueError(f"`repeat` must be a non-negative int, got {repeat!r}")
    return methods


class _Batch(NamedTuple):
    """The failures every method runs on, and how often each call is repeated for timing."""

    pipeline: Callable
    cases: object
    worlds: World
    structure: Structure
    repeat: int

    @property
    def n(self) -> int:
        return self.structure.num_steps

    def coalition_scores(self, masks: np.ndarray):
        """The mean score over worlds of each coalition in `masks` (`[C, n]`), per failure
        (`[F, C]`), with the first call's and the steady wall time."""
        masks_fn = mask_function(self.pipeline, self.structure, self.n)
        masks = jnp.asarray(masks)
        values, first, steady = timed_call(
            lambda: masks_fn(self.cases, self.worlds, masks), self.repeat
        )
        return np.asarray(values, np.float64).mean(axis=1), first, steady


class _Answer(NamedTuple):
    """One method's answer on the batch: the named step per failure (`[F]`, -1: none), its
    credits (`[F, n]` or `None`), pipeline runs per failure, first-call and steady seconds."""

    predicted: np.ndarray
    credits: np.ndarray | None
    evaluations: float
    seconds: float
    steady_seconds: float


# -- the methods, one family each -----------------------------------------------------------------
def _fix_alone_gains(batch: _Batch):
    """`v({i}) - v(empty)` per failure and step, the earliest step whose fix alone repairs the
    run (the golden label's rule; -1 if none), and the timing of the call."""
    n = batch.n
    v_alone, first, steady = batch.coalition_scores(
        np.concatenate([np.zeros((1, n), bool), np.eye(n, dtype=bool)])
    )  # [F, n + 1]: the failed run, then each step fixed alone
    gains = v_alone[:, 1:] - v_alone[:, :1]
    repaired = (v_alone[:, 1:] >= 0.5) & (v_alone[:, :1] < 0.5)
    earliest = np.where(repaired.any(axis=1), repaired.argmax(axis=1), -1).astype(np.int32)
    return gains, earliest, (first, steady)


def _leave_one_out(batch: _Batch, rng_ties) -> _Answer:
    """`v(all) - v(all - i)`, its top step with ties at random."""
    n = batch.n
    v_loo, first, steady = batch.coalition_scores(
        np.concatenate([np.ones((1, n), bool), ~np.eye(n, dtype=bool)])
    )
    loo = v_loo[:, :1] - v_loo[:, 1:]
    return _Answer(top_step(loo, rng_ties), loo, n + 1, first, steady)


def _first_and_last_step(batch: _Batch) -> dict[str, _Answer]:
    """The first and the last step whose output differs between the failed run and the fully
    fixed run (two runs)."""
    pipeline, cases, worlds, structure, n = (*batch[:4], batch.n)
    full = mask_plan(structure, tuple(range(n)), (1,) * n, np.ones(n, bool))

    def both():
        failed = replay(pipeline, cases, worlds)["choice"]
        return failed, replay(pipeline, cases, worlds, full)["choice"]

    (failed, fixed), first_s, steady_s = timed_call(both, batch.repeat)
    site_step = [structure.step_index(s.step) for s in structure.sites]
    first, last = differing_steps(np.asarray(failed)[:, 0], np.asarray(fixed)[:, 0], site_step, n)
    return dict(
        first_step=_Answer(first, None, 2, first_s, steady_s),
        last_step=_Answer(last, None, 2, first_s, steady_s),
    )


def _exact_shapley(batch: _Batch, rng_ties, fix_alone, out) -> dict[str, _Answer]:
    """The top exact Shapley step, ties at random and ties to the earliest; the cheap answers
    computed so far (`fix_alone`, and `out`'s leave-one-out and last step) checked against
    `exact_blame`'s by-products."""
    result, first, steady = timed_call(
        lambda: exact_blame(batch.pipeline, batch.cases, batch.worlds), batch.repeat
    )
    shapley = np.asarray(result.shapley, np.float64)
    _agree(np.asarray(result.fix_alone, np.float64), fix_alone, "fix-alone gains")
    if "leave_one_out" in out:
        loo = np.asarray(result.leave_one_out, np.float64)
        _agree(loo, out["leave_one_out"].credits, "leave-one-out gains")
    if "last_step" in out:
        last = np.asarray(result.last_step)[:, 0]
        _agree(last, out["last_step"].predicted, "last differing steps")
    cost = float(2**batch.n)
    return dict(
        exact_shapley=_Answer(top_step(shapley, rng_ties), shapley, cost, first, steady),
        exact_shapley_earliest=_Answer(top_step(shapley, None), shapley, cost, first, steady),
    )


def _mc_shapley(batch: _Batch, key, mc_orders: int, fix_alone, rng_ties) -> _Answer:
    """The top Monte Carlo Shapley step at a fixed budget of `mc_orders` orders, no stopping
    rule; with one step, its value is the total repair and nothing is sampled."""
    n = batch.n
    if n < 2:
        return _Answer(top_step(fix_alone, rng_ties), fix_alone, 2.0, 0.0, np.nan)
    budget = 2 + mc_orders * (n - 1)
    result, first, steady = timed_call(
        lambda: mc_shapley(
            batch.pipeline,
            batch.cases,
            batch.worlds,
            key,
            max_evaluations=budget,
            stop=(),  # a fixed budget: the schedule of looks is not used
        ),
        batch.repeat,
    )
    values = np.asarray(result.values, np.float64)
    evaluations = float(np.mean(np.asarray(result.evaluations)))
    return _Answer(top_step(values, rng_ties), values, evaluations, first, steady)


def _commitment(batch: _Batch, downstream: str, num_rollouts: int, delta: float) -> _Answer:
    """`contrastive`'s point of commitment with the later steps' noise `downstream`."""
    result, first, steady = timed_call(
        lambda: contrastive(
            batch.pipeline,
            batch.cases,
            batch.worlds,
            num_rollouts=num_rollouts,
            downstream=downstream,
            delta=delta,
        ),
        batch.repeat,
    )
    evaluations = 1 + batch.n * num_rollouts
    return _Answer(np.asarray(result.commitment, np.int32), None, evaluations, first, steady)


def _random_guess(batch: _Batch, key) -> _Answer:
    """A step drawn uniformly per failure; it runs nothing."""
    num_failures = int(batch.worlds.key.shape[0])
    guess = numpy_rng(key).integers(batch.n, size=num_failures).astype(np.int32)
    return _Answer(guess, None, 0, 0.0, np.nan if batch.repeat == 0 else 0.0)


def _agree(a, b, what: str):
    same = a.shape == b.shape and (
        np.array_equal(a, b) if a.dtype.kind in "iu" else np.allclose(a, b, rtol=0.0, atol=1e-6)
    )
    if not same:
        bad = np.argwhere(a != b)
        raise RuntimeError(
            f"internal check failed: two computations of the {what} disagree (first at {bad[:1].tolist()})"
        )
