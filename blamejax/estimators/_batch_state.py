"""What a `blame_batch` run was asked for (`BatchSettings`), its first pass over the cases
(`BatchFront`) and where its stream of failures stands (`BatchState`): the values its phases
(`_batch.py`) pass on and its checkpoint (`_resume.py`) saves and takes up again."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._game import Game
from ..pipeline import World
from ..stats import Interval, Schedule


class BatchSettings(NamedTuple):
    """What a `blame_batch` run was asked for, checked once."""

    game: Game
    key: object  # the typed root key
    noise: str
    num_worlds: int
    observed: object  # observed choices for inferred noise, or None
    threshold: float
    estimator: str  # "exact" or "mc" ("auto" resolved)
    num_permutations: int
    interval: Interval  # its kind ("bernstein" or "normal") and delta
    stop: bool  # stop at the first look where the top step is separated
    schedule: Schedule  # the looks of the failure stream, in failures
    value_range: float  # the width of the interval a Shapley value lies in
    keep_coalitions: bool = (
        False  # keep every coalition's scores and outputs (the interactive page)
    )
    in_blocks: bool = False  # analyse in blocks (a checkpoint is kept or a progress bar shown)
    block_size: int | None = None  # failures per block as asked (None: the default, `_block_size`)


class BatchFront(NamedTuple):
    """Every case run once as it happened (recorded noise), and the failures to analyse."""

    num_cases: int
    recorded: World  # key shape=(C, 1), every case's recorded world
    scores: np.ndarray  # shape=(C,), the factual scores
    choices: np.ndarray  # shape=(C, sites), the factual choices
    num_failures: int  # cases with score < threshold
    failed: np.ndarray  # shape=(A,), the failures to analyse, in the seeded visiting order


class BatchState(NamedTuple):
    """Where the stream of failures stands."""

    case_ids: np.ndarray  # shape=(A,), the case index of each failure to analyse
    cases: object  # the failures' cases, shape=(A, ...), in visiting order
    worlds: World  # their worlds, key shape=(A, W)
    fixed_choices: object  # shape=(A, sites), the choices of each failure's fully fixed run
    marks: tuple[int, ...]  # the checkpoints of the failure stream, in failures
    start: int  # failures analysed so far
    k: int  # checkpoints decided so far
    blocks: tuple  # one dict of per-failure arrays per analysed block
    separated_at: dict  # rule -> failures needed to separate the top step, or None
    stopped: int | None  # the checkpoint at which the batch stopped early, or None
    evaluations: int  # pipeline runs so far
    block_size: int = 0  # failures analysed per compiled call (`_block_size`)
