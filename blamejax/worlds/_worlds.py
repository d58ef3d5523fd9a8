"""Worlds: the noise under which failures are replayed.

- *recorded*: the failure's own noise, replayed exactly (`recorded_worlds`);
- *fresh*: new noise per world, interventional (`fresh_worlds`);
- *inferred*: posterior noise abducted from the observed choices only (`inferred_worlds`).

Recorded and inferred worlds answer the counterfactual question "had this step run its
fix, with the same luck, would this run have succeeded?". That answer assumes the
Gumbel-max coupling, which data cannot identify: another coupling with the same
interventional behaviour gives different blame.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import as_key, check_memory, check_observed, leading_size
from .._compile import compiled
from ..noise import abduct_gumbels, abduction_key, stable_hash, world_key
from ..pipeline import (
    World,
    check_finite_logits,
    discover_batch,
    observed_plan,
    trace_arrays,
)


def _case_ids(case_ids) -> np.ndarray:
    if isinstance(case_ids, (int, np.integer)) and not isinstance(case_ids, bool):
        # A bare count is the easy slip `recorded_worlds(0, len(failed))` for
        # `recorded_worlds(0, failed)`: it would give every failure the noise of case 0, 1, ...
        # instead of its own, with no word. Ask for the ids.
        raise TypeError(
            f"`case_ids` must be the cases' ids (an int array), got the bare int {case_ids}; "
            f"for cases 0..{int(case_ids) - 1} pass range({case_ids}) or np.arange({case_ids}), "
            "for a subset of cases pass their ids (e.g. the failures' ids, not their count)"
        )
    ids = np.asarray(case_ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) or ids.size == 0:
        raise ValueError(
            f"`case_ids` must be a non-empty 1-D int array, got shape {ids.shape}, dtype {ids.dtype}"
        )
    if ids.min() < 0 or ids.max() >= 2**32:  # ids address noise as uint32: wider ones would alias
        raise ValueError(
            f"`case_ids` must lie in [0, 2**32), got ids from {ids.min()} to {ids.max()}"
        )
    return ids


def _case_id_leaf(ids: np.ndarray, shape: tuple) -> jax.Array:
    """`World.case_id`: each world's case id, `[F, W]` uint32 as the keys."""
    return jnp.broadcast_to(jnp.asarray(ids.astype(np.uint32))[:, None], shape)


def recorded_worlds(key, case_ids) -> World:
    """The recorded noise of cases: world 0 of each case's own key.

    **Arguments:**
    - `key`: the root key (or int seed) the cases were run with.
    - `case_ids`: the cases' ids, an int array `[F]` (`range(F)` for cases 0..F-1); each
      case's noise is addressed by its id, so a subset of cases passes its own ids.

    **Returns:** a `World` whose key has shape `[F, 1]`.
    """
    key = as_key(key)
    ids = _case_ids(case_ids).astype(np.uint32)
    keys = world_key(key, ids[:, None], np.uint32(0))  # one compiled call for all cases
    return World(key=keys, case_id=_case_id_leaf(ids, keys.shape))


def fresh_worlds(key, case_ids, num_worlds: int) -> World:
    """`num_worlds` new worlds per case (worlds 1..W of the case's key, never the recorded
    world 0): interventional, "what helps on average".

    **Returns:** a `World` whose key has shape `[F, W]`.
    """
    if not isinstance(num_worlds, (int, np.integer)) or num_worlds < 1:
        raise ValueError(f"`num_worlds` must be a positive int, got {num_worlds!r}")
    key = as_key(key)
    ids = _case_ids(case_ids).astype(np.uint32)
    _check_world_memory(ids.size, num_worlds, 0)
    worlds = np.arange(1, num_worlds + 1, dtype=np.uint32)
    keys = world_key(key, ids[:, None], worlds[None, :])  # one compiled call
    return World(key=keys, case_id=_case_id_leaf(ids, keys.shape))


def _check_world_memory(num_cases: int, num_worlds: int, options: int) -> None:
    """Refuse up front `num_worlds` worlds per case whose arrays alone would not fit: a key
    (8 bytes) per case and world, and for abducted worlds the Gumbels of every option of
    every site (`options` of them, one float each), counted twice for the arrays made while
    they are built."""
    per_world = 8 + options * np.dtype(jnp.result_type(float)).itemsize
    check_memory(
        2 * num_cases * num_worlds * per_world,
        f"`num_worlds` = {num_worlds} for {num_cases} case" + ("s" if num_cases != 1 else ""),
        "ask for fewer worlds, or blame fewer cases per call",
    )


def inferred_worlds(
    pipeline: Callable, cases, observed, key, num_worlds: int, case_ids=None
) -> World:
    """Abduct `num_worlds` posterior worlds per case from the observed choices alone.

    For every draw site, the logits it saw are found by replaying the case with every
    draw forced to its observed option; then each site's Gumbels are sampled from their
    posterior given that its observed option won (`abduct_gumbels`). Sites are
    independent given the observed choices, so this is exact posterior sampling. The
    abducted noise is data: it carries no gradient.

    **Arguments:**
    - `pipeline`: the pipeline.
    - `cases`: the cases, a pytree with a leading axis F.
    - `observed`: `Int[Array, "F sites"]`, the observed option of every draw site (in
      `discover(pipeline, case).sites` order).
    - `key`: root key or int seed.
    - `num_worlds`: W.
    - `case_ids`: the case index of each row of `cases` (default 0..F-1). World w of case i
      is addressed by `(key, i, w)`, so a case's posterior worlds do not depend on which
      other cases are abducted with it.

    **Returns:** a `World` with keys `[F, W]`, overrides (one `[F, W, K]` per site) and
    `valid` all true.

    **Raises:** `ValueError` if an observed option has logit `-inf` in the factual run (it
    could not have been chosen), or if shapes do not match.
    """
    if not isinstance(num_worlds, (int, np.integer)) or num_worlds < 1:
        raise ValueError(f"`num_worlds` must be a positive int, got {num_worlds!r}")
    num_cases = leading_size(cases)
    structure = discover_batch(pipeline, cases)
    check_finite_logits(cases)
    observed = check_observed(observed, num_cases, structure)
    ids = np.arange(num_cases) if case_ids is None else _case_ids(case_ids)
    if ids.shape != (num_cases,):
        raise ValueError(
            f"`case_ids` must hold one id per case ({num_cases}), got shape {ids.shape}"
        )
    _check_world_memory(num_cases, num_worlds, sum(site.num_options for site in structure.sites))
    key = as_key(key)
    observed_d = jnp.asarray(observed, jnp.int32)
    seen, picked = _seen_function(pipeline, structure)(cases, observed_d, key)
    bad = np.argwhere(~np.isfinite(np.asarray(picked)))
    if bad.size:
        case, i = (int(x) for x in bad[0])
        site = structure.sites[i]
        raise ValueError(
            f"case {case if case_ids is None else int(np.asarray(case_ids)[case])}: the observed option {int(observed[case, i])} of step "
            f"{site.step!r} (slot {site.slot}) has logit -inf in the factual run, so it "
            "could not have been chosen; the observations and the logits disagree"
        )
    worlds = np.arange(1, num_worlds + 1, dtype=np.uint32)
    keys = world_key(key, ids.astype(np.uint32)[:, None], worlds[None, :])
    # Sites with the same number of options are abducted together, by one compiled call.
    overrides = [None] * len(structure.sites)
    for k in sorted({site.num_options for site in structure.sites}):
        group = [i for i, site in enumerate(structure.sites) if site.num_options == k]
        hashes = np.asarray([stable_hash(structure.sites[i].step) for i in group], np.uint32)
        slots = np.asarray([structure.sites[i].slot for i in group], np.uint32)
        if isinstance(seen, tuple):
            logits = jnp.stack([seen[i] for i in group])
        else:  # [F, sites, K_max]: the group's rows, sites first
            logits = jnp.moveaxis(seen[:, np.asarray(group), :k], 1, 0)
        noise = _abduct_sites(keys, logits, observed[:, group].astype(np.int32), hashes, slots)
        for j, i in enumerate(group):  # split here, outside the compiled abduction
            overrides[i] = _row(noise, np.int32(j))
    valid = jnp.ones(keys.shape, bool)
    return World(
        key=keys,
        overrides=tuple(overrides),
        valid=tuple(valid for _ in structure.sites),
        case_id=_case_id_leaf(ids, keys.shape),
    )


@compiled("worlds.seen")
def _seen_function(pipeline, structure):
    """Compiled: the logits every draw saw when each case is replayed with its observed
    choices (`[F, sites, K_max]`, padded with -inf; a tuple of one `[F, K]` per site when
    the sites' logits differ in dtype), and the logit of each observed option
    (`[F, sites]`, checked on the host: `-inf` means it could not have been chosen)."""

    def seen(cases, observed, key):
        world = World(key=key)
        logits = jax.vmap(
            lambda c, o: trace_arrays(pipeline, structure, c, world, observed_plan(structure, o))[
                "logits"
            ]
        )(cases, observed)
        if not isinstance(logits, tuple):  # stacked, [F, sites, K_max]: one output
            return logits, jnp.take_along_axis(logits, observed[:, :, None], axis=2)[:, :, 0]
        picked = [
            jnp.take_along_axis(logits[i], observed[:, i, None], axis=1)[:, 0]
            for i in range(len(structure.sites))
        ]
        return logits, jnp.stack(picked, axis=1)

    return jax.jit(seen)


@jax.jit
def _abduct_sites(keys, logits, observed, step_hashes, slots):
    """The posterior Gumbels of G sites with K options each (`[G, F, W, K]`, split per site
    by the caller: one output per site made the program slow to compile at length) in
    the worlds `keys` `[F, W]`, from the logits each site saw (`[G, F, K]`) and
    the observed options `[F, G]`. Compiled once per shape, shared by every pipeline (the
    world keys come in from outside: hashing them in here too made the first call of
    `inferred_worlds` about 2 s slower).
    The abducted noise is data: it carries no gradient."""

    def one(key, logits, obs, step_hash, slot):
        key = abduction_key(key, step_hash, slot)
        return abduct_gumbels(key, logits, obs, check=False)  # checked by inferred_worlds

    per_site = jax.vmap(
        jax.vmap(one, in_axes=(0, None, None, None, None)), in_axes=(0, 0, 0, None, None)
    )
    out = jax.vmap(per_site, in_axes=(None, 0, 1, 0, 0))(keys, logits, observed, step_hashes, slots)
    return jax.lax.stop_gradient(out)


@jax.jit
def _row(stacked, index):
    """`stacked[index]`, one compiled call for every index."""
    return jax.lax.dynamic_index_in_dim(stacked, index, keepdims=False)
