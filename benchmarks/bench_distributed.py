"""Several devices and several processes (`jax.distributed`, gloo CPU collectives on
127.0.0.1): the wall time of `exact_blame`, `mc_shapley` and `blame_batch` with the failure
axis on one device, on two devices of one process, and on two processes of one device each,
and whether every layout gives the same numbers as one device (bit for bit).

    python benchmarks/bench_distributed.py            # three layouts, a few minutes
    python benchmarks/bench_distributed.py --repeats 3

Each layout runs in fresh processes (this script started again with `--worker`); each
estimator is called once to compile, then `--repeats` times, and the median of those is
reported. Results: `benchmarks/results/bench_distributed.md` and `.json`. On a machine with
fewer cores than devices the devices share the cores: such a run shows correctness, not
speed.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import socket
import statistics
import subprocess
import sys
import time

RESULTS = pathlib.Path(__file__).parent / "results"
LAYOUTS = ((1, 1), (1, 2), (2, 1))  # (processes, devices per process)


def _work(repeats: int, only: str | None = None) -> dict:
    """Run in every process of a layout: the timings and every output, for process 0 to
    write."""
    import jax
    import jax.random as jr
    import numpy as np

    import blamejax as bj

    sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "tests"))
    from helpers import chain_pipeline, random_chain_cases

    exact_cases = random_chain_cases(jr.key(1), 10, num_cases=256, num_options=8)
    exact_worlds = bj.fresh_worlds(2, range(256), 4)
    mc_cases = random_chain_cases(jr.key(3), 12, num_cases=64, num_options=8)
    mc_worlds = bj.fresh_worlds(4, range(64), 1)
    batch_cases = random_chain_cases(jr.key(6), 8, num_cases=1000, num_options=8)
    jobs = {
        "exact_blame (n = 10, F = 256, W = 4)": (
            lambda: bj.exact_blame(chain_pipeline, exact_cases, exact_worlds),
            ("shapley", "last_step"),
            256 * 4 * 2**10,
        ),
        "mc_shapley (n = 12, F = 64, fixed budget 110,000)": (
            lambda: bj.mc_shapley(
                chain_pipeline, mc_cases, mc_worlds, key=5, max_evaluations=110_000, stop=()
            ),
            ("values", "lower", "upper", "num_samples"),
            None,
        ),
        "blame_batch (n = 8, 1,000 cases, exact)": (
            lambda: bj.blame_batch(
                chain_pipeline, batch_cases, 7, threshold=0.5, estimator="exact"
            ),
            ("failure_ids", "shapley", "mean_shapley", "lower", "upper"),
            None,
        ),
    }
    out = {"rows": [], "arrays": {}}
    for name, (run, fields, evaluations) in jobs.items():
        if only and not name.startswith(only):
            continue
        start = time.perf_counter()
        result = run()
        first = time.perf_counter() - start
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            result = run()
            times.append(time.perf_counter() - start)
        if name.startswith("mc_shapley"):
            evaluations = int(np.sum(result.evaluations))
        if name.startswith("blame_batch"):
            evaluations = int(result.evaluations)
        out["rows"].append(
            dict(
                name=name, first_s=first, median_s=statistics.median(times), evaluations=evaluations
            )
        )
        for field in fields:
            out["arrays"][f"{name}.{field}"] = np.asarray(getattr(result, field))
    out["devices"] = jax.device_count()
    out["processes"] = jax.process_count()
    return out


def _worker(args) -> None:
    import jax

    if args.num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=120,
        )
    import numpy as np

    out = _work(args.repeats, args.only)
    if jax.process_index() == 0:
        np.savez(args.out + ".npz", **out.pop("arrays"))
        pathlib.Path(args.out + ".json").write_text(json.dumps(out))
    if args.num_processes > 1:
        jax.distributed.shutdown()


def _launch(processes: int, devices: int, repeats: int, stem: str, timeout: float, only=()) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
    )
    procs = []
    try:
        for i in range(processes):
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                "--out",
                stem,
                "--repeats",
                str(repeats),
                *only,
                "--num-processes",
                str(processes),
                "--process-id",
                str(i),
                "--coordinator",
                f"127.0.0.1:{port}",
            ]
            procs.append(subprocess.Popen(cmd, env=env))
        for p in procs:
            p.wait(timeout=timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        raise SystemExit(f"layout {processes} x {devices}: a process failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", help="run only the estimator whose name starts with this")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", default=str(RESULTS / "bench_distributed"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return _worker(args)

    import numpy as np

    tmp = pathlib.Path(args.out).parent / "_distributed_tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    runs = {}
    for processes, devices in LAYOUTS:
        stem = str(tmp / f"{processes}x{devices}")
        load = os.getloadavg()[0]
        _launch(
            processes,
            devices,
            args.repeats,
            stem,
            args.timeout,
            (("--only", args.only) if args.only else ()),
        )
        info = json.loads(pathlib.Path(stem + ".json").read_text())
        arrays = dict(np.load(stem + ".npz"))
        runs[(processes, devices)] = (info, arrays, load, os.getloadavg()[0])
    base = runs[LAYOUTS[0]][1]
    lines = [
        "# Several devices and processes (`python benchmarks/bench_distributed.py`)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, shared with other work; "
        f"JAX {__import__('jax').__version__}, CPU devices simulated with "
        "`--xla_force_host_platform_device_count`. Median of "
        f"{args.repeats} calls after one compiling call; load average (1 min) before / after each layout.",
        "",
        "| estimator | layout | first call (s) | median call (s) | ns per evaluation | equal to 1 device, bit for bit | load |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = []
    for (processes, devices), (info, arrays, before, after) in runs.items():
        for row in info["rows"]:
            names = [k for k in base if k.startswith(row["name"] + ".")]
            equal = all(np.array_equal(base[k], arrays[k], equal_nan=True) for k in names)
            per = 1e9 * row["median_s"] / row["evaluations"]
            layout = f"{processes} process{'es' if processes > 1 else ''} x {devices} device{'s' if devices > 1 else ''}"
            lines.append(
                f"| {row['name']} | {layout} | {row['first_s']:.2f} | {row['median_s']:.3f} | {per:.1f} | "
                f"{'yes' if equal else 'NO'} | {before:.1f} / {after:.1f} |"
            )
            rows.append(
                dict(row, processes=processes, devices=devices, equal=equal, load=[before, after])
            )
    text = "\n".join(lines) + "\n"
    print(text)
    pathlib.Path(args.out + ".md").write_text(text)
    pathlib.Path(args.out + ".json").write_text(json.dumps(rows, indent=1))
    if not all(r["equal"] for r in rows):
        raise SystemExit(f"some layout gave different numbers (the outputs are in {tmp})")
    for path in tmp.iterdir():
        path.unlink()
    tmp.rmdir()


if __name__ == "__main__":
    main()
