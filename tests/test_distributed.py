"""Several processes on JAX's own runtime: `jax.distributed` with gloo CPU collectives on
127.0.0.1, two processes of two simulated CPU devices each (four devices in all), against a
plain one-process run on one device. The failure axis is split over all four devices; every
process ends with the whole answer.

Every output is compared bit for bit (`np.array_equal`). One documented exception: Monte
Carlo with adaptive stopping, across *device counts*. Each device advances its share of the
active failures with its share of the lanes, and a failure's per-call sums add its samples
`lanes // active failures on its device` at a time (float32 Kahan sums): the grouping, and
so the last bits, change with the number of active failures per device unless the device
count divides the active count. The samples, the stopping decisions and the evaluation
counts stay identical, and with the same four devices in one process the two-process run is
bit-identical again, so the difference comes from the device count alone, never from the
processes.

Each run is a fresh subprocess (tests/distributed_worker.py), bounded by a timeout and killed
in `finally`.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from blamejax.estimators._devices import slot_layout

WORKER = pathlib.Path(__file__).with_name("distributed_worker.py")
TIMEOUT = 900  # seconds for a whole launch (the machine may be shared)
ADAPTIVE_FLOATS = ("values", "lower", "upper", "variance")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(folder: pathlib.Path, name: str, num_processes: int, devices: int, sections=None):
    """Run the worker in `num_processes` processes of `devices` CPU devices each; return the
    output file of every process."""
    env = dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
    )
    port = _free_port()
    outs = [folder / f"{name}-{i}.npz" for i in range(num_processes)]
    logs = [open(folder / f"{name}-{i}.log", "w") for i in range(num_processes)]
    procs = []
    try:
        for i in range(num_processes):
            cmd = [sys.executable, str(WORKER), str(outs[i])]
            if sections:
                cmd += ["--sections", sections]
            if num_processes > 1:
                cmd += [
                    "--coordinator",
                    f"127.0.0.1:{port}",
                    "--num-processes",
                    str(num_processes),
                    "--process-id",
                    str(i),
                ]
            procs.append(subprocess.Popen(cmd, env=env, stdout=logs[i], stderr=subprocess.STDOUT))
        for p in procs:
            p.wait(timeout=TIMEOUT)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    for i, p in enumerate(procs):
        text = (folder / f"{name}-{i}.log").read_text()
        assert p.returncode == 0, f"{name} process {i} exited with {p.returncode}:\n{text[-4000:]}"
    return [dict(np.load(out)) for out in outs]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("distributed")
    two = _launch(folder, "two-processes", 2, 2)
    one = _launch(folder, "one-device", 1, 1)[0]
    four = _launch(folder, "four-devices", 1, 4, sections="mc_adaptive")[0]
    return two, one, four


def _results(run):
    return {k: v for k, v in run.items() if k not in ("process_count", "device_count")}


@pytest.mark.slow  # four worker processes, each compiling every estimator
def test_runs_span_two_processes_and_four_devices(runs):
    two, one, four = runs
    for run in two:
        assert (int(run["process_count"]), int(run["device_count"])) == (2, 4)
    assert (int(one["process_count"]), int(one["device_count"])) == (1, 1)
    assert (int(four["process_count"]), int(four["device_count"])) == (1, 4)


@pytest.mark.slow  # four worker processes, each compiling every estimator
def test_every_process_holds_the_whole_answer(runs):
    first, second = (_results(r) for r in runs[0])
    assert first.keys() == second.keys()
    for name in first:
        assert np.array_equal(first[name], second[name], equal_nan=True), name


@pytest.mark.slow  # four worker processes, each compiling every estimator
def test_two_processes_equal_one_process_bit_for_bit(runs):
    two, one = _results(runs[0][0]), _results(runs[1])
    assert two.keys() == one.keys()
    assert {name.split(".")[0] for name in one} == {
        "exact",
        "mc_fixed",
        "mc_adaptive",
        "batch_exact",
        "batch_mc",
    }
    assert one["exact.interactions"].shape == (7, 4, 4) and np.abs(one["exact.shapley"]).max() > 0
    assert one["batch_mc.failure_ids"].size > 4  # several failures, padded over four devices
    for name in one:
        if name.startswith("mc_adaptive.") and name.split(".")[1] in ADAPTIVE_FLOATS:
            continue  # see the next test
        assert one[name].shape == two[name].shape, name
        assert np.array_equal(one[name], two[name], equal_nan=True), name


@pytest.mark.slow  # four worker processes, each compiling every estimator
def test_adaptive_monte_carlo_differs_by_device_count_only(runs):
    """Two processes of two devices equal one process of four devices bit for bit; against
    one device, the same samples and stopping decisions, and estimates that differ in the
    last bits of the float sums only (their grouping follows the active failures per
    device; see the module docstring)."""
    two, one, four = _results(runs[0][0]), _results(runs[1]), _results(runs[2])
    samples = one["mc_adaptive.num_samples"]
    assert len(set(samples.tolist())) > 1  # failures stopped at different checkpoints
    for name in four:
        assert np.array_equal(four[name], two[name], equal_nan=True), name
    for name in ("num_samples", "evaluations", "rule", "empty", "full"):
        assert np.array_equal(one[f"mc_adaptive.{name}"], two[f"mc_adaptive.{name}"]), name
    eps = np.finfo(np.float64 if jax.config.jax_enable_x64 else np.float32).eps  # the sums' dtype
    for name in ADAPTIVE_FLOATS:
        a, b = one[f"mc_adaptive.{name}"], two[f"mc_adaptive.{name}"]
        scale = np.abs(a).max()
        assert np.abs(a - b).max() <= 64 * eps * scale, (name, np.abs(a - b).max(), scale)


@pytest.mark.parametrize("num_active", [1, 2, 3, 5, 8, 13, 32])
@pytest.mark.parametrize("num_devices", [1, 2, 3, 4])
def test_slot_layout_gives_each_device_an_even_share(num_active, num_devices):
    """Monte Carlo's failure slots over devices: every active failure in exactly one slot,
    each device's share contiguous and packed first in its own slots, shares as even as can
    be, padding only with failures of the group, and at least one active slot per device."""
    num_slots = -(-32 // num_devices) * num_devices
    part = np.arange(100, 100 + num_active)
    index, active, positions = slot_layout(part, num_slots, num_devices)
    per_device = num_slots // num_devices
    assert index.shape == (num_slots,) and active.shape == (num_devices,)
    assert np.array_equal(index[positions], part)
    assert len(set(positions.tolist())) == num_active
    assert set(index.tolist()) <= set(part.tolist())
    shares = [
        int(np.sum((positions >= d * per_device) & (positions < (d + 1) * per_device)))
        for d in range(num_devices)
    ]
    assert sum(shares) == num_active and max(shares) - min(shares) <= 1
    for d, share in enumerate(shares):
        mine = positions[(positions >= d * per_device) & (positions < (d + 1) * per_device)]
        assert np.array_equal(mine, d * per_device + np.arange(share))  # packed first
        assert active[d] == max(share, 1)
