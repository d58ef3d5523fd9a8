"""A plain Python/numpy reference for exact blame, to time and check blamejax against.

It does what a hand-written implementation does: for every failure, every world and every
coalition, run the pipeline step by step in Python, with a per-step cache so that a step
whose inputs were seen before is not recomputed; then Shapley values by the textbook
weighted sum over coalitions, in float64.

The pipeline is described as tables, one `TableStep` per step (the same tables the
blamejax pipeline reads), and a score function of the choices. The noise is blamejax's
own: every site's Gumbels come from `blamejax.gumbel_at` at the same address, computed once
up front (`site_noise`), so both sides replay exactly the same luck.

This module is shared by the benchmarks; it is not part of the library.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from math import comb
from operator import itemgetter
from typing import NamedTuple

import jax
import numpy as np

import blamejax as bj


class TableStep(NamedTuple):
    """One step of a tabulated pipeline.

    - `name`: the step's name (its noise address).
    - `logits`: `[F, V, *K_parents, K]`, the logits of every failure, variant and parent
      choice (variant 0 = factual, 1.. = fixes).
    - `parents`: indices of the earlier steps whose choices index the parent axes, in order.
    """

    name: str
    logits: np.ndarray
    parents: tuple[int, ...]


def site_noise(worlds: bj.World, steps: Sequence[TableStep]) -> np.ndarray:
    """The Gumbels of every step (slot 0) in every world: `[F, W, n, K_max]`.

    Computed with `blamejax.gumbel_at`, the public addressed-noise function, so that the
    reference replays exactly the noise blamejax uses (entries past a step's K are unused).
    """
    num_options = max(step.logits.shape[-1] for step in steps)
    per_step = []
    for step in steps:
        # Run eagerly: every step then reuses the same small compiled kernels.
        one = jax.vmap(
            jax.vmap(lambda key, name=step.name: bj.noise.gumbel_at(key, name, 0, num_options))
        )
        per_step.append(np.asarray(one(worlds.key)))
    return np.stack(per_step, axis=2)


def world_values(
    steps: Sequence[TableStep],
    score: Callable[[int, list[int]], float],
    failure: int,
    noise: np.ndarray,
    fixes: Sequence[int],
    coalitions: Sequence[int] | None = None,
) -> np.ndarray:
    """The score of every coalition (or of those in `coalitions`) for one failure and one
    world, by running the steps in a Python loop with a per-step cache.

    Coalition `m` (an int) runs step i's fix `fixes[i]` when bit i of m is set. The cache
    key of a step is (step, its variant, its parents' choices): the step's output is a
    function of these alone once the world's noise is fixed.

    **Arguments:**
    - `steps`: the pipeline's steps, parents before children.
    - `score`: `score(failure, choices) -> float`, the run's score from every step's choice.
    - `failure`: which failure (row of every `logits` table).
    - `noise`: `[n, K_max]`, this world's Gumbels (a slice of `site_noise`).
    - `fixes`: the fix variant of every step.
    - `coalitions`: the coalitions to evaluate, default all `2**n` in order.

    **Returns:** `float64[M]`, the score of each coalition.
    """
    num_steps = len(steps)
    if coalitions is None:
        coalitions = range(1 << num_steps)
    tables = [step.logits[failure] for step in steps]
    gumbels = [noise[i, : tables[i].shape[-1]] for i in range(num_steps)]
    # parents_of[i](choices): the parents' choices, as an int (one parent) or a tuple.
    parents_of = [itemgetter(*step.parents) if step.parents else _no_parents for step in steps]
    cache: dict = {}
    values = np.empty(len(coalitions), dtype=np.float64)
    for row, mask in enumerate(coalitions):
        choices: list[int] = []
        for i in range(num_steps):
            variant = fixes[i] if (mask >> i) & 1 else 0
            key = (i, variant, parents_of[i](choices))
            choice = cache.get(key)
            if choice is None:
                seen = key[2] if isinstance(key[2], tuple) else (key[2],)
                logits = tables[i][(variant, *seen)]  # the row this step sees: [K]
                choice = int(np.argmax(logits + gumbels[i]))
                cache[key] = choice
            choices.append(choice)
        values[row] = score(failure, choices)
    return values


def _no_parents(choices) -> tuple:
    return ()


def shapley_weights(num_players: int) -> np.ndarray:
    """`s! (n - s - 1)! / n!` for s = 0..n-1, from Python integers, in float64."""
    n = num_players
    return np.array([float(Fraction(1, n * comb(n - 1, s))) for s in range(n)])


def textbook_shapley(values: np.ndarray) -> np.ndarray:
    """Shapley values from the full table `values[2**n]` (float64), by the textbook sum
    `phi_i = sum over S without i of w(|S|) (v(S + i) - v(S))`, one player at a time."""
    values = np.asarray(values, dtype=np.float64)
    size = values.shape[0]
    n = size.bit_length() - 1
    masks = np.arange(size, dtype=np.int64)
    popcount = np.zeros(size, dtype=np.int64)
    for i in range(n):
        popcount += (masks >> i) & 1
    weights = shapley_weights(n)
    phi = np.empty(n, dtype=np.float64)
    for i in range(n):
        without = masks[((masks >> i) & 1) == 0]
        phi[i] = np.sum(weights[popcount[without]] * (values[without | (1 << i)] - values[without]))
    return phi


# -- a chain's Shapley values by the multilinear extension, in float64 (the structured path's
# reference: `bench_structured.py` and `tests/test_structured.py`) -----------------------------


def numpy_chain_cases(
    seed: int, num_steps: int, num_cases: int, num_options: int, num_variants: int = 2
):
    """Tables of a chain drawn with NumPy (float32): step 0 `[F, V, K]`, step i `[F, V, K, K]`
    given step i - 1, and a score `[F, K]` read from the last step. (Drawn with JAX, one program
    per length compiles for minutes at n = 1000.)"""
    rng = np.random.default_rng(seed)
    shape = (num_cases, num_variants)
    tables = [
        np.asarray(
            1.5 * rng.standard_normal(shape + ((num_options,) if i else ()) + (num_options,)),
            np.float32,
        )
        for i in range(num_steps)
    ]
    score = np.asarray(rng.uniform(size=(num_cases, num_options)), np.float32)
    return dict(tables=[jax.numpy.asarray(t) for t in tables], score=jax.numpy.asarray(score))


def chain_shapley(fact: np.ndarray, fix: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Shapley values of a chain from its maps (`[n, K]`: each step's option for each option of
    the step before, factual and fixed), in float64: the forward-backward recursion written
    plainly (every Gauss-Legendre node at once), integrated over t."""
    n, size = fact.shape
    x, w = np.polynomial.legendre.leggauss(-(-n // 2))
    t, w = (x + 1)[:, None] / 2, w / 2
    alpha = np.zeros((t.size, size))
    alpha[:, 0] = 1.0
    before = []
    for s in range(n):
        before.append(alpha)
        new = np.zeros_like(alpha)
        for c in range(size):
            new[:, fact[s, c]] += (1 - t[:, 0]) * alpha[:, c]
            new[:, fix[s, c]] += t[:, 0] * alpha[:, c]
        alpha = new
    beta = np.broadcast_to(np.asarray(score, np.float64), (t.size, size))
    out = np.zeros(n)
    for s in reversed(range(n)):
        bf, bg = beta[:, fact[s]], beta[:, fix[s]]
        out[s] = w @ (before[s] * (bg - bf)).sum(1)
        beta = (1 - t) * bf + t * bg
    return out


def chain_shapley_of(pipeline, cases, worlds: bj.World, f: int, w: int) -> np.ndarray:
    """`chain_shapley` of failure f in world w of `numpy_chain_cases` blamed by `pipeline` (a
    chain of two variants): the maps are the argmax of each table plus the world's addressed
    Gumbels, added in float32 as the library adds them."""
    structure = bj.discover(pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    world = jax.tree_util.tree_map(lambda x: x[f, w], worlds)
    tables = [np.asarray(t[f]) for t in cases["tables"]]
    k = tables[0].shape[-1]
    noise = np.asarray(bj.pipeline.world_noise(structure, world)).astype(np.float32)[:, :k]
    root = np.argmax(tables[0] + noise[0], axis=-1)  # [V]
    rest = np.argmax(np.stack(tables[1:]) + noise[1:, None, None, :], axis=-1)  # [n-1, V, K]
    fact = np.concatenate([np.full((1, k), root[0]), rest[:, 0]])
    fix = np.concatenate([np.full((1, k), root[1]), rest[:, 1]])
    return chain_shapley(fact, fix, np.asarray(cases["score"][f]))
