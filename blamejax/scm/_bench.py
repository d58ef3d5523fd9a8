"""Attribution methods side by side on failures whose culprit is known, and their metrics.

`compare_methods` runs every method on the same failures (the same cases, the same recorded
noise) and returns, per method, the step it names and what it cost. The metrics score those
answers against golden labels: Step@k (the named step is within k steps of the culprit;
Step@0 is the exact step), agent-level accuracy, and for multi-culprit cases whether the
named step is a culprit and how far a method's credit vector is from the analytic Shapley
split. Accuracies come with Wilson score intervals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax.numpy as jnp
import jax.random as jr
import numpy as np

from ..coalitions import mask_plan
from ..estimators import exact_blame, mc_shapley
from ..interventions import contrastive
from ..noise import as_key
from ..pipeline import World, discover_batch
from ..stats import wilson_interval
from ..worlds import replay
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
    from blamejax import scm
    model = scm.make_scm(0, num_steps=6)
    failures = scm.inject_errors(1, model, 50)
    comparison = scm.compare_methods(
        model.pipeline, failures.cases, failures.worlds, key=2, methods=("exact_shapley", "fix_alone")
    )
    hits = scm.step_hits(comparison.predicted[comparison.index("fix_alone")], failures.culprit)
    ```
    """
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
    key_mc, key_ties, key_random = jr.split(as_key(key), 3)
    structure = discover_batch(pipeline, cases)
    n = structure.num_steps
    num_failures = int(worlds.key.shape[0])
    out: dict = {}  # name -> (predicted, credits, evaluations, seconds, steady)
    masks_fn = mask_function(pipeline, structure, n)
    eye = np.eye(n, dtype=bool)

    # Fix-alone coalitions: the failed run and each step fixed alone (also gives the label rule).
    alone_masks = jnp.asarray(np.concatenate([np.zeros((1, n), bool), eye]))
    v_alone, t_first, t_steady = timed_call(lambda: masks_fn(cases, worlds, alone_masks), repeat)
    v_alone = np.asarray(v_alone, np.float64).mean(axis=1)  # [F, n + 1]
    fix_alone = v_alone[:, 1:] - v_alone[:, :1]
    repaired = (v_alone[:, 1:] >= 0.5) & (v_alone[:, :1] < 0.5)
    earliest = np.where(repaired.any(axis=1), repaired.argmax(axis=1), -1).astype(np.int32)
    rng_ties = numpy_rng(key_ties)
    if "fix_alone" in methods:
        out["fix_alone"] = (top_step(fix_alone, rng_ties), fix_alone, n + 1, t_first, t_steady)

    if "leave_one_out" in methods:
        loo_masks = jnp.asarray(np.concatenate([np.ones((1, n), bool), ~eye]))
        v_loo, t_first, t_steady = timed_call(lambda: masks_fn(cases, worlds, loo_masks), repeat)
        v_loo = np.asarray(v_loo, np.float64).mean(axis=1)
        loo = v_loo[:, :1] - v_loo[:, 1:]
        out["leave_one_out"] = (top_step(loo, rng_ties), loo, n + 1, t_first, t_steady)

    if "first_step" in methods or "last_step" in methods:
        full = mask_plan(structure, tuple(range(n)), (1,) * n, np.ones(n, bool))

        def both():
            return replay(pipeline, cases, worlds)["choice"], replay(pipeline, cases, worlds, full)[
                "choice"
            ]

        (failed, fixed), t_first, t_steady = timed_call(both, repeat)
        site_step = [structure.step_index(s.step) for s in structure.sites]
        first, last = differing_steps(
            np.asarray(failed)[:, 0], np.asarray(fixed)[:, 0], site_step, n
        )
        out["first_step"] = (first, None, 2, t_first, t_steady)
        out["last_step"] = (last, None, 2, t_first, t_steady)

    if "exact_shapley" in methods or "exact_shapley_earliest" in methods:
        result, t_first, t_steady = timed_call(lambda: exact_blame(pipeline, cases, worlds), repeat)
        shapley = np.asarray(result.shapley, np.float64)
        _agree(np.asarray(result.fix_alone, np.float64), fix_alone, "fix-alone gains")
        if "leave_one_out" in out:
            _agree(
                np.asarray(result.leave_one_out, np.float64),
                out["leave_one_out"][1],
                "leave-one-out gains",
            )
        if "last_step" in out:
            _agree(np.asarray(result.last_step)[:, 0], out["last_step"][0], "last differing steps")
        cost = float(2**n)
        out["exact_shapley"] = (top_step(shapley, rng_ties), shapley, cost, t_first, t_steady)
        out["exact_shapley_earliest"] = (top_step(shapley, None), shapley, cost, t_first, t_steady)

    if "mc_shapley" in methods:
        if n < 2:  # one step: its Shapley value is the total repair, no sampling needed
            values = fix_alone
            evaluations, t_first, t_steady = 2.0, 0.0, np.nan
        else:
            budget = 2 + mc_orders * (n - 1)
            result, t_first, t_steady = timed_call(
                lambda: mc_shapley(
                    pipeline,
                    cases,
                    worlds,
                    key_mc,
                    max_evaluations=budget,
                    stop=(),
                    first_checkpoint=2,
                ),
                repeat,
            )
            values = np.asarray(result.values, np.float64)
            evaluations = float(np.mean(np.asarray(result.evaluations)))
        out["mc_shapley"] = (top_step(values, rng_ties), values, evaluations, t_first, t_steady)

    for name, downstream in (("commitment_held", "held"), ("commitment_fresh", "fresh")):
        if name in methods:
            result, t_first, t_steady = timed_call(
                lambda d=downstream: contrastive(
                    pipeline, cases, worlds, num_rollouts=num_rollouts, downstream=d, delta=delta
                ),
                repeat,
            )
            out[name] = (
                np.asarray(result.commitment, np.int32),
                None,
                1 + n * num_rollouts,
                t_first,
                t_steady,
            )

    if "random" in methods:
        guess = numpy_rng(key_random).integers(n, size=num_failures).astype(np.int32)
        out["random"] = (guess, None, 0, 0.0, np.nan if repeat == 0 else 0.0)

    return MethodComparison(
        methods=methods,
        predicted=jnp.asarray(np.stack([out[m][0] for m in methods]), jnp.int32),
        credits=tuple(
            None if out[m][1] is None else jnp.asarray(out[m][1], jnp.float32) for m in methods
        ),
        evaluations=jnp.asarray([float(out[m][2]) for m in methods], jnp.float32),
        seconds=jnp.asarray([out[m][3] for m in methods], jnp.float32),
        steady_seconds=jnp.asarray([out[m][4] for m in methods], jnp.float32),
        earliest_repair=jnp.asarray(earliest),
        mc_orders=mc_orders,
        num_rollouts=num_rollouts,
    )


def _agree(a, b, what: str):
    same = a.shape == b.shape and (
        np.array_equal(a, b) if a.dtype.kind in "iu" else np.allclose(a, b, rtol=0.0, atol=1e-6)
    )
    if not same:
        bad = np.argwhere(a != b)
        raise RuntimeError(
            f"internal check failed: two computations of the {what} disagree (first at {bad[:1].tolist()})"
        )


# -- metrics ----------------------------------------------------------------------------------------
def step_hits(predicted, culprit, within: int = 0) -> np.ndarray:
    """Step@k hits: `|predicted - culprit| <= within` per failure (a prediction of -1, no
    step named, is a miss). `within = 0` is Step@0, the exact step."""
    if isinstance(within, bool) or not isinstance(within, (int, np.integer)) or within < 0:
        raise ValueError(f"`within` must be a non-negative int, got {within!r}")
    predicted, culprit = np.asarray(predicted), np.asarray(culprit)
    if predicted.shape != culprit.shape:
        raise ValueError(
            f"`predicted` {predicted.shape} and `culprit` {culprit.shape} must have the same shape"
        )
    return (predicted >= 0) & (np.abs(predicted - culprit) <= within)


def agent_hits(predicted, culprit, agents: Sequence[int]) -> np.ndarray:
    """Agent-level hits: the named step belongs to the culprit's agent (`agents[i]` is the
    agent of step i; -1, no step named, is a miss)."""
    agents = np.asarray(agents)
    predicted, culprit = np.asarray(predicted), np.asarray(culprit)
    named = agents[np.maximum(predicted, 0)]
    return (predicted >= 0) & (named == agents[culprit])


def culprit_hits(predicted, culprits) -> np.ndarray:
    """Multi-culprit hits: the named step is one of the culprits (`culprits`: `[F, m]`)."""
    predicted, culprits = np.asarray(predicted), np.asarray(culprits)
    return (predicted[:, None] == culprits).any(axis=1)


def split_error(credits, analytic) -> np.ndarray:
    """How far a credit vector is from the analytic Shapley split, per failure: the total
    variation distance `0.5 * sum_i |p_i - q_i|` between the credits made a distribution
    (negative credits clipped to 0, then normalised; all-zero credits count as the uniform
    split) and the analytic values normalised the same way. 0: the same split; 1: disjoint."""
    credits = np.clip(np.asarray(credits, np.float64), 0.0, None)
    analytic = np.asarray(analytic, np.float64)
    if credits.shape != analytic.shape:
        raise ValueError(
            f"`credits` {credits.shape} and `analytic` {analytic.shape} must have the same shape"
        )
    total = credits.sum(axis=1, keepdims=True)
    p = np.where(total > 0, credits / np.where(total > 0, total, 1.0), 1.0 / credits.shape[1])
    q = analytic / analytic.sum(axis=1, keepdims=True)
    return 0.5 * np.abs(p - q).sum(axis=1)


def proportion(hits, delta: float = 0.05) -> dict:
    """`{"hits", "total", "rate", "low", "high"}`: a hit rate with its Wilson interval."""
    hits = np.asarray(hits, bool)
    count, total = int(hits.sum()), int(hits.size)
    low, high = wilson_interval(count, total, delta)
    return dict(hits=count, total=total, rate=count / total, low=float(low), high=float(high))
