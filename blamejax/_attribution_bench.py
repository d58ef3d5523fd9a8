"""Attribution methods side by side on failures whose culprit is known, and their metrics.

`compare_methods` runs every method on the same failures (the same cases, the same recorded
noise) and returns, per method, the step it names and what it cost. The metrics score those
answers against golden labels: Step@k (the named step is within k steps of the culprit;
Step@0 is the exact step), agent-level accuracy, and for multi-culprit cases whether the
named step is a culprit and how far a method's credit vector is from the analytic Shapley
split. Accuracies come with Wilson score intervals.

`single_culprit_benchmark` and `multi_culprit_benchmark` put it together for one
configuration and return plain, JSON-ready results; `results_markdown` renders them. Timings
are kept in their own field, so two runs with the same seeds give identical tables once the
timings are left out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int

from ._contrastive import contrastive, wilson_interval
from ._evaluate import mask_plan, mask_values
from ._exact import exact_blame
from ._mc_adaptive import mc_shapley
from ._pipeline import World
from ._replay import replay
from ._scm import SCM, InjectedFailures, MultiCulpritCases, inject_errors, multi_culprit_cases
from ._structure import discover
from ._worlds import as_key

METHODS = (
    "exact_shapley",
    "exact_shapley_earliest",
    "mc_shapley",
    "fix_alone",
    "leave_one_out",
    "last_step",
    "first_step",
    "commitment_held",
    "commitment_fresh",
    "random",
)
CREDIT_METHODS = ("exact_shapley", "mc_shapley", "fix_alone", "leave_one_out")
TIE_TOLERANCE = 1e-5


def method_label(name: str, mc_orders: int = 16, num_rollouts: int = 200) -> str:
    """A readable name of a method."""
    labels = {
        "exact_shapley": "exact Shapley, top step (ties at random)",
        "exact_shapley_earliest": "exact Shapley, top step (ties to the earliest)",
        "mc_shapley": f"Monte Carlo Shapley, top step ({mc_orders} orders)",
        "fix_alone": "fix-alone, top step",
        "leave_one_out": "leave-one-out, top step",
        "last_step": "last step that differs (failed vs fully fixed run)",
        "first_step": "first step that differs (failed vs fully fixed run)",
        "commitment_held": f"point of commitment, held downstream noise ({num_rollouts} rollouts)",
        "commitment_fresh": f"point of commitment, fresh downstream noise ({num_rollouts} rollouts)",
        "random": "uniform random guess",
    }
    if name not in labels:
        raise ValueError(f"unknown method {name!r}; the methods are {METHODS}")
    return labels[name]


class MethodComparison(eqx.Module):
    """What each method named on the same F failures, and what it cost.

    - `methods`: the method names (static), the order of every `M` axis.
    - `predicted`: `Int[Array, "M F"]`, the step each method names (-1: it names none).
    - `credits`: per method, `Float[Array, "F n"]` (the scores it ranks steps by: Shapley
      values, fix-alone and leave-one-out gains) or `None` for methods that name a step only.
    - `evaluations`: `Float[Array, "M"]`, pipeline runs per failure (one run = one coalition
      or plan in one world).
    - `seconds`: `Float[Array, "M"]`, wall time of the method's first call on the batch
      (compilation included); `steady_seconds`: the fastest of `repeat` further calls (NaN
      when `repeat = 0`). Methods computed from one call (the two exact-Shapley tie rules;
      first and last differing step) report that call's time.
    - `earliest_repair`: `Int[Array, "F"]`, the earliest step whose fix alone repairs the
      run (-1 if none), the definition of the golden label of injected failures.
    - `mc_orders`, `num_rollouts`: the settings used.
    """

    methods: tuple[str, ...] = eqx.field(static=True)
    predicted: Int[Array, "M F"]
    credits: tuple
    evaluations: Float[Array, " M"]
    seconds: Float[Array, " M"]
    steady_seconds: Float[Array, " M"]
    earliest_repair: Int[Array, " F"]
    mc_orders: int = eqx.field(static=True)
    num_rollouts: int = eqx.field(static=True)

    def index(self, method: str) -> int:
        if method not in self.methods:
            raise ValueError(f"method {method!r} was not run; these were: {self.methods}")
        return self.methods.index(method)


# -- helpers ------------------------------------------------------------------------------------
def _rng(key) -> np.random.Generator:
    return np.random.default_rng(np.asarray(jr.key_data(key)).tolist())


def top_step(
    values, rng: np.random.Generator | None = None, tolerance: float = TIE_TOLERANCE
) -> np.ndarray:
    """The index of the largest value in each row; rows with several values within
    `tolerance` of the largest are broken uniformly at random with `rng`, or to the earliest
    index when `rng` is `None`.

    **Arguments:**
    - `values`: `[F, n]` scores.
    - `rng`: a numpy `Generator`, or `None` for the earliest of the tied steps.
    - `tolerance`: how close to the largest value counts as a tie (float rounding).

    **Returns:** `Int[ndarray, "F"]`.
    """
    values = np.asarray(values, np.float64)
    if values.ndim != 2 or values.shape[1] < 1:
        raise ValueError(f"`values` must have shape [F, n] with n >= 1, got {values.shape}")
    tied = values >= values.max(axis=1, keepdims=True) - tolerance
    if rng is None:
        return np.argmax(tied, axis=1).astype(np.int32)
    draw = np.where(tied, rng.random(values.shape), -1.0)
    return np.argmax(draw, axis=1).astype(np.int32)


def _differing_steps(choice_a, choice_b, site_step, num_steps):
    """First and last step whose output differs between two runs; -1 when none does."""
    differs = np.asarray(choice_a) != np.asarray(choice_b)  # [F, sites]
    step_differs = np.zeros((differs.shape[0], num_steps), bool)
    for site, step in enumerate(site_step):
        step_differs[:, step] |= differs[:, site]
    any_ = step_differs.any(axis=1)
    first = np.where(any_, np.argmax(step_differs, axis=1), -1)
    last = np.where(any_, num_steps - 1 - np.argmax(step_differs[:, ::-1], axis=1), -1)
    return first.astype(np.int32), last.astype(np.int32)


_MASKS: dict = {}


def _mask_function(pipeline, structure, n):
    """Compiled: the scores of a set of coalitions for every failure and world."""
    if (pipeline, structure) not in _MASKS:
        players, fixes = tuple(range(n)), (1,) * n

        def one(case, world, masks):
            return mask_values(pipeline, structure, case, world, players, fixes, masks)

        per_failure = jax.vmap(one, in_axes=(None, 0, None))
        _MASKS[(pipeline, structure)] = jax.jit(jax.vmap(per_failure, in_axes=(0, 0, None)))
    return _MASKS[(pipeline, structure)]


def _timed(function, repeat: int):
    start = time.perf_counter()
    out = jax.block_until_ready(function())
    first = time.perf_counter() - start
    steady = np.nan
    for _ in range(repeat):
        start = time.perf_counter()
        jax.block_until_ready(function())
        elapsed = time.perf_counter() - start
        steady = elapsed if np.isnan(steady) else min(steady, elapsed)
    return out, first, steady


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
    model = scm.make_scm(0, num_steps=6)
    failures = scm.inject_errors(1, model, 200)
    comparison = scm.compare_methods(model.pipeline, failures.cases, failures.worlds, key=2)
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
    structure = discover(pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    n = structure.num_steps
    num_failures = int(worlds.key.shape[0])
    out: dict = {}  # name -> (predicted, credits, evaluations, seconds, steady)
    masks_fn = _mask_function(pipeline, structure, n)
    eye = np.eye(n, dtype=bool)

    # Fix-alone coalitions: the failed run and each step fixed alone (also gives the label rule).
    alone_masks = jnp.asarray(np.concatenate([np.zeros((1, n), bool), eye]))
    v_alone, t_first, t_steady = _timed(lambda: masks_fn(cases, worlds, alone_masks), repeat)
    v_alone = np.asarray(v_alone, np.float64).mean(axis=1)  # [F, n + 1]
    fix_alone = v_alone[:, 1:] - v_alone[:, :1]
    repaired = (v_alone[:, 1:] >= 0.5) & (v_alone[:, :1] < 0.5)
    earliest = np.where(repaired.any(axis=1), repaired.argmax(axis=1), -1).astype(np.int32)
    rng_ties = _rng(key_ties)
    if "fix_alone" in methods:
        out["fix_alone"] = (top_step(fix_alone, rng_ties), fix_alone, n + 1, t_first, t_steady)

    if "leave_one_out" in methods:
        loo_masks = jnp.asarray(np.concatenate([np.ones((1, n), bool), ~eye]))
        v_loo, t_first, t_steady = _timed(lambda: masks_fn(cases, worlds, loo_masks), repeat)
        v_loo = np.asarray(v_loo, np.float64).mean(axis=1)
        loo = v_loo[:, :1] - v_loo[:, 1:]
        out["leave_one_out"] = (top_step(loo, rng_ties), loo, n + 1, t_first, t_steady)

    if "first_step" in methods or "last_step" in methods:
        full = mask_plan(structure, tuple(range(n)), (1,) * n, np.ones(n, bool))

        def both():
            return replay(pipeline, cases, worlds)["choice"], replay(pipeline, cases, worlds, full)[
                "choice"
            ]

        (failed, fixed), t_first, t_steady = _timed(both, repeat)
        site_step = [structure.step_index(s.step) for s in structure.sites]
        first, last = _differing_steps(
            np.asarray(failed)[:, 0], np.asarray(fixed)[:, 0], site_step, n
        )
        out["first_step"] = (first, None, 2, t_first, t_steady)
        out["last_step"] = (last, None, 2, t_first, t_steady)

    if "exact_shapley" in methods or "exact_shapley_earliest" in methods:
        result, t_first, t_steady = _timed(lambda: exact_blame(pipeline, cases, worlds), repeat)
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
            result, t_first, t_steady = _timed(
                lambda: mc_shapley(
                    pipeline, cases, worlds, key_mc, max_evaluations=budget, stop=(), t1=2
                ),
                repeat,
            )
            values = np.asarray(result.values, np.float64)
            evaluations = float(np.mean(np.asarray(result.evaluations)))
        out["mc_shapley"] = (top_step(values, rng_ties), values, evaluations, t_first, t_steady)

    for name, downstream in (("commitment_held", "held"), ("commitment_fresh", "fresh")):
        if name in methods:
            result, t_first, t_steady = _timed(
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
        guess = _rng(key_random).integers(n, size=num_failures).astype(np.int32)
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


# -- one configuration, end to end ------------------------------------------------------------------
def _scm_config(scm: SCM) -> dict:
    return dict(
        num_steps=scm.num_steps,
        num_options=scm.num_options,
        topology=scm.topology,
        parents=[list(p) for p in scm.parents],
        num_agents=scm.num_agents,
        noise=scm.noise,
        recovery=scm.recovery,
        fix_noise=scm.fix_noise,
        fix_recovery=scm.fix_recovery,
        leak=scm.leak,
    )


def _default_name(scm: SCM) -> str:
    return f"n={scm.num_steps} {scm.topology}"


def single_culprit_benchmark(
    key,
    scm: SCM,
    num_failures: int,
    *,
    methods: Sequence[str] = METHODS,
    mc_orders: int = 16,
    num_rollouts: int = 200,
    within: Sequence[int] = (0, 1, 2),
    delta: float = 0.05,
    repeat: int = 0,
    name: str | None = None,
) -> dict:
    """Inject errors into `scm` (`inject_errors`), run `compare_methods` on the failures and
    score every method: Step@k for each k in `within`, agent-level accuracy, how often it
    names no step; with Wilson intervals at level 1 - `delta`.

    `name` labels the configuration in tables (default "n=8 chain").

    **Returns:** a JSON-ready dict: `config`, `generator` (counts and rejection rate),
    `methods` (one dict per method), `check` (the share of failures whose earliest repairing
    fix is the label: 1.0 by construction) and `timing` (seconds per method; the only part
    that differs between two runs with the same seeds).

    ```python
    report = scm.single_culprit_benchmark(0, scm.make_scm(0, 8, steps_per_agent=2), 1000)
    print(scm.results_markdown([report]))
    ```
    """
    key_inject, key_methods = jr.split(as_key(key))
    failures: InjectedFailures = inject_errors(key_inject, scm, num_failures)
    comparison = compare_methods(
        scm.pipeline,
        failures.cases,
        failures.worlds,
        key_methods,
        methods=methods,
        mc_orders=mc_orders,
        num_rollouts=num_rollouts,
        delta=delta,
        repeat=repeat,
    )
    culprit = np.asarray(failures.culprit)
    rows = []
    for m, method in enumerate(comparison.methods):
        predicted = np.asarray(comparison.predicted[m])
        row = dict(method=method, label=method_label(method, mc_orders, num_rollouts))
        for k in within:
            row[f"step@{k}"] = proportion(step_hits(predicted, culprit, k), delta)
        row["agent"] = proportion(agent_hits(predicted, culprit, scm.agents), delta)
        row["no_answer"] = int(np.sum(predicted < 0))
        row["evaluations"] = float(comparison.evaluations[m])
        rows.append(row)
    timing = {
        method: dict(
            first_s=float(comparison.seconds[m]), steady_s=float(comparison.steady_seconds[m])
        )
        for m, method in enumerate(comparison.methods)
    }
    return dict(
        config=dict(
            _scm_config(scm),
            name=name or _default_name(scm),
            num_failures=num_failures,
            mc_orders=mc_orders,
            num_rollouts=num_rollouts,
            delta=delta,
        ),
        generator=dict(
            candidates=failures.num_candidates,
            successful=failures.num_successful,
            still_successful=failures.num_still_successful,
            repaired_earlier=failures.num_repaired_earlier,
            kept=failures.num_failures,
            rejection_rate=failures.rejection_rate,
            culprit_counts=np.bincount(culprit, minlength=scm.num_steps).tolist(),
        ),
        methods=rows,
        check=dict(
            earliest_repair_is_label=float(
                np.mean(np.asarray(comparison.earliest_repair) == culprit)
            )
        ),
        timing=timing,
    )


def multi_culprit_benchmark(
    key,
    scm: SCM,
    num_cases: int,
    *,
    num_culprits: int = 2,
    kind: str = "conjunctive",
    methods: Sequence[str] = METHODS,
    mc_orders: int = 16,
    num_rollouts: int = 200,
    delta: float = 0.05,
    repeat: int = 0,
    name: str | None = None,
) -> dict:
    """Multi-culprit cases (`multi_culprit_cases`) with every method: how often the named
    step is a culprit, and for the methods that give credits, the split error against the
    analytic Shapley values (mean total variation distance with its standard error).

    **Returns:** a JSON-ready dict: `config`, `methods`, `check` (the largest |exact Shapley -
    analytic| over all cases and steps) and `timing`.

    ```python
    report = scm.multi_culprit_benchmark(0, scm.make_scm(0, 8), 500, kind="disjunctive")
    print(scm.results_markdown(multi=[report]))
    ```
    """
    key_cases, key_methods = jr.split(as_key(key))
    cases: MultiCulpritCases = multi_culprit_cases(
        key_cases, scm, num_cases, num_culprits=num_culprits, kind=kind
    )
    comparison = compare_methods(
        scm.pipeline,
        cases.cases,
        cases.worlds,
        key_methods,
        methods=methods,
        mc_orders=mc_orders,
        num_rollouts=num_rollouts,
        delta=delta,
        repeat=repeat,
    )
    culprits = np.asarray(cases.culprits)
    analytic = np.asarray(cases.analytic_shapley, np.float64)
    rows = []
    check = None
    for m, method in enumerate(comparison.methods):
        row = dict(method=method, label=method_label(method, mc_orders, num_rollouts))
        predicted = np.asarray(comparison.predicted[m])
        row["culprit_hit"] = proportion(culprit_hits(predicted, culprits), delta)
        row["no_answer"] = int(np.sum(predicted < 0))
        credits = comparison.credits[m]
        if credits is not None and method in CREDIT_METHODS:
            error = split_error(credits, analytic)
            row["split_error"] = dict(
                mean=float(error.mean()),
                stderr=float(error.std(ddof=1) / np.sqrt(error.size))
                if error.size > 1
                else float("nan"),
            )
            if method == "exact_shapley":
                check = float(np.max(np.abs(np.asarray(credits, np.float64) - analytic)))
        row["evaluations"] = float(comparison.evaluations[m])
        rows.append(row)
    timing = {
        method: dict(
            first_s=float(comparison.seconds[m]), steady_s=float(comparison.steady_seconds[m])
        )
        for m, method in enumerate(comparison.methods)
    }
    return dict(
        config=dict(
            _scm_config(scm),
            name=name or f"{_default_name(scm)}, {kind}, m={num_culprits}",
            num_cases=num_cases,
            num_culprits=num_culprits,
            kind=kind,
            mc_orders=mc_orders,
            num_rollouts=num_rollouts,
            delta=delta,
        ),
        methods=rows,
        check=dict(exact_max_abs_error=check),
        timing=timing,
    )


# -- markdown ----------------------------------------------------------------------------------------
def _cell(p: dict) -> str:
    return f"{100 * p['rate']:.1f} [{100 * p['low']:.1f}, {100 * p['high']:.1f}]"


def _no_answer_lines(results, methods, labels, what: str) -> list[str]:
    """The note under a table: per method, how many failures (or cases) got no answer in each
    configuration; nothing when every method always named a step."""
    counts = [
        (labels[name], [r["methods"][m]["no_answer"] for r in results])
        for m, name in enumerate(methods)
    ]
    counts = [(label, row) for label, row in counts if any(row)]
    if not counts:
        return []
    listed = "; ".join(f"{label}: " + ", ".join(str(c) for c in row) for label, row in counts)
    return ["", f"{what} for which a method named no step (counted as misses): {listed} (in the column order above)."]


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def results_markdown(
    single: Sequence[dict] = (), multi: Sequence[dict] = (), *, timings: bool = True
) -> str:
    """Markdown tables of `single_culprit_benchmark` and `multi_culprit_benchmark` results:
    the generator's counts, Step@0 / Step@1 / agent-level accuracy (percent, with Wilson
    intervals) per method and configuration, cost, and the multi-culprit results.
    With `timings=False` the wall-time columns are left out, so that two runs with the same
    seeds give identical text."""
    lines: list[str] = []
    if single:
        names = [r["config"]["name"] for r in single]
        lines += ["### Generator: controlled injection", ""]
        lines += _table(
            [
                "configuration",
                "clean runs",
                "successful",
                "still successful",
                "repaired earlier",
                "kept failures",
                "rejection rate",
            ],
            [
                [
                    name,
                    str(g["candidates"]),
                    str(g["successful"]),
                    str(g["still_successful"]),
                    str(g["repaired_earlier"]),
                    str(g["kept"]),
                    f"{g['rejection_rate']:.3f}",
                ]
                for name, g in zip(names, (r["generator"] for r in single))
            ],
        )
        methods = [row["method"] for row in single[0]["methods"]]
        labels = {row["method"]: row["label"] for row in single[0]["methods"]}
        for metric, title in (
            ("step@0", "Step@0 (exact step)"),
            ("step@1", "Step@1 (within one step)"),
            ("agent", "Agent-level"),
        ):
            if metric not in single[0]["methods"][0]:
                continue
            lines += ["", f"### {title} accuracy, % [95% Wilson interval]", ""]
            body = []
            for m, name in enumerate(methods):
                body.append([labels[name]] + [_cell(r["methods"][m][metric]) for r in single])
            lines += _table(["method"] + names, body)
        lines += [
            "",
            "### Cost: pipeline runs per failure"
            + (
                " / wall time per failure in ms (steady state where measured, else first call)"
                if timings
                else ""
            ),
            "",
        ]
        body = []
        for m, name in enumerate(methods):
            cells = []
            for r in single:
                cell = f"{r['methods'][m]['evaluations']:g}"
                if timings:
                    t = r["timing"][name]
                    seconds = t["steady_s"] if np.isfinite(t["steady_s"]) else t["first_s"]
                    cell += f" / {1000 * seconds / r['generator']['kept']:.3f}"
                cells.append(cell)
            body.append([labels[name]] + cells)
        lines += _table(["method"] + names, body)
        lines += _no_answer_lines(single, methods, labels, "Failures")
        checks = [r["check"]["earliest_repair_is_label"] for r in single]
        lines += [
            "",
            f"Check: the earliest step whose fix alone repairs the run is the golden label in "
            f"{min(checks) * 100:.1f}% of the failures (100% by construction).",
        ]
    if multi:
        lines += [
            "",
            "### Multi-culprit cases: named step is a culprit, % [95% Wilson interval]; split error (total variation distance to the analytic Shapley split, mean ± s.e.)",
            "",
        ]
        names = [r["config"]["name"] for r in multi]
        methods = [row["method"] for row in multi[0]["methods"]]
        labels = {row["method"]: row["label"] for row in multi[0]["methods"]}
        body = []
        for m, name in enumerate(methods):
            cells = []
            for r in multi:
                row = r["methods"][m]
                cell = _cell(row["culprit_hit"])
                if "split_error" in row:
                    cell += (
                        f"; {row['split_error']['mean']:.3f} ± {row['split_error']['stderr']:.3f}"
                    )
                cells.append(cell)
            body.append([labels[name]] + cells)
        lines += _table(["method"] + names, body)
        lines += _no_answer_lines(multi, methods, labels, "Cases")
        worst = max(r["check"]["exact_max_abs_error"] for r in multi)
        lines += [
            "",
            f"Check: largest |exact Shapley - analytic value| over all multi-culprit cases and steps: {worst:.2e}.",
        ]
    return "\n".join(lines) + "\n"
