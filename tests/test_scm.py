"""Synthetic SCMs: controlled injection gives failures whose decisive step is the label, the
analytic Shapley values of multi-culprit cases equal exact Shapley, the metrics, the
benchmark harness is reproducible, and impossible parameters raise clear errors."""

import json

import jax
import numpy as np
import pytest

import blamejax as bj
from blamejax.benchmarks import scm

# One topology and one batch size (F = 48) keep the compiled functions shared between tests.
CHAIN = scm.make_scm(0, 5, 3, steps_per_agent=2)
DAG = scm.make_scm(3, 5, 3, topology="dag", extra_parent=1.0, steps_per_agent=2)
F = 48


def _subset(tree, index):
    return jax.tree_util.tree_map(lambda x: x[index], tree)


# -- the generator ------------------------------------------------------------------------------
def test_make_scm_topologies():
    assert CHAIN.parents == ((), (0,), (1,), (2,), (3,))
    assert DAG.parents[:2] == ((), (0,))
    assert all(
        len(p) == 2 and p[1] == i - 1 and p[0] < i - 1 for i, p in enumerate(DAG.parents) if i >= 2
    )
    assert DAG.agents == CHAIN.agents == (0, 0, 1, 1, 2) and DAG.num_agents == 3
    assert scm.make_scm(3, 5, 3, topology="dag", extra_parent=1.0).parents == DAG.parents  # seeded
    assert CHAIN.pipeline is scm.make_scm(9, 5, 3, noise=0.3).pipeline  # one function per topology


def test_injection_is_reproducible():
    a = scm.inject_errors(7, CHAIN, F)
    b = scm.inject_errors(7, CHAIN, F)
    c = scm.inject_errors(8, CHAIN, F)
    for x, y in zip(jax.tree_util.tree_leaves(a.cases), jax.tree_util.tree_leaves(b.cases)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(a.culprit), np.asarray(b.culprit))
    np.testing.assert_array_equal(
        jax.random.key_data(a.worlds.key), jax.random.key_data(b.worlds.key)
    )
    assert not np.array_equal(
        np.asarray(a.candidate_ids), np.asarray(c.candidate_ids)
    ) or not np.array_equal(np.asarray(a.culprit), np.asarray(c.culprit))


def test_generator_and_injection_are_the_same_with_and_without_x64():
    """The same seed gives the same DAG and the same injected failures in both precision
    modes (the draws are made in float32 and int32 whatever the mode)."""
    made = {}
    for x64 in (False, True):
        with jax.enable_x64(x64):
            model = scm.make_scm(0, 10, topology="dag")
            made[x64] = (model.parents, scm.inject_errors(1, model, 6))
    assert made[False][0] == made[True][0]
    a, b = made[False][1], made[True][1]
    np.testing.assert_array_equal(np.asarray(a.culprit), np.asarray(b.culprit))
    np.testing.assert_array_equal(np.asarray(a.candidate_ids), np.asarray(b.candidate_ids))
    for x, y in zip(jax.tree_util.tree_leaves(a.cases), jax.tree_util.tree_leaves(b.cases)):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64))


@pytest.mark.parametrize("model", [CHAIN, DAG], ids=["chain", "dag"])
def test_injected_label_is_the_decisive_step(model):
    """Under the recorded noise the factual run fails, fixing the labelled step alone
    repairs it, and no earlier step's fix alone does (read from the coalition cube of
    `exact_blame`, not from the generator's own screening)."""
    failures = scm.inject_errors(1, model, F)
    culprit = np.asarray(failures.culprit)
    assert len(set(culprit.tolist())) == model.num_steps  # every step gets labels
    result = bj.exact_blame(model.pipeline, failures.cases, failures.worlds)
    np.testing.assert_array_equal(np.asarray(result.empty), 0.0)
    fix_alone = np.asarray(result.fix_alone)
    rows = np.arange(len(culprit))
    np.testing.assert_array_equal(fix_alone[rows, culprit], 1.0)
    earlier = np.arange(model.num_steps)[None, :] < culprit[:, None]
    assert not np.any((fix_alone > 0) & earlier)
    # The counts behind the rejection rate add up.
    assert (
        failures.num_successful
        == failures.num_failures + failures.num_still_successful + failures.num_repaired_earlier
    )
    assert failures.num_candidates >= failures.num_successful > 0
    assert 0.0 <= failures.rejection_rate < 1.0
    assert "rejection rate" in failures.summary()


def test_injection_replays_the_prefix_and_restores_the_clean_run():
    """Steps before the label replay exactly; the label's fix (the original implementation)
    restores a successful run whose choice at the label differs from the failed one."""
    failures = scm.inject_errors(2, CHAIN, F)
    pipeline, n = CHAIN.pipeline, CHAIN.num_steps
    structure = bj.discover(pipeline, _subset(failures.cases, 0))
    culprit = np.asarray(failures.culprit)
    failed = bj.replay(pipeline, failures.cases, failures.worlds)

    def fixed_run(case, world, mask):  # the label's fix alone, one failure
        plan = bj.coalitions.mask_plan(structure, tuple(range(n)), (1,) * n, mask)
        return bj.pipeline.trace_run(pipeline, structure, case, _subset(world, 0), plan)

    masks = np.arange(n)[None, :] == culprit[:, None]
    fixed = jax.jit(jax.vmap(fixed_run))(failures.cases, failures.worlds, masks)
    np.testing.assert_array_equal(np.asarray(failed["score"]), 0.0)
    np.testing.assert_array_equal(np.asarray(fixed["score"]), 1.0)
    before = np.arange(n)[None, :] < culprit[:, None]
    failed_choice, fixed_choice = np.asarray(failed["choice"])[:, 0], np.asarray(fixed["choice"])
    assert np.all((failed_choice == fixed_choice) | ~before)
    assert np.all(failed_choice[masks] != fixed_choice[masks])


# -- multi-culprit cases ---------------------------------------------------------------------------
@pytest.mark.parametrize("model", [CHAIN, DAG], ids=["chain", "dag"])
@pytest.mark.parametrize("kind", scm.KINDS)
@pytest.mark.parametrize("num_culprits", [2, 3])
def test_analytic_shapley_equals_exact(model, kind, num_culprits):
    cases = scm.multi_culprit_cases(4, model, F, num_culprits=num_culprits, kind=kind)
    result = bj.exact_blame(model.pipeline, cases.cases, cases.worlds)
    analytic = np.asarray(cases.analytic_shapley)
    assert np.all(np.sort(analytic, axis=1)[:, -num_culprits:] == np.float32(1 / num_culprits))
    np.testing.assert_allclose(np.asarray(result.shapley), analytic, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(result.empty), 0.0)
    np.testing.assert_array_equal(np.asarray(result.full), 1.0)
    # The other steps' fixes do change their outputs (they are null players, not frozen).
    assert np.mean(np.asarray(result.last_step)[:, 0] >= 0) > 0
    fix_alone = np.asarray(result.fix_alone)
    culprits = np.asarray(cases.culprits)
    on_culprits = np.take_along_axis(fix_alone, culprits, axis=1)
    np.testing.assert_array_equal(on_culprits, 1.0 if kind == "conjunctive" else 0.0)


def test_fixed_culprits():
    cases = scm.multi_culprit_cases(0, CHAIN, 4, culprits=(3, 1), kind="disjunctive")
    np.testing.assert_array_equal(np.asarray(cases.culprits), [[1, 3]] * 4)
    np.testing.assert_allclose(np.asarray(cases.analytic_shapley)[0], [0, 0.5, 0, 0.5, 0])


# -- metrics ------------------------------------------------------------------------------------------
def test_step_and_agent_hits():
    predicted = np.array([2, 3, 5, -1, 0])
    culprit = np.array([2, 2, 2, 2, 1])
    np.testing.assert_array_equal(scm.step_hits(predicted, culprit), [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(scm.step_hits(predicted, culprit, within=1), [1, 1, 0, 0, 1])
    np.testing.assert_array_equal(scm.step_hits(predicted, culprit, within=3), [1, 1, 1, 0, 1])
    agents = (0, 0, 1, 1, 2, 2)
    np.testing.assert_array_equal(scm.agent_hits(predicted, culprit, agents), [1, 1, 0, 0, 1])
    np.testing.assert_array_equal(
        scm.culprit_hits(predicted, np.array([[2, 4]] * 5)), [1, 0, 0, 0, 0]
    )
    p = scm.proportion([True, True, False, True])
    assert (p["hits"], p["total"], p["rate"]) == (3, 4, 0.75) and 0 < p["low"] < 0.75 < p[
        "high"
    ] < 1
    with pytest.raises(ValueError, match="`within` must be a non-negative int"):
        scm.step_hits(predicted, culprit, within=-1)


def test_split_error():
    analytic = np.array([[0.5, 0.5, 0.0, 0.0]] * 4)
    credits = np.array([[0.5, 0.5, 0, 0], [1.0, 0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 0]])
    np.testing.assert_allclose(scm.split_error(credits, analytic), [0.0, 0.5, 1.0, 0.5])
    np.testing.assert_allclose(scm.split_error(2 * analytic[:1], analytic[:1]), [0.0])  # scale-free


def test_top_step_ties():
    values = np.array([[0.5, 0.5 - 1e-7, 0.1], [0.0, 0.2, 0.2]])
    np.testing.assert_array_equal(scm.top_step(values), [0, 1])
    rng = np.random.default_rng(0)
    draws = np.stack([scm.top_step(values, rng) for _ in range(200)])
    assert set(draws[:, 0]) == {0, 1} and set(draws[:, 1]) == {1, 2}
    assert 60 < np.sum(draws[:, 0] == 0) < 140  # a fair coin over 200 draws (|z| < 2.9)


# -- the harness ---------------------------------------------------------------------------------------
SMALL = dict(mc_orders=4, num_rollouts=20)


def test_benchmark_tables_are_reproducible():
    first = scm.single_culprit_benchmark(5, CHAIN, F, **SMALL)
    again = scm.single_culprit_benchmark(5, CHAIN, F, **SMALL)
    other = scm.single_culprit_benchmark(6, CHAIN, F, **SMALL)
    multi = scm.multi_culprit_benchmark(5, CHAIN, F, **SMALL)
    multi_again = scm.multi_culprit_benchmark(5, CHAIN, F, **SMALL)
    table = scm.results_markdown([first], [multi], timings=False)
    assert table == scm.results_markdown([again], [multi_again], timings=False)
    assert table != scm.results_markdown([other], [multi], timings=False)
    strip = lambda r: json.dumps({k: v for k, v in r.items() if k != "timing"}, sort_keys=True)  # noqa: E731
    assert strip(first) == strip(again) and strip(multi) == strip(multi_again)
    assert "ms" in scm.results_markdown([first], [multi], timings=True)
    assert first["check"]["earliest_repair_is_label"] == 1.0
    assert multi["check"]["exact_max_abs_error"] <= 1e-6
    rows = {row["method"]: row for row in first["methods"]}
    assert set(rows) == set(scm.METHODS)
    assert rows["exact_shapley"]["evaluations"] == 32 and rows["fix_alone"]["evaluations"] == 6
    for row in first["methods"]:
        for metric in ("step@0", "step@1", "agent"):
            p = row[metric]
            assert 0 <= p["low"] <= p["rate"] <= p["high"] <= 1 and p["total"] == F
        assert row["step@0"]["hits"] <= row["step@1"]["hits"] <= row["step@2"]["hits"]


# -- bad input ------------------------------------------------------------------------------------------
def test_bad_generator_parameters():
    with pytest.raises(ValueError, match="`num_options` must be at least 2, got 1"):
        scm.make_scm(0, 4, 1)
    with pytest.raises(ValueError, match="`num_steps` must be at least 1, got 0"):
        scm.make_scm(0, 0, 4)
    with pytest.raises(TypeError, match="`num_steps` must be an int"):
        scm.make_scm(0, 2.5, 4)
    with pytest.raises(ValueError, match=r"`noise` must lie in \[0, 0.75\), got 0.8"):
        scm.make_scm(0, 4, 4, noise=0.8)
    with pytest.raises(ValueError, match="`topology` must be one of"):
        scm.make_scm(0, 4, 4, topology="tree")
    with pytest.raises(ValueError, match=r"`leak` must lie in \[0, 1\)"):
        scm.make_scm(0, 4, 4, leak=1.0)


def test_bad_culprit_indices():
    with pytest.raises(
        ValueError, match="`steps` holds step index 5, beyond this pipeline's 5 steps"
    ):
        scm.inject_errors(0, CHAIN, 10, steps=[1, 5])
    with pytest.raises(
        ValueError, match="`culprits` holds step index 7, beyond this pipeline's 5 steps"
    ):
        scm.multi_culprit_cases(0, CHAIN, 10, culprits=(0, 7))
    with pytest.raises(ValueError, match="`num_culprits` = 6 is more than the pipeline's 5 steps"):
        scm.multi_culprit_cases(0, CHAIN, 10, num_culprits=6)
    with pytest.raises(ValueError, match="`kind` must be one of"):
        scm.multi_culprit_cases(0, CHAIN, 10, kind="both")
    with pytest.raises(ValueError, match="`num_failures` must be at least 1, got 0"):
        scm.inject_errors(0, CHAIN, 0)


def test_zero_successful_runs():
    # Success needs five lucky steps (p = 0.34 ** 5 = 0.005 per run); none in 16 runs.
    hopeless = scm.make_scm(0, 5, 3, noise=0.66, recovery=0.0)
    with pytest.raises(ValueError, match="zero successful runs to inject an error into"):
        scm.inject_errors(0, hopeless, 10, max_candidates=16)
    with pytest.raises(ValueError, match=r"only \d+ of the 10000 failures requested were kept"):
        scm.inject_errors(0, CHAIN, 10_000, max_candidates=1024)
