"""The exact engine on random pipelines: brute force, jit vs eager, vmap vs loops,
prefix sharing, chunking, recompiles, gradients and bad input."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import (
    chain_pipeline,
    dag_pipeline,
    first,
    masks,
    random_chain_cases,
    random_dag_cases,
    take,
)

import blamejax as bj
from blamejax.estimators import _exact


def loop_values(pipeline, cases, worlds, n):
    """v[f, w, m] by a plain Python loop over failures, worlds and masks (no vmap)."""
    structure = bj.discover(pipeline, first(cases))
    num_f, num_w = worlds.key.shape
    score = jax.jit(
        lambda c, w, m: bj.pipeline.run_score(
            pipeline, structure, c, w, bj.coalitions.mask_plan(structure, range(n), [1] * n, m)
        )
    )
    out = np.zeros((num_f, num_w, 1 << n))
    for f in range(num_f):
        for w in range(num_w):
            world = bj.World(key=worlds.key[f, w])
            for m, mask in enumerate(masks(n)):
                out[f, w, m] = score(take(cases, f), world, jnp.asarray(mask))
    return out


@pytest.mark.parametrize("kind", ["chain", "dag"])
def test_exact_equals_loop_and_brute_force(kind, getkey):
    if kind == "chain":
        n, pipeline = 4, chain_pipeline
        cases = random_chain_cases(getkey(), n, num_cases=3, neg_inf=0.2)
    else:
        n, pipeline = 4, dag_pipeline
        cases = random_dag_cases(getkey(), num_cases=3)
    worlds = bj.fresh_worlds(getkey(), range(3), 2)
    v = loop_values(pipeline, cases, worlds, n).mean(axis=1)
    result = bj.exact_blame(pipeline, cases, worlds, interactions=True)
    for f in range(3):
        ref = bj.attribute(jnp.asarray(v[f], jnp.float32), interactions=True)
        np.testing.assert_allclose(result.shapley[f], ref.shapley, atol=1e-6)
        np.testing.assert_allclose(result.interactions[f], ref.interactions, atol=1e-6)
        np.testing.assert_allclose(result.full[f], v[f, -1], atol=1e-6)
        np.testing.assert_allclose(result.empty[f], v[f, 0], atol=1e-6)
    np.testing.assert_allclose(result.shapley.sum(1), result.total, atol=1e-5)
    assert np.abs(np.asarray(result.shapley)).max() > 1e-3  # not a trivial instance


def test_reproducible(getkey):
    # 7 failures x 4 worlds of a 5-step chain: the shapes test_chunks_and_world_groups_agree
    # compiles, so the two tests share one compiled program
    cases = random_chain_cases(jr.key(3), 5, num_cases=7)
    a = bj.exact_blame(chain_pipeline, cases, bj.fresh_worlds(7, range(7), 4))
    b = bj.exact_blame(chain_pipeline, cases, bj.fresh_worlds(7, range(7), 4))
    np.testing.assert_array_equal(a.shapley, b.shapley)
    c = bj.exact_blame(chain_pipeline, cases, bj.fresh_worlds(8, range(7), 4))
    assert not np.array_equal(a.shapley, c.shapley)


def test_chunks_and_world_groups_agree(monkeypatch, getkey):
    cases = random_chain_cases(getkey(), 5, num_cases=7)
    worlds = bj.fresh_worlds(getkey(), range(7), 4)
    whole = bj.exact_blame(chain_pipeline, cases, worlds)
    chunked = bj.exact_blame(chain_pipeline, cases, worlds, block_size=2)
    monkeypatch.setattr(_exact, "DEFAULT_BUDGET", 64)  # forces worlds to be scanned in groups
    grouped = bj.exact_blame(chain_pipeline, cases, worlds)
    np.testing.assert_allclose(chunked.shapley, whole.shapley, atol=1e-6)
    np.testing.assert_allclose(grouped.shapley, whole.shapley, atol=1e-6)
    np.testing.assert_array_equal(chunked.last_step, whole.last_step)


def _block_size_cases(kind):
    """Failures, worlds and a pipeline for `test_structured_values_do_not_depend_on_block_size`:
    the RAG demo (a DAG: the score reads two draws) or a random chain, under fresh or expected
    (counterfactual) worlds."""
    pipeline, num = (bj.demos.rag_pipeline, 400) if kind[0] == "dag" else (chain_pipeline, 40)
    if kind[0] == "dag":
        cases = bj.demos.rag_cases(num, seed=0)
    else:
        cases = random_chain_cases(jr.key(3), 12, num, num_options=5)
    out = bj.replay(pipeline, cases, bj.recorded_worlds(0, np.arange(num)))
    failed = np.flatnonzero(np.asarray(out["score"][:, 0]) < 1)[:21]
    cases = jax.tree_util.tree_map(lambda x: x[failed], cases)
    if kind[1] == "fresh":
        return pipeline, cases, bj.fresh_worlds(1, failed, 8)
    observed = np.asarray(out["choice"][:, 0])  # [F, sites]
    return pipeline, cases, bj.expected_worlds(failed, observed[failed])


@pytest.mark.parametrize(
    "kind", [("dag", "fresh"), ("dag", "expected"), ("chain", "fresh"), ("chain", "expected")]
)
def test_structured_values_do_not_depend_on_block_size(kind):
    """A failure's structured values are the same bits whatever `block_size`: each call runs
    its failures a fixed number at a time (`MICRO_BATCH`), so one failure's arithmetic never
    takes the shape of its block (the enumerating path's rounding never did)."""
    pipeline, cases, worlds = _block_size_cases(kind)
    runs = [
        bj.exact_blame(pipeline, cases, worlds, block_size=size, method="structured")
        for size in (None, 1, 2, 8)
    ]
    names = ("shapley", "banzhaf", "fix_alone", "leave_one_out", "empty", "full", "last_step")
    for run in runs[1:]:
        for name in names:
            assert np.array_equal(
                np.asarray(getattr(run, name)), np.asarray(getattr(runs[0], name)), equal_nan=True
            ), name
    assert np.abs(np.asarray(runs[0].shapley)).max() > 1e-2  # not a trivial instance


def test_bucket_sizes():
    sizes = [_exact._bucket(count, 1024) for count in range(1, 2000)]
    assert all(b >= c for b, c in zip(sizes, range(1, 1025)))
    assert all(b - c < c / 8 for b, c in zip(sizes, range(1, 1025)))  # < 1/8 padding
    assert len(set(sizes[256:512])) == 8  # counts 257..512: eight shapes per doubling
    assert max(sizes) == 1024  # capped at the chunk
    # the structured path's buckets: multiples of the failures it runs at a time
    sizes = [_exact._bucket(count, 1024, _exact.MICRO_BATCH) for count in range(1, 2000)]
    assert sizes[:8] == [4, 4, 4, 4, 8, 8, 8, 8]
    assert all(b >= c and b % _exact.MICRO_BATCH == 0 for b, c in zip(sizes, range(1, 1025)))
    assert all(b - c < c / 8 for b, c in zip(sizes[31:], range(32, 1025)))
    assert _exact._bucket(3, 2, _exact.MICRO_BATCH) == 2  # capped at the chunk


# -- bad input ---------------------------------------------------------------------------


def test_error_unknown_step_and_fix(getkey):
    cases = random_chain_cases(getkey(), 3, num_cases=2)
    worlds = bj.recorded_worlds(0, range(2))
    with pytest.raises(
        ValueError, match=r"unknown step 'planner'; this pipeline's steps are \['s0', 's1', 's2'\]"
    ):
        bj.exact_blame(chain_pipeline, cases, worlds, steps=["s0", "planner"])
    with pytest.raises(ValueError, match=r"`fixes\['s1'\]` must be a variant in \[1, 2\), got 2"):
        bj.exact_blame(chain_pipeline, cases, worlds, fixes={"s1": 2})


def test_error_step_without_fix(getkey):
    cases = random_chain_cases(getkey(), 3, num_cases=2, num_variants=1)
    with pytest.raises(ValueError, match="step 's0' has no fix: its logits have 1 variant"):
        bj.exact_blame(chain_pipeline, cases, bj.recorded_worlds(0, range(2)))


def test_error_too_many_steps(getkey):
    cases = random_chain_cases(getkey(), 5, num_cases=1)
    with pytest.raises(
        ValueError,
        match=r"n = 5 steps needs 2\^5 coalitions.*above `max_steps` = 4.*blamejax.mc_shapley",
    ):
        bj.exact_blame(
            chain_pipeline, cases, bj.recorded_worlds(0, range(1)), max_steps=4, method="enumerate"
        )
    # max_steps bounds enumeration only: a tabulated chain takes the structured path past it.
    assert (
        bj.exact_blame(chain_pipeline, cases, bj.recorded_worlds(0, range(1)), max_steps=4).method
        == "structured"
    )


def test_error_zero_failures_and_worlds(getkey):
    cases = random_chain_cases(getkey(), 3, num_cases=2)
    empty = jax.tree_util.tree_map(lambda x: x[:0], cases)
    with pytest.raises(ValueError, match="`cases` holds zero failures"):
        bj.exact_blame(chain_pipeline, empty, bj.recorded_worlds(0, range(2)))
    worlds = bj.fresh_worlds(0, range(2), 3)
    no_worlds = bj.World(key=worlds.key[:, :0])
    with pytest.raises(ValueError, match="W = 0 worlds"):
        bj.exact_blame(chain_pipeline, cases, no_worlds)
    with pytest.raises(
        ValueError, match=r"`worlds.key` must have shape \[F, W\] = \[2, W\], got \(3, 3\)"
    ):
        bj.exact_blame(chain_pipeline, cases, bj.fresh_worlds(0, range(3), 3))


def test_error_score_out_of_range(getkey):
    cases = random_chain_cases(getkey(), 3, num_cases=2)
    with pytest.raises(ValueError, match=r"outside the declared `score_range` \(0.0, 0.1\)"):
        bj.exact_blame(
            chain_pipeline, cases, bj.recorded_worlds(0, range(2)), score_range=(0.0, 0.1)
        )


_SHARDED_SCRIPT = """
import jax, numpy as np
import blamejax as bj
assert len(jax.devices()) == 2, jax.devices()
for num in (8, 7):  # 8: one call, sharded output; 7: padded to whole rows per device
    cases = bj.demos.refund_cases(num_cases=num)
    worlds = bj.fresh_worlds(1, range(num), 3)
    single = bj.exact_blame(bj.demos.refund_pipeline, cases, worlds, devices=jax.devices()[:1])
    spread = bj.exact_blame(bj.demos.refund_pipeline, cases, worlds)
    np.testing.assert_allclose(np.asarray(spread.shapley), np.asarray(single.shapley), rtol=0, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(spread.last_step), np.asarray(single.last_step))
    if num == 8:
        assert len(spread.shapley.sharding.device_set) == 2, spread.shapley.sharding
        assert len(single.shapley.sharding.device_set) == 1
from helpers import chain_pipeline, random_chain_cases
cases = random_chain_cases(jax.random.key(3), 12, 14, num_options=5)
for worlds in (bj.fresh_worlds(1, range(14), 4), bj.expected_worlds(np.arange(14))):
    single = bj.exact_blame(chain_pipeline, cases, worlds, devices=jax.devices()[:1])
    spread = bj.exact_blame(chain_pipeline, cases, worlds, block_size=4)
    assert single.method == spread.method == "structured"
    for name in ("shapley", "banzhaf", "fix_alone", "leave_one_out", "empty", "full"):
        assert np.array_equal(np.asarray(getattr(spread, name)), np.asarray(getattr(single, name))), name
print("ok")
"""


@pytest.mark.slow  # multi-process: a child Python process with two CPU devices
def test_failures_sharded_over_devices_equal_one_device():
    """Two simulated CPU devices (XLA_FLAGS, in a fresh process): the failure axis is split
    over both and the answers equal a one-device run (bit for bit on the structured path)."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))  # the script imports `helpers`
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]),
    )
    out = subprocess.run(
        [sys.executable, "-c", _SHARDED_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_bad_devices_argument():
    cases = bj.demos.refund_cases(num_cases=2)
    with pytest.raises(
        TypeError, match="`devices` must be a jax device or a non-empty sequence of them"
    ):
        bj.exact_blame(
            bj.demos.refund_pipeline, cases, bj.recorded_worlds(0, range(2)), devices=["cpu"]
        )
    with pytest.raises(TypeError, match="`devices`"):
        bj.exact_blame(bj.demos.refund_pipeline, cases, bj.recorded_worlds(0, range(2)), devices=[])


def test_warns_when_the_worlds_do_not_reproduce_the_failures():
    """Runs that score the top of the range in their factual run under the supplied worlds are
    named in a `NotAFailureWarning` (by exact_blame and mc_shapley); real failures are not."""
    import warnings

    pipeline, cases = bj.demos.refund_pipeline, bj.demos.refund_cases(20)
    scores = np.asarray(bj.replay(pipeline, cases, bj.recorded_worlds(0, range(20)))["score"][:, 0])
    failed, passed = np.flatnonzero(scores < 1), np.flatnonzero(scores >= 1)
    assert failed.size >= 2 and passed.size >= 1
    ids = np.concatenate([failed[:2], passed[:1]])  # two failures, then a run that passed
    rows = jax.tree_util.tree_map(lambda x: x[ids], cases)
    with pytest.warns(
        bj.estimators.NotAFailureWarning,
        match=rf"1 of 3 failures \(case id {ids[2]}\) already score",
    ):
        bj.exact_blame(pipeline, rows, bj.recorded_worlds(0, ids))
    with pytest.warns(
        bj.estimators.NotAFailureWarning, match=rf"1 of 3 failures \(case id {ids[2]}\)"
    ):
        bj.mc_shapley(pipeline, rows, bj.recorded_worlds(0, ids), 0, max_evaluations=2_000)
    only_failures = jax.tree_util.tree_map(lambda x: x[failed[:2]], cases)
    with warnings.catch_warnings():
        warnings.simplefilter("error", bj.estimators.NotAFailureWarning)
        bj.exact_blame(pipeline, only_failures, bj.recorded_worlds(0, failed[:2]))
        bj.mc_shapley(
            pipeline, only_failures, bj.recorded_worlds(0, failed[:2]), 0, max_evaluations=2_000
        )
