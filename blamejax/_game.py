"""The game: what a call blames, discovered and checked once.

A `Game` holds the pipeline, its discovered structure, the players (the steps to blame), each
player's fix variant, the sampling mode and the declared score range. Every estimator builds
one at its entry (`make_game`, which runs the argument checks) and passes it on as one value;
it is hashable, so it is also the key of the compiled functions in the one compile cache.

The entry points that replay runs without blaming fixes (`replay`, `replay_fidelity`,
`contrastive`, `inferred_worlds`) check what they share with `discover_checked`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from ._checks import check_mode, check_score_range, check_worlds, leading_size, resolve_players
from .pipeline import Hard, Relaxed, Structure, World, check_finite_logits, discover_batch


class Game(NamedTuple):
    """What one call blames.

    - `pipeline`: `pipeline(ctx, case) -> score`, written for one failure, world and plan.
    - `structure`: its `Structure` (steps, draw sites, deterministic sites).
    - `players`: indices into `structure.steps` of the steps to blame, in pipeline order.
    - `fixes`: each player's fix variant (1 unless `fixes=` chose another).
    - `mode`: `Hard()` or `Relaxed(tau)`.
    - `score_range`: the declared `(low, high)` of the score.

    ```python
    import blamejax as bj
    game = bj.Game.make(bj.demos.refund_pipeline, bj.demos.refund_cases(2), steps=["writer", "reviewer"])
    assert game.steps == ("writer", "reviewer") and game.fixes == (1, 1)
    ```
    """

    pipeline: Callable
    structure: Structure
    players: tuple[int, ...]
    fixes: tuple[int, ...]
    mode: Hard | Relaxed
    score_range: tuple[float, float]

    @property
    def steps(self) -> tuple[str, ...]:
        """The players' step names, the order of every step axis of a result."""
        return tuple(self.structure.steps[p] for p in self.players)

    @property
    def num_players(self) -> int:
        """The number of players, `n` (the steps blamed)."""
        return len(self.players)

    @classmethod
    def make(cls, pipeline: Callable, cases, **kwargs) -> Game:
        """`make_game(pipeline, cases, **kwargs)`."""
        return make_game(pipeline, cases, **kwargs)


def make_game(
    pipeline: Callable,
    cases,
    *,
    steps: Sequence[str] | None = None,
    fixes: dict | None = None,
    mode=Hard(),
    score_range=(0.0, 1.0),
) -> Game:
    """Check the arguments every estimator shares and discover the pipeline's structure from
    `cases` (a pytree with a leading case axis), once.

    **Raises:** `TypeError`/`ValueError` naming the argument: empty or ragged `cases`, a
    `pipeline` that is not callable or makes no draw, unknown `steps`, bad `fixes`, a `mode`
    that is not `Hard()`/`Relaxed(tau)`, a malformed `score_range`.

    ```python
    import blamejax as bj
    game = bj.Game.make(bj.demos.refund_pipeline, bj.demos.refund_cases(2))
    print(game.steps)
    ```
    """
    leading_size(cases)
    low_high = check_score_range(score_range)
    mode = check_mode(mode)
    structure = discover_batch(pipeline, cases)
    players, variants = resolve_players(structure, steps, fixes)
    return Game(pipeline, structure, players, variants, mode, low_high)


def discover_checked(
    pipeline: Callable, cases, worlds: World | None = None
) -> tuple[Structure, int, int | None]:
    """The checks every replaying entry point shares, in one place: `cases` (a pytree with a
    leading case axis F, no NaN logits), the pipeline's structure (discovered once) and,
    when given, `worlds` (keys `[F, W]`).

    **Returns:** `(structure, F, W)`, `W = None` without `worlds`.

    **Raises:** `TypeError`/`ValueError` naming the argument, as `make_game`, and for NaN
    logits in `cases` or malformed `worlds`.

    ```python
    import blamejax as bj
    from blamejax._game import discover_checked
    structure, F, W = discover_checked(bj.demos.refund_pipeline, bj.demos.refund_cases(2), bj.recorded_worlds(0, range(2)))
    assert (F, W) == (2, 1)
    ```
    """
    num_cases = leading_size(cases)
    structure = discover_batch(pipeline, cases)
    check_finite_logits(cases)
    num_worlds = None if worlds is None else check_worlds(worlds, num_cases, structure)
    return structure, num_cases, num_worlds
