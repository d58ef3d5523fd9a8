"""Where the time of one `exact_blame` call goes, piece by piece, on the bench_exact inputs.

For each size it times, each piece compiled on its own and called repeatedly after a warm-up:
the addressed noise of every world (blamejax's unrolled Threefry hash, and the same addresses
drawn with `jax.random`, checked bit-equal), the coalition table alone, the Shapley reduction
alone, the whole compiled call, and `exact_blame` itself (the difference is the host's share of
a call). It also prints how much slower the first 30 calls after compiling run than later ones,
and, at n = 24, the reduction with the two-halves split against the pairwise
divide-and-conquer.

With `--floor` it also writes the same chain's coalition table by hand at n = 12 (one default
chunk, 512 failures): every step's argmaxes computed once from the same tables and noise, then
one gather per step and per coalition bit and the score's gather, nothing else. That is the least
a prefix-sharing table of this chain can cost on this machine; the script checks it equals
blamejax's table bit for bit and prints both costs per coalition and their ratio. `--chunks`
times `exact_blame` on 8,192 failures at n = 12 with 128, 512 (the default there) and 2,048
failures per compiled call.

    python benchmarks/profile_exact.py                 # n = 8 (154 x 8) and n = 12 (100 x 1)
    python benchmarks/profile_exact.py --reduction24   # also the n = 24 reduction
    python benchmarks/profile_exact.py --floor         # also the hand-written table (n = 12)
    python benchmarks/profile_exact.py --chunks        # also failures per compiled call (n = 12)

Run from the repository root. Results go to `benchmarks/results/profile_exact.md`. Timings
are medians; the machine is small and shared, so expect a spread of a fifth between runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.random as jr  # noqa: E402
from _timing import WARMUP_S, timed  # noqa: E402
from bench_exact import build_tables, chain_pipeline  # noqa: E402

import blamejax as bj  # noqa: E402
from blamejax import _compile  # noqa: E402
from blamejax.coalitions import coalition_values  # noqa: E402
from blamejax.estimators import _exact  # noqa: E402
from blamejax.noise import _gumbel as _noise  # noqa: E402
from blamejax.pipeline import discover_batch, world_noise  # noqa: E402
from blamejax.reduction import _shapley  # noqa: E402


def jax_random_sites(key, steps, slots, num_options):
    """The noise of `gumbel_sites` drawn with jax.random itself (its rolled Threefry on CPU)."""
    rows = []
    for step, slot in zip(steps, slots):
        site = jr.fold_in(
            jr.fold_in(jr.fold_in(key, _noise._GUMBEL_TAG), bj.noise.stable_hash(step)), slot
        )
        rows.append(
            jax.vmap(lambda j, s=site: jr.gumbel(jr.fold_in(s, j)))(jnp.arange(num_options))
        )
    return jnp.stack(rows)


def bench_inputs(n: int, num_failures: int, num_worlds: int):
    """The bench_exact chain of n steps: its float32 tables, fresh worlds and pipeline."""
    tables = {
        k: jnp.asarray(v.astype(np.float32)) for k, v in build_tables(n, num_failures, 0).items()
    }
    return tables, bj.fresh_worlds(0, range(num_failures), num_worlds), chain_pipeline(n)


def profile_size(n: int, num_failures: int, num_worlds: int) -> list[str]:
    tables, worlds, pipeline = bench_inputs(n, num_failures, num_worlds)
    structure = discover_batch(pipeline, tables)
    players, fixes = tuple(range(n)), (1,) * n
    steps = tuple(s.step for s in structure.sites)
    slots = tuple(s.slot for s in structure.sites)
    per_world = lambda f: jax.jit(jax.vmap(jax.vmap(f)))  # noqa: E731

    unrolled = per_world(lambda key: world_noise(structure, bj.World(key=key)))
    rolled = per_world(lambda key: jax_random_sites(key, steps, slots, 8))
    noise_new, noise_old = timed(unrolled, worlds.key), timed(rolled, worlds.key)
    same = bool(np.array_equal(np.asarray(unrolled(worlds.key)), np.asarray(rolled(worlds.key))))

    def table(case, ws):
        one = lambda w: coalition_values(pipeline, structure, case, w, players, fixes)  # noqa: E731
        return jax.vmap(one)(ws).mean(0)

    tables_fn = jax.jit(jax.vmap(table))
    cube = timed(tables_fn, tables, worlds)
    values = tables_fn(tables, worlds)
    reduction = timed(
        jax.jit(jax.vmap(lambda v: bj.attribute(v, interactions=False).shapley)), values
    )

    call = lambda: bj.exact_blame(pipeline, tables, worlds, max_steps=max(20, n))  # noqa: E731
    whole = timed(call)
    chunk = [f for (kind, _), f in _compile._ENTRIES.items() if kind == "exact.chunk"][-1]
    bucket = _exact._bucket(num_failures, 1 << 30)
    index = jnp.asarray(np.minimum(np.arange(bucket), num_failures - 1), jnp.int32)
    padded = _exact.take_rows((tables, worlds), index)
    compiled = timed(chunk, *padded)

    # The first 30 calls after compiling against the next 50 (a fresh compiled function).
    for entry in [k for k in _compile._ENTRIES if k[0] == "exact.chunk"]:
        del _compile._ENTRIES[entry]
    jax.block_until_ready(call())
    runs = []
    for _ in range(80):
        start = time.perf_counter()
        jax.block_until_ready(call())
        runs.append(time.perf_counter() - start)
    early, late = statistics.median(runs[:30]), statistics.median(runs[30:])

    ms = lambda s: f"{s * 1e3:.3f} ms"  # noqa: E731
    return [
        f"### n = {n}, {num_failures} failures x {num_worlds} worlds",
        "",
        "| piece | first call (compile) | steady |",
        "|---|---|---|",
        f"| noise, unrolled Threefry (blamejax) | {noise_new[0]:.2f} s | {ms(noise_new[1])} |",
        f"| noise, the same addresses with jax.random | {noise_old[0]:.2f} s | {ms(noise_old[1])} |",
        f"| coalition table (noise included) | {cube[0]:.2f} s | {ms(cube[1])} |",
        f"| Shapley reduction | {reduction[0]:.2f} s | {ms(reduction[1])} |",
        f"| the whole compiled call (bucket {bucket}) | - | {ms(compiled[1])} |",
        f"| `exact_blame` | {whole[0]:.2f} s | {ms(whole[1])} |",
        "",
        f"- The two noise computations are bit-equal: {same}.",
        f"- The host's share of a call (`exact_blame` minus the compiled call): {ms(whole[1] - compiled[1])}.",
        f"- Calls 1-30 after compiling: median {ms(early)}; calls 31-80: {ms(late)} ({early / late:.2f}x).",
        "",
    ]


def profile_reduction24() -> list[str]:
    values = jnp.asarray(np.random.default_rng(0).uniform(size=(1, 1 << 24)), jnp.float32)
    out = []
    for name, split_from in (
        ("two-halves split (used from n = 18)", 18),
        ("pairwise divide-and-conquer", 99),
    ):
        _shapley._SPLIT_FROM = split_from
        bj.attribute.clear_cache()  # compiled per table length: read the setting again
        reduce = jax.jit(jax.vmap(lambda v: bj.attribute(v, interactions=False).shapley))
        first, steady = timed(reduce, values, calls=20)
        out.append(f"| {name} | {first:.2f} s | {steady * 1e3:.1f} ms |")
    _shapley._SPLIT_FROM = 18
    bj.attribute.clear_cache()
    return [
        "### Shapley reduction at n = 24, one table",
        "",
        "| method | first call (compile) | steady |",
        "|---|---|---|",
        *out,
        "",
    ]


def profile_floor(n: int = 12, num_failures: int = 512) -> list[str]:
    """blamejax's table and whole compiled chunk against the hand-written gather chain."""
    tables, worlds, pipeline = bench_inputs(n, num_failures, 1)
    structure = discover_batch(pipeline, tables)
    players, fixes = tuple(range(n)), (1,) * n

    def library(case, world):
        return coalition_values(
            pipeline, structure, case, world, players, fixes, rows_per_world=True
        )

    def by_hand(case, world):
        noise = world_noise(structure, world)  # [n, K], site i is step i
        # Each step's choice for every (variant, previous choice), once per world.
        first = jnp.argmax(case["t0"] + noise[0], axis=-1)  # [2]
        later = [jnp.argmax(case[f"t{i}"] + noise[i], axis=-1) for i in range(1, n)]  # [2, K] each
        choice = first
        for table in later:  # the newest bit becomes axis 0, as in coalition_values
            choice = table[:, choice]
        return case["score"][choice].reshape(-1)

    first_world = jax.tree_util.tree_map(lambda leaf: leaf[:, 0], worlds)
    library_fn = jax.jit(jax.vmap(library))
    hand_fn = jax.jit(jax.vmap(by_hand))
    values = hand_fn(tables, first_world)
    same = bool(np.array_equal(np.asarray(library_fn(tables, first_world)), np.asarray(values)))
    if not same:
        raise SystemExit("the hand-written coalition table differs from blamejax's")
    lib, hand = timed(library_fn, tables, first_world), timed(hand_fn, tables, first_world)
    reduction = timed(
        jax.jit(jax.vmap(lambda v: bj.attribute(v, interactions=False).shapley)), values
    )
    call = timed(lambda: bj.exact_blame(pipeline, tables, worlds, block_size=num_failures))
    per = lambda s: f"{s / (num_failures << n) * 1e9:.2f} ns"  # noqa: E731
    return [
        f"### The floor at n = {n}, {num_failures} failures x 1 world (one default chunk)",
        "",
        "| piece | steady | per coalition |",
        "|---|---|---|",
        f"| coalition table, by hand (argmaxes once, one gather per step and bit) | {hand[1] * 1e3:.2f} ms | {per(hand[1])} |",
        f"| coalition table, blamejax (`coalition_values`) | {lib[1] * 1e3:.2f} ms | {per(lib[1])} |",
        f"| Shapley reduction of that table | {reduction[1] * 1e3:.2f} ms | {per(reduction[1])} |",
        f"| `exact_blame`, the whole call | {call[1] * 1e3:.2f} ms | {per(call[1])} |",
        "",
        f"- The two tables are equal bit for bit: {same}. blamejax's table / the hand-written one: "
        f"{lib[1] / hand[1]:.2f}x; the hand-written table plus the reduction, the least this design "
        f"can cost: {per(hand[1] + reduction[1])} per coalition.",
        "",
    ]


def profile_chunks(n: int = 12, num_failures: int = 8192, sizes=(128, 512, 2048)) -> list[str]:
    """`exact_blame` with several failures per compiled call; the answers must not change."""
    tables, worlds, pipeline = bench_inputs(n, num_failures, 1)
    rows, reference = [], None
    for size in sizes:
        call = lambda size=size: bj.exact_blame(pipeline, tables, worlds, block_size=size).shapley  # noqa: E731
        first, steady = timed(call, calls=7)
        values = np.asarray(call())
        reference = values if reference is None else reference
        if not np.array_equal(values, reference):
            raise SystemExit(f"block_size {size} changed the Shapley values")
        rows.append(
            f"| {size} | {first:.2f} s | {steady * 1e3:.1f} ms | {steady / (num_failures << n) * 1e9:.2f} ns |"
        )
    return [
        f"### Failures per compiled call, n = {n}, {num_failures} failures x 1 world",
        "",
        "| block_size | first call | steady | per coalition |",
        "|---|---|---|---|",
        *rows,
        "",
        "- The same Shapley values, bit for bit, at every chunk size.",
        "",
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reduction24", action="store_true", help="also time the n = 24 reduction")
    parser.add_argument(
        "--floor", action="store_true", help="also the hand-written coalition table at n = 12"
    )
    parser.add_argument(
        "--chunks", action="store_true", help="also exact_blame at several chunk sizes (n = 12)"
    )
    parser.add_argument("--out", default=os.path.join(HERE, "results", "profile_exact.md"))
    args = parser.parse_args(argv)
    lines = [
        "## profile_exact",
        "",
        f"`python benchmarks/profile_exact.py{' --reduction24' if args.reduction24 else ''}"
        f"{' --floor' if args.floor else ''}{' --chunks' if args.chunks else ''}`; jax "
        f"{jax.__version__}, {os.cpu_count()} CPU cores; medians of 200 calls after {WARMUP_S} s of warm-up.",
        "",
    ]
    for n, num_failures, num_worlds in ((8, 154, 8), (12, 100, 1)):
        lines += profile_size(n, num_failures, num_worlds)
    if args.reduction24:
        lines += profile_reduction24()
    if args.floor:
        lines += profile_floor()
    if args.chunks:
        lines += profile_chunks()
    text = "\n".join(lines)
    print(text)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
