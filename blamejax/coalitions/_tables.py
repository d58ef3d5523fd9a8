"""Coalition tables: the score of every coalition of the players' fixes, in one world.

A coalition is a plan in which the players it holds run their fix and every other step
its factual variant. `coalition_values` gives each player one scalar bit and wraps the
pipeline in one size-2 `vmap` per bit, so values carry only their ancestors' bits (prefix
sharing: a chain of n steps costs about 2^(n+1) step evaluations, not n 2^n).
`mask_values` scores arbitrary masks with a plain `vmap` (a block of Monte Carlo prefixes:
`blamejax.estimators` scans an order's prefixes block by block, so its program stays one
batched pipeline however many prefixes an order has).

All functions here are pure and written for one failure x one world; the estimators
`vmap` them over worlds and failures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..pipeline import (
    Hard,
    Structure,
    World,
    coalition_plan,
    mask_plan,
    run_score,
    trace_run,
    world_noise,
)


def coalition_values(
    pipeline: Callable,
    structure: Structure,
    case,
    world: World,
    players: Sequence[int],
    fix_variants: Sequence[int],
    mode=Hard(),
    noise=None,
    rows_per_world=False,
) -> Float[Array, " coalitions"]:
    """The score of every coalition of `players` for one case and one world.

    Coalition `m` (an integer) fixes player `players[j]` when bit `j` of `m` is set. The
    pipeline gets one scalar bit per player and is wrapped in one size-2 `vmap` per bit,
    so a value depends only on its ancestors' bits: a step with a ancestors among the
    players runs 2^(a+1) times, not 2^n, and the noise and tabulated argmaxes, which
    depend on no bit, run once (prefix sharing).

    `noise` is the world's site noise if the caller already computed it (`world_noise`).
    `rows_per_world`: a table row with no valid option makes every coalition of the world
    NaN, reached or not (a check made once per world instead of per coalition; see `Context`).

    **Returns:** `Float[Array, "2**n"]`, `v[m]`.
    """
    n = len(players)
    fixes = [0] * structure.num_steps
    for p, f in zip(players, fix_variants):
        fixes[p] = f

    if noise is None:
        noise = world_noise(structure, world)  # depends on no bit: computed once per world

    def score(*bits):
        step_bits = [None] * structure.num_steps
        for p, bit in zip(players, bits):
            step_bits[p] = bit
        plan = coalition_plan(structure, step_bits, fixes)
        return run_score(pipeline, structure, case, world, plan, mode, noise, rows_per_world)

    batched = score
    for j in range(n):
        axes = tuple(0 if k == j else None for k in range(n))
        batched = jax.vmap(batched, in_axes=axes)
    bit = jnp.arange(2, dtype=jnp.int32)
    values = batched(*([bit] * n))  # axis 0 is bit n-1, ..., axis n-1 is bit 0
    return values.reshape(-1)


def mask_values(
    pipeline: Callable,
    structure: Structure,
    case,
    world: World,
    players: Sequence[int],
    fix_variants: Sequence[int],
    masks,
    mode=Hard(),
    noise=None,
    defer=False,
) -> Float[Array, " masks"]:
    """The score of each coalition in `masks` (`Bool[Array, "M n"]`, row = coalition over
    `players`) for one case and one world: a plain `vmap` over plans, for sets of coalitions
    that are not the whole cube (a block of Monte Carlo prefixes, interventions). The
    world's noise is computed once and shared by every mask (common random numbers);
    `noise` is that noise if the caller already computed it (`world_noise`); `defer`, see
    `Context` (Monte Carlo defers its tabulated draws in pipelines of 32 draw sites or more).
    """
    if noise is None:
        noise = world_noise(structure, world)

    def one(mask):
        plan = mask_plan(structure, players, fix_variants, mask)
        return run_score(pipeline, structure, case, world, plan, mode, noise, defer=defer)

    return jax.vmap(one)(masks)


def last_step_blame(
    pipeline: Callable,
    structure: Structure,
    case,
    world: World,
    players: Sequence[int],
    fix_variants: Sequence[int],
    mode=Hard(),
    noise=None,
):
    """The naive baseline: the index (into `players`) of the last player whose output
    differs between the failed run (every step factual) and the fully fixed run, or -1 when
    no player's output differs. Steps that are not players are never named."""
    players = tuple(players)
    # The failed run and every player's fix on, in one batched trace: half the code to
    # compile of two separate traces.
    n = len(players)
    both = jnp.asarray(np.stack([np.zeros(n, bool), np.ones(n, bool)]))
    traces = _mask_traces(
        pipeline, structure, case, world, players, fix_variants, both, mode, noise
    )
    failed, fixed = traces["choice"]
    site_player = np.array(
        [
            players.index(structure.step_index(s.step))
            if structure.step_index(s.step) in players
            else -1
            for s in structure.sites
        ]
    )
    differs = (failed != fixed) & jnp.asarray(site_player >= 0)
    last_site = jnp.max(jnp.where(differs, jnp.arange(len(structure.sites)), -1))
    return jnp.where(last_site >= 0, jnp.asarray(site_player)[jnp.maximum(last_site, 0)], -1)


def _mask_traces(pipeline, structure, case, world, players, fix_variants, masks, mode, noise=None):
    """`trace_run` of each coalition in `masks` (`Bool[Array, "M n"]`, row = coalition over
    `players`), batched with a plain `vmap` over plans."""

    def one(mask):
        plan = mask_plan(structure, players, fix_variants, mask)
        return trace_run(pipeline, structure, case, world, plan, mode, noise)

    return jax.vmap(one)(masks)


def count_step_evaluations(
    pipeline: Callable, structure: Structure, case, world: World, players=None, fix_variants=None
) -> int:
    """How many step evaluations (hard-mode gathers and free-form argmaxes) the
    all-coalitions table of one world costs, read from the jaxpr after `vmap`.

    With prefix sharing a chain of n steps costs 2^(n+1) - 2; without it, n * 2^n.
    """
    if players is None:
        players = list(range(structure.num_steps))
    if fix_variants is None:
        fix_variants = [1] * len(players)
    jaxpr = jax.make_jaxpr(
        lambda c, w: coalition_values(pipeline, structure, c, w, players, fix_variants)
    )(case, world)
    return _count_named(jaxpr.jaxpr, ("_gather_choice", "_free_hard"))


def _count_named(jaxpr, names) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.params.get("name")
        if eqn.primitive.name in ("pjit", "jit") and name in names:
            total += int(np.prod(eqn.outvars[0].aval.shape, dtype=np.int64))
            continue
        for sub in _subjaxprs(eqn.params.values()):
            total += _count_named(sub, names)
    return total


def _subjaxprs(params):
    for value in params:
        if isinstance(value, (tuple, list)):
            yield from _subjaxprs(value)
        elif hasattr(value, "eqns"):
            yield value
        elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):
            yield value.jaxpr


def explain_nan_score(
    pipeline: Callable, structure: Structure, case, world: World, players, fix_variants, mode=Hard()
) -> str:
    """Where a NaN score of one failure in one world comes from, in words: the first coalition
    (the empty one, the full one, each player alone, then, for up to 12 players, every one)
    whose run scores NaN, and the draw in it that had no valid option, if any. For error
    messages; runs eagerly on one failure."""
    players = tuple(players)
    n = len(players)
    masks = [np.zeros(n, bool), np.ones(n, bool)] + [np.eye(n, dtype=bool)[i] for i in range(n)]
    if n <= 12:
        masks += [np.array([(m >> i) & 1 for i in range(n)], bool) for m in range(1 << n)]
    traces = _mask_traces(
        pipeline, structure, case, world, players, fix_variants, jnp.asarray(np.stack(masks)), mode
    )
    scores, invalid = np.asarray(traces["score"]), np.asarray(traces["invalid"])
    bad = np.flatnonzero(np.isnan(scores))
    if bad.size == 0:
        return "no coalition searched scores NaN here"
    m = int(bad[0])
    fixed = [structure.steps[p] for p, on in zip(players, masks[m]) if on]
    coalition = "{" + ", ".join(fixed) + "}" if fixed else "the empty coalition (the failed run)"
    sites = np.flatnonzero(invalid[m])
    if sites.size == 0:
        return f"the pipeline's own score is NaN in coalition {coalition}"
    site = structure.sites[int(sites[0])]
    draw = f"step {site.step!r}" + (f" (slot {site.slot})" if site.slot else "")
    return (
        f"{draw} drew from logits with no valid option (every logit -inf, or NaN/+inf), or "
        f"was forced to an option outside [0, K), in coalition {coalition}"
    )
