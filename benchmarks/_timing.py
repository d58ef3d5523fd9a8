"""Timing shared by the benchmark scripts (not a benchmark itself).

`timed` times a first call (with compilation), then `WARMUP_S` seconds of untimed calls (the
first calls after compiling run slower), then the median of the steady calls.
"""

from __future__ import annotations

import statistics
import time

import jax

WARMUP_S = 0.5  # untimed calls between the first (compiling) call and the timed ones


def timed(function, *args, calls: int = 200) -> tuple[float, float]:
    """(first call incl. compilation, median of `calls` later calls after a warm-up), in s.
    Every call is ended with `jax.block_until_ready`."""
    start = time.perf_counter()
    jax.block_until_ready(function(*args))
    first = time.perf_counter() - start
    until = time.perf_counter() + WARMUP_S
    while time.perf_counter() < until:
        jax.block_until_ready(function(*args))
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(function(*args))
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)
