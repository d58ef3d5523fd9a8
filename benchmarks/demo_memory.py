"""Memory per case of each demo, as the command line's size check assumes it.

Runs `python -m blamejax demo NAME --cases N` in a fresh process at two sizes, reads each
process's peak resident memory (`ru_maxrss` of the child), and prints the difference divided
by the difference in cases: the bytes a demo holds per case. `blamejax/_cli.py` keeps these
figures in `BYTES_PER_CASE` and refuses a `--cases` whose need (twice that per case, plus the
process's own) exceeds the memory available.

    python benchmarks/demo_memory.py [--demos refund,rag] [--small 2000] [--large 20000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

EXTRA = {"rag": ["--skip-noise-sharing", "--no-progress"], "stopping": ["--no-progress"]}
SIZES = {
    "refund": (10_000, 100_000),
    "rag": (2_000, 20_000),
    "agent8": (500, 5_000),
    "car": (500, 5_000),
    "stopping": (1_000, 10_000),
    "fit": (400, 4_000),
}


MEASURE = (
    "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "sys.stderr.write(done.stderr[-2000:]); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if done.returncode == 0 else -1)"
)


def peak_rss(name: str, cases: int, out: str) -> tuple[int, float]:
    """Peak resident bytes and wall seconds of one demo run in a fresh process (measured by a
    wrapper process of its own, so that no earlier run's peak hides it)."""
    command = [
        sys.executable,
        "-m",
        "blamejax",
        "demo",
        name,
        "--cases",
        str(cases),
        "--no-compile-cache",
    ]
    command += EXTRA.get(name, []) + (["--out", out] if name in ("rag", "fit") else [])
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *command],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    wall = time.perf_counter() - start
    peak = int(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else -1
    if peak < 0:
        raise SystemExit(f"demo {name} --cases {cases} failed:\n{done.stderr[-2000:]}")
    return peak * 1024, wall


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--demos", default="refund", help="comma-separated demos (default refund)")
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as out:
        for name in args.demos.split(","):
            small, large = SIZES[name]
            low, t_low = peak_rss(name, small, out)
            high, t_high = peak_rss(name, large, out)
            per_case = (high - low) / (large - small)
            print(
                f"{name}: {small:,} cases {low / 2**20:.0f} MiB ({t_low:.0f} s), {large:,} cases "
                f"{high / 2**20:.0f} MiB ({t_high:.0f} s): {per_case:,.0f} bytes per case"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
