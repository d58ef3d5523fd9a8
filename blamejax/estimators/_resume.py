"""Resuming a `blame_batch` run: what its checkpoint must agree on (`batch_fingerprint`),
what it holds (`saved_state`), how the stream of failures is taken up again
(`resumed_state`), and what a Ctrl-C says. The file itself, and the deferral of Ctrl-C, are
`_checkpoint.py`'s."""

from __future__ import annotations

import jax.random as jr
import numpy as np

from ._batch_state import BatchSettings, BatchState
from ._checkpoint import (
    CheckpointError,
    array_identity,
    callable_identity,
    environment,
    tree_identity,
)


def batch_interrupt_notice(path) -> str:
    where = "" if path is None else f" (it is saved to {path})"
    return f"blame_batch: Ctrl-C received; stopping after the current block of failures{where}"


def batch_interrupt_message(path, done: int, total: int | None) -> str:
    if path is None:
        return (
            f"blame_batch stopped by Ctrl-C after {done} of {total or 0} failures; nothing was saved: "
            "pass checkpoint=PATH to keep each completed block and resume from it"
        )
    if done == 0:
        return (
            f"blame_batch stopped by Ctrl-C before its first block of failures was complete; "
            f"nothing was saved in {path}: run the same call again to start"
        )
    return (
        f"blame_batch stopped by Ctrl-C after {done} of {total} failures, saved in {path}: run "
        "the same call again (same arguments, same checkpoint) to resume from there"
    )


_FILE_NAMES = {
    "interval": lambda interval: {"interval": interval.kind, "delta": interval.delta},
    "stop": lambda stop: {"stop_early": stop},
    "schedule": lambda schedule: {"first_checkpoint": schedule.first, "growth": schedule.growth},
}
"""Each options setting as the fingerprint keys a checkpoint file holds (written so before the
options were values: files written then still resume)."""


def batch_fingerprint(settings: BatchSettings, cases, max_failures) -> dict:
    """What the checkpoint must agree on, named as the arguments are: every setting (the
    game by its parts), the cases by their bytes, and the environment."""
    game = settings.game
    out = {
        "pipeline": callable_identity(game.pipeline),
        "cases": tree_identity(cases),
        "steps": list(game.steps),
        "fixes": list(game.fixes),
        "mode": tree_identity(game.mode) | {"type": type(game.mode).__name__},
        "score_range": list(game.score_range),
        "max_failures": max_failures,
    }
    for name, value in settings._asdict().items():
        if name in ("game", "value_range"):  # by its parts above; derived from score_range
            continue
        if name == "key":
            out[name] = {
                "impl": str(jr.key_impl(value)),
                "data": np.asarray(jr.key_data(value)).tolist(),
            }
        elif name == "observed":
            out[name] = None if value is None else array_identity(value)
        elif name in _FILE_NAMES:  # options objects, under the keys files have always had
            out.update(_FILE_NAMES[name](value))
        else:
            out[name] = value
    return out | environment()


def saved_state(state: BatchState) -> tuple[dict, dict]:
    """What a checkpoint holds: where the stream stands, and the per-failure arrays of
    every analysed block, joined."""
    progress = dict(
        start=state.start,
        k=state.k,
        stopped=state.stopped,
        evaluations=int(state.evaluations),
        separated_at=state.separated_at,
        block_size=state.block_size,
    )
    arrays = {name: np.concatenate([b[name] for b in state.blocks]) for name in state.blocks[0]}
    return progress, arrays


def resumed_state(path: str, state: BatchState, progress: dict, arrays: dict) -> BatchState:
    """The stream as the checkpoint left it (checked against what the arguments imply)."""
    try:
        start, k, stopped = int(progress["start"]), int(progress["k"]), progress["stopped"]
        consistent = (
            0 < start <= state.case_ids.size
            and 0 <= k <= len(state.marks)
            and progress["block_size"] == state.block_size
            and set(progress["separated_at"]) == set(state.separated_at)
            and set(arrays) >= {"shapley", "total"}
            and all(value.shape[:1] == (start,) for value in arrays.values())
        )
    except (KeyError, TypeError, ValueError):
        consistent = False
    if not consistent:
        raise CheckpointError(
            f"`checkpoint` file {path!r} is corrupt (its progress does not fit these {state.case_ids.size} "
            "failures); delete it to start over"
        )
    return state._replace(
        start=start,
        k=k,
        stopped=None if stopped is None else int(stopped),
        blocks=(arrays,),
        separated_at=dict(progress["separated_at"]),
        evaluations=int(progress["evaluations"]),
    )
