#!/usr/bin/env bash
# The accelerator check: the device-independent tests and the scale benchmark rows on a GPU,
# in under 8 minutes. Run from the repository root, in an environment where JAX sees the GPU
# (for example `pip install -e ".[dev]" "jax[cuda12]"` beforehand):
#
#     bash benchmarks/gpu_check.sh [OUT_DIR]
#
# It refuses to run (exit 2) when JAX's default backend is the CPU, so a CPU figure is never
# reported as a GPU one. Results: OUT_DIR (default benchmarks/results/gpu) holds the test log,
# the benchmark tables and device.txt naming the device.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${1:-benchmarks/results/gpu}
mkdir -p "$OUT"

$PY - <<'EOF' | tee "$OUT/device.txt"
import sys
import jax
devices = jax.devices()
print("jax", jax.__version__, "backend", jax.default_backend(), "devices", devices)
if jax.default_backend() == "cpu":
    print("no accelerator visible to JAX: nothing to check here", file=sys.stderr)
    sys.exit(2)
EOF

# The tests whose outcome does not depend on the device (numbers, not timings): the engine,
# its estimators and their statistics, in 32- and 64-bit mode. About 3 minutes.
timeout 200 $PY -m pytest -q -p no:cacheprovider \
    tests/test_noise.py tests/test_pipeline.py tests/test_coalitions.py tests/test_reduction.py \
    tests/test_exact.py tests/test_mc.py tests/test_stats.py 2>&1 | tee "$OUT/tests.log" | tail -3
JAX_ENABLE_X64=1 timeout 120 $PY -m pytest -q -p no:cacheprovider \
    tests/test_exact.py tests/test_reduction.py 2>&1 | tee "$OUT/tests_x64.log" | tail -3

# The benchmark rows: exact blame at scale (F = 100,000 at n = 12, 10,000 at n = 16) and the
# Monte Carlo chain rows. About 3 minutes; each script checks its own answers.
timeout 150 $PY benchmarks/bench_exact.py --scale --repeats 11 --budget 5 --out "$OUT/bench_exact_scale"
timeout 120 $PY benchmarks/bench_exact.py --sizes 8,12,16 --repeats 11 --budget 5 --no-generic --out "$OUT/bench_exact"
# (--sizes given: the table is printed, and kept here, not written over the CPU results.)
timeout 150 $PY benchmarks/bench_mc.py --chain --sizes 16,32,64,128,256 --repeats 2 \
    | tee "$OUT/bench_mc_chain.txt" || echo "bench_mc --chain failed or ran out of time"
echo "gpu_check: done; results in $OUT"
