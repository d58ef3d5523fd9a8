"""Monte Carlo Shapley (`blamejax.mc_shapley`) against shapiq's `PermutationSamplingSV`.

Games: weighted unanimity games with n = 16 and n = 32 players, whose Shapley values are
known analytically: v(S) = sum_T w_T [T subset of S], phi_i = sum_{T containing i} w_T / |T|.
Each failure is its own random game (8 carriers of random sizes, weights summing to 1, so the
score lies in [0, 1]). blamejax samples them through a pipeline of n deterministic steps
(factual = the step's bad option, fix = the good one) whose score is the game's value of the
set of good steps; shapiq gets the same game as a vectorized numpy function.

At equal budgets (coalition evaluations per failure, counted the same way on both sides: the
empty and full coalitions once, then n - 1 per order), it reports the error against the exact
values (root mean squared error over steps and failures), the wall time per failure, and their
ratios; then the coverage of the intervals of the adaptive estimator over 1000 runs, for each
radius (the normal radius has no finite-sample guarantee: its coverage is reported only).

Run from the repository root:

    python benchmarks/bench_mc.py            # n = 16 and 32, 100 failures (a few minutes)
    python benchmarks/bench_mc.py --quick    # a smoke run
    python benchmarks/bench_mc.py --breakdown  # where a call goes (game, choices, sampling)
    python benchmarks/bench_mc.py --chain  # chain pipelines with `given`, n = 16 ... 256
    python benchmarks/bench_mc.py --chain-compare  # deferred draws against one by one

If shapiq is not installed (it is not a dependency of blamejax), a plain numpy permutation
sampler stands in for it, and the results say so.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import blamejax as bj
import blamejax.estimators._mc as bj_mc
import blamejax.estimators._permutation as bj_permutation
import blamejax.estimators._prefixes as bj_prefixes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import timed  # noqa: E402

NEG = -np.inf
NUM_TERMS = 8


def weighted_unanimity(rng, num_failures, n):
    """Carriers `[F, T, n]` (bool), weights `[F, T]` (sum 1) and exact Shapley values `[F, n]`."""
    members = np.zeros((num_failures, NUM_TERMS, n), bool)
    for f in range(num_failures):
        for t in range(NUM_TERMS):
            size = rng.integers(1, n // 2 + 1)
            members[f, t, rng.choice(n, size, replace=False)] = True
    # float32 weights a hair below a sum of 1, so that no float32 score exceeds the range
    weights = (rng.dirichlet(np.ones(NUM_TERMS), size=num_failures) * (1 - 1e-6)).astype(np.float32)
    exact = np.einsum("ft,fti->fi", weights.astype(np.float64) / members.sum(-1), members)
    return members, weights, exact


def make_pipeline(n):
    def pipeline(ctx, case):
        good = jnp.stack([ctx.choose(f"p{i}", case["step"]).index for i in range(n)]) > 0
        satisfied = ~jnp.any(case["members"] & ~good[None, :], axis=1)
        return jnp.dot(case["weights"], satisfied.astype(case["weights"].dtype))

    return pipeline


def game_cases(members, weights):
    num = members.shape[0]
    step = np.array([[0.0, NEG], [NEG, 0.0]], np.float32)
    return dict(
        step=jnp.asarray(np.broadcast_to(step, (num, 2, 2))),
        members=jnp.asarray(members),
        weights=jnp.asarray(weights, jnp.float32),
    )


def numpy_game(members, weights):
    def game(coalitions):
        coalitions = np.atleast_2d(coalitions)
        satisfied = ~np.any(members[None] & ~coalitions[:, None, :], axis=-1)
        return satisfied @ weights

    return game


def numpy_permutation_sampling(game, n, budget, seed):
    """A plain permutation sampler (the stand-in when shapiq is missing): the empty and full
    coalitions once, then n - 1 evaluations per order."""
    rng = np.random.default_rng(seed)
    empty = game(np.zeros(n, bool))[0]
    full = game(np.ones(n, bool))[0]
    num = (budget - 2) // (n - 1)
    total = np.zeros(n)
    for _ in range(num):
        order = rng.permutation(n)
        masks = np.zeros((n - 1, n), bool)
        for k in range(n - 1):
            masks[k:, order[k]] = True
        prefix = np.concatenate([[empty], game(masks), [full]])
        total[order] += np.diff(prefix)
    return total / num


def baseline():
    try:
        import shapiq
        from shapiq import PermutationSamplingSV

        version = getattr(shapiq, "__version__", None)
        if version is None:
            from importlib.metadata import version as _version

            version = _version("shapiq")

        def run(game, n, budget, seed):
            approx = PermutationSamplingSV(n, random_state=seed)
            return approx.approximate(budget, game).get_n_order_values(1)

        return f"shapiq {version} PermutationSamplingSV", run
    except Exception as err:  # noqa: BLE001 - any import problem means: use the stand-in
        print(
            f"shapiq unavailable ({type(err).__name__}: {err}); using a plain numpy permutation sampler"
        )
        return "plain numpy permutation sampling (shapiq unavailable)", numpy_permutation_sampling


def load():
    return os.getloadavg()[0]


def rmse(estimates, exact):
    return float(np.sqrt(np.mean((np.asarray(estimates) - exact) ** 2)))


def bench_size(n, num_failures, multipliers, base_run, base_failures, repeats, seed, log):
    rng = np.random.default_rng(seed + n)
    members, weights, exact = weighted_unanimity(rng, num_failures, n)
    pipeline = make_pipeline(n)
    cases = game_cases(members, weights)
    worlds = bj.recorded_worlds(0, range(num_failures))
    rows = []
    for mult in multipliers:
        budget = 2 + (n - 1) * mult
        for antithetic in (False, True):

            def call(key):
                return bj.mc_shapley(
                    pipeline,
                    cases,
                    worlds,
                    key=key,
                    max_evaluations=budget,
                    stop=(),
                    antithetic=antithetic,
                )

            start, start_cpu = time.perf_counter(), time.process_time()
            result = call(0)
            jax.block_until_ready(result.values)
            first = time.perf_counter() - start
            first_cpu = time.process_time() - start_cpu
            times, cpu_times = [], []
            for r in range(repeats):
                start, start_cpu = time.perf_counter(), time.process_time()
                jax.block_until_ready(call(r + 1).values)
                times.append(time.perf_counter() - start)
                cpu_times.append(time.process_time() - start_cpu)
            steady = float(np.min(times))  # the least disturbed by other work
            steady_cpu = float(np.min(cpu_times))
            err = rmse(result.values, exact)
            efficiency = float(
                np.abs(np.asarray(result.values).sum(1) - np.asarray(result.total)).max()
            )
            assert np.all(np.asarray(result.evaluations) <= budget), "budget exceeded"
            assert efficiency < 1e-5, f"estimates do not add up: {efficiency}"
            rows.append(
                dict(
                    n=n,
                    budget=budget,
                    side="blamejax" + (" antithetic" if antithetic else ""),
                    rmse=err,
                    per_failure_ms=1e3 * steady / num_failures,
                    compile_s=max(first - steady, 0.0),
                    compile_cpu_s=max(first_cpu - steady_cpu, 0.0),
                    load=load(),
                )
            )
            log(
                f"n={n} budget={budget} {rows[-1]['side']}: rmse {err:.5f}, "
                f"{rows[-1]['per_failure_ms']:.3f} ms/failure, first call {first:.2f} s"
            )
        game_errors, game_times = [], []
        for f in range(base_failures):
            game = numpy_game(members[f], weights[f])
            start = time.perf_counter()
            estimate = base_run(game, n, budget, seed=f)
            game_times.append(time.perf_counter() - start)
            game_errors.append(np.asarray(estimate) - exact[f])
        err = float(np.sqrt(np.mean(np.square(game_errors))))
        rows.append(
            dict(
                n=n,
                budget=budget,
                side="baseline",
                rmse=err,
                per_failure_ms=1e3 * float(np.mean(game_times)),
                compile_s=0.0,
                compile_cpu_s=0.0,
                load=load(),
            )
        )
        log(
            f"n={n} budget={budget} baseline: rmse {err:.5f}, {rows[-1]['per_failure_ms']:.1f} ms/failure "
            f"({base_failures} failures)"
        )
    return rows


def coverage(n, num_games, seeds_per_game, seed, log):
    """Coverage over num_games x seeds_per_game adaptive runs (top-1 rule), per radius."""
    rng = np.random.default_rng(seed)
    members, weights, exact = weighted_unanimity(rng, num_games, n)
    members = np.repeat(members, seeds_per_game, axis=0)
    weights = np.repeat(weights, seeds_per_game, axis=0)
    exact = np.repeat(exact, seeds_per_game, axis=0)
    num = members.shape[0]
    pipeline = make_pipeline(n)
    out = {}
    for radius in ("bernstein", "hoeffding", "normal"):
        result = bj.mc_shapley(
            pipeline,
            game_cases(members, weights),
            bj.recorded_worlds(0, range(num)),
            key=seed,
            max_evaluations=2 + (n - 1) * 2000,
            interval=bj.stats.Interval(radius),
            schedule=bj.stats.Schedule(first=4, growth=1.5),
            epsilon=0.01,
            history=True,
        )
        hist = result.history
        values = np.asarray(hist.values)
        reached = ~np.isnan(values)

        def count(lower, upper):
            bad = reached & ((exact[:, None] < lower - 1e-6) | (exact[:, None] > upper + 1e-6))
            return int(bad.any(axis=(1, 2)).sum())

        out[radius] = count(np.asarray(hist.lower), np.asarray(hist.upper))
        if radius == "normal":
            t = np.asarray(hist.t)[None, :, None]
            half = bj.stats.normal_radius(t, np.asarray(hist.variance, np.float64), 0.1)
            out["normal, uncorrected"] = count(values - half, values + half)
        out[radius + " median orders"] = int(np.median(np.asarray(result.num_samples)))
        log(f"coverage {radius}: {out[radius]} of {num} runs missed")
    return num, out


def breakdown(n, num_failures, seed, repeats, orders=(32, 128, 512)):
    """Where an `mc_shapley` call goes: the same call (fixed budget) with the game's pipeline,
    with the game without the padding of each order's prefixes (`blamejax.scored_prefixes`),
    with a pipeline that makes the same n choices but scores their mean (no game), and with
    one whose score ignores the choices (the compiler drops them: what is left is sampling
    the orders, building the prefixes and summing the marginals). The fixed cost of a call is
    the game's time extrapolated linearly to zero orders."""
    rng = np.random.default_rng(seed + n)
    members, weights, _ = weighted_unanimity(rng, num_failures, n)
    cases = game_cases(members, weights)
    worlds = bj.recorded_worlds(0, range(num_failures))

    def choices_only(ctx, case):
        good = jnp.stack([ctx.choose(f"p{i}", case["step"]).index for i in range(n)]) > 0
        return jnp.mean(good.astype(jnp.float32)) * case["weights"].sum()

    def constant(ctx, case):
        for i in range(n):
            ctx.choose(f"p{i}", case["step"])
        return 0.5 * case["weights"].sum()

    game = make_pipeline(n)
    unpadded = (
        f"the game, all {n - 1} interior prefixes of an order in one block (no padding, no scan)"
    )
    pipelines = {
        "the game (as timed above)": game,
        unpadded: lambda ctx, case: game(ctx, case),  # its own compiled function
        "the same choices, scored by their mean (no game)": choices_only,
        "a constant score (the choices are dropped)": constant,
    }
    out = {}
    for label, pipeline in pipelines.items():
        # `scored_prefixes` scores an order's prefixes in padded blocks of at most 8;
        # one block of all n - 1 turns the padding and the scan off (read when compiling).
        # (the driver imported the function by name: it is replaced in both modules)
        blocks = bj_prefixes.prefix_blocks
        if label == unpadded:
            bj_prefixes.prefix_blocks = bj_mc.prefix_blocks = lambda n: (1, n - 1)
        try:
            for num_orders in orders:
                budget = 2 + (n - 1) * num_orders

                def call(pipeline=pipeline, budget=budget):
                    return bj.mc_shapley(
                        pipeline, cases, worlds, key=1, max_evaluations=budget, stop=()
                    ).values

                out[label, num_orders] = 1e3 * timed(call, calls=repeats)[1]
        finally:
            bj_prefixes.prefix_blocks = bj_mc.prefix_blocks = blocks
    lines = [
        f"### n = {n}, {num_failures} failures: ms per `mc_shapley` call (median of {repeats})",
        "",
        "| pipeline | " + " | ".join(f"{t} orders" for t in orders) + " | ms per 100 orders |",
        "|---|" + "---|" * (len(orders) + 1),
    ]
    fits = {}
    for label in pipelines:  # least squares: time = fixed + slope x orders
        fits[label] = np.polyfit(orders, [out[label, t] for t in orders], 1)
        cells = " | ".join(f"{out[label, t]:.1f}" for t in orders)
        lines.append(f"| {label} | {cells} | {100 * fits[label][0]:.1f} |")
    slope, fixed = fits[next(iter(pipelines))]
    lines += [
        "",
        f"Fixed cost of a call (the game's times fitted by a line, at 0 orders): {fixed:.2f} ms.",
        "",
    ]
    return lines


# --------------------------------------------------------------------------------------
# Chain pipelines with `given` (`--chain`): compile time, memory and cost per evaluation
# as n grows, each size in a fresh process so that peak memory does not mix.
# --------------------------------------------------------------------------------------

CHAIN_SIZES = (16, 32, 64, 128, 256)
CHAIN_OPTIONS = 4


def chain_cases(n, num_failures, seed):
    """Random tables of a chain of n steps: step 0 `[2, K]`, step i `[2, K, K]` given step
    i - 1 (2 variants: factual and fix); the score reads the last choice from `[K]`."""
    rng = np.random.default_rng(seed + n)
    tables = [rng.normal(size=(num_failures, 2, CHAIN_OPTIONS)).astype(np.float32) * 1.5]
    for _ in range(1, n):
        shape = (num_failures, 2, CHAIN_OPTIONS, CHAIN_OPTIONS)
        tables.append(rng.normal(size=shape).astype(np.float32) * 1.5)
    score = rng.uniform(size=(num_failures, CHAIN_OPTIONS)).astype(np.float32)
    return dict(tables=[jnp.asarray(t) for t in tables], score=jnp.asarray(score))


def chain_pipeline(ctx, case):
    choice = ctx.choose("s0", case["tables"][0])
    for i in range(1, len(case["tables"])):
        choice = ctx.choose(f"s{i}", case["tables"][i], given=choice)
    return choice.take(case["score"])


def chain_one(n, num_failures, orders, repeats, seed) -> dict:
    """One size, in this process: the first call (compile included), the fastest of
    `repeats` later calls with other keys, and the peak resident memory."""
    import resource

    cases = chain_cases(n, num_failures, seed)
    worlds = bj.fresh_worlds(seed, range(num_failures), 1)
    budget = 2 + (n - 1) * orders

    def call(key):
        result = bj.mc_shapley(
            chain_pipeline, cases, worlds, key=key, max_evaluations=budget, stop=()
        )
        jax.block_until_ready(result.values)
        return result

    start, start_cpu = time.perf_counter(), time.process_time()
    result = call(0)
    first, first_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    times, cpu_times = [], []
    for r in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        call(r + 1)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - start_cpu)
    steady, steady_cpu = min(times), min(cpu_times)
    evaluations = int(np.asarray(result.evaluations).sum())
    assert np.all(np.asarray(result.evaluations) == budget), "budget not spent exactly"
    row = dict(
        n=n,
        failures=num_failures,
        orders=orders,
        evaluations=evaluations,
        computed=result.evaluations_computed,
        first_s=first,
        compile_s=max(first - steady, 0.0),
        compile_cpu_s=max(first_cpu - steady_cpu, 0.0),
        steady_s=steady,
        ns_per_eval=1e9 * steady / evaluations,
        ns_per_eval_step=1e9 * steady / evaluations / n,
        cpu_ns_per_eval_step=1e9 * steady_cpu / evaluations / n,
        peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        load=load(),
    )
    if n == 16:  # the estimate at 2^16 evaluations against exact_blame
        big = 2**16
        mc = bj.mc_shapley(chain_pipeline, cases, worlds, key=99, max_evaluations=big, stop=())
        exact = np.asarray(bj.exact_blame(chain_pipeline, cases, worlds).shapley)
        inside = (exact >= np.asarray(mc.lower) - 1e-6) & (exact <= np.asarray(mc.upper) + 1e-6)
        row.update(
            check_budget=big,
            check_failures_inside=int(inside.all(axis=1).sum()),
            check_max_error=float(np.abs(np.asarray(mc.values) - exact).max()),
            check_max_half_width=float(np.max(np.asarray(mc.upper) - np.asarray(mc.lower)) / 2),
            check_delta=mc.delta,
        )
    return row


def chain_compare(n, num_failures, orders, repeats, seed) -> dict:
    """Deferred draws against draws made one by one (`DEFER_FROM` set to 0, then past n:
    `mc_shapley` itself defers from 32 draw sites on), on the same inputs in this one process:
    compile time, the fastest of `repeats` calls, and whether the answers agree bit for bit."""
    cases = chain_cases(n, num_failures, seed)
    worlds = bj.fresh_worlds(seed, range(num_failures), 1)
    budget = 2 + (n - 1) * orders
    default = bj_permutation.DEFER_FROM

    def side(defer):
        bj.clear_caches()  # the setting is read while tracing
        bj_permutation.DEFER_FROM = 0 if defer else n + 1
        try:

            def call(key):
                result = bj.mc_shapley(
                    chain_pipeline, cases, worlds, key=key, max_evaluations=budget, stop=()
                )
                jax.block_until_ready(result.values)
                return result

            start = time.perf_counter()
            result = call(0)
            first = time.perf_counter() - start
            times = []
            for r in range(repeats):
                start = time.perf_counter()
                call(r + 1)
                times.append(time.perf_counter() - start)
            steady = min(times)
        finally:
            bj_permutation.DEFER_FROM = default
            bj.clear_caches()
        evaluations = int(np.asarray(result.evaluations).sum())
        return result, dict(
            compile_s=max(first - steady, 0.0), ns_per_eval=1e9 * steady / evaluations
        )

    deferred, d = side(True)
    eager, e = side(False)
    same = all(
        np.array_equal(np.asarray(getattr(deferred, f)), np.asarray(getattr(eager, f)))
        for f in ("values", "lower", "upper", "variance")
    )
    return dict(n=n, deferred=d, eager=e, bit_for_bit=same, load=load())


def chain_rows(sizes, num_failures, orders, repeats, seed, log) -> list[dict]:
    """Every size in its own fresh process (`--chain-one`), so peaks do not mix."""
    import json
    import subprocess

    rows = []
    for n in sizes:
        command = [
            sys.executable,
            __file__,
            "--chain-one",
            str(n),
            "--failures",
            str(num_failures),
            "--orders",
            str(orders),
            "--repeats",
            str(repeats),
            "--seed",
            str(seed),
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"n = {n} failed:\n{done.stdout}\n{done.stderr}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        log(
            f"chain n={n}: compile {r['compile_s']:.1f} s (CPU {r['compile_cpu_s']:.1f} s), "
            f"{r['ns_per_eval']:.0f} ns/evaluation, {r['ns_per_eval_step']:.2f} ns/evaluation/step, "
            f"peak RSS {r['peak_rss_gb']:.2f} GB, load {r['load']:.1f}"
        )
    return rows


def chain_report(rows, command, uptime) -> str:
    lines = [
        "# bench_mc --chain: Monte Carlo on chain pipelines with `given`",
        "",
        f"Command: `{command}`; jax {jax.__version__}, {jax.devices()[0].platform}, "
        f"{os.cpu_count()} cores shared with other work (`uptime` before: {uptime}; the "
        "1-minute load average is given per row: times are disturbed by it, CPU times less so).",
        "",
        f"Chain of n steps, {CHAIN_OPTIONS} options, step i `ctx.choose(..., [2, K, K] table, "
        f"given=step i - 1)`, {rows[0]['failures']} failures, one fresh world each, a fixed "
        f"budget of {rows[0]['orders']} orders per failure (`stop=()`). Each size runs in a "
        "fresh process. compile = first call minus the fastest later call; ns per evaluation = "
        "fastest call / evaluations charged (the padding of `scored_prefixes` is extra work "
        "not counted); peak RSS = `ru_maxrss` of the process.",
        "",
        "| n | evaluations | compile s (wall / CPU) | ns / evaluation | ns / evaluation / step "
        "(wall / CPU) | peak RSS GB | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['evaluations']:,} | {r['compile_s']:.1f} / {r['compile_cpu_s']:.1f} | "
            f"{r['ns_per_eval']:.0f} | {r['ns_per_eval_step']:.2f} / {r['cpu_ns_per_eval_step']:.2f} | "
            f"{r['peak_rss_gb']:.2f} | {r['load']:.1f} |"
        )
    by_n = {r["n"]: r for r in rows}
    lines += ["", "Targets:"]
    compile_ok = all(r["compile_s"] <= 10 for r in rows)
    rss_ok = all(r["peak_rss_gb"] <= 2 for r in rows)
    lines.append(
        f"- compile <= 10 s at every n: {'met' if compile_ok else 'NOT met'} (largest "
        f"{max(r['compile_s'] for r in rows):.1f} s wall, {max(r['compile_cpu_s'] for r in rows):.1f} s CPU)"
    )
    lines.append(
        f"- peak RSS <= 2 GB at every n: {'met' if rss_ok else 'NOT met'} (largest "
        f"{max(r['peak_rss_gb'] for r in rows):.2f} GB)"
    )
    if 32 in by_n and 256 in by_n:
        ratio = by_n[256]["ns_per_eval_step"] / by_n[32]["ns_per_eval_step"]
        cpu_ratio = by_n[256]["cpu_ns_per_eval_step"] / by_n[32]["cpu_ns_per_eval_step"]
        lines.append(
            f"- ns per evaluation per step at n = 256 within 2x of n = 32: "
            f"{'met' if ratio <= 2 else 'NOT met'} ({ratio:.2f}x wall, {cpu_ratio:.2f}x CPU)"
        )
    if 16 in by_n and "check_budget" in by_n[16]:
        r = by_n[16]
        ok = r["check_failures_inside"] >= (1 - r["check_delta"]) * r["failures"]
        lines.append(
            f"- n = 16, budget 2^16 = {r['check_budget']:,} evaluations per failure: exact_blame's "
            f"Shapley values lie inside every interval of {r['check_failures_inside']} of "
            f"{r['failures']} failures (the guarantee: at least 1 - delta = {1 - r['check_delta']:g} "
            f"of them in expectation): {'met' if ok else 'NOT met'}; largest error "
            f"{r['check_max_error']:.4f}, largest half-width {r['check_max_half_width']:.4f}"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: n = 16 only, few failures"
    )
    parser.add_argument("--failures", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/bench_mc.md")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="only time where an mc_shapley call goes (n = 16 and 32; writes "
        "benchmarks/results/bench_mc_breakdown.md)",
    )
    parser.add_argument(
        "--chain",
        action="store_true",
        help="only the chain pipelines with `given` (n = 16 ... 256, each in a fresh process; "
        "writes benchmarks/results/bench_mc_chain.md)",
    )
    parser.add_argument("--chain-one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--chain-compare",
        action="store_true",
        help="chain pipelines, deferred draws against draws made one by one in one process "
        "(n = 16, 32, 64, 128 or --sizes; writes benchmarks/results/bench_mc_chain_compare.md)",
    )
    parser.add_argument("--orders", type=int, default=64, help="orders per failure (--chain)")
    parser.add_argument("--sizes", default=None, help="comma-separated n for --chain")
    args = parser.parse_args(argv)
    if args.chain_one is not None:
        import json

        row = chain_one(args.chain_one, args.failures, args.orders, args.repeats, args.seed)
        print(json.dumps(row))
        return 0
    if args.chain_compare:
        sizes = (
            (16, 32, 64, 128)
            if args.sizes is None
            else tuple(int(x) for x in args.sizes.split(","))
        )
        uptime = "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())
        lines = [
            "# bench_mc --chain-compare: deferred draws against draws made one by one",
            "",
            "Command: `python benchmarks/bench_mc.py --chain-compare"
            + (f" --sizes {args.sizes}" if args.sizes else "")
            + f"`; jax {jax.__version__}, cpu, `uptime` before: {uptime}. The chains of "
            f"`--chain` ({args.failures} failures, {args.orders} orders each), both sides in "
            "one process on the same inputs. compile = first call minus the fastest of "
            f"{args.repeats} later calls.",
            "",
            "| n | compile s (deferred / one by one) | ns / evaluation (deferred / one by one) "
            "| evaluation cost ratio | bit for bit | load |",
            "|---|---|---|---|---|---|",
        ]
        for n in sizes:
            r = chain_compare(n, args.failures, args.orders, args.repeats, args.seed)
            d, e = r["deferred"], r["eager"]
            line = (
                f"| {n} | {d['compile_s']:.1f} / {e['compile_s']:.1f} | {d['ns_per_eval']:.0f} / "
                f"{e['ns_per_eval']:.0f} | {d['ns_per_eval'] / e['ns_per_eval']:.2f}x | "
                f"{'yes' if r['bit_for_bit'] else 'NO'} | {r['load']:.1f} |"
            )
            print(line)
            lines.append(line)
            if not r["bit_for_bit"]:
                raise SystemExit(f"n = {n}: deferred and one-by-one answers differ")
        text = "\n".join(lines) + "\n"
        print("\n" + text)
        if args.sizes is None:
            path = Path("benchmarks/results/bench_mc_chain_compare.md")
            path.write_text(text)
            print(f"wrote {path}")
        return 0
    if args.chain:
        sizes = CHAIN_SIZES if args.sizes is None else tuple(int(x) for x in args.sizes.split(","))
        uptime = "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())
        rows = chain_rows(sizes, args.failures, args.orders, args.repeats, args.seed, print)
        command = "python benchmarks/bench_mc.py --chain" + (
            f" --sizes {args.sizes}" if args.sizes else ""
        )
        text = chain_report(rows, command, uptime)
        print("\n" + text)
        if args.sizes is None:
            path = Path("benchmarks/results/bench_mc_chain.md")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
        return 0
    if args.breakdown:
        lines = [
            "## bench_mc --breakdown",
            "",
            f"`python benchmarks/bench_mc.py --breakdown`; jax {jax.__version__}, {os.cpu_count()} CPU cores.",
            "",
        ]
        for n in (16, 32):
            lines += breakdown(n, args.failures, args.seed, max(args.repeats, 15))
        text = "\n".join(lines)
        print(text)
        Path("benchmarks/results/bench_mc_breakdown.md").write_text(text + "\n")
        return 0
    sizes = (16,) if args.quick else (16, 32)
    failures = 10 if args.quick else args.failures
    multipliers = (32, 256) if args.quick else (32, 128, 512, 2048)
    name, base_run = baseline()
    lines = []

    def log(text):
        print(text, flush=True)

    rows = []
    for n in sizes:
        rows += bench_size(
            n, failures, multipliers, base_run, failures, args.repeats, args.seed, log
        )
    num_runs, cov = coverage(16, 10 if args.quick else 100, 10, args.seed + 1, log)

    lines.append("# bench_mc: Monte Carlo Shapley vs " + name + "\n")
    lines.append(
        f"Command: `python benchmarks/bench_mc.py{' --quick' if args.quick else ''}`; "
        f"{failures} failures per size (each its own weighted unanimity game, {NUM_TERMS} carriers); "
        f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} cores (shared: "
        "times are noisy; the load average is given per row).\n"
    )
    lines.append(
        "Budget = coalition evaluations per failure (2 + (n - 1) x orders, the same on both sides). "
        "RMSE over steps and failures against the analytic Shapley values. blamejax time: one "
        "`mc_shapley` call on all failures with a fixed budget (`stop=()`), fastest of the repeats, "
        "divided by the failures; compile = first call minus steady. Baseline time: mean per failure.\n"
    )
    lines.append(
        "| n | budget | blamejax RMSE | antithetic RMSE | baseline RMSE | error ratio | blamejax ms/failure | "
        "baseline ms/failure | speed-up | compile s (wall / CPU) | load |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        for budget in sorted({r["budget"] for r in rows if r["n"] == n}):
            sel = {r["side"]: r for r in rows if r["n"] == n and r["budget"] == budget}
            ours, anti, base = sel["blamejax"], sel["blamejax antithetic"], sel["baseline"]
            lines.append(
                f"| {n} | {budget} | {ours['rmse']:.5f} | {anti['rmse']:.5f} | {base['rmse']:.5f} | "
                f"{ours['rmse'] / base['rmse']:.2f} | {ours['per_failure_ms']:.3f} | {base['per_failure_ms']:.1f} | "
                f"{base['per_failure_ms'] / ours['per_failure_ms']:.0f}x | {ours['compile_s']:.2f} / "
                f"{ours['compile_cpu_s']:.2f} | {ours['load']:.1f} |"
            )
    lines.append("")
    lines.append(
        f"Coverage, delta = 0.1 per run, {num_runs} adaptive runs (top-1 rule, epsilon = 0.01, first look = 4, "
        "growth = 1.5, n = 16): runs in which some interval at some checkpoint up to stopping missed "
        "the exact value (137 is the 1 - 1e-4 quantile of Binomial(1000, 0.1)).\n"
    )
    lines.append("| radius | runs missed | median orders at stop |")
    lines.append("|---|---|---|")
    for radius in ("bernstein", "hoeffding", "normal"):
        note = " (asymptotic, no guarantee; reported only)" if radius == "normal" else ""
        lines.append(f"| {radius}{note} | {cov[radius]} | {cov[radius + ' median orders']} |")
    lines.append(
        f"| normal at level 0.1 at every checkpoint, no correction | {cov['normal, uncorrected']} | - |"
    )
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if not args.quick or args.out != parser.get_default("out"):
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
