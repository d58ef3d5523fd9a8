"""The refund-policy demo: exact values known by hand."""

import jax
import numpy as np
import pytest

import blamejax as bj


def _failures(mechanism, num_cases=40, seed=0):
    cases = bj.demos.refund_cases(num_cases, mechanism)
    scores = bj.replay(bj.demos.refund_pipeline, cases, bj.recorded_worlds(seed, num_cases))["score"]
    failed = np.flatnonzero(np.asarray(scores[:, 0]) < 1)
    assert 0 < len(failed) < num_cases  # the demo is stochastic: some pass, some fail
    cases_f = jax.tree_util.tree_map(lambda x: x[failed], cases)
    return cases_f, bj.recorded_worlds(seed, failed)


@pytest.mark.parametrize(
    "mechanism, shapley, fix_alone",
    [
        ("A", [5 / 12, 5 / 12, 1 / 12, 1 / 12], [1, 1, 0, 0]),
        ("B", [1 / 3, 1 / 3, 0, 1 / 3], [1, 1, 0, 1]),
    ],
)
def test_refund_values(mechanism, shapley, fix_alone):
    cases, worlds = _failures(mechanism)
    result = bj.exact_blame(bj.demos.refund_pipeline, cases, worlds, interactions=True)
    assert result.steps == ("planner", "retriever", "writer", "reviewer")
    num = result.num_failures
    np.testing.assert_allclose(result.shapley, np.tile(shapley, (num, 1)), atol=1e-6)
    np.testing.assert_allclose(result.fix_alone, np.tile(fix_alone, (num, 1)), atol=1e-6)
    np.testing.assert_allclose(result.leave_one_out, 0.0, atol=1e-6)
    np.testing.assert_allclose(result.empty, 0.0)
    np.testing.assert_allclose(result.full, 1.0)
    # last-step blame names the reviewer (index 3) in every failure
    np.testing.assert_array_equal(result.last_step, 3)


def test_refund_interaction_writer_reviewer():
    cases, worlds = _failures("A")
    result = bj.exact_blame(bj.demos.refund_pipeline, cases, worlds, interactions=True)
    inter = np.asarray(result.interactions[0])
    np.testing.assert_allclose(inter, inter.T, atol=1e-6)
    # writer and reviewer only work together: positive interaction
    assert inter[2, 3] > 0.1
    # planner and retriever substitute for each other: negative interaction
    assert inter[0, 1] < -0.1


def test_cli_demo_refund(capsys):
    from blamejax._cli import main

    assert main(["demo", "refund", "--cases", "20"]) == 0
    out = capsys.readouterr().out
    assert "0.4167" in out and "0.0833" in out and "0.3333" in out
