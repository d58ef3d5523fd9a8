"""Ctrl-C in `exact_blame` and `mc_shapley`: honoured between compiled calls, never inside
XLA. `exact_blame` stops after the chunk of failures it was running and says how to keep
work across interruptions; `mc_shapley` stops at the end of its checkpoint and hands back
the estimates so far, equal to what an uninterrupted run had at that checkpoint. In a real
subprocess, a SIGINT while compiling ends in `KeyboardInterrupt`, never a segmentation
fault. (`blame_batch`'s Ctrl-C, with checkpoints, is tested in test_checkpoint.py.)"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import without_compile_cache

import blamejax as bj

pytestmark = pytest.mark.usefixtures("sigint_is_ctrl_c")  # Ctrl-C tests: see conftest.py


@pytest.fixture(scope="module")
def failures():
    """Six failures of the refund demo, each with its recorded world."""
    cases = bj.demos.refund_cases(40)
    ids = np.sort(np.asarray(bj.blame_batch(bj.demos.refund_pipeline, cases, 0).failure_ids))[:6]
    return {name: value[ids] for name, value in cases.items()}, bj.recorded_worlds(0, ids)


def _exact_module():
    return sys.modules[bj.exact_blame.__module__]


def _mc_module():
    return sys.modules[bj.mc_shapley.__module__]


def test_exact_blame_stops_after_the_chunk_a_ctrl_c_came_in(monkeypatch, capsys, failures):
    cases, worlds = failures
    module, calls = _exact_module(), []
    real = module.to_local

    def to_local(outputs):  # the chunk's call has been dispatched: Ctrl-C while it runs
        calls.append(1)
        if len(calls) == 2:
            signal.raise_signal(signal.SIGINT)
        return real(outputs)

    monkeypatch.setattr(module, "to_local", to_local)
    with pytest.raises(
        KeyboardInterrupt, match=r"after 4 of 6 failures; nothing was kept: .*checkpoint=PATH"
    ):
        bj.exact_blame(bj.demos.refund_pipeline, cases, worlds, block_size=2)
    assert len(calls) == 2  # the third chunk never ran
    assert (
        "exact_blame: Ctrl-C received; stopping after the current chunk" in capsys.readouterr().err
    )
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    monkeypatch.undo()  # and the next call runs to the end
    assert bj.exact_blame(bj.demos.refund_pipeline, cases, worlds, block_size=2).shapley.shape == (
        6,
        4,
    )


def test_mc_shapley_keeps_the_estimates_of_the_checkpoint_a_ctrl_c_came_in(
    monkeypatch, capsys, failures
):
    cases, worlds = failures
    # a rule that never fires: every failure runs through every checkpoint
    kwargs = dict(
        key=1,
        max_evaluations=20_000,
        stop="width",
        epsilon=1e-9,
        schedule=bj.stats.Schedule(first=4, growth=2.0),
        history=True,
    )
    full = bj.mc_shapley(bj.demos.refund_pipeline, cases, worlds, **kwargs)
    module = _mc_module()
    real, steps = module._mc_step, []

    def step(*args):
        steps.append(1)
        if len(steps) == 2:
            signal.raise_signal(signal.SIGINT)
        return real(*args)

    monkeypatch.setattr(module, "_mc_step", step)
    with pytest.raises(KeyboardInterrupt, match=r"at look 2 of \d+; the estimates so far") as stop:
        bj.mc_shapley(bj.demos.refund_pipeline, cases, worlds, **kwargs)
    assert len(steps) == 2
    assert "mc_shapley: Ctrl-C received" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    partial = stop.value.result
    np.testing.assert_array_equal(partial.num_samples, full.history.t[1])
    np.testing.assert_array_equal(
        partial.values, full.history.values[:, 1]
    )  # what the full run had
    np.testing.assert_array_equal(partial.lower, full.history.lower[:, 1])
    np.testing.assert_array_equal(partial.upper, full.history.upper[:, 1])
    np.testing.assert_array_equal(partial.empty, full.empty)


# The child says "ready" once the estimator has put its own SIGINT handler in place (a thread
# watches for it), not just before the call, so no fixed wait decides whose handler a Ctrl-C meets.
CHILD = """
import signal, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
import sys
import blamejax as bj
cases = bj.demos.agent8_cases(16)
worlds = bj.fresh_worlds(0, range(16), 4)
def _announce():
    while type(signal.getsignal(signal.SIGINT)).__name__ != "_DeferredInterrupt":
        time.sleep(0.001)
    print("ready", flush=True)
threading.Thread(target=_announce, daemon=True).start()
if sys.argv[1] == "exact":
    bj.exact_blame(bj.demos.agent8_pipeline, cases, worlds, block_size=4)
else:
    bj.mc_shapley(bj.demos.agent8_pipeline, cases, worlds, key=0, max_evaluations=10**9, stop="width", epsilon=1e-9)
print("finished", flush=True)
"""


# Multi-process (a child Python process compiling from nothing), so with the slow tests; the fast
# run checks Ctrl-C in process (test_mc_shapley_keeps_the_estimates_of_the_checkpoint_a_ctrl_c_came_in
# and the tests above).
@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["exact", "mc"])
def test_ctrl_c_while_compiling_in_a_subprocess_never_crashes(estimator):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, estimator],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=without_compile_cache({**os.environ, "PYTHONFAULTHANDLER": "1"}),
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # inside the estimator: its first compiled calls take seconds
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=180)
    finally:
        child.kill()
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGINT, err[-3000:]  # not -SIGSEGV
    name = "exact_blame" if estimator == "exact" else "mc_shapley"
    assert "finished" not in out and f"KeyboardInterrupt: {name} stopped by Ctrl-C" in err, err[
        -3000:
    ]
