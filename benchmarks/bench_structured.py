"""Exact blame by structure (`exact_blame(method="structured")`) at real length.

Sections (each runs both sides on the same inputs in one process, checks that they agree,
and prints the ratio or the fit):

- `--chain`: a chain of n = 256 steps, K = 8, 1,000 failures x 4 fresh worlds: first call,
  steady call, peak resident memory; two failures checked against a float64 NumPy
  reference of the same recursion.
- `--scaling`: the steady cost against n = 16 ... 1,024 (64 failures x 4 worlds, K = 8) and
  the fitted exponent of time ~ n^p.
- `--enumeration`: against the enumerating path at n = 8 ... 20 on random chains and at
  n = 4 on a DAG with a two-parent step and on every demo: the largest difference of every
  rule, and the speed-up.
- `--take`: a score over two steps of a 20-step chain read three ways on the enumerating
  path, `table[d.index, v.index]`, `v.take(d.take(table))` and `d.take(v.take(table.T))`:
  nanoseconds per coalition, the ratio, and that the values are equal.
- `--mc`: at n = 64, how long `mc_shapley` needs to bring its largest error below 1e-3 against
  the structured exact values, and the structured call's time.
- `--dag`: the skip-chain DAG (every 5th step reads two parents, K = 4) at n = 200 (and
  n = 1,000 with `BENCH_DAG_LONG=1`; `expected_worlds` too with `BENCH_DAG_EXPECTED=1`):
  first call (compile), steady call, CPU time and peak RSS, each path in a fresh process:
  the scan over the draws against the draw-by-draw contraction (and today's code from the
  checkout in `BENCH_DAG_BASE`), their agreement and the ratio.
- `--replay`: `bj.replay` of a chain of n = 100 and 1,000 steps (K = 4 and 8), each call in a
  fresh process: discovery, first and steady call, against the old route (draws one by one,
  one output per site) at n = 100 (and 1,000 with `BENCH_REPLAY_OLD_LONG=1`), values equal.
- `--expected`: `expected_worlds` (fresh and inferred) on a chain of 32 steps, 64 failures:
  first and steady call, and the gap to the mean over 512 fresh worlds.

```bash
python benchmarks/bench_structured.py            # every section (about ten minutes)
python benchmarks/bench_structured.py --take     # one section
```

Results: `benchmarks/results/bench_structured.md` (appended per run, with the date and load).
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import resource
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import blamejax as bj

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _reference import chain_shapley_of, numpy_chain_cases  # noqa: E402

warnings.simplefilter("ignore", bj.estimators.NotAFailureWarning)
HERE = pathlib.Path(__file__).parent
OUT = HERE / "results" / "bench_structured.md"
LINES: list[str] = []


def say(line: str = "") -> None:
    print(line, flush=True)
    LINES.append(line)


def chain(ctx, case):
    choice = ctx.choose("s0", case["tables"][0])
    for i in range(1, len(case["tables"])):
        choice = ctx.choose(f"s{i}", case["tables"][i], given=choice)
    return choice.take(case["score"])


def dag(ctx, case):
    t = case["tables"]
    a = ctx.choose("s0", t[0])
    b = ctx.choose("s1", t[1], given=a)
    c = ctx.choose("s2", t[2], given=a)
    d = ctx.choose("s3", t[3], given=(b, c))
    return d.take(case["score"])


def dag_cases(seed, num_cases, k=4):
    rng = np.random.default_rng(seed)
    shapes = [(2, k), (2, k, k), (2, k, k), (2, k, k, k)]
    tables = [jnp.asarray(rng.standard_normal((num_cases,) + s), jnp.float32) for s in shapes]
    return dict(tables=tables, score=jnp.asarray(rng.uniform(size=(num_cases, k)), jnp.float32))


def call(function, repeats=3):
    """(first call, median steady call) in seconds."""
    start = time.perf_counter()
    out = jax.block_until_ready(function())
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(function())
        times.append(time.perf_counter() - start)
    return out, first, float(np.median(times))


def section_chain():
    n, k, num_f, num_w = 256, 8, 1000, 4
    say(f"## chain: n = {n}, K = {k}, {num_f} failures x {num_w} fresh worlds")
    cases = numpy_chain_cases(0, n, num_f, k)
    worlds = bj.fresh_worlds(1, range(num_f), num_w)
    result, first, steady = call(lambda: bj.exact_blame(chain, cases, worlds))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    errors = []
    for f in range(2):  # one world each: the reference of the mean over worlds is the mean
        ref = np.mean([chain_shapley_of(chain, cases, worlds, f, w) for w in range(num_w)], axis=0)
        errors.append(np.abs(np.asarray(result.shapley[f], np.float64) - ref).max())
    eff = float(np.abs(np.asarray(result.shapley).sum(1) - np.asarray(result.total)).max())
    say(
        f"- method {result.method}; first call {first:.2f} s, steady {steady:.2f} s "
        f"(targets 10 s, 2 s), peak RSS {rss:.2f} GiB (target 2 GiB)"
    )
    say(
        f"- largest difference from the float64 reference (2 failures): {max(errors):.2e}; "
        f"efficiency error {eff:.2e}"
    )
    ok = max(errors) < 1e-5 and eff < 1e-4
    say(f"- per failure x world: {steady / (num_f * num_w) * 1e6:.0f} us")
    return ok


def section_scaling():
    k, num_f, num_w = 8, 64, 4
    say(f"## cost against n (K = {k}, {num_f} failures x {num_w} worlds)")
    say("| n | first call s | steady s | us per failure x world |")
    say("|---|---|---|---|")
    sizes, times = [], []
    for n in (16, 32, 64, 128, 256, 512, 1024):
        cases = numpy_chain_cases(n, n, num_f, k)
        worlds = bj.fresh_worlds(2, range(num_f), num_w)
        result, first, steady = call(lambda: bj.exact_blame(chain, cases, worlds))
        assert result.method == "structured"
        eff = float(np.abs(np.asarray(result.shapley).sum(1) - np.asarray(result.total)).max())
        assert eff < 1e-3, eff
        say(f"| {n} | {first:.2f} | {steady:.3f} | {steady / (num_f * num_w) * 1e6:.1f} |")
        sizes.append(n)
        times.append(steady)
    slope = np.polyfit(np.log(sizes[2:]), np.log(times[2:]), 1)[0]
    say(f"- fitted exponent of steady time ~ n^p over n = 64 ... 1024: p = {slope:.2f}")
    return True


def section_enumeration():
    say("## against enumeration")
    say("| pipeline | n | largest difference | enumerate s | structured s | speed-up |")
    say("|---|---|---|---|---|---|")
    ok = True
    num_f = 64
    rows = [
        ("chain K=4", chain, numpy_chain_cases(n, n, num_f, 4, num_variants=3), n)
        for n in (8, 12, 16, 20)
    ]
    rows.append(("DAG, two-parent step", dag, dag_cases(0, num_f), 4))
    d = bj.demos
    rows += [
        ("demo refund", d.refund_pipeline, d.refund_cases(num_f), 4),
        ("demo rag", d.rag_pipeline, d.rag_cases(num_f), 4),
        ("demo agent8", d.agent8_pipeline, d.agent8_cases(num_f), 8),
        ("demo car (interaction)", d.interaction_pipeline, d.interaction_cases(num_f), 3),
    ]
    say(f"({num_f} failures x 4 fresh worlds each)")
    for name, pipeline, cases, n in rows:
        worlds = bj.fresh_worlds(3, range(num_f), 4)
        fixes = {"s3": 2} if name.startswith("chain") else None
        e, _, te = call(
            lambda: bj.exact_blame(pipeline, cases, worlds, method="enumerate", fixes=fixes),
            repeats=1,
        )
        s, _, ts = call(lambda: bj.exact_blame(pipeline, cases, worlds, fixes=fixes))
        diff = max(
            float(np.abs(np.asarray(getattr(s, f)) - np.asarray(getattr(e, f))).max())
            for f in ("shapley", "banzhaf", "fix_alone", "leave_one_out", "empty", "full")
        )
        ok &= s.method == "structured" and diff <= 1e-5 and bool((s.last_step == e.last_step).all())
        say(f"| {name} | {n} | {diff:.1e} | {te:.4f} | {ts:.4f} | {te / ts:.0f}x |")
    return ok


def take_pipeline(form, n):
    def pipeline(ctx, case):
        c = ctx.choose("s0", case["tables"][0])
        chosen = [c]
        for i in range(1, n):
            c = ctx.choose(f"s{i}", case["tables"][i], given=c)
            chosen.append(c)
        d, v = chosen[-2], chosen[-1]
        if form == "index":
            return case["pair"][d.index, v.index]
        if form == "take":
            return v.take(d.take(case["pair"]))
        return d.take(v.take(case["pair"].T))

    return pipeline


def section_take():
    n, k, num_f = 20, 4, 4
    say(f"## a score over two steps, enumerating path (n = {n}, K = {k}, {num_f} failures)")
    cases = dict(
        numpy_chain_cases(5, n, num_f, k),
        pair=jnp.asarray(np.random.default_rng(6).uniform(size=(num_f, k, k)), jnp.float32),
    )
    worlds = bj.recorded_worlds(0, range(num_f))
    out, cost = {}, {}
    for form in ("index", "take", "swap"):
        pipeline = take_pipeline(form, n)
        result, _, steady = call(
            lambda: bj.exact_blame(pipeline, cases, worlds, method="enumerate")
        )
        out[form], cost[form] = np.asarray(result.shapley), steady / (num_f * 2**n) * 1e9
    same = all(np.array_equal(out["index"], out[f]) for f in out)
    say(
        f"- ns per coalition: table[d.index, v.index] {cost['index']:.1f}, v.take(d.take(table)) "
        f"{cost['take']:.1f} ({cost['take'] / cost['index']:.2f}x), d.take(v.take(table.T)) "
        f"{cost['swap']:.1f} ({cost['swap'] / cost['index']:.2f}x); values equal bit for bit: {same}"
    )
    return same


def section_mc():
    n, k, num_f = 64, 4, 4
    say(
        f"## Monte Carlo against structured exact values (n = {n}, K = {k}, {num_f} failures, recorded)"
    )
    cases = numpy_chain_cases(7, n, num_f, k)
    worlds = bj.recorded_worlds(0, range(num_f))
    exact, _, ts = call(lambda: bj.exact_blame(chain, cases, worlds))
    say(f"- structured exact: {ts:.3f} s steady")
    say("| max_evaluations per failure | largest error | wall s (incl. compile) |")
    say("|---|---|---|")
    reached = None
    for budget in (2**14, 2**16, 2**18, 2**20, 2**22):
        start = time.perf_counter()
        mc = bj.mc_shapley(chain, cases, worlds, 0, max_evaluations=budget, stop=())
        wall = time.perf_counter() - start
        error = float(np.abs(np.asarray(mc.values) - np.asarray(exact.shapley)).max())
        say(f"| {budget:,} | {error:.2e} | {wall:.1f} |")
        if error < 1e-3:
            reached = wall
            break
    say(
        f"- Monte Carlo reached a largest error below 1e-3 in {reached:.1f} s"
        if reached
        else "- Monte Carlo did not reach 1e-3 within 2^22 evaluations per failure"
    )
    return True


def skip_chain(ctx, case):
    """Every 5th step reads two parents: the step before it and the one five before."""
    t = case["tables"]
    options = [ctx.choose("s0", t[0])]
    for i in range(1, len(t)):
        given = (options[i - 1], options[i - 5]) if i % 5 == 0 and i >= 5 else options[i - 1]
        options.append(ctx.choose(f"s{i}", t[i], given=given))
    return options[-1].take(case["score"])


def skip_chain_cases(seed, n, num_cases, k=4):
    rng = np.random.default_rng(seed)
    tables = []
    for i in range(n):
        parents = 0 if i == 0 else (2 if i % 5 == 0 and i >= 5 else 1)
        shape = (num_cases, 2) + (k,) * parents + (k,)
        tables.append(jnp.asarray(rng.standard_normal(shape), jnp.float32))
    score = jnp.asarray(rng.uniform(size=(num_cases, k)), jnp.float32)
    return dict(tables=tables, score=score)


DAG_SIDES = {
    "scan": "one scan over the draws (this checkout)",
    "draws": "draw by draw (this checkout, the scan switched off)",
    "base": "draw by draw (today's code, the checkout in BENCH_DAG_BASE)",
}


def dag_child(n: int, side: str, kind: str, out: str) -> None:
    """One side of a `--dag` row, in a fresh process: first and steady call of
    `exact_blame` on the skip-chain DAG, CPU time and peak RSS; the values to `out`."""
    from blamejax.structured import _plan

    if side == "draws":
        _plan.SCAN_MIN_SITES = 10**9
    cases = skip_chain_cases(0, n, 8)
    if kind == "expected":
        worlds = bj.expected_worlds(np.arange(8))
    else:
        worlds = bj.fresh_worlds(1, range(8), 2)
    cpu, start = time.process_time(), time.perf_counter()
    jax.block_until_ready(bj.exact_blame(skip_chain, cases, worlds))
    cpu, first = time.process_time() - cpu, time.perf_counter() - start
    result, _, steady = call(lambda: bj.exact_blame(skip_chain, cases, worlds), 1)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    np.savez(
        out,
        shapley=np.asarray(result.shapley),
        total=np.asarray(result.total),
        times=np.asarray([first, steady, cpu, rss]),
    )


def dag_row(n: int, side: str, kind: str):
    """Run `dag_child` in a fresh process: `(times, shapley, total)` or None on failure."""
    import subprocess
    import tempfile

    env = dict(os.environ)
    if side == "base":
        env["PYTHONPATH"] = os.environ["BENCH_DAG_BASE"]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "row.npz")
        command = [sys.executable, __file__, "--dag-child", str(n), side, kind, out]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode:
            say(f"- {side}: failed ({done.stderr.strip().splitlines()[-1:]})")
            return None
        data = np.load(out)
        return data["times"], data["shapley"], data["total"]


def section_dag():
    """The skip-chain DAG (every 5th step reads two parents, K = 4, 8 failures x 2 fresh
    worlds; `BENCH_DAG_EXPECTED=1` adds `expected_worlds`), each side in a fresh process:
    first call (compile), steady call, CPU time of the process's calls, peak RSS; the sides
    agree and the ratio of first calls. n = 200, and n = 1,000 with `BENCH_DAG_LONG=1` (the
    draw-by-draw sides at n = 1,000 only with `BENCH_DAG_LONG_OLD=1`: 20 minutes and more
    than 7 GiB). `BENCH_DAG_BASE=<checkout>` adds today's code from that checkout."""
    sizes = [200] + ([1000] if os.environ.get("BENCH_DAG_LONG") else [])
    kinds = ["fresh"] + (["expected"] if os.environ.get("BENCH_DAG_EXPECTED") else [])
    ok = True
    for n in sizes:
        for kind in kinds:
            say(f"## skip-chain DAG: n = {n}, K = 4, 8 failures x {kind} worlds")
            say("| path | first call s | its CPU s | steady s | peak RSS GiB | efficiency error |")
            say("|---|---|---|---|---|---|")
            sides = ["scan"]
            if n <= 200 or os.environ.get("BENCH_DAG_LONG_OLD"):
                sides += ["draws"] + (["base"] if os.environ.get("BENCH_DAG_BASE") else [])
            rows = {}
            for side in sides:
                row = dag_row(n, side, kind)
                if row is None:
                    ok = False
                    continue
                (first, steady, cpu, rss), shapley, total = row
                eff = float(np.abs(shapley.sum(1) - total).max())
                say(
                    f"| {DAG_SIDES[side]} | {first:.1f} | {cpu:.1f} | {steady:.2f} | {rss:.2f} "
                    f"| {eff:.1e} |"
                )
                rows[side] = row
            if "scan" in rows:
                target = 10 if n == 200 else 60
                say(f"- target for the first call: {target} s on a quiet machine, 2 GiB")
            for side in ("draws", "base"):
                if "scan" in rows and side in rows:
                    diff = float(np.abs(rows["scan"][1] - rows[side][1]).max())
                    ratio = rows[side][0][0] / rows["scan"][0][0]
                    ok &= diff <= 1e-5
                    say(
                        f"- scan against {DAG_SIDES[side]}: largest Shapley difference "
                        f"{diff:.1e}; first call {ratio:.1f}x faster"
                    )
    return ok


def section_expected():
    """Blame in expectation over the noise (`expected_worlds`, both kinds) on a chain: first
    and steady call, and agreement with the mean over many fresh worlds."""
    n, k, num_f = 32, 4, 64
    say(f"## expected noise: chain n = {n}, K = {k}, {num_f} failures")
    cases = numpy_chain_cases(0, n, num_f, k)
    out = bj.replay(chain, cases, bj.recorded_worlds(0, np.arange(num_f)))
    observed = np.asarray(out["choice"][:, 0])
    ok = True
    for kind, obs in (("fresh", None), ("inferred", observed)):
        worlds = bj.expected_worlds(np.arange(num_f), obs)
        result, first, steady = call(lambda: bj.exact_blame(chain, cases, worlds))
        say(f"- {kind}: first call {first:.2f} s, steady {steady:.3f} s")
    sampled = bj.exact_blame(chain, cases, bj.fresh_worlds(3, range(num_f), 512))
    exact = bj.exact_blame(chain, cases, bj.expected_worlds(np.arange(num_f)))
    gap = float(np.abs(np.asarray(sampled.shapley) - np.asarray(exact.shapley)).mean())
    say(f"- mean |fresh (512 worlds) - expected| per value: {gap:.1e}")
    n, num_f = 1000, 16
    say(f"## expected noise at length: chain n = {n}, K = {k}, {num_f} failures")
    cases = numpy_chain_cases(0, n, num_f, k)
    # Every logit is finite, so any observed path is possible (a replay of 1,000 steps
    # compiles for minutes: not what this row measures).
    observed = np.random.default_rng(0).integers(0, k, (num_f, n))
    for kind, obs in (("fresh", None), ("inferred", observed)):
        worlds = bj.expected_worlds(np.arange(num_f), obs)
        result, first, steady = call(lambda: bj.exact_blame(chain, cases, worlds), 1)
        eff = float(np.abs(np.asarray(result.shapley).sum(1) - np.asarray(result.total)).max())
        say(
            f"- {kind}: first call {first:.1f} s, steady {steady:.2f} s; efficiency error {eff:.1e}"
        )
    case = jax.tree_util.tree_map(lambda x: x[0], cases)
    world = jax.tree_util.tree_map(lambda x: x[0], bj.expected_worlds(np.arange(1), observed[:1]))

    def blame_of_fixes(tables):
        return bj.shapley_values(chain, dict(case, tables=tables), world).shapley.sum()

    grad = jax.jit(jax.grad(blame_of_fixes))
    _, first, steady = call(lambda: grad(case["tables"]), 1)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    say(
        f"- jax.grad of the inferred Shapley values' sum wrt every table (one case): first call "
        f"{first:.1f} s, steady {steady:.2f} s; peak RSS so far {rss:.2f} GiB"
    )
    return ok


def _replay_run(n: int, k: int, route: str, out_path: str) -> None:
    """One replay of a chain of `n` steps (8 cases, recorded worlds) in this process, timed:
    prints one JSON line (discovery, first call, steady call, CPU seconds) and saves the
    outputs to `out_path`. `route` "new" is `bj.replay`; "old" is the program it compiled
    before (each draw made on its own, one output per site), kept here to compare."""
    import json

    cases = numpy_chain_cases(0, n, 8, k)
    worlds = bj.recorded_worlds(0, np.arange(8))
    start, cpu = time.perf_counter(), time.process_time()
    structure = bj.discover(chain, jax.tree_util.tree_map(lambda x: x[0], cases))
    discover_s, discover_cpu = time.perf_counter() - start, time.process_time() - cpu
    if route == "new":
        function = lambda: bj.replay(chain, cases, worlds)  # noqa: E731
    else:
        plan = bj.pipeline.factual_plan(structure)
        sizes = [site.num_options for site in structure.sites]

        def one(case, world):
            out = bj.pipeline.trace_arrays(chain, structure, case, world, plan, defer=False)
            split = {
                f: tuple(out[f][i, :s] for i, s in enumerate(sizes)) for f in ("logits", "noise")
            }
            return dict(out, **split)

        old = jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, 0)))
        function = lambda: old(cases, worlds)  # noqa: E731
    cpu = time.process_time()
    out, first, steady = call(function, repeats=3)
    cpu = time.process_time() - cpu
    arrays = {f: np.asarray(out[f]) for f in ("score", "choice", "variant", "invalid")}
    for field in ("logits", "noise"):
        arrays.update({f"{field}{i}": np.asarray(x) for i, x in enumerate(out[field])})
    np.savez(out_path, **arrays)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    row = dict(discover=discover_s, discover_cpu=discover_cpu, first=first, steady=steady)
    print(json.dumps(dict(row, cpu=cpu, rss=rss)))


def section_replay():
    """`bj.replay` of a chain of n = 100 and 1,000 steps (K = 4 and 8), each in a fresh
    process: discovery, first call (compile) and steady call, today's route against the old
    one (draws made one by one, one output per site; at n = 1,000 only with
    BENCH_REPLAY_OLD_LONG=1: it compiles for minutes), and that both give the same arrays."""
    import json
    import subprocess
    import tempfile

    say("## replay: chain, 8 cases x 1 recorded world, first call in a fresh process")
    say(
        "| n | K | route | discovery s (CPU s) | first call s | steady s | CPU s of the calls "
        "| peak RSS GiB |"
    )
    say("|---|---|---|---|---|---|---|---|")
    ok = True
    folder = tempfile.mkdtemp()
    long_old = bool(os.environ.get("BENCH_REPLAY_OLD_LONG"))
    for n, k in ((100, 4), (1000, 4), (1000, 8)):
        routes = ("new", "old") if n <= 100 or long_old else ("new",)
        saved = {}
        for route in routes:
            saved[route] = os.path.join(folder, f"{n}-{k}-{route}.npz")
            code = (
                f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_structured as b; "
                f"b._replay_run({n}, {k}, {route!r}, {saved[route]!r})"
            )
            done = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            )
            row = json.loads(done.stdout.strip().splitlines()[-1])
            say(
                f"| {n} | {k} | {route} | {row['discover']:.2f} ({row['discover_cpu']:.2f}) | "
                f"{row['first']:.1f} | "
                f"{row['steady']:.3f} | {row['cpu']:.1f} | {row['rss']:.2f} |"
            )
        if len(saved) == 2:
            new, old = np.load(saved["new"]), np.load(saved["old"])
            same = set(new.files) == set(old.files) and all(
                new[f].dtype == old[f].dtype and np.array_equal(new[f], old[f]) for f in new.files
            )
            say(f"- n = {n}, K = {k}: old and new routes give the same arrays bit for bit: {same}")
            ok &= same
    return ok


SECTIONS = dict(
    chain=section_chain,
    scaling=section_scaling,
    enumeration=section_enumeration,
    take=section_take,
    mc=section_mc,
    dag=section_dag,
    expected=section_expected,
    replay=section_replay,
)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--dag-child"]:
        dag_child(int(argv[1]), argv[2], argv[3], argv[4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in SECTIONS:
        parser.add_argument(f"--{name}", action="store_true")
    args = parser.parse_args(argv)
    chosen = [name for name in SECTIONS if getattr(args, name)] or list(SECTIONS)
    load = os.getloadavg()[0]
    say(
        f"# bench_structured.py --{' --'.join(chosen)}: {datetime.date.today()}, load {load:.1f}, "
        f"jax {jax.__version__}, {jax.devices()[0].platform}"
    )
    ok = True
    for name in chosen:
        ok &= bool(SECTIONS[name]())
    say(f"load at the end {os.getloadavg()[0]:.1f}; results {'agree' if ok else 'DISAGREE'}")
    with OUT.open("a") as handle:
        handle.write("\n".join(LINES) + "\n\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
