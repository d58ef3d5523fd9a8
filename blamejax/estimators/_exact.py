"""Exact blame: every coalition of every failure, in one compiled call per chunk.

The score table `v[F, W, 2**n]` is never held whole. Failures are processed in chunks
(a host loop over one compiled function); inside a chunk, worlds are either vmapped or
scanned in groups, their mean is taken, and it is reduced to attributions at once.
Chunk sizes are powers of two, so a batch of any size compiles at most a few times.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .._arguments import check_power_of_two
from .._checks import (
    check_observed,
    check_scores_in_range,
    check_worlds,
    leading_size,
    split_case_ids,
    warn_not_failures,
)
from .._compile import compiled, note_trace
from .._game import Game, make_game
from ..coalitions import coalition_values, explain_nan_score, last_step_blame
from ..pipeline import Hard, World, check_finite_logits, world_noise
from ..reduction import Attribution, attribute
from ..structured import (
    chain_expected_arrays,
    chain_maps,
    expected_site_maps,
    factor_tables,
    observed_logits,
    site_logits,
    site_maps,
    structured_plan,
    world_blame,
)
from ..worlds import ExpectedWorlds
from ._checkpoint import defers_interrupts, interrupt_notice, interrupted
from ._devices import (
    failure_sharding,
    num_shards,
    on_device,
    place,
    split_over_devices,
    take_rows,
    to_local,
)
from ._results import ExactResult

DEFAULT_MAX_STEPS = 20
DEFAULT_BUDGET = 2**21  # scores (failure x world x coalition) per compiled call
METHODS = ("auto", "structured", "enumerate")
# The structured path: the numbers (site x quadrature node x frontier state, per failure and
# world) one compiled call may keep for its reverse pass.
STRUCTURED_BUDGET = 2**26
# The structured path vmaps this many failures at a time inside a call, whatever the call's
# size, so that a failure's values do not depend on `block_size` or the device count.
MICRO_BATCH = 4


def _bucket(count: int, chunk: int, multiple: int = 1) -> int:
    """The smallest bucket size >= count, capped at the chunk size. Buckets keep four
    significant bits (1..16, then 18, 20, ..., 32, 36, 40, ...): less than an eighth of a
    call is padding, and a batch of any size compiles at most eight shapes per doubling.
    `multiple`: buckets are also multiples of it (the structured path runs `MICRO_BATCH`
    failures at a time, so its calls of 1 to 4 failures do the same work: one shape)."""
    step = max(multiple, 1 << max(0, count.bit_length() - 4))
    return min(chunk, -(-count // step) * step)


@compiled("exact.chunk")
def _chunk_function(game: Game, interactions: bool, world_group: int, rows_per_world: bool):
    """The compiled call that blames one chunk of failures (cached per game and settings;
    traced once per chunk shape). `rows_per_world`: see `exact_run`."""
    pipeline, structure, players, fixes, mode, _ = game
    bits = np.array([1 << j for j in range(len(players))])

    def cube(case, world):
        # The world's noise is computed once and shared by the coalition table and the
        # last-step baseline.
        noise = world_noise(structure, world)
        v = coalition_values(
            pipeline, structure, case, world, players, fixes, mode, noise, rows_per_world
        )
        last = last_step_blame(pipeline, structure, case, world, players, fixes, mode, noise)
        return (v,) + _min_max(v) + (jnp.asarray(last, jnp.int32),)

    def per_failure(case, worlds, threshold):
        num_worlds = worlds.key.shape[0]

        def hit(v):  # whether fixing each player alone reaches `threshold` (zeros without one)
            if threshold is None:
                return jnp.zeros(v.shape[:-1] + (len(players),), v.dtype)
            return (v[..., bits] >= threshold).astype(v.dtype)

        if num_worlds == 1:  # no world axis: the gathers index two axes, not three
            world = jax.tree_util.tree_map(lambda x: x[0], worlds)
            total, lo, hi, last = cube(case, world)
            hits, last = hit(total), last[None]
        elif world_group >= num_worlds:
            v, lo, hi, last = jax.vmap(cube, in_axes=(None, 0))(case, worlds)
            total, lo, hi, hits = v.sum(0), lo.min(), hi.max(), hit(v).sum(0)
        else:
            groups = jax.tree_util.tree_map(
                lambda x: x.reshape((num_worlds // world_group, world_group) + x.shape[1:]), worlds
            )

            def body(carry, group):
                total, lo, hi, hits = carry
                v, low, high, last = jax.vmap(cube, in_axes=(None, 0))(case, group)
                carry = (
                    total + v.sum(0),
                    jnp.minimum(lo, low.min()),
                    jnp.maximum(hi, high.max()),
                    hits + hit(v).sum(0),
                )
                return carry, last

            size = 1 << len(players)
            init = (
                jnp.zeros(size),
                jnp.asarray(jnp.inf),
                jnp.asarray(-jnp.inf),
                jnp.zeros(len(players)),
            )
            (total, lo, hi, hits), last = jax.lax.scan(body, init, groups)
            last = last.reshape(num_worlds)
        mean = total / num_worlds
        attribution = attribute(mean, interactions=interactions)
        return attribution, lo, hi, last, hits / num_worlds

    def chunk(cases, worlds, threshold=None):
        """Attributions and last-step blame of a chunk of failures, the score range and
        NaN check (`stats`), and, when `threshold` is given, the share of worlds in which
        fixing each player alone reaches it (`[F, n]`; zeros otherwise)."""
        note_trace("exact.chunk")
        attribution, lo, hi, last, resolve = jax.vmap(per_failure, in_axes=(0, 0, None))(
            cases, worlds, threshold
        )
        # [lowest score, highest score, any NaN/+inf logits]: one small transfer to check.
        stats = jnp.stack([lo.min(), hi.max(), _non_finite(cases).astype(lo.dtype)])
        return attribution, last, stats, resolve

    return jax.jit(chunk)


def resolve_method(game: Game, cases, method: str, max_steps: int):
    """The path `exact_blame` takes: `("structured", elimination, graph)` or
    `("enumerate", None, None)`; raises when neither applies."""
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {list(METHODS)}, got {method!r}")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"`max_steps` must be a positive int, got {max_steps!r}")
    n = game.num_players
    if method == "enumerate":
        reason = None
    else:
        elim, graph, reason = structured_plan(game, cases)
        if reason is None:
            return "structured", elim, graph
        if method == "structured":
            raise ValueError(f"`method='structured'` does not apply to this pipeline: {reason}")
    if n > max_steps:
        why = "" if reason is None else f"; the structured path does not apply because {reason}"
        raise ValueError(
            f"exact Shapley over n = {n} steps needs 2^{n} coalitions per failure and world, "
            f"above `max_steps` = {max_steps}{why}. Use Monte Carlo sampling "
            "(blamejax.mc_shapley) or raise `max_steps` deliberately"
        )
    return "enumerate", None, None


@compiled("exact.structured")
def _structured_function(
    game: Game, elim, graph, interactions: bool, expected: str | None = None, sharding=None
):
    """The compiled call that blames one chunk of failures by the multilinear extension
    (`blamejax.structured`): the same outputs as `_chunk_function`. `expected`: `"fresh"`
    or `"inferred"` for `ExpectedWorlds` (the chunk's worlds are then the observed options
    `[F, sites]`, unused for fresh), blame in expectation over the noise as one world.
    With a `sharding` over several devices each device runs its own rows (`shard_map`),
    `MICRO_BATCH` at a time as on one device."""
    pipeline, structure, players, _, _, _ = game
    n = len(players)

    def per_world(world, logits, score):
        if expected is not None:
            observed = world if expected == "inferred" else None
            arrays = None
            if elim.chain and not interactions:
                arrays = chain_expected_arrays(elim, logits, observed)
            if arrays is not None:
                blame = world_blame(elim, None, score, chain=arrays)
                return jax.tree_util.tree_map(lambda x: x[None], blame)
            maps = expected_site_maps(structure, graph, logits, observed)
            blame = world_blame(elim, maps, score, interactions)
            return jax.tree_util.tree_map(lambda x: x[None], blame)
        noise = world_noise(structure, world)
        if elim.chain and not interactions:
            chain = chain_maps(structure, elim, logits, noise, world)
            return world_blame(elim, None, score, chain=chain)
        maps = site_maps(structure, logits, noise, world)
        return world_blame(elim, maps, score, interactions)

    def per_failure(case, worlds, threshold):
        logits = site_logits(pipeline, structure, case)  # depend on no world
        score = factor_tables(pipeline, structure, graph, case, elim.factors)
        if expected is not None:
            num_worlds = 1
            blame = per_world(worlds, logits, score)
        else:
            num_worlds = worlds.key.shape[0]
            blame = jax.vmap(per_world, in_axes=(0, None, None))(worlds, logits, score)

        def mean(x):
            return x.sum(0) / num_worlds

        runs = mean(blame.runs)  # v(empty), v(all), v({j})
        empty, full = runs[0], runs[1]
        attribution = Attribution(
            shapley=mean(blame.shapley),
            banzhaf=mean(blame.banzhaf),
            fix_alone=runs[2:] - empty,
            leave_one_out=mean(blame.leave_one_out),
            interactions=None if blame.interactions is None else mean(blame.interactions),
            empty=empty,
            full=full,
        )
        if threshold is None:
            hits = jnp.zeros((n,), runs.dtype)
        else:
            hits = mean((blame.runs[:, 2 : 2 + n] >= threshold).astype(runs.dtype))
        return attribution, blame.low.min(), blame.high.max(), blame.last, hits

    def chunk(cases, worlds, threshold=None):
        note_trace("exact.structured")
        attribution, lo, hi, last, resolve = _micro_batched(per_failure, cases, worlds, threshold)
        stats = jnp.stack([lo.min(), hi.max(), _non_finite(cases).astype(lo.dtype)])
        return attribution, last, stats, resolve

    if sharding is None:
        return jax.jit(chunk)
    split = split_over_devices(chunk, sharding, (0, 0, None), (0, 0, "device", 0))

    def spread(cases, worlds, threshold=None):
        attribution, last, stats, resolve = split(cases, worlds, threshold)
        return attribution, last, _merge_stats(stats), resolve

    return spread


@jax.jit
def _merge_stats(stats):
    """The devices' `[D, 3]` stats (lowest score, highest score, any non-finite) as one."""
    return jnp.stack([stats[:, 0].min(), stats[:, 1].max(), stats[:, 2].max()])


def _micro_batched(per_failure, cases, worlds, threshold):
    """`vmap(per_failure)` over the failures, `MICRO_BATCH` of them at a time (`lax.map`; the
    last batch filled with copies of the first failure, dropped): every failure's arithmetic
    has the same shapes, hence the same rounding, whatever the number of failures in a call
    (`block_size`, the device count)."""
    count = jax.tree_util.tree_leaves(cases)[0].shape[0]
    padded = -(-count // MICRO_BATCH) * MICRO_BATCH
    index = np.where(np.arange(padded) < count, np.arange(padded), 0)

    def batches(x):
        x = x if padded == count else x[index]
        return x.reshape((padded // MICRO_BATCH, MICRO_BATCH) + x.shape[1:])

    def one_batch(rows):
        return jax.vmap(per_failure, in_axes=(0, 0, None))(*rows, threshold)

    outs = jax.lax.map(one_batch, jax.tree_util.tree_map(batches, (cases, worlds)))
    return jax.tree_util.tree_map(lambda x: x.reshape((padded,) + x.shape[2:])[:count], outs)


def _non_finite(cases):
    """True when a floating leaf of `cases` holds NaN or +inf (-inf is allowed)."""
    flags = [
        jnp.any(jnp.isnan(x) | jnp.isposinf(x))
        for x in jax.tree_util.tree_leaves(cases)
        if jnp.issubdtype(x.dtype, jnp.floating)
    ]
    return jnp.any(jnp.stack(flags)) if flags else jnp.asarray(False)


@functools.partial(jax.jit, static_argnums=(1,))
def _join(pieces, counts):
    """Concatenate the chunks' outputs, dropping each chunk's padding (one compiled call)."""
    return jax.tree_util.tree_map(
        lambda *xs: jnp.concatenate([x[:count] for x, count in zip(xs, counts)]), *pieces
    )


def _min_max(v):
    """`(v.min(), v.max())` in one pass: one fused reduction, where two separate ones each
    re-read (and, after the coalition vmaps, re-layout) the whole score table."""
    init = (jnp.asarray(jnp.inf, v.dtype), jnp.asarray(-jnp.inf, v.dtype))

    def combine(a, b):
        return jnp.minimum(a[0], b[0]), jnp.maximum(a[1], b[1])

    return jax.lax.reduce((v, v), init, combine, tuple(range(v.ndim)))


@defers_interrupts  # Ctrl-C is honoured between chunks, never inside XLA
def exact_blame(
    pipeline: Callable,
    cases,
    worlds: World,
    *,
    steps: Sequence[str] | None = None,
    fixes: dict | None = None,
    score_range: tuple[float, float] = (0.0, 1.0),
    interactions: bool = False,
    mode=Hard(),
    max_steps: int = DEFAULT_MAX_STEPS,
    block_size: int | None = None,
    devices: Sequence | None = None,
    method: str = "auto",
) -> ExactResult:
    """Exact Shapley values (and Banzhaf, fix-alone, leave-one-out, pairwise interactions
    and last-step blame) of every failure, over every coalition of its steps' fixes.

    **Arguments:**
    - `pipeline`: `pipeline(ctx, case) -> score`, written for one failure, one world, one plan.
    - `cases`: a pytree of arrays with a leading failure axis F (the logits tables).
    - `worlds`: a `World` with keys `[F, W]` (`recorded_worlds`, `fresh_worlds`,
      `inferred_worlds`); values are averaged over the W worlds.
    - `steps`: the steps to blame (the players), default every step, in pipeline order.
    - `fixes`: `{step: variant}`, which variant is each step's fix (default 1).
    - `score_range`: the declared range of the score; a score outside it is an error.
    - `interactions`: also compute the pairwise Shapley interaction index (off by default:
      it costs about 4x the reduction and n^2 memory per failure).
    - `mode`: `Hard()` (exact Gumbel-max) or `Relaxed(tau)`.
    - `max_steps`: the largest n enumeration is allowed (2^n coalitions); raise it
      deliberately. The structured path has no such bound.
    - `method`: `"auto"` (the default: the structured path wherever it applies, else
      enumeration), `"structured"` or `"enumerate"`. The structured path applies in hard
      mode to a *tabulated* pipeline, every draw's logits a table over its `given` parents'
      options and the score a function of a few draws' options (at most 65,536 joint
      options, and as many for the frontier the recursion carries): it integrates the
      game's multilinear extension exactly, in O(n^2) per failure and world for a chain,
      instead of scoring 2^n coalitions. Both give the same values up to rounding;
      `result.method` says which ran.
    - `block_size`: failures per compiled call (a power of two). By default chosen so that
      a call holds at most about 2 million scores; memory is bounded by it, not by F.
    - `devices`: the devices to spread each call's failures over (`jax.sharding`: a 1-D
      `Mesh` and the failure axis sharded along it). Default: every device of the default
      backend, so on one CPU or one GPU nothing changes; `[jax.devices()[0]]` keeps a
      call on one device.

    **Returns:** an `ExactResult`.

    **Raises:** `ValueError`/`TypeError` that names the argument for malformed cases,
    worlds, steps or fixes; n above `max_steps`; NaN logits; scores outside `score_range`.

    ```python
    import blamejax as bj
    cases = bj.demos.refund_cases(num_cases=1)
    result = bj.exact_blame(bj.demos.refund_pipeline, cases, bj.recorded_worlds(0, range(1)))
    print(result.table())
    ```
    """
    # On the device once (a no-op for JAX arrays), and sliced there.
    cases = jax.tree_util.tree_map(on_device, cases)
    game = make_game(pipeline, cases, steps=steps, fixes=fixes, mode=mode, score_range=score_range)
    interrupt_notice("exact_blame: Ctrl-C received; stopping after the current chunk of failures")
    result = exact_run(
        game,
        cases,
        worlds,
        interactions=interactions,
        max_steps=max_steps,
        block_size=block_size,
        devices=devices,
        interruptible=True,
        method=method,
    )[0]
    warn_not_failures(result.empty, game.score_range, case_ids=result.case_ids)
    return result


def exact_run(
    game: Game,
    cases,
    worlds: World,
    *,
    interactions=False,
    max_steps=DEFAULT_MAX_STEPS,
    block_size=None,
    devices=None,
    threshold=None,
    case_ids=None,
    interruptible=False,
    fixed_shape=False,
    method="auto",
):
    """`exact_blame` of a checked `game`, and (for `blame_batch`) with `threshold` given, the
    share of worlds in which fixing each player alone reaches it, `[F, n]`, from the same
    coalition tables. `interruptible`: wait for each chunk and stop with `KeyboardInterrupt`
    after the chunk during which a Ctrl-C came (inside `defers_interrupts`). `fixed_shape`: the
    caller already gives every call the same number of failures (`blame_batch`'s blocks), so a
    chunk is not padded up to a bucket (no copy before the call, no join after it).

    A draw from a row with no valid option makes a run's score NaN. Checking each run's
    rows costs the coalition tables about half their speed, so enumeration first checks every
    table row once per world instead (`_chunk_function`'s `rows_per_world`): a world with such
    a row anywhere scores NaN in every coalition. Only if a NaN appears are the calls made
    again with the per-run check, which tells a row that some coalition reaches (an error)
    from one that none does (no effect). Without such rows both passes give the same values."""
    num_failures = leading_size(cases)
    # On the device once (a no-op for JAX arrays), and sliced there.
    cases = jax.tree_util.tree_map(on_device, cases)
    expected = worlds.kind if isinstance(worlds, ExpectedWorlds) else None
    if expected is not None:
        method = _expected_method(game, method)
    method, elim, graph = resolve_method(game, cases, method, max_steps)
    if expected is not None:
        carried = check_expected_worlds(worlds, num_failures, game.structure)
        num_worlds = 1
        worlds = _expected_rows(game, graph, cases, worlds, carried)
    else:
        num_worlds = check_worlds(worlds, num_failures, game.structure)
        worlds, carried = split_case_ids(worlds)  # the ids go to the result, not the programs
    case_ids = carried if case_ids is None else case_ids
    block_size = check_power_of_two(block_size, "block_size", allow_none=True)
    sharding = failure_sharding(devices)
    run = functools.partial(
        _run_blocks, cases, worlds, threshold, sharding, fixed_shape, interruptible
    )
    if method == "structured":
        if block_size is None:
            block_size = _structured_block_size(game, elim, num_worlds, interactions)
        function = _structured_function(game, elim, graph, interactions, expected, sharding)
        attribution, last, resolve, stats = run(function, block_size, MICRO_BATCH)
    else:
        world_group, block_size = _enumeration_sizes(game.num_players, num_worlds, block_size)
        function = _chunk_function(game, interactions, world_group, True)
        attribution, last, resolve, stats = run(function, block_size)
        if _nan_failures(attribution).any():  # a row without a valid option, maybe never reached
            function = _chunk_function(game, interactions, world_group, False)
            attribution, last, resolve, stats = run(function, block_size)
    nan = _nan_failures(attribution)
    if expected is not None:
        explain = functools.partial(_explain_expected_nan, nan, case_ids)
    else:
        explain = functools.partial(explain_nan, game, cases, worlds, nan, case_ids)
    low, high = stats[:, 0].min(), stats[:, 1].max()
    check_scores_in_range(low, high, game.score_range, explain, nan=bool(nan.any()))
    result = ExactResult(
        steps=game.steps,
        last_step=last,
        score_range=game.score_range,
        method=method,
        case_ids=np.arange(num_failures) if case_ids is None else np.asarray(case_ids, np.int64),
        **{name: getattr(attribution, name) for name in _ATTRIBUTION_FIELDS},
    )
    return result, (None if threshold is None else resolve)


_ATTRIBUTION_FIELDS = (
    "shapley",
    "banzhaf",
    "fix_alone",
    "leave_one_out",
    "interactions",
    "empty",
    "full",
)


def _structured_block_size(game: Game, elim, num_worlds: int, interactions: bool) -> int:
    """The structured path's default `block_size`: the largest power of two of failures
    whose reverse pass keeps at most `STRUCTURED_BUDGET` numbers."""
    n = game.num_players
    nodes = 1 + -(-n // 2)
    per_failure = num_worlds * len(game.structure.sites) * nodes * elim.width
    if interactions:
        per_failure *= max(1, n)
    block_size = max(1, STRUCTURED_BUDGET // per_failure)
    return 1 << (block_size.bit_length() - 1)


def _enumeration_sizes(n: int, num_worlds: int, block_size: int | None) -> tuple[int, int]:
    """Enumeration's `(world_group, block_size)`: worlds vmapped together (a divisor of W) and
    failures per call (default: a power of two), so that a call holds at most about
    `DEFAULT_BUDGET` scores."""
    size = 1 << n
    world_group = num_worlds
    while world_group > 1 and world_group * size > DEFAULT_BUDGET:
        world_group -= 1
        while num_worlds % world_group:
            world_group -= 1
    if block_size is None:
        block_size = max(1, DEFAULT_BUDGET // (world_group * size))
        block_size = 1 << (block_size.bit_length() - 1)
    return world_group, block_size


def _run_blocks(
    cases, worlds, threshold, sharding, fixed_shape, interruptible, function, block_size, multiple=1
):
    """`function` over the failures, `block_size` (at least one per device) per call, each
    call padded up to a bucket (unless `fixed_shape`; a multiple of `multiple`) with copies of
    a real failure, dropped.

    **Returns:** `(attribution, last, resolve, stats)`, the calls' outputs joined and their
    stats `[calls, 3]` (host); raises, naming the leaf, when some logit is NaN or +inf."""
    num_failures = leading_size(cases)
    width = num_shards(sharding)
    block_size = max(block_size, width)
    pieces, stats = [], []
    for start in range(0, num_failures, block_size):
        stop = min(start + block_size, num_failures)
        count = stop - start if fixed_shape else _bucket(stop - start, block_size, multiple)
        bucket = -(-count // width) * width  # whole rows per device
        if start == 0 and bucket == num_failures:
            chunk_cases, chunk_worlds = cases, worlds  # one call, no padding: no copies
        else:
            index = np.arange(start, start + bucket)
            index = np.where(index < stop, index, start)  # pad with a real failure, dropped below
            chunk_cases, chunk_worlds = take_rows((cases, worlds), np.asarray(index, np.int32))
        chunk_cases, chunk_worlds = place((chunk_cases, chunk_worlds), sharding)
        # Across processes the outputs are gathered whole into every process.
        attribution, last, chunk_stats, resolve = to_local(
            function(chunk_cases, chunk_worlds, threshold)
        )
        pieces.append((attribution, last, resolve, stop - start))
        stats.append(chunk_stats)
        if interruptible and interrupted(chunk_stats):
            raise KeyboardInterrupt(
                f"exact_blame stopped by Ctrl-C after {stop} of {num_failures} failures; nothing "
                "was kept: blame_batch(..., checkpoint=PATH) keeps each completed block and resumes from it"
            )
    stats = np.stack([np.asarray(x) for x in stats])
    if stats[:, 2].any():
        check_finite_logits(cases)  # raises, naming the leaf and the index
    if len(pieces) == 1 and pieces[0][1].shape[0] == num_failures:
        attribution, last, resolve, _ = pieces[0]
    else:
        attribution, last, resolve = _join(
            tuple(p[:3] for p in pieces), tuple(p[3] for p in pieces)
        )
    return attribution, last, resolve, stats


def _nan_failures(attribution) -> np.ndarray:
    """The failures whose Shapley values, v(empty) or v(all) are NaN `[F]` (host). A NaN
    score makes them NaN (every coalition has a positive weight): tested on the results,
    which is reliable where min/max are not."""
    nan = np.isnan(np.asarray(attribution.shapley)).any(axis=1)
    return nan | np.isnan(np.asarray(attribution.empty)) | np.isnan(np.asarray(attribution.full))


def _explain_expected_nan(nan, case_ids) -> str:
    """The error message for a NaN under `expected_worlds`: the first such failure."""
    f = int(np.flatnonzero(nan)[0]) if nan.any() else 0
    who = f"failure {f}" if case_ids is None else f"case {int(case_ids[f])}"
    return (
        f"{who}: some coalition reaches a NaN score or draws from a row with no valid "
        "option with positive probability (expected_worlds)"
    )


def check_expected_worlds(worlds: ExpectedWorlds, num_failures: int, structure) -> np.ndarray:
    """Check `worlds` against a batch of `num_failures` cases; return the case ids (host)."""
    if tuple(np.shape(worlds.case_id)) != (num_failures,):
        raise ValueError(
            f"`worlds.case_id` must have shape [F] = [{num_failures}], got "
            f"{tuple(np.shape(worlds.case_id))}"
        )
    if worlds.observed is not None:
        check_observed(worlds.observed, num_failures, structure)
    return np.asarray(worlds.case_id).astype(np.int64)


def _expected_method(game: Game, method: str) -> str:
    """The method for `ExpectedWorlds`: the structured path only, in hard mode."""
    if not isinstance(game.mode, Hard):
        raise ValueError(
            f"`expected_worlds` integrates hard (Gumbel-max) draws exactly; got mode={game.mode!r}: "
            "leave `mode` at Hard()"
        )
    if method == "enumerate":
        raise ValueError(
            "`expected_worlds` needs the structured path (method='auto' or 'structured'), got "
            "method='enumerate': enumeration replays sampled worlds (use fresh_worlds or "
            "inferred_worlds)"
        )
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}, got {method!r}")
    return "structured"


@functools.partial(jax.jit, static_argnums=(0, 1))
def _observed_logits(game: Game, graph, cases, observed):
    """The logit of every observed option in the observed run, `[F, sites]`."""
    pipeline, structure = game.pipeline, game.structure
    return jax.vmap(lambda c, o: observed_logits(graph, site_logits(pipeline, structure, c), o))(
        cases, observed
    )


def _expected_rows(game: Game, graph, cases, worlds: ExpectedWorlds, case_ids):
    """What the compiled call takes as worlds for `ExpectedWorlds`: the observed options
    `[F, sites]` (zeros `[F, 1]` for fresh noise), each observation checked possible."""
    if worlds.observed is None:
        return jnp.zeros((len(case_ids), 1), jnp.int32)
    picked = np.asarray(_observed_logits(game, graph, cases, worlds.observed))
    bad = np.argwhere(~np.isfinite(picked))
    if bad.size:
        f, i = (int(x) for x in bad[0])
        site = game.structure.sites[i]
        raise ValueError(
            f"case {int(case_ids[f])}: the observed option {int(worlds.observed[f, i])} of step "
            f"{site.step!r} (slot {site.slot}) has logit -inf in the factual run, so it "
            "could not have been chosen; the observations and the logits disagree"
        )
    return worlds.observed


def explain_nan(game: Game, cases, worlds: World, suspects, case_ids=None) -> str:
    """Which failure, world, coalition and step gave a NaN score (for the error message):
    the first failure among `suspects` (a boolean mask, or all failures when it is empty)
    for which a search of its coalitions finds one."""
    suspects = np.asarray(suspects, bool)
    order = np.flatnonzero(suspects) if suspects.any() else np.arange(suspects.size)
    num_worlds = worlds.key.shape[1]
    for f in order[:8]:  # a few failures are enough to explain
        case = jax.tree_util.tree_map(lambda x: x[f], cases)
        for w in range(num_worlds):
            world = jax.tree_util.tree_map(lambda x: x[f, w], worlds)
            words = explain_nan_score(
                game.pipeline, game.structure, case, world, game.players, game.fixes, game.mode
            )
            if not words.startswith("no coalition"):
                who = f"failure {int(f)}" if case_ids is None else f"case {int(case_ids[f])}"
                return f"{who}, world {w}: {words}"
    return "the failing coalition was not found by a bounded search"
