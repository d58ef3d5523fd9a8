"""`blame_batch`'s analysis of one block of failures (`analyse_block`: exact or Monte Carlo
values per failure), the failures' worlds (`failure_worlds`), and the coalition tables the
interactive report needs (`coalition_tables`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._checks import check_scores_in_range
from ..noise import BATCH_MC_TAG, INFERRED_TAG
from ..pipeline import World
from ..worlds import ExpectedWorlds, fresh_worlds, inferred_worlds, recorded_worlds
from ._batch_programs import coalition_function, mc_function
from ._batch_state import BatchFront, BatchSettings, BatchState
from ._devices import over_failures, take_rows
from ._exact import exact_run, explain_nan


def analyse_block(settings: BatchSettings, cases, worlds, start: int, case_ids) -> dict:
    """Per-failure values of one block: host arrays (float64), and the evaluations spent."""
    game = settings.game
    n = game.num_players
    num_f, num_w = (num_rows(worlds), 1) if isinstance(worlds, ExpectedWorlds) else worlds.key.shape
    if settings.estimator == "exact":
        result, resolve = exact_run(
            game,
            cases,
            worlds,
            max_steps=max(n, 20),
            threshold=settings.threshold,
            case_ids=case_ids,
            fixed_shape=True,  # every block has the block size: no bucket padding on top
        )
        out = jax.device_get(
            dict(
                shapley=result.shapley,
                empty=result.empty,
                full=result.full,
                last_step=result.last_step,
                resolve=resolve,
            )
        )  # one transfer; the total repair v(all) - v(empty) on the host (as `result.total`, in its dtype)
        out = dict(
            shapley=out["shapley"],
            total=out["full"] - out["empty"],
            **{k: v for k, v in out.items() if k != "shapley"},
        )
        out = {
            name: value.astype(np.float64) if name != "last_step" else value
            for name, value in out.items()
        }
        # The structured path scores no coalition on its own: it counts its direct runs.
        runs = 2 + n if result.method == "structured" else 1 << n
        return dict(out, evaluations=num_f * num_w * runs)
    # Failure i of the stream takes fold_in(key, i), whatever its block.
    key = jr.fold_in(settings.key, BATCH_MC_TAG)
    function = mc_function(game, settings.num_permutations)
    estimate, empty, full, last, resolve, low, high, nan = over_failures(  # split over devices
        function, cases, worlds, key, settings.threshold, jnp.int32(start)
    )
    nan = np.asarray(nan)
    check_scores_in_range(
        float(np.min(low)),
        float(np.max(high)),
        game.score_range,
        lambda: explain_nan(game, cases, worlds, nan, case_ids),
        nan=bool(nan.any()),
    )
    return dict(
        shapley=np.asarray(estimate.values, np.float64),
        total=np.asarray(full - empty, np.float64),
        empty=np.asarray(empty, np.float64),
        full=np.asarray(full, np.float64),
        last_step=np.asarray(last),
        resolve=np.asarray(resolve, np.float64),
        evaluations=num_f
        * num_w
        * (2 + settings.num_permutations * (n - 1) + n),  # + n: the fixes alone
    )


def coalition_tables(
    settings: BatchSettings, front: BatchFront, state: BatchState, analysed
) -> dict:
    """Every coalition's score in every world (`[A, W, 2^n]`, as float64) and every site's
    output in each failure's own world (`[A, 2^n, sites]`: recorded noise, or the observed
    path when `observed` is given) of the analysed failures."""
    rows = np.arange(analysed.size, dtype=np.int32)
    cases, worlds = take_rows((state.cases, state.worlds), rows)
    own = take_rows(front.recorded, np.asarray(analysed, np.int32))  # as it happened
    scores, choices = coalition_function(settings.game)(cases, worlds, own)
    num_f, num_w = worlds.key.shape
    size = 1 << settings.game.num_players
    return dict(
        coalition_scores=np.asarray(scores, np.float64),
        coalition_choices=np.asarray(choices),
        evaluations=num_f * (num_w + 1) * size,
    )


def failure_worlds(settings: BatchSettings, sub_cases, ids, choices) -> World:
    """The failures' worlds under inferred or fresh noise."""
    key, noise, num_worlds = settings.key, settings.noise, settings.num_worlds
    if noise == "recorded":
        return recorded_worlds(key, ids)
    if noise == "fresh":
        return fresh_worlds(key, ids, num_worlds)
    observed = settings.observed
    obs = choices[ids] if observed is None else np.asarray(observed)[ids]
    pipeline = settings.game.pipeline
    return inferred_worlds(pipeline, sub_cases, obs, inferred_key(key), num_worlds, case_ids=ids)


def num_rows(worlds) -> int:
    """The failures `worlds` covers (a `World`'s keys `[F, W]`, an `ExpectedWorlds`' ids)."""
    if isinstance(worlds, ExpectedWorlds):
        return int(worlds.case_id.shape[0])
    return int(worlds.key.shape[0])


def inferred_key(key):
    """The root key of the inferred worlds (the front's and the analysis's are the same)."""
    return jr.fold_in(key, INFERRED_TAG)
