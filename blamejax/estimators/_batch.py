"""Batch blame over a test set.

Every case is run once as it happened; only the failures are analysed, visited in a
seeded random order. Per failure the Shapley values are exact (or, for many steps, a
fixed-budget Monte Carlo estimate: adaptively stopped per-failure estimates are biased and
would invalidate the interval across failures). Across failures the mean Shapley value of
each step gets an anytime-valid confidence interval, and the batch can stop as soon as the
top step is separated from all others.

This module holds `blame_batch` and its private helpers (worlds, per-failure analysis,
noise modes). Its neighbours: the result type `BatchResult` is in
`_batch_result.py`, the interval across failures and the stopping rule
(`checkpoint_interval`) in `_batch_interval.py`, the reports in `_report.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._checks import as_key, check_score_range, leading_size, resolve_players
from .._compile import compiled
from ..coalitions import last_step_blame, mask_plan, mask_values
from ..noise import world_key
from ..pipeline import Hard, World, check_finite_logits, discover_batch, trace_run
from ..stats import INTERVAL_RULES, checkpoint_interval, checkpoints, top_separated_at
from ..worlds import fresh_worlds, inferred_worlds, recorded_worlds
from ._batch_result import BatchResult
from ._exact import _exact_run, _take

NOISE_MODES = {
    "recorded": "counterfactual, this run's own luck: had this step run its fix, with the "
    "recorded noise replayed exactly, would the run have succeeded?",
    "inferred": "counterfactual, posterior luck: the noise abducted from the observed choices "
    "alone (Gumbel-max coupling), averaged over posterior worlds",
    "fresh": "interventional, new luck: how much does fixing this step help on average over "
    "fresh noise (not about this particular run)",
}
EXACT_AUTO_LIMIT = 14
STOP_EARLY_BLOCK = 32  # failures analysed per compiled call when stopping early


def blame_batch(
    pipeline: Callable,
    cases,
    key,
    *,
    noise: str = "recorded",
    num_worlds: int = 8,
    observed=None,
    steps: Sequence[str] | None = None,
    fixes: dict | None = None,
    score_range: tuple[float, float] = (0.0, 1.0),
    threshold: float | None = None,
    estimator: str = "auto",
    num_permutations: int = 64,
    interval: str = "bernstein",
    delta: float = 0.1,
    stop_early: bool = False,
    first_checkpoint: int = 10,
    growth: float = 1.5,
    max_failures: int | None = None,
    option_names: dict | None = None,
    mode=Hard(),
    progress: bool = False,
) -> BatchResult:
    """Blame every failure of a test set and summarise across failures.

    **Arguments:**
    - `pipeline`: `pipeline(ctx, case) -> score`.
    - `cases`: the test set, a pytree with a leading case axis.
    - `key`: root key or int seed. Case i's recorded noise is world 0 of `fold_in(key, i)`;
      the same key also seeds the visiting order, fresh worlds and abduction.
    - `noise`: `"recorded"`, `"inferred"` or `"fresh"` (see `NOISE_MODES`).
    - `num_worlds`: W for inferred and fresh noise (recorded noise has one world).
    - `observed`: for `"inferred"`, `Int[Array, "cases sites"]` observed choices from a log;
      default: the choices of the recorded run (as if the log kept choices but not noise).
    - `steps`, `fixes`: the players and their fix variants (see `exact_blame`).
    - `score_range`: the declared score range; `threshold`: a run passes when its score is
      >= threshold (default: the top of the range).
    - `estimator`: `"exact"`, `"mc"` (fixed number of permutations per failure) or `"auto"`
      (exact up to 14 steps).
    - `num_permutations`: permutations per failure and world for `"mc"`.
    - `interval`: `"bernstein"` (finite-sample, empirical Bernstein, width
      `2 (s_max - s_min)`) or `"normal"` (asymptotic, no finite-sample guarantee).
    - `delta`: error probability of all intervals together (anytime valid: checkpoint k of
      the failure stream gets `delta / (n k (k+1))` per step).
    - `stop_early`: stop at the first checkpoint where the top step's interval is disjoint
      from every other step's (otherwise analyse every failure and report where it would
      have stopped).
    - `first_checkpoint`, `growth`: checkpoints `ceil(first * growth^(k-1))` failures.
    - `max_failures`: analyse at most this many failures.
    - `option_names`: `{step: tuple of option names}` for the reports.
    - `progress`: show a progress bar (tqdm) over the failure stream.

    **Returns:** a `BatchResult`. An all-passing test set returns a result with no failures
    whose table says so (nothing to blame is not an error).

    **Raises:** `ValueError` naming the argument for an unknown noise mode, W < 1,
    malformed cases, bad thresholds.
    """
    if noise not in NOISE_MODES:
        raise ValueError(f"`noise` must be one of {sorted(NOISE_MODES)}, got {noise!r}")
    if interval not in INTERVAL_RULES:
        raise ValueError(f"`interval` must be one of {INTERVAL_RULES}, got {interval!r}")
    if estimator not in ("auto", "exact", "mc"):
        raise ValueError(f"`estimator` must be 'auto', 'exact' or 'mc', got {estimator!r}")
    if not isinstance(num_worlds, (int, np.integer)) or num_worlds < 1:
        raise ValueError(f"`num_worlds` must be a positive int (W >= 1), got {num_worlds!r}")
    if not 0 < delta < 1:
        raise ValueError(f"`delta` must be in (0, 1), got {delta!r}")
    low, high = check_score_range(score_range)
    threshold = high if threshold is None else float(threshold)
    if not low < threshold <= high:
        raise ValueError(f"`threshold` must lie in ({low}, {high}], got {threshold}")
    key = as_key(key)
    num_cases = leading_size(cases)
    structure = discover_batch(pipeline, cases)
    players, variants = resolve_players(structure, steps, fixes)
    n = len(players)
    names = tuple(structure.steps[p] for p in players)
    if estimator == "auto":
        estimator = "exact" if n <= EXACT_AUTO_LIMIT else "mc"

    # 1. Every case once, as it happened (recorded noise). A pass costs one evaluation.
    check_finite_logits(cases)  # before the transfer: host arrays are checked where they are
    cases = jax.tree_util.tree_map(jnp.asarray, cases)  # on the device once, sliced there
    recorded, scores, choices = _front_function(pipeline, structure, mode)(cases, key)
    scores, choices = np.asarray(scores), np.asarray(choices)
    failed = np.flatnonzero(scores < threshold)
    evaluations = num_cases
    failed = failed[np.asarray(_visit_order(key, failed.size))]
    if max_failures is not None:
        if not isinstance(max_failures, int) or max_failures < 1:
            raise ValueError(f"`max_failures` must be a positive int, got {max_failures!r}")
        failed = failed[:max_failures]
    num_failures = int(np.sum(scores < threshold))
    value_range = 2.0 * (high - low)
    if failed.size == 0:
        return _empty_result(structure, names, noise, estimator, interval, delta, threshold, (low, high), num_cases, evaluations, option_names)

    # 2. The failures to analyse, their fully fixed runs under their own noise (for the
    #    drill-down; one evaluation each) and their worlds.
    select = _select_function(pipeline, structure, players, variants, mode)
    all_cases, own_worlds, fixed_choices = select(cases, recorded, jnp.asarray(failed, jnp.int32))
    evaluations += failed.size
    if noise == "recorded":  # the failures' own worlds
        all_worlds = own_worlds
    else:
        all_worlds = _worlds(pipeline, all_cases, failed, key, noise, num_worlds, observed, choices)

    # 3. Per-failure values. Intervals are formed and stopping decided only at the checkpoints
    #    of the failure stream; values are computed in blocks of a fixed size (one compiled
    #    shape), or all at once when the batch does not stop early.
    marks = checkpoints(first_checkpoint, growth, int(failed.size)) if failed.size > first_checkpoint else (int(failed.size),)
    block_size = STOP_EARLY_BLOCK if stop_early else int(failed.size)
    blocks, separated_at, stopped = [], {rule: None for rule in INTERVAL_RULES}, None
    bar = _progress(progress, int(failed.size))
    start, k = 0, 0
    while start < failed.size and stopped is None:
        rows = np.arange(start, min(start + block_size, failed.size))
        if rows.size == failed.size:
            block_cases, block_worlds = all_cases, all_worlds
        else:
            block_cases, block_worlds = _take((all_cases, all_worlds), jnp.asarray(rows, jnp.int32))
        block = _analyse(
            pipeline, block_cases, block_worlds,
            names, fixes, (low, high), estimator, num_permutations, key, start, mode, threshold,
        )
        evaluations += block.pop("evaluations")
        blocks.append(block)
        if bar is not None:
            bar.update(len(rows))
        start = int(rows[-1]) + 1
        values = np.concatenate([b["shapley"] for b in blocks])
        reached = k + int(np.searchsorted(marks[k:], start, side="right"))  # marks <= start
        if reached > k:  # checkpoints k+1..reached, decided at once
            ts, ks = marks[k:reached], np.arange(k + 1, reached + 1)
            first = {}
            for rule in INTERVAL_RULES:
                if separated_at[rule] is None:
                    hits = np.flatnonzero(top_separated_at(values, ts, ks, rule, delta, value_range))
                    first[rule] = int(hits[0]) if hits.size else None
            looked = len(ts)  # when the batch stops, checkpoints after the stop are not looked at
            if stop_early and first.get(interval) is not None:
                looked = first[interval] + 1
                stopped = k + looked
            for rule, j in first.items():
                if j is not None and j < looked:
                    separated_at[rule] = int(ts[j])
            k = reached
    if bar is not None:
        bar.close()
    k_last = stopped if stopped is not None else len(marks)
    cat = {name: np.concatenate([b[name] for b in blocks]) for name in blocks[0]}
    if stopped is not None:  # values computed past the stopping checkpoint are not looked at
        cat = {name: value[: marks[stopped - 1]] for name, value in cat.items()}
    analysed = failed[: cat["shapley"].shape[0]]
    values = cat["shapley"]
    mean, lo, hi, _ = checkpoint_interval(values, k_last, interval, delta, value_range)
    total = cat["total"]
    share = values.sum(0) / total.sum() if abs(total.sum()) > 0 else np.full(n, np.nan)
    last = cat["last_step"]
    last_rate = np.array([(last == i).mean() for i in range(n)])

    # 4. The result, on the host; the drill-down shows the failed run and the fully fixed run
    #    of each analysed failure.
    arrays = dict(
        failure_ids=analysed,
        shapley=values,
        total=total,
        empty=cat["empty"],
        full=cat["full"],
        resolve=cat["resolve"],
        last_step=last,
        mean_shapley=mean,
        lower=lo,
        upper=hi,
        share_of_repair=share,
        resolve_rate=cat["resolve"].mean(0),
        last_step_rate=last_rate,
        factual_choice=choices[analysed],
        fixed_choice=np.asarray(fixed_choices)[: analysed.size],
        factual_score=scores[analysed],
    )
    return BatchResult(
        steps=names,
        site_steps=tuple(s.step for s in structure.sites),
        option_names=_option_names(option_names, structure),
        noise=noise,
        question=NOISE_MODES[noise],
        estimator=estimator if estimator == "exact" else f"mc ({num_permutations} permutations per world)",
        interval=interval,
        delta=float(delta),
        threshold=threshold,
        score_range=(low, high),
        num_cases=num_cases,
        num_failures=num_failures,
        evaluations=int(evaluations),
        separated=separated_at[interval] is not None,
        separated_at=separated_at,
        **{name: np.asarray(value) for name, value in arrays.items()},
    )


def _worlds(pipeline, sub_cases, ids, key, noise, num_worlds, observed, choices) -> World:
    if noise == "recorded":
        return recorded_worlds(key, ids)
    if noise == "fresh":
        return fresh_worlds(key, ids, num_worlds)
    obs = choices[ids] if observed is None else np.asarray(observed)[ids]
    worlds = inferred_worlds(pipeline, sub_cases, obs, jr.fold_in(key, 0xABD), num_worlds, case_ids=ids)
    return worlds


def _analyse(pipeline, cases, worlds, names, fixes, score_range, estimator, num_permutations, key, start, mode, threshold):
    n = len(names)
    num_f, num_w = worlds.key.shape
    if estimator == "exact":
        result, resolve = _exact_run(
            pipeline, cases, worlds, names, fixes, score_range, False, mode, max(n, 20), None, None, threshold
        )
        out = jax.device_get(
            dict(shapley=result.shapley, total=result.total, empty=result.empty, full=result.full,
                 last_step=result.last_step, resolve=resolve)
        )  # one transfer
        out = {name: value.astype(np.float64) if name != "last_step" else value for name, value in out.items()}
        return dict(out, evaluations=num_f * num_w * (1 << n))
    key = jr.fold_in(key, start)
    structure = discover_batch(pipeline, cases)
    players, variants = resolve_players(structure, names, fixes)
    function = _mc_function(pipeline, structure, players, variants, mode, num_permutations)
    estimate, empty, full, last, resolve = function(cases, worlds, key, threshold)
    low, high = score_range
    if float(np.min(empty)) < low or float(np.max(full)) > high:
        raise ValueError(f"the pipeline returned scores outside the declared `score_range` {score_range}")
    return dict(
        shapley=np.asarray(estimate.values, np.float64),
        total=np.asarray(full - empty, np.float64),
        empty=np.asarray(empty, np.float64),
        full=np.asarray(full, np.float64),
        last_step=np.asarray(last),
        resolve=np.asarray(resolve, np.float64),
        evaluations=num_f * num_w * (2 + num_permutations * (n - 1) + n),  # + n: the fixes alone
    )


@compiled("batch.mc")
def _mc_function(pipeline, structure, players, variants, mode, num_permutations):
    """Compiled: a fixed number of permutations per failure (`mc_shapley_fixed`, vmapped over
    failures), v(empty), v(all), last-step blame, and the share of worlds in which fixing each
    player alone reaches `threshold`."""
    from ._mc import mc_shapley_fixed

    n = len(players)
    masks = np.concatenate([np.zeros((1, n), bool), np.ones((1, n), bool), np.eye(n, dtype=bool)])

    def one(case, worlds, key, threshold):
        estimate = mc_shapley_fixed(pipeline, structure, case, worlds, key, num_permutations, players, variants, mode=mode)
        v = jax.vmap(lambda w: mask_values(pipeline, structure, case, w, players, variants, masks, mode))(worlds)
        last = jax.vmap(lambda w: last_step_blame(pipeline, structure, case, w, players, variants, mode))(worlds)
        resolve = (v[:, 2:] >= threshold).mean(axis=0)  # [n]: each player's fix alone
        return estimate, v[:, 0].mean(), v[:, 1].mean(), last, resolve

    def batch(cases, worlds, key, threshold):
        num = worlds.key.shape[0]
        keys = jax.vmap(lambda f: jr.fold_in(key, f))(jnp.arange(num))
        return jax.vmap(one, in_axes=(0, 0, 0, None))(cases, worlds, keys, threshold)

    return jax.jit(batch)


@compiled("batch.front")
def _front_function(pipeline, structure, mode):
    """Compiled: every case's recorded world and its factual run,
    `(cases, key) -> (World [C, 1], score [C], choice [C, sites])` (world 0 of
    `fold_in(key, case)`, as `recorded_worlds`): it decides which cases failed."""

    def front(cases, key):
        num_cases = jax.tree_util.tree_leaves(cases)[0].shape[0]
        ids = jnp.arange(num_cases, dtype=jnp.uint32)
        worlds = World(key=world_key(key, ids[:, None], 0))
        run = jax.vmap(lambda case, world: trace_run(pipeline, structure, case, world, mode=mode))
        out = run(cases, jax.tree_util.tree_map(lambda x: x[:, 0], worlds))
        return worlds, out["score"], out["choice"]

    return jax.jit(front)


@compiled("batch.select")
def _select_function(pipeline, structure, players, variants, mode):
    """Compiled: the rows `rows` of the cases and of their recorded worlds, and the choices of
    each selected case's fully fixed run under its recorded noise (the drill-down's other
    side), `(cases, worlds, rows) -> (cases [A], World [A, 1], choice [A, sites])`."""
    full = np.ones(len(players), bool)

    def select(cases, worlds, rows):
        cases, worlds = jax.tree_util.tree_map(lambda x: x[rows], (cases, worlds))

        def fixed(case, world):
            plan = mask_plan(structure, players, variants, full)
            return trace_run(pipeline, structure, case, world, plan, mode)["choice"]

        return cases, worlds, jax.vmap(fixed)(cases, jax.tree_util.tree_map(lambda x: x[:, 0], worlds))

    return jax.jit(select)


@functools.partial(jax.jit, static_argnums=(1,))
def _visit_order(key, num_failures: int):
    """The seeded order in which the failures are visited."""
    return jr.permutation(jr.fold_in(key, 0x0BDE), num_failures)


def _progress(enabled: bool, total: int):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional
        return None
    return tqdm(total=total, desc="failures", unit="failure", leave=False)


def _option_names(option_names, structure):
    if option_names is None:
        return None
    out = []
    for step in structure.steps:
        labels = option_names.get(step)
        k = structure.num_options[structure.step_index(step)]
        if labels is not None and len(labels) != k:
            raise ValueError(f"`option_names[{step!r}]` must name all {k} options, got {len(labels)}")
        out.append((step, tuple(labels) if labels is not None else None))
    for step in option_names:
        structure.step_index(step)  # unknown names raise
    return tuple(out)


def _empty_result(structure, names, noise, estimator, interval, delta, threshold, score_range, num_cases, evaluations, option_names):
    n = len(names)
    sites = len(structure.sites)
    z = np.zeros((0,))
    nan = np.full((n,), np.nan)
    return BatchResult(
        steps=names, site_steps=tuple(s.step for s in structure.sites),
        option_names=_option_names(option_names, structure), noise=noise, question=NOISE_MODES[noise],
        estimator=estimator, interval=interval, delta=float(delta), threshold=threshold,
        score_range=score_range, num_cases=num_cases, num_failures=0, evaluations=evaluations,
        separated=False, separated_at={rule: None for rule in INTERVAL_RULES},
        failure_ids=np.zeros((0,), np.int64), shapley=np.zeros((0, n)), total=z, empty=z, full=z,
        resolve=np.zeros((0, n)), last_step=np.zeros((0, 1), np.int32), mean_shapley=nan,
        lower=nan, upper=nan, share_of_repair=nan, resolve_rate=nan, last_step_rate=nan,
        factual_choice=np.zeros((0, sites), np.int32), fixed_choice=np.zeros((0, sites), np.int32),
        factual_score=z,
    )
