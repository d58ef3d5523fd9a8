"""Where the time of one `exact_blame` call goes, piece by piece, on the bench_exact inputs.

For each size it times, each piece compiled on its own and called repeatedly after a warm-up:
the addressed noise of every world (blamejax's unrolled Threefry hash, and the same addresses
drawn with `jax.random`, checked bit-equal), the coalition table alone, the Shapley reduction
alone, the whole compiled call, and `exact_blame` itself (the difference is the host's share of
a call). It also prints how much slower the first 30 calls after compiling run than later ones,
and, at n = 24, the reduction with the two-halves split against the pairwise
divide-and-conquer.

    python benchmarks/profile_exact.py                 # n = 8 (154 x 8) and n = 12 (100 x 1)
    python benchmarks/profile_exact.py --reduction24   # also the n = 24 reduction

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
        site = jr.fold_in(jr.fold_in(jr.fold_in(key, _noise._GUMBEL_TAG), bj.noise.stable_hash(step)), slot)
        rows.append(jax.vmap(lambda j, s=site: jr.gumbel(jr.fold_in(s, j)))(jnp.arange(num_options)))
    return jnp.stack(rows)


def profile_size(n: int, num_failures: int, num_worlds: int) -> list[str]:
    tables = {k: jnp.asarray(v.astype(np.float32)) for k, v in build_tables(n, num_failures, 0).items()}
    worlds = bj.fresh_worlds(0, num_failures, num_worlds)
    pipeline = chain_pipeline(n)
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
    reduction = timed(jax.jit(jax.vmap(lambda v: bj.attribute(v, interactions=False).shapley)), values)

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
    for name, split_from in (("two-halves split (used from n = 18)", 18), ("pairwise divide-and-conquer", 99)):
        _shapley._SPLIT_FROM = split_from
        reduce = jax.jit(jax.vmap(lambda v: bj.attribute(v, interactions=False).shapley))
        first, steady = timed(reduce, values, calls=20)
        out.append(f"| {name} | {first:.2f} s | {steady * 1e3:.1f} ms |")
    _shapley._SPLIT_FROM = 18
    return ["### Shapley reduction at n = 24, one table", "", "| method | first call (compile) | steady |", "|---|---|---|", *out, ""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reduction24", action="store_true", help="also time the n = 24 reduction")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "profile_exact.md"))
    args = parser.parse_args(argv)
    lines = [
        "## profile_exact",
        "",
        f"`python benchmarks/profile_exact.py{' --reduction24' if args.reduction24 else ''}`; jax "
        f"{jax.__version__}, {os.cpu_count()} CPU cores; medians of 200 calls after {WARMUP_S} s of warm-up.",
        "",
    ]
    for n, num_failures, num_worlds in ((8, 154, 8), (12, 100, 1)):
        lines += profile_size(n, num_failures, num_worlds)
    if args.reduction24:
        lines += profile_reduction24()
    text = "\n".join(lines)
    print(text)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
