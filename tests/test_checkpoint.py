"""Checkpoint and resume of `blame_batch`, and Ctrl-C: a resumed run gives bit for bit the
result of an uninterrupted one (after SIGKILL in a real subprocess, and after SIGINT at
several moments); a checkpoint of other arguments, a truncated or corrupt file and a newer
format are refused with the file and the difference named; the progress bar moves."""

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import without_compile_cache

import blamejax as bj

HERE = os.path.dirname(os.path.abspath(__file__))
DEPTH = 200  # rounds of the heavy scorer: makes a block slow enough to interrupt
SLOW = dict(noise="fresh", num_worlds=2, threshold=0.5, block_size=6)


def slow_pipeline(ctx, case):
    """A three-step chain scored by a deliberately heavy deterministic scorer (a small
    recurrent net, like a reward model): the same blame as any chain, but each block of
    failures takes a while, so a run can be interrupted in the middle."""
    a = ctx.choose("plan", case["tables"][0])
    b = ctx.choose("search", case["tables"][1], given=a)
    c = ctx.choose("answer", case["tables"][2], given=b)
    h = jax.lax.fori_loop(
        0, DEPTH, lambda _, h: jnp.tanh(case["weights"] @ h), c.take(case["embed"])
    )
    return c.take(case["good"]) * jax.nn.sigmoid(4.0 * h[0] + 2.0)


def slow_cases(num_cases=96, dim=128):
    rng = np.random.default_rng(7)  # NumPy: no compiling before the run
    k = 4
    tables = [
        1.5 * rng.standard_normal((num_cases, 2, k)),
        1.5 * rng.standard_normal((num_cases, 2, k, k)),
        1.5 * rng.standard_normal((num_cases, 2, k, k)),
    ]
    weights = rng.standard_normal((num_cases, dim, dim)) / np.sqrt(dim)
    embed = rng.standard_normal((num_cases, k, dim))
    good = (rng.uniform(size=(num_cases, k)) > 0.5).astype(np.float32)
    cast = lambda x: x.astype(np.float32)  # noqa: E731
    return dict(
        tables=[cast(x) for x in tables], weights=cast(weights), embed=cast(embed), good=good
    )


def slow_batch(path=None, **kwargs):
    return bj.blame_batch(slow_pipeline, slow_cases(), 0, checkpoint=path, **(SLOW | kwargs))


# The child says "ready" once blame_batch has put its own SIGINT handler in place (a thread
# watches for it), not before the call: under load, building the call's arguments can take
# longer than any fixed wait, and a Ctrl-C then would meet Python's handler, not the library's.
ANNOUNCE = """
import signal, threading, time
def _announce():
    while type(signal.getsignal(signal.SIGINT)).__name__ != "_DeferredInterrupt":
        time.sleep(0.001)
    print("ready", flush=True)
threading.Thread(target=_announce, daemon=True).start()
"""

CHILD = f"""
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
import sys
sys.path.insert(0, {HERE!r})
import test_checkpoint as t
{ANNOUNCE}
t.slow_batch(sys.argv[1])
print("finished", flush=True)
"""


pytestmark = pytest.mark.usefixtures("sigint_is_ctrl_c")  # Ctrl-C tests: see conftest.py


def assert_same_result(a, b):
    """Every array field equal bit for bit (NaN where NaN), every setting equal, and the
    JSON export equal."""
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, (np.ndarray, jax.Array)):
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape, field.name
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), field.name
        else:
            assert x == y, field.name
    assert json.dumps(a.to_dict()) == json.dumps(b.to_dict())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The slow batch, uninterrupted (its own checkpoint file), and without any checkpoint."""
    path = str(tmp_path_factory.mktemp("reference") / "slow.json")
    return slow_batch(path), slow_batch(block_size=None)


def _text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def read_progress(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["progress"]


def count_writes(monkeypatch, after=None):
    """Count the checkpoint writes; after write number `after`, send this process a SIGINT
    (as a Ctrl-C would), which blame_batch must honour at the end of that block."""
    module = sys.modules[bj.blame_batch.__module__]
    real = module.write_checkpoint
    writes = []

    def write(*args):
        real(*args)
        writes.append(args[0])
        if len(writes) == after:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(module, "write_checkpoint", write)
    return writes


def test_checkpointed_run_equals_the_plain_run(reference):
    checkpointed, plain = reference
    assert checkpointed.num_analysed > 6 * 4  # several blocks
    assert_same_result(checkpointed, plain)  # the blocks change no value


def test_ctrl_c_keeps_the_last_block_and_resumes_bit_identically(tmp_path, monkeypatch, reference):
    path = str(tmp_path / "run.json")
    writes = count_writes(monkeypatch, after=2)
    with pytest.raises(
        KeyboardInterrupt,
        match=r"after 12 of \d+ failures, saved in .*run\.json: run the same call again",
    ):
        slow_batch(path)
    assert len(writes) == 2 and read_progress(path)["start"] == 12
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    resumed = slow_batch(path)
    blocks = -(-reference[0].num_analysed // 6)
    assert len(writes) == blocks  # it went on from block 3, not from the start
    assert_same_result(resumed, reference[0])
    writes.clear()
    assert_same_result(slow_batch(path), reference[0])  # a finished file: read back only
    assert writes == []


@pytest.mark.parametrize("estimator", ["exact", pytest.param("mc", marks=pytest.mark.slow)])
def test_resume_when_stopping_early_and_monte_carlo(tmp_path, monkeypatch, estimator):
    cases = bj.demos.agent8_cases(300)
    kwargs = dict(
        interval=bj.stats.Interval("normal"),
        schedule=bj.stats.Schedule(first=4, growth=1.5),
        stop="top1",
        estimator=estimator,
        num_permutations=8,
    )
    whole = bj.blame_batch(
        bj.demos.agent8_pipeline, cases, 0, checkpoint=str(tmp_path / "whole.json"), **kwargs
    )
    path = str(tmp_path / "part.json")
    count_writes(monkeypatch, after=1)
    with pytest.raises(KeyboardInterrupt, match="after 32 of"):
        bj.blame_batch(bj.demos.agent8_pipeline, cases, 0, checkpoint=path, **kwargs)
    monkeypatch.undo()
    resumed = bj.blame_batch(bj.demos.agent8_pipeline, cases, 0, checkpoint=path, **kwargs)
    assert_same_result(resumed, whole)
    plain = bj.blame_batch(bj.demos.agent8_pipeline, cases, 0, **kwargs)
    assert_same_result(resumed, plain)


def _child(path):
    env = without_compile_cache(dict(os.environ, PYTHONFAULTHANDLER="1"))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for(predicate, process, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            out, err = process.communicate(timeout=30)
            raise AssertionError(
                f"the child ended or timed out first (rc {process.returncode}):\n{out}\n{err[-3000:]}"
            )
        time.sleep(0.005)


@pytest.mark.slow  # multi-process: a child Python process compiles from nothing
def test_resume_after_sigkill_in_a_subprocess(tmp_path, monkeypatch, reference):
    """A real process killed with SIGKILL just after its first block was saved: the file
    on disk is whole, and resuming it here gives the uninterrupted result bit for bit."""
    path = str(tmp_path / "killed.json")
    child = _child(path)
    try:
        _wait_for(lambda: os.path.exists(path), child, timeout=240)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        child.kill()
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    done = read_progress(path)["start"]
    assert 0 < done < reference[0].num_analysed  # killed in the middle
    writes = count_writes(monkeypatch)
    resumed = slow_batch(path)
    assert len(writes) == -(-(reference[0].num_analysed - done) // 6)  # only the rest
    assert_same_result(resumed, reference[0])


@pytest.mark.slow  # multi-process: a child Python process compiles from nothing
@pytest.mark.parametrize(
    "moment", ["while compiling", "during the blocks", "twice during the blocks"]
)
def test_ctrl_c_in_a_subprocess_never_crashes(tmp_path, reference, moment):
    """SIGINT while the child compiles its first calls, or while it analyses blocks (once,
    or twice in a row): it ends by KeyboardInterrupt (never a segmentation fault), says how
    to resume, and what it saved resumes to the uninterrupted result bit for bit."""
    path = str(tmp_path / "interrupted.json")
    child = _child(path)
    try:
        assert child.stdout.readline().strip() == "ready"
        if moment == "while compiling":
            time.sleep(0.5)  # inside blame_batch, its first compiled calls take seconds
        else:
            _wait_for(lambda: os.path.exists(path), child, timeout=240)
        child.send_signal(signal.SIGINT)
        if moment.startswith("twice"):
            time.sleep(0.01)
            child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGINT, err[-3000:]  # not -SIGSEGV
    assert "finished" not in out and "KeyboardInterrupt: blame_batch stopped by Ctrl-C" in err
    assert "Ctrl-C received; stopping after the current block" in err
    if os.path.exists(path):
        assert "run the same call again" in err
        assert 0 < read_progress(path)["start"] < reference[0].num_analysed
        assert_same_result(slow_batch(path), reference[0])
    else:
        assert moment == "while compiling" and "before its first block" in err


def _small(path, **kwargs):
    cases = bj.demos.refund_cases(40)
    return bj.blame_batch(
        bj.demos.refund_pipeline, cases, 0, checkpoint=path, **({"block_size": 4} | kwargs)
    )


def other_pipeline(ctx, case):
    return bj.demos.refund_pipeline(ctx, case)


@pytest.mark.parametrize(
    "change, named",
    [
        (
            dict(num_worlds=4, noise="fresh"),
            "`noise` differs (file: recorded, this call: fresh); `num_worlds` differs (file: 8, this call: 4)",
        ),
        (dict(key=1), "`key` differs"),
        (
            dict(interval=bj.stats.Interval(delta=0.05)),
            "`delta` differs (file: 0.1, this call: 0.05)",
        ),
        (dict(block_size=5), "`block_size` differs (file: 4, this call: 5)"),
        (dict(steps=["writer", "reviewer"]), "`steps` differs"),
        (
            dict(pipeline=other_pipeline),
            "`pipeline` differs (file: blamejax.demos._refund.refund_pipeline, this call: test_checkpoint.other_pipeline)",
        ),
        (dict(cases="values"), "`cases` differ (leaf ['reply_right'] holds other values)"),
        (
            dict(cases="shape"),
            "`cases` differ (leaf ['planner'] has shape [40, 2, 2] in the file, [39, 2, 2] in this call)",
        ),
    ],
)
def test_a_checkpoint_of_other_arguments_is_refused(tmp_path, change, named):
    path = str(tmp_path / "other.json")
    _small(path)
    before = _text(path)
    cases = bj.demos.refund_cases(40)
    pipeline = change.pop("pipeline", bj.demos.refund_pipeline)
    kind = change.pop("cases", None)
    if kind == "values":
        cases = dict(cases, reply_right=np.asarray(cases["reply_right"]) * 0.5)
    elif kind == "shape":
        cases = jax.tree_util.tree_map(lambda x: x[:39], cases)
    with pytest.raises(
        bj.estimators.CheckpointError,
        match="other.json' was written by a call with other arguments",
    ) as error:
        bj.blame_batch(
            pipeline, cases, change.pop("key", 0), checkpoint=path, **({"block_size": 4} | change)
        )
    assert named in str(error.value) and "Pass the same arguments to resume" in str(error.value)
    assert _text(path) == before  # left as it was


def test_a_pipeline_whose_code_changed_is_refused(tmp_path):
    path = str(tmp_path / "code.json")
    cases = bj.demos.refund_cases(20)

    def make(weight):
        def scored(ctx, case):
            return weight * bj.demos.refund_pipeline(ctx, case)

        return scored

    bj.blame_batch(make(1.0), cases, 0, checkpoint=path)
    bj.blame_batch(make(1.0), cases, 0, checkpoint=path)  # the same code and closure: resumes
    with pytest.raises(
        ValueError,
        match=r"`pipeline` test_checkpoint\..*scored differs \(its code or the values it closes over",
    ):
        bj.blame_batch(make(0.5), cases, 0, checkpoint=path)


def _rewrite(path, edit):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    edited = edit(text)
    assert edited != text
    with open(path, "w", encoding="utf-8") as f:
        f.write(edited)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda text: text[: len(text) // 2], r"is truncated or corrupt \(not valid JSON"),
        (lambda text: "", r"is truncated or corrupt \(not valid JSON"),
        (
            lambda text: re.sub(r'"start": (\d+)', lambda m: f'"start": {int(m[1]) - 4}', text),
            r"is corrupt \(its checksum does not match",
        ),
        (
            lambda text: text.replace('"base64": "', '"base64": "AAAA', 1),
            r"is corrupt \(its checksum does not match",
        ),
        (
            lambda text: text.replace('"format": 1', '"format": 2'),
            r"has format 2, newer than this blamejax reads \(format 1\)",
        ),
        (lambda text: json.dumps({"type": "BatchResult"}), r"is not a blamejax checkpoint"),
    ],
)
def test_a_truncated_corrupt_or_newer_file_is_refused(tmp_path, edit, message):
    path = str(tmp_path / "bad.json")
    _small(path)
    _rewrite(path, edit)
    with pytest.raises(
        bj.estimators.CheckpointError, match=r"`checkpoint` file '.*bad\.json' " + message
    ):
        _small(path)


def test_a_checksummed_but_inconsistent_file_is_refused(tmp_path):
    path = str(tmp_path / "odd.json")
    _small(path)
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    document["progress"]["start"] = 10_000  # more failures than these arguments give
    del document["sha256"]
    document["sha256"] = bj.estimators._checkpoint._checksum(document)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f)
    with pytest.raises(
        bj.estimators.CheckpointError, match=r"odd\.json' is corrupt \(its progress does not fit"
    ):
        _small(path)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            dict(checkpoint=3),
            TypeError,
            "`checkpoint` must be a file path (str or os.PathLike), got 3",
        ),
        (
            dict(checkpoint="/no/such/folder/x.json"),
            ValueError,
            "`checkpoint`'s folder '/no/such/folder' does not exist",
        ),
        (
            dict(block_size=0),
            ValueError,
            "`block_size` must be None or a positive int, got 0",
        ),
        (dict(progress="yes"), TypeError, "`progress` must be a bool (True or False), got 'yes'"),
    ],
)
def test_bad_checkpoint_arguments(kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        bj.blame_batch(bj.demos.refund_pipeline, bj.demos.refund_cases(8), 0, **kwargs)


def test_checkpoint_folder_is_refused_when_it_is_a_folder(tmp_path):
    with pytest.raises(ValueError, match="`checkpoint` must be a file path, got the folder"):
        bj.blame_batch(bj.demos.refund_pipeline, bj.demos.refund_cases(8), 0, checkpoint=tmp_path)


def test_the_progress_bar_moves_once_per_block(capsys):
    cases = bj.demos.refund_cases(120)
    plain = bj.blame_batch(bj.demos.refund_pipeline, cases, 0)
    shown = bj.blame_batch(bj.demos.refund_pipeline, cases, 0, progress=True, block_size=16)
    err = capsys.readouterr().err
    blocks = -(-plain.num_analysed // 16)
    assert blocks >= 3
    for i in range(1, blocks + 1):  # every block is shown, with the rate and the time left
        assert f"block {i}/{blocks}" in err
    assert "failure/s" in err or "s/failure" in err
    assert f"{plain.num_analysed}/{plain.num_analysed} [" in err and "<00:00" in err
    assert_same_result(shown, plain)


OLD_FILES = os.path.join(HERE, "data", "old_checkpoint")
OLD_OPTIONS = dict(
    interval=bj.stats.Interval("normal", delta=0.05),
    schedule=bj.stats.Schedule(first=4, growth=2.0),
    stop="top1",
    block_size=8,
)


def old_checkpoint(tmp_path) -> str:
    """A copy of the file `blame_batch` wrote before its options were values (commit
    59fb466, old keywords; tests/data/old_checkpoint/make.py), interrupted after 16 failures,
    with its environment entries (versions, backend) set to this one's: the file is kept
    across upgrades, and what it must show is that its argument entries still match."""
    from blamejax.estimators._checkpoint import _checksum, environment

    if jax.config.jax_enable_x64:
        pytest.skip(
            "the file holds 32-bit values: since noise is drawn in float32 in both modes "
            "(commit 1be73de), a 64-bit file of that commit no longer holds this code's failures"
        )
    with open(os.path.join(OLD_FILES, "refund_x32.ckpt.json"), encoding="utf-8") as f:
        document = json.load(f)
    document["fingerprint"] |= environment()
    document["sha256"] = _checksum({k: v for k, v in document.items() if k != "sha256"})
    path = tmp_path / "old.ckpt.json"
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return str(path)


def test_a_checkpoint_written_before_the_options_were_values_resumes(tmp_path, monkeypatch):
    """Its 16 failures are read back, not recomputed (one more block is written), and the
    result is bit for bit an uninterrupted run's under the new spelling."""
    path = old_checkpoint(tmp_path)
    cases = bj.demos.refund_cases(60)
    writes = count_writes(monkeypatch)
    resumed = bj.blame_batch(bj.demos.refund_pipeline, cases, 0, checkpoint=path, **OLD_OPTIONS)
    assert len(writes) == 1  # 21 (x64: 20) failures: the file held two blocks of 8
    plain = bj.blame_batch(bj.demos.refund_pipeline, cases, 0, **OLD_OPTIONS)
    assert_same_result(resumed, plain)
    assert resumed.interval == "normal" and resumed.delta == 0.05


def test_a_checkpoint_written_before_the_options_were_values_resumes_under_old_keywords(
    tmp_path,
):
    """The deprecation period: the same file, resumed with the keywords that wrote it."""
    path = old_checkpoint(tmp_path)
    cases = bj.demos.refund_cases(60)
    old = dict(interval="normal", delta=0.05, first_checkpoint=4, growth=2.0, stop_early=True)
    with pytest.warns(DeprecationWarning, match="is deprecated"):
        resumed = bj.blame_batch(
            bj.demos.refund_pipeline, cases, 0, checkpoint=path, block_size=8, **old
        )
    assert_same_result(resumed, bj.blame_batch(bj.demos.refund_pipeline, cases, 0, **OLD_OPTIONS))


def test_a_64_bit_checkpoint_from_before_float32_noise_is_refused_with_the_reason(tmp_path):
    """Noise is drawn in float32 in both modes now, so a 64-bit file written before holds
    other worlds: its fingerprint lacks the `noise draws` entry that 64-bit mode adds, and
    resuming it is refused, saying why. 32-bit files are unaffected (no entry is added)."""
    from blamejax.estimators._checkpoint import (
        CheckpointError,
        environment,
        read_checkpoint,
        write_checkpoint,
    )

    assert ("noise draws" in environment()) == bool(jax.config.jax_enable_x64)
    now = {"steps": ["a"], "jax_enable_x64": True, "noise draws": "float32"}
    before = {k: v for k, v in now.items() if k != "noise draws"}
    path = str(tmp_path / "x64.ckpt.json")
    write_checkpoint(path, before, {"done": 8}, {"values": np.zeros(3)})
    with pytest.raises(CheckpointError, match="before noise was drawn in float32"):
        read_checkpoint(path, now)
    assert read_checkpoint(path, before)[0] == {"done": 8}
