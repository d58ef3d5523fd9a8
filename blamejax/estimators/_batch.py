"""Batch blame over a test set.

Every case is run once as it happened; only the failures are analysed, visited in a
seeded random order. Per failure the Shapley values are exact (or, for many steps, a
fixed-budget Monte Carlo estimate: adaptively stopped per-failure estimates are biased and
would invalidate the interval across failures). Across failures the mean Shapley value of
each step gets an anytime-valid confidence interval, and the batch can stop as soon as the
top step is separated from all others.

`blame_batch` runs in four named phases: `_batch_front` runs every case once and picks the
failures; `_batch_init` selects them, with their fully fixed runs (the drill-down) and their
worlds; `_batch_step` analyses one block of failures (`_batch_analysis.py`) and decides the
looks it reaches; `_batch_finish` computes the statistics across failures and builds the
`BatchResult`. The checks its arguments must pass together are in `_batch_checks.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import numpy as np

from .._arguments import (
    check_bool,
    check_int_at_least,
    check_one_of,
    check_option,
    check_positive_int,
    renamed_keywords,
)
from .._checks import as_key, check_scores_in_range, leading_size
from .._game import make_game
from ..pipeline import Hard, check_finite_logits
from ..stats import (
    INTERVAL_RULES,
    Interval,
    Schedule,
    look_interval,
    looks,
    top_separated_at,
)
from ..worlds import (
    expected_worlds,
    inferred_worlds,
)
from ._batch_analysis import analyse_block, coalition_tables, failure_worlds, inferred_key, num_rows
from ._batch_checks import (
    QUESTIONS,
    check_batch_threshold,
    check_noise,
    check_observed,
    check_stop,
    checked_option_names,
    resolved_estimator,
    stop_from_flag,
)
from ._batch_programs import (
    front_function,
    observed_front_function,
    select_function,
)
from ._batch_state import BatchFront, BatchSettings, BatchState
from ._checkpoint import (
    checkpoint_path,
    defers_interrupts,
    interrupt_notice,
    interrupted,
    read_checkpoint,
    write_checkpoint,
)
from ._devices import on_device, take_rows
from ._exact import explain_nan
from ._order import visit_order
from ._results import BatchResult
from ._resume import (
    batch_fingerprint,
    batch_interrupt_message,
    batch_interrupt_notice,
    resumed_state,
    saved_state,
)

STOP_EARLY_BLOCK = 32  # failures analysed per compiled call when stopping early


NUM_BLOCKS = 20  # about this many blocks by default (`_block_size`)


MIN_PLAIN_BLOCK = 1024  # failures per block at least, without a checkpoint or progress bar


@renamed_keywords(
    interval={"interval": "kind", "delta": "delta"},
    schedule={"first_checkpoint": "first", "growth": "growth"},
    stop={"stop_early": stop_from_flag},
)
@defers_interrupts  # Ctrl-C is honoured between blocks, never inside XLA
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
    interval: Interval = Interval("bernstein", delta=0.1),
    stop: str | Sequence[str] = (),
    schedule: Schedule = Schedule(first=10, growth=1.5),
    max_failures: int | None = None,
    option_names: dict | None = None,
    mode=Hard(),
    progress: bool = False,
    keep_coalitions: bool = False,
    checkpoint=None,
    block_size: int | None = None,
) -> BatchResult:
    """Blame every failure of a test set and summarise across failures.

    **Arguments:**
    - `pipeline`: `pipeline(ctx, case) -> score`.
    - `cases`: the test set, a pytree with a leading case axis.
    - `key`: root key or int seed. Case i's recorded noise is world 0 of `fold_in(key, i)`;
      the same key also seeds the visiting order, fresh worlds and abduction.
    - `noise`: `"recorded"`, `"inferred"` or `"fresh"` (see `NOISE_MODES`); or
      `"expected-inferred"` / `"expected-fresh"`, their limits over infinitely many worlds,
      integrated exactly (`expected_worlds`; `resolve` then says whether the expected
      fix-alone score reaches `threshold`).
    - `num_worlds`: W for inferred and fresh noise (recorded noise has one world).
    - `observed`: for `"inferred"`, `Int[Array, "cases sites"]` observed choices from a log
      (default: the recorded run's). Given, a case fails when the run along its observed
      choices fails.
    - `steps`, `fixes`: the players and their fix variants (see `exact_blame`).
    - `score_range`: the declared score range; `threshold`: a run passes when its score is
      >= threshold (default: the top of the range).
    - `estimator`: `"exact"`, `"mc"` (a fixed number of orders per failure) or `"auto"`
      (exact up to 14 steps).
    - `num_permutations`: orders per failure and world for `"mc"` (a count of orders;
      `mc_shapley`'s `max_evaluations` bounds coalition evaluations).
    - `interval`: a `blamejax.stats.Interval` of kind `"bernstein"` (finite-sample, width
      `2 (s_max - s_min)`) or `"normal"` (asymptotic); its `delta` covers every interval
      of the failure stream together (anytime valid).
    - `stop`: `()` to analyse every failure (and report where it would have stopped), or
      `"top1"` to stop at the first look where the top step's interval is disjoint from
      every other step's.
    - `schedule`: a `blamejax.stats.Schedule`, the looks in failures.
    - `max_failures`: analyse at most this many failures.
    - `option_names`: `{step: tuple of option names}` for the reports.
    - `progress`: show a tqdm progress bar that moves once per block of failures.
    - `keep_coalitions`: also keep every coalition's score in every world (exact estimator
      only; memory `A W 2^n`), for `to_html(interactive=True)`.
    - `checkpoint`: a file path. Each completed block of failures is saved there
      atomically, with a fingerprint of the arguments; the same call run again resumes
      after the last saved block, bit for bit as an uninterrupted run (a finished run's
      file returns its result). Delete the file to start over. See docs/scaling.md.
    - `block_size`: failures analysed per compiled call (one block: what a checkpoint saves,
      the progress bar shows, and a Ctrl-C waits for). Default: 32 when stopping early;
      otherwise about a twentieth of the failures, at least 32, and unless `checkpoint` or
      `progress` is given at least 1,024. The per-failure values do not depend on it.

    ```python
    import os, tempfile
    import numpy as np
    import blamejax as bj
    cases = bj.demos.refund_cases(60)
    path = os.path.join(tempfile.mkdtemp(), "refund.ckpt.json")
    first = bj.blame_batch(bj.demos.refund_pipeline, cases, 0, checkpoint=path, block_size=8)
    again = bj.blame_batch(bj.demos.refund_pipeline, cases, 0, checkpoint=path, block_size=8)
    assert np.array_equal(first.shapley, again.shapley)  # read back, not recomputed
    ```

    **Returns:** a `BatchResult` (an all-passing test set gives one with no failures).

    **Raises:** `ValueError`/`TypeError` naming the argument for bad arguments;
    `CheckpointError` (a `ValueError`) naming the file for a `checkpoint` written by a call
    with other arguments (each one named), a corrupt file, or a newer format;
    `KeyboardInterrupt` after Ctrl-C (SIGINT), at the end of the block it came in (saved).
    """
    game = make_game(pipeline, cases, steps=steps, fixes=fixes, mode=mode, score_range=score_range)
    noise = check_noise(noise)
    interval = check_option(interval, "interval", Interval)
    check_one_of(interval.kind, "interval.kind", INTERVAL_RULES)
    estimator = check_one_of(estimator, "estimator", ("auto", "exact", "mc"))
    low, high = game.score_range
    settings = BatchSettings(
        game=game,
        key=as_key(key),
        noise=noise,
        num_worlds=check_positive_int(num_worlds, "num_worlds"),
        observed=check_observed(observed, noise, cases, game.structure),
        threshold=check_batch_threshold(threshold, low, high),
        estimator=estimator,
        num_permutations=check_int_at_least(num_permutations, "num_permutations", 2),
        interval=interval,
        stop=check_stop(stop),
        schedule=check_option(schedule, "schedule", Schedule),
        value_range=2.0 * (high - low),
        keep_coalitions=check_bool(keep_coalitions, "keep_coalitions"),
        in_blocks=checkpoint is not None or check_bool(progress, "progress"),
        block_size=check_positive_int(block_size, "block_size", allow_none=True),
    )
    max_failures = check_positive_int(max_failures, "max_failures", allow_none=True)
    checked_option_names(option_names, game.structure)  # checked before any work
    settings = resolved_estimator(settings, cases)
    path = None if checkpoint is None else checkpoint_path(checkpoint)
    return _batch_run(settings, cases, max_failures, path, progress, option_names)


def _batch_run(settings: BatchSettings, cases, max_failures, path, progress: bool, option_names):
    """The run of a checked `blame_batch` call: the front, the blocks of failures (each saved
    to `path` when given; Ctrl-C honoured between them), and the result."""
    check_finite_logits(cases)  # before the transfer: host arrays are checked where they are
    cases = jax.tree_util.tree_map(on_device, cases)  # on the device once, sliced there
    saved = fingerprint = None
    if path is not None:  # a checkpoint of other arguments is refused before any work
        interrupt_notice(batch_interrupt_notice(path))
        fingerprint = batch_fingerprint(settings, cases, max_failures)
        saved = read_checkpoint(path, fingerprint)
    if interrupted():
        raise KeyboardInterrupt(batch_interrupt_message(path, 0, None))
    front = _batch_front(settings, cases, max_failures)
    total = int(front.failed.size)
    if interrupted():
        raise KeyboardInterrupt(batch_interrupt_message(path, 0, total))
    if total == 0:
        return _empty_result(settings, front, option_names)
    state = _batch_init(settings, front, cases)
    if saved is not None:
        state = resumed_state(path, state, *saved)
    bar = _progress(progress, total, state.start)
    try:
        while state.start < total and state.stopped is None and not interrupted():
            state = _batch_step(settings, state)
            if path is not None:
                write_checkpoint(path, fingerprint, *saved_state(state))
            if bar is not None:
                _advance(bar, state, total)
    finally:
        if bar is not None:
            bar.close()
    if interrupted():
        raise KeyboardInterrupt(batch_interrupt_message(path, state.start, total))
    return _batch_finish(settings, front, state, option_names)


def _batch_front(settings: BatchSettings, cases, max_failures) -> BatchFront:
    """Every case once, as it happened; a pass costs one evaluation. The failures are
    visited in a seeded random order (at most `max_failures` of them).

    As it happened means under recorded noise, or, when `observed` choices are given (a log),
    along the observed path: a case fails when its observed run fails, whatever the recorded
    noise would have chosen. Its world is then its first posterior world (the one the
    analysis's world 0 is), which replays the observed choices exactly."""
    game = settings.game
    num_cases = leading_size(cases)
    if settings.observed is None:
        recorded, scores, choices = front_function(game.pipeline, game.structure, game.mode)(
            cases, settings.key
        )
    else:
        ids = np.arange(num_cases)
        recorded = inferred_worlds(
            game.pipeline, cases, settings.observed, inferred_key(settings.key), 1, case_ids=ids
        )
        scores, choices = observed_front_function(game.pipeline, game.structure, game.mode)(
            cases, recorded
        )
    scores, choices = np.asarray(scores), np.asarray(choices)
    nan = np.isnan(scores)  # never a pass, never a failure to blame: an error
    check_scores_in_range(
        np.min(scores),
        np.max(scores),
        game.score_range,
        lambda: explain_nan(game, cases, recorded, nan, np.arange(nan.size)),
    )
    failed = np.flatnonzero(scores < settings.threshold)
    failed = failed[visit_order(settings.key, failed.size)]  # on the host: no program to compile
    if max_failures is not None:
        failed = failed[:max_failures]
    return BatchFront(
        num_cases=num_cases,
        recorded=recorded,
        scores=scores,
        choices=choices,
        num_failures=int(np.sum(scores < settings.threshold)),
        failed=failed,
    )


def _batch_init(settings: BatchSettings, front: BatchFront, cases) -> BatchState:
    """The failures to analyse, their fully fixed runs under their own noise (for the
    drill-down; one evaluation each), their worlds, and the checkpoints of the stream."""
    game, failed = settings.game, front.failed
    select = select_function(game)
    failed_cases, own_worlds, fixed_choices = select(
        cases, front.recorded, np.asarray(failed, np.int32)
    )
    if settings.noise == "recorded":  # the failures' own worlds
        worlds = own_worlds
    elif settings.noise.startswith("expected"):  # every world, integrated
        observed = None
        if settings.noise == "expected-inferred":
            source = front.choices if settings.observed is None else settings.observed
            observed = np.asarray(source)[failed]
        worlds = expected_worlds(failed, observed)
    else:
        worlds = failure_worlds(settings, failed_cases, failed, front.choices)
    size = int(failed.size)
    if size > settings.schedule.first:
        marks = looks(settings.schedule, size)
    else:
        marks = (size,)
    return BatchState(
        case_ids=failed,
        cases=failed_cases,
        worlds=worlds,
        fixed_choices=fixed_choices,
        marks=tuple(marks),
        start=0,
        k=0,
        blocks=(),
        separated_at={rule: None for rule in INTERVAL_RULES},
        stopped=None,
        evaluations=front.num_cases + size,
        block_size=_block_size(settings, size),
    )


def _block_size(settings: BatchSettings, size: int) -> int:
    """Failures per block: as asked; else 32 when stopping early; else about `NUM_BLOCKS`
    blocks of at least 32 failures, and at least `MIN_PLAIN_BLOCK` unless a checkpoint is
    kept or progress shown (so that a plain batch of up to that many failures is one call,
    and a long one still stops soon after a Ctrl-C), evened out so that the last block is
    nearly full (it is padded to the block size: one compiled shape)."""
    if settings.block_size is not None:
        return min(settings.block_size, size)
    if settings.stop:
        return STOP_EARLY_BLOCK
    block = STOP_EARLY_BLOCK * -(-size // (NUM_BLOCKS * STOP_EARLY_BLOCK))
    block = min(size, block if settings.in_blocks else max(block, MIN_PLAIN_BLOCK))
    return -(-size // -(-size // block))  # blocks of equal size: the last one pads little


def _batch_step(settings: BatchSettings, state: BatchState) -> BatchState:
    """Analyse the next block of failures, then decide every checkpoint of the stream it
    reaches. Intervals are formed and stopping decided only at those checkpoints; values are
    computed in blocks of `state.block_size` failures (one compiled shape: a short last
    block is padded with copies of its first failure, whose values are dropped)."""
    size = num_rows(state.worlds)
    block_size = state.block_size or size
    rows = np.arange(state.start, min(state.start + block_size, size))
    if rows.size == size:
        block_cases, block_worlds = state.cases, state.worlds
        padded = rows
    else:
        padded = np.concatenate([rows, np.full(block_size - rows.size, rows[0])])
        block_cases, block_worlds = take_rows(
            (state.cases, state.worlds), np.asarray(padded, np.int32)
        )
    block = analyse_block(settings, block_cases, block_worlds, state.start, state.case_ids[padded])
    # the padding's values and evaluations (linear in the rows) are dropped
    evaluations = state.evaluations + block.pop("evaluations") * rows.size // padded.size
    block = {name: value[: rows.size] for name, value in block.items()}
    blocks = state.blocks + (block,)
    start = int(rows[-1]) + 1
    marks, k, interval = state.marks, state.k, settings.interval
    separated_at, stopped = dict(state.separated_at), None
    values = np.concatenate([b["shapley"] for b in blocks])
    reached = k + int(np.searchsorted(marks[k:], start, side="right"))  # marks <= start
    if reached > k:  # checkpoints k+1..reached, decided at once
        ts, ks = marks[k:reached], np.arange(k + 1, reached + 1)
        first = {}
        for rule in INTERVAL_RULES:
            if separated_at[rule] is None:
                hits = np.flatnonzero(
                    top_separated_at(values, ts, ks, rule, interval.delta, settings.value_range)
                )
                first[rule] = int(hits[0]) if hits.size else None
        looked = len(ts)  # when the batch stops, checkpoints after the stop are not looked at
        if settings.stop and first.get(interval.kind) is not None:
            looked = first[interval.kind] + 1
            stopped = k + looked
        for rule, j in first.items():
            if j is not None and j < looked:
                separated_at[rule] = int(ts[j])
        k = reached
    return state._replace(
        start=start,
        k=k,
        blocks=blocks,
        separated_at=separated_at,
        stopped=stopped,
        evaluations=evaluations,
    )


def _batch_finish(
    settings: BatchSettings, front: BatchFront, state: BatchState, option_names
) -> BatchResult:
    """The statistics across the analysed failures, and the result on the host; the
    drill-down shows the failed run and the fully fixed run of each analysed failure."""
    game, marks, stopped = settings.game, state.marks, state.stopped
    n = game.num_players
    k_last = stopped if stopped is not None else len(marks)
    cat = {name: np.concatenate([b[name] for b in state.blocks]) for name in state.blocks[0]}
    if stopped is not None:  # values computed past the stopping checkpoint are not looked at
        cat = {name: value[: marks[stopped - 1]] for name, value in cat.items()}
    analysed = front.failed[: cat["shapley"].shape[0]]
    values = cat["shapley"]
    mean, lo, hi, _ = look_interval(
        values, k_last, settings.interval.kind, settings.interval.delta, settings.value_range
    )
    total = cat["total"]
    share = values.sum(0) / total.sum() if abs(total.sum()) > 0 else np.full(n, np.nan)
    last = cat["last_step"]
    last_rate = np.array([(last == i).mean() for i in range(n)])
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
        factual_choice=front.choices[analysed],
        fixed_choice=np.asarray(state.fixed_choices)[: analysed.size],
        factual_score=front.scores[analysed],
    )
    estimator = settings.estimator
    tables = {}
    if settings.keep_coalitions:
        tables = coalition_tables(settings, front, state, analysed)
        state = state._replace(evaluations=state.evaluations + tables.pop("evaluations"))
    return BatchResult(
        steps=game.steps,
        site_steps=tuple(s.step for s in game.structure.sites),
        option_names=checked_option_names(option_names, game.structure),
        noise=settings.noise,
        question=QUESTIONS[settings.noise],
        estimator=estimator
        if estimator == "exact"
        else f"mc ({settings.num_permutations} permutations per world)",
        interval=settings.interval.kind,
        delta=settings.interval.delta,
        threshold=settings.threshold,
        score_range=game.score_range,
        num_cases=front.num_cases,
        num_failures=front.num_failures,
        evaluations=int(state.evaluations),
        separated=state.separated_at[settings.interval.kind] is not None,
        separated_at=state.separated_at,
        interval_look=int(k_last),
        **{name: np.asarray(value) for name, value in arrays.items()},
        **tables,
    )


def _progress(enabled: bool, total: int, done: int = 0):
    """A tqdm bar over the failure stream (from `done`, when resuming), moved once per block
    by `_advance`: failures per second and the time left come from tqdm."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional
        return None
    return tqdm(
        total=total,
        initial=done,
        desc="failures",
        unit="failure",
        leave=False,
        smoothing=0.5,
        mininterval=0,
        miniters=1,  # show every block
    )


def _advance(bar, state: BatchState, total: int) -> None:
    size = state.block_size or total
    bar.set_postfix_str(f"block {-(-state.start // size)}/{-(-total // size)}", refresh=False)
    bar.update(state.start - bar.n)


def _empty_result(settings: BatchSettings, front: BatchFront, option_names) -> BatchResult:
    """The result of a test set with no failure to analyse: nothing to blame, not an error."""
    game = settings.game
    structure, names = game.structure, game.steps
    n = len(names)
    sites = len(structure.sites)
    z = np.zeros((0,))
    nan = np.full((n,), np.nan)
    return BatchResult(
        steps=names,
        site_steps=tuple(s.step for s in structure.sites),
        option_names=checked_option_names(option_names, structure),
        noise=settings.noise,
        question=QUESTIONS[settings.noise],
        estimator=settings.estimator,
        interval=settings.interval.kind,
        delta=settings.interval.delta,
        threshold=settings.threshold,
        score_range=game.score_range,
        num_cases=front.num_cases,
        num_failures=0,
        evaluations=front.num_cases,
        separated=False,
        separated_at={rule: None for rule in INTERVAL_RULES},
        failure_ids=np.zeros((0,), np.int64),
        shapley=np.zeros((0, n)),
        total=z,
        empty=z,
        full=z,
        resolve=np.zeros((0, n)),
        last_step=np.zeros((0, 1), np.int32),
        mean_shapley=nan,
        lower=nan,
        upper=nan,
        share_of_repair=nan,
        resolve_rate=nan,
        last_step_rate=nan,
        factual_choice=np.zeros((0, sites), np.int32),
        fixed_choice=np.zeros((0, sites), np.int32),
        factual_score=z,
    )
