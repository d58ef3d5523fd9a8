"""Exact batch blame: blamejax against a plain Python/numpy reference.

Builds random chain pipelines with the public API (K = 8 options, each step's logits
depending on the previous choice), runs `blamejax.exact_blame` and the reference in
`_reference.py` (a Python loop over failures, worlds and coalitions with a per-step cache)
on the same inputs and the same noise, checks that the Shapley values agree, and reports
the speed-up, the compile time, the time per failure x world x coalition and the extra
memory. The same pipeline written free-form (logits rows gathered by the pipeline's own
code, no `given`) is reported beside it, without a target.

Every size runs in its own subprocess, so that compile caches and the peak-memory counter
start fresh.

    python benchmarks/bench_exact.py                  # sizes 8, 12, 16, 20, 24
    python benchmarks/bench_exact.py --quick          # small sizes, a smoke run
    python benchmarks/bench_exact.py --sizes 8,12 --x64   # float64 (also JAX_ENABLE_X64=1)
    python benchmarks/bench_exact.py --scale          # F = 100,000 at n = 12, 10,000 at n = 16

Run from the repository root (the script puts it on `sys.path`). Results go to
`benchmarks/results/bench_exact.md` and `.json` (`bench_exact_x64.*` under float64).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

K = 8  # options per step
FAVOURED = 6.0  # logit bonus of the option a parent choice favours (see `build_tables`)

# n -> (failures F, worlds W, target speed-up, target ms per call or None)
SIZES = {
    8: (154, 8, 300.0, None),
    12: (100, 1, 500.0, None),
    16: (10, 1, 500.0, None),
    20: (1, 1, 500.0, 10.0),
    24: (1, 1, None, None),
}
QUICK_SIZES = {4: (16, 2, None, None), 6: (16, 2, None, None), 8: (8, 2, None, None)}
# Exact blame at scale (the scale issue): many failures, memory flat in F (the calls are
# chunked), the target in ns per failure x world x coalition, not a ratio.
SCALE_SIZES = {12: (100_000, 1, None, None), 16: (10_000, 1, None, None)}
SCALE_NS_TARGET = 3.0
COMPILE_TARGET_S = 2.0
WARMUP_S = 0.5  # untimed calls between the first (compiling) call and the timed ones
MEMORY_TARGET_MB = {24: 512.0}
TOLERANCE = {"float32": 1e-6, "float64": 1e-12}


# -- the pipelines and their inputs --------------------------------------------------------


def build_tables(num_steps: int, num_failures: int, seed: int) -> dict:
    """Random logits tables of a chain, as numpy float64 (cast by the caller).

    Step 0 has logits `[F, 2, K]`; step i > 0 has `[F, 2, K, K]` (variant, previous
    choice, option). Every logit is N(0, 1); on top, the factual variant favours option
    `perm(p)` after previous choice p (a random permutation) by `FAVOURED`, and the fix
    favours a different option `perm(p + shift)`. A choice therefore depends strongly on
    the previous one, paths under different coalitions rarely merge, and every step's
    Shapley value is non-zero (checked and reported). The score is a table `[F, K]` of
    uniform values in [0, 1] read at the last step's choice, so values are real and distinct.
    """
    rng = np.random.default_rng(seed)
    rows = np.arange(num_failures)
    first = rng.normal(size=(num_failures, 2, K))
    k0 = rng.integers(K, size=num_failures)
    k1 = (k0 + rng.integers(1, K, size=num_failures)) % K
    first[rows, 0, k0] += FAVOURED
    first[rows, 1, k1] += FAVOURED
    tables = {"t0": first}
    parent = np.arange(K)
    for i in range(1, num_steps):
        table = rng.normal(size=(num_failures, 2, K, K))
        perm = np.argsort(rng.random((num_failures, K)), axis=1)
        shift = rng.integers(1, K, size=(num_failures, 1))
        table[rows[:, None], 0, parent[None, :], perm] += FAVOURED
        table[
            rows[:, None], 1, parent[None, :], np.take_along_axis(perm, (parent + shift) % K, 1)
        ] += FAVOURED
        tables[f"t{i}"] = table
    tables["score"] = rng.uniform(size=(num_failures, K))
    return tables


def chain_pipeline(num_steps: int):
    """The tabulated chain: `given=` the previous choice."""

    def pipeline(ctx, case):
        choice = ctx.choose("s0", case["t0"])
        for i in range(1, num_steps):
            choice = ctx.choose(f"s{i}", case[f"t{i}"], given=choice)
        return choice.take(case["score"])

    return pipeline


def free_form_pipeline(num_steps: int):
    """The same chain written free-form: the pipeline gathers its own `[V, K]` logits row."""

    def pipeline(ctx, case):
        choice = ctx.choose("s0", case["t0"])
        for i in range(1, num_steps):
            choice = ctx.choose(f"s{i}", case[f"t{i}"][:, choice.index, :])
        return choice.take(case["score"])

    return pipeline


# -- measuring -----------------------------------------------------------------------------


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _reset_peak() -> float:
    """Reset this process's peak RSS (VmHWM) to its current RSS; return that RSS in MB."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_mb("VmRSS")


class CompileLog:
    """Sums JAX's own compile-phase durations (trace, lowering, XLA compile) while active."""

    EVENTS = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "xla",
    }

    def __init__(self):
        import jax

        self.active = False
        self.totals = dict.fromkeys(self.EVENTS.values(), 0.0)
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event, duration, **kwargs):
        if self.active and event in self.EVENTS:
            self.totals[self.EVENTS[event]] += duration

    def start(self):
        self.totals = dict.fromkeys(self.EVENTS.values(), 0.0)
        self.active = True

    def stop(self) -> dict:
        self.active = False
        return dict(self.totals)


def time_blamejax(pipeline, cases, worlds, num_steps, repeats, log: CompileLog) -> dict:
    """First call (compile + run), `WARMUP_S` of untimed calls, then `repeats` steady calls;
    peak RSS growth of the first call and of the steady ones."""
    import jax

    import blamejax as bj

    def call():
        result = bj.exact_blame(pipeline, cases, worlds, max_steps=max(20, num_steps))
        return jax.block_until_ready(result)

    base = _reset_peak()
    log.start()
    start, start_cpu = time.perf_counter(), time.process_time()
    result = call()
    first, first_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    phases = log.stop()
    first_mb = _status_mb("VmHWM") - base
    # Warm-up, untimed: the first calls after compiling can run slower than the rest
    # (`profile_exact.py` prints by how much); the reference, which runs for seconds, is
    # timed warm too.
    base = _reset_peak()  # the steady memory figure covers the warm-up calls too
    warm_until = time.perf_counter() + WARMUP_S
    while time.perf_counter() < warm_until:
        call()
    times, cpu_times = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        call()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - start_cpu)
    steady_mb = _status_mb("VmHWM") - base
    median = statistics.median(times)
    return dict(
        result=result,
        first_s=first,
        steady_min_s=min(times),
        steady_median_s=median,
        steady_cpu_median_s=statistics.median(cpu_times),
        compile_s=max(0.0, first - median),
        compile_cpu_s=max(0.0, first_cpu - statistics.median(cpu_times)),
        phases_s=phases,
        first_call_extra_mb=first_mb,
        steady_extra_mb=steady_mb,
    )


def blamejax_table(pipeline, case, worlds_key) -> np.ndarray:
    """blamejax's own value table of one failure, `[W, 2**n]`, via the public
    `coalition_values` (vmapped over the failure's worlds)."""
    import jax

    import blamejax as bj

    structure = bj.discover(pipeline, case)
    players = tuple(range(structure.num_steps))
    fixes = (1,) * structure.num_steps

    def one(key):
        return bj.coalitions.coalition_values(
            pipeline, structure, case, bj.World(key=key), players, fixes
        )

    return np.asarray(jax.jit(jax.vmap(one))(worlds_key))


def time_reference(
    steps, score, noise, num_failures, num_worlds, num_steps, budget_s, seed=1
) -> dict:
    """Run the reference on as much as fits in `budget_s` and extrapolate the rest.

    A probe on random coalitions of failure 0 estimates the cost of one coalition. If one
    failure (all its worlds, all coalitions) fits the budget, whole failures are run until the
    budget is spent (all of them if they fit) and their Shapley values kept; otherwise random
    coalitions of failure 0, world 0 are evaluated for about the budget. The cost per
    failure x world x coalition is extrapolated linearly to the full batch.
    """
    import _reference as ref

    size = 1 << num_steps
    fixes = [1] * num_steps
    rng = np.random.default_rng(seed)
    probe = rng.choice(size, min(size, 2048), replace=False).tolist()
    start = time.perf_counter()
    ref.world_values(steps, score, 0, noise[0, 0], fixes, probe)
    per_coalition = (time.perf_counter() - start) / len(probe)
    out = dict(shapley={}, values_f0=None, sample=None)
    if per_coalition * num_worlds * size <= budget_s:
        eval_s = reduce_s = 0.0
        done = 0
        while done < num_failures and (done == 0 or eval_s + reduce_s < budget_s):
            start = time.perf_counter()
            values = np.stack(
                [
                    ref.world_values(steps, score, done, noise[done, w], fixes)
                    for w in range(num_worlds)
                ]
            )
            eval_s += time.perf_counter() - start
            start = time.perf_counter()
            out["shapley"][done] = ref.textbook_shapley(values.mean(axis=0))
            reduce_s += time.perf_counter() - start
            if done == 0:
                out["values_f0"] = values
            done += 1
        evaluated = done * num_worlds * size
        out["per_element_eval_s"] = eval_s / evaluated
        out["reduce_per_failure_s"] = reduce_s / done
        out["measured_s"] = eval_s + reduce_s
        out["what"] = (
            f"all {num_failures} failures in full (not extrapolated)"
            if done == num_failures
            else f"{done} of {num_failures} failures in full ({evaluated:,} failure x world x "
            "coalition), extrapolated linearly to all"
        )
    else:
        coalitions, values = [], []
        eval_s = 0.0
        while eval_s < budget_s and len(coalitions) < size:
            batch = rng.integers(size, size=4096).tolist()
            start = time.perf_counter()
            values.append(ref.world_values(steps, score, 0, noise[0, 0], fixes, batch))
            eval_s += time.perf_counter() - start
            coalitions += batch
        out["sample"] = (np.asarray(coalitions), np.concatenate(values))
        out["per_element_eval_s"] = eval_s / len(coalitions)
        out["reduce_per_failure_s"] = None  # timed on blamejax's table by the caller
        out["measured_s"] = eval_s
        out["what"] = (
            f"{len(coalitions):,} random coalitions of failure 0, world 0 (of "
            f"{num_failures * num_worlds * size:,}), extrapolated linearly; Shapley reduction "
            "timed on a full table"
        )
    return out


def instance_check(phi: np.ndarray) -> dict:
    """Are the Shapley values informative for a precision check: non-zero and distinct?"""
    phi = np.atleast_2d(phi)
    gaps = np.diff(np.sort(phi, axis=1), axis=1)
    return dict(
        nonzero_fraction=float(np.mean(np.abs(phi) > 1e-6)),
        distinct_fraction=float(np.mean(np.all(gaps > 1e-6, axis=1))) if gaps.size else 1.0,
        min_abs=float(np.abs(phi).min()),
        all_equal=bool(np.any(np.all(np.abs(phi - phi[:, :1]) <= 1e-12, axis=1))),
    )


def run_size(num_steps, num_failures, num_worlds, repeats, budget_s, generic, seed) -> dict:
    """One size, in this process (called in a fresh subprocess per size)."""
    import _reference as ref
    import jax
    import jax.numpy as jnp

    import blamejax as bj

    x64 = bool(jax.config.jax_enable_x64)
    dtype = np.float64 if x64 else np.float32
    log = CompileLog()
    tables = {k: v.astype(dtype) for k, v in build_tables(num_steps, num_failures, seed).items()}
    cases = {k: jnp.asarray(v) for k, v in tables.items()}
    worlds = bj.fresh_worlds(seed, range(num_failures), num_worlds)
    size = 1 << num_steps
    elements = num_failures * num_worlds * size
    out = dict(
        load=os.getloadavg()[0],
        n=num_steps,
        F=num_failures,
        W=num_worlds,
        coalitions=size,
        elements=elements,
        dtype="float64" if x64 else "float32",
    )

    # blamejax, tabulated steps, then free-form steps.
    pipeline = chain_pipeline(num_steps)
    bjt = time_blamejax(pipeline, cases, worlds, num_steps, repeats, log)
    phi_bj = np.asarray(bjt.pop("result").shapley, dtype=np.float64)
    out["blamejax"] = bjt
    if generic:
        free = free_form_pipeline(num_steps)
        gen = time_blamejax(free, cases, worlds, num_steps, repeats, log)
        out["generic"] = gen
        phi_gen = np.asarray(gen.pop("result").shapley, dtype=np.float64)

    # The reference: noise up front (timed apart), then the Python loop.
    steps = [ref.TableStep("s0", tables["t0"], ())]
    steps += [ref.TableStep(f"s{i}", tables[f"t{i}"], (i - 1,)) for i in range(1, num_steps)]
    score_table = tables["score"].astype(np.float64)

    def score(failure, choices):
        return score_table[failure, choices[-1]]

    start = time.perf_counter()
    noise = ref.site_noise(worlds, steps)
    noise_s = time.perf_counter() - start
    reference = time_reference(steps, score, noise, num_failures, num_worlds, num_steps, budget_s)

    # blamejax's own value table of failure 0 (public `coalition_values`), reduced in float64.
    case0 = {k: v[0] for k, v in cases.items()}
    table0 = blamejax_table(pipeline, case0, worlds.key[0]).astype(np.float64)
    start = time.perf_counter()
    phi_f64 = ref.textbook_shapley(table0.mean(axis=0))
    reduce_s = time.perf_counter() - start
    if reference["reduce_per_failure_s"] is None:
        reference["reduce_per_failure_s"] = reduce_s
    projected = (
        elements * reference["per_element_eval_s"]
        + num_failures * reference["reduce_per_failure_s"]
    )
    out["reference"] = dict(
        noise_s=noise_s,
        measured_s=reference["measured_s"],
        projected_s=projected,
        per_element_ns=projected / elements * 1e9,
        what=reference["what"],
    )
    out["ratio"] = projected / bjt["steady_median_s"]
    out["per_element_ns"] = bjt["steady_median_s"] / elements * 1e9

    # Agreement.
    checked = sorted(reference["shapley"])
    agree = dict(reference_failures=len(checked))
    if checked:
        phi_ref = np.stack([reference["shapley"][f] for f in checked])
        agree["max_abs_diff"] = float(np.abs(phi_bj[checked] - phi_ref).max())
        if generic:
            agree["generic_max_abs_diff"] = float(np.abs(phi_gen[checked] - phi_ref).max())
        out["instance"] = instance_check(phi_ref)
        values0 = reference["values_f0"]
        agree["table_mismatches"] = int(np.sum(values0 != table0))
        agree["table_compared"] = int(values0.size)
    else:
        coalitions, values = reference["sample"]
        agree["table_mismatches"] = int(np.sum(values != table0[0, coalitions]))
        agree["table_compared"] = int(len(coalitions))
        out["instance"] = instance_check(phi_f64)
        if generic:
            agree["generic_vs_blamejax"] = float(np.abs(phi_gen - phi_bj).max())
    # The float32 reduction against a float64 reduction of the same table.
    agree["reduction_diff_f0"] = float(np.abs(phi_bj[0] - phi_f64).max())
    out["agree"] = agree
    return out


# -- the driver -------------------------------------------------------------------------------


def _size_config(n: int, quick: bool, scale: bool = False):
    table = SCALE_SIZES if scale else QUICK_SIZES if quick else SIZES
    if n in table:
        return table[n]
    return (max(1, 2**14 >> n), 1, None, None)


def _max_error(row) -> float:
    agree = row["agree"]
    return max(agree.get("max_abs_diff", 0.0), agree["reduction_diff_f0"])


def _targets(row) -> list[str]:
    """The issue's targets for this row: 'name ok' or 'name MISSED'."""
    n = row["n"]
    # The speed, compile and memory targets are the issue's float32 targets at its sizes.
    timed = not row.get("quick") and row["dtype"] == "float32"
    config = SIZES.get(n, (None,) * 4) if timed and not row.get("scale") else (None,) * 4
    out = []

    def mark(name, ok):
        out.append(f"{name} {'ok' if ok else 'MISSED'}")

    if config[2] is not None:
        mark(f"ratio>={config[2]:.0f}", row["ratio"] >= config[2])
    if config[3] is not None:
        mark(f"<={config[3]:.0f}ms", row["blamejax"]["steady_median_s"] * 1e3 <= config[3])
    if timed and row.get("scale"):
        mark(f"<={SCALE_NS_TARGET:g}ns/elem", row["per_element_ns"] <= SCALE_NS_TARGET)
    elif timed:
        mark(f"compile<={COMPILE_TARGET_S:.0f}s", row["blamejax"]["compile_s"] <= COMPILE_TARGET_S)
    if n in MEMORY_TARGET_MB and timed:
        mark(
            f"mem<={MEMORY_TARGET_MB[n]:.0f}MB",
            row["blamejax"]["steady_extra_mb"] <= MEMORY_TARGET_MB[n],
        )
    tol = TOLERANCE[row["dtype"]]
    mark(f"err<={tol:g}", _max_error(row) <= tol and row["agree"]["table_mismatches"] == 0)
    return out


def format_report(rows, header: str) -> str:
    lines = [header, ""]
    lines.append("### Tabulated steps (`given=`): blamejax.exact_blame vs the reference")
    lines.append("")
    lines.append(
        "| n | F x W | blamejax s | ns/elem | compile s wall (cpu) | reference s | ref ns/elem "
        "| ratio | max abs diff | extra MB steady (first call) | load | targets |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        bjt, ref = row["blamejax"], row["reference"]
        lines.append(
            f"| {row['n']} | {row['F']} x {row['W']} | {bjt['steady_median_s']:.4f} | "
            f"{row['per_element_ns']:.2f} | {bjt['compile_s']:.2f} ({bjt['compile_cpu_s']:.2f}) | "
            f"{ref['projected_s']:.2f} | {ref['per_element_ns']:.0f} | {row['ratio']:.0f}x | "
            f"{_max_error(row):.1e} | {max(0.0, bjt['steady_extra_mb']):.0f} "
            f"({max(0.0, bjt['first_call_extra_mb']):.0f}) "
            f"| {row['load']:.1f} | {', '.join(_targets(row))} |"
        )
    if any("generic" in row for row in rows):
        lines += ["", "### Free-form steps (logits row gathered by the pipeline): no target", ""]
        lines.append(
            "| n | blamejax s | ns/elem | compile s wall (cpu) | ratio | max abs diff "
            "| extra MB steady (first call) |"
        )
        lines.append("|---|---|---|---|---|---|---|")
        for row in rows:
            if "generic" not in row:
                continue
            gen = row["generic"]
            agree = row["agree"]
            diff = agree.get("generic_max_abs_diff", agree.get("generic_vs_blamejax"))
            lines.append(
                f"| {row['n']} | {gen['steady_median_s']:.4f} | "
                f"{gen['steady_median_s'] / row['elements'] * 1e9:.2f} | {gen['compile_s']:.2f} "
                f"({gen['compile_cpu_s']:.2f}) | "
                f"{row['reference']['projected_s'] / gen['steady_median_s']:.0f}x | {diff:.1e} | "
                f"{max(0.0, gen['steady_extra_mb']):.0f} ({max(0.0, gen['first_call_extra_mb']):.0f}) |"
            )
    lines += ["", "### Details per size", ""]
    for row in rows:
        ref, agree, inst, ph = (
            row["reference"],
            row["agree"],
            row["instance"],
            row["blamejax"]["phases_s"],
        )
        lines.append(
            f"- n = {row['n']}: reference {ref['what']}; measured {ref['measured_s']:.1f} s, "
            f"noise up front {ref['noise_s']:.2f} s (not in the ratio). Shapley checked against the "
            f"reference on {agree['reference_failures']} failure(s); value table of failure 0: "
            f"{agree['table_mismatches']} mismatches in {agree['table_compared']:,} coalitions; "
            f"blamejax's reduction vs a float64 textbook reduction of that table: "
            f"{agree['reduction_diff_f0']:.1e}. "
            f"Instance: {inst['nonzero_fraction']:.1%} of Shapley values have |phi| > 1e-6; in "
            f"{inst['distinct_fraction']:.0%} of failures all n values are more than 1e-6 apart"
            f"{'; SOME FAILURE HAS ALL VALUES EQUAL' if inst['all_equal'] else ''}. First call "
            f"{row['blamejax']['first_s']:.2f} s (trace {ph['trace']:.2f}, lower {ph['lower']:.2f}, "
            f"XLA {ph['xla']:.2f})."
        )
    return "\n".join(lines) + "\n"


HOW = """\
How to read this:
- F x W: failures x worlds (fresh noise); every failure has 2^n coalitions. ns/elem is the steady
  time of one `exact_blame` call divided by F x W x 2^n (median of the repeats, timed after
  0.5 s of untimed warm-up calls: the first calls after compiling can run slower; see
  `profile_exact.py`).
- compile s: first call minus the steady median (tracing, lowering and XLA compilation; the
  details list JAX's own trace/lower/XLA durations for the first call); in brackets the same in
  process CPU time, which a busy machine inflates less than wall time.
- reference: a Python loop over failures, worlds and coalitions with a per-step cache
  (`benchmarks/_reference.py`), Shapley by the textbook weighted sum in float64. Its noise
  (blamejax.gumbel_at, the same addresses) is computed up front and not counted. Where the
  reference is too slow to run in full, its cost per failure x world x coalition is measured on a
  part and extrapolated linearly (each size says what). ratio = reference / blamejax.
- max abs diff: the larger of |blamejax Shapley - reference Shapley| (float64) over the failures
  the reference ran in full, and |blamejax Shapley - float64 reduction of blamejax's own value
  table of failure 0|. The first checks the whole computation; the second checks only the
  reduction's rounding, and is the only Shapley check where the reference ran on a sample; there
  the sampled values are compared with blamejax's table one by one (mismatches must be 0). For
  the free-form pipeline: against the reference, or where it ran on a sample against blamejax's
  tabulated result.
- extra MB: growth of the process's peak resident memory (VmHWM, reset through
  /proc/self/clear_refs) over the steady calls, and over the first call (with compilation).
- load: the machine's 1-minute load average when the size started. The machine is shared and
  small (2 cores); at a load above 2 every time here is inflated, compile times most.
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=None, help="comma-separated n (default 8,12,16,20,24)")
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--x64", action="store_true", help="float64 (same as JAX_ENABLE_X64=1)")
    parser.add_argument(
        "--repeats", type=int, default=None, help="steady-state repeats (default 31, quick 3)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="reference seconds per size (default 20, quick 2)",
    )
    parser.add_argument("--no-generic", action="store_true", help="skip the free-form path")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="the at-scale rows: F = 100,000 at n = 12 and F = 10,000 at n = 16 (free-form path skipped)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="results path without extension")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child is not None:  # one size, in a fresh process
        sys.path[:0] = [HERE, ROOT]
        n, num_failures, num_worlds = (int(x) for x in args.child.split(","))
        row = run_size(
            n, num_failures, num_worlds, args.repeats, args.budget, not args.no_generic, args.seed
        )
        print("RESULT " + json.dumps(row))
        return 0

    x64 = args.x64 or os.environ.get("JAX_ENABLE_X64", "").lower() in ("1", "true")
    if args.scale:
        args.no_generic = True
    if args.sizes is None:
        sizes = sorted(SCALE_SIZES if args.scale else QUICK_SIZES if args.quick else SIZES)
    else:
        sizes = [int(s) for s in args.sizes.split(",")]
    repeats = args.repeats or (3 if args.quick else 31)
    budget = args.budget if args.budget is not None else (2.0 if args.quick else 20.0)
    env = dict(os.environ, JAX_ENABLE_X64="1" if x64 else "0")
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    rows, failed = [], []
    for n in sizes:
        num_failures, num_worlds, _, _ = _size_config(n, args.quick, args.scale)
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            f"{n},{num_failures},{num_worlds}",
            "--repeats",
            str(repeats),
            "--budget",
            str(budget),
            "--seed",
            str(args.seed),
        ] + (["--no-generic"] if args.no_generic else [])
        print(f"n = {n}: {num_failures} failures x {num_worlds} worlds ...", flush=True)
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            print(done.stdout[-2000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
            failed.append(n)
            continue
        row = json.loads(lines[-1][len("RESULT ") :])
        row["quick"] = args.quick
        row["scale"] = args.scale
        rows.append(row)
        print("   " + ", ".join(_targets(row)), flush=True)

    import jax

    header = (
        f"## bench_exact ({'float64' if x64 else 'float32'}{', quick' if args.quick else ''})\n\n"
        f"jax {jax.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPU cores, K = {K}, repeats = {repeats}, reference budget {budget:g} s "
        f"per size, {time.strftime('%Y-%m-%d')}.\n\n" + HOW
    )
    report = format_report(rows, header)
    print()
    print(report)
    if args.out is not None or not args.quick:
        stem = args.out or os.path.join(
            HERE,
            "results",
            "bench_exact" + ("_scale" if args.scale else "") + ("_x64" if x64 else ""),
        )
        os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
        with open(stem + ".md", "w") as f:
            f.write(report)
        with open(stem + ".json", "w") as f:
            json.dump(rows, f, indent=1)
        print(f"wrote {stem}.md and {stem}.json")
    bad = [
        row["n"]
        for row in rows
        if not any(t.startswith("err") and t.endswith("ok") for t in _targets(row))
    ]
    if failed or bad:
        print(
            f"FAILED: sizes {failed} crashed; sizes {bad} disagree with the reference",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
