"""The stochastic-RAG demo: a test set where last-step blame misleads and Shapley does not.

The demo is stochastic; every seed here is fixed. Rankings are asserted with margins of
a few standard errors of the per-failure differences, computed from the data.
"""

import jax
import numpy as np
import pytest

import blamejax as bj
from blamejax.demos import _rag

SEED = 0
NUM_CASES = 200
NUM_WORLDS = 8
REWRITE, RETRIEVE, ANSWER, VERIFY = range(4)


def _paired_gap(a, b):
    """Mean of `a - b` over failures and its standard error."""
    diff = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    return diff.mean(), diff.std(ddof=1) / np.sqrt(diff.size)


@pytest.fixture(scope="module")
def rag():
    cases = bj.demos.rag_cases(NUM_CASES, seed=SEED)
    out = bj.replay(bj.demos.rag_pipeline, cases, bj.recorded_worlds(SEED, NUM_CASES))
    scores = np.asarray(out["score"][:, 0])
    failed = np.flatnonzero(scores < 1)
    cases_f = jax.tree_util.tree_map(lambda x: x[failed], cases)
    recorded = bj.exact_blame(bj.demos.rag_pipeline, cases_f, bj.recorded_worlds(SEED, failed))
    return dict(
        cases=cases,
        scores=scores,
        failed=failed,
        cases_f=cases_f,
        observed_f=np.asarray(out["choice"][failed, 0]),
        recorded=recorded,
    )


def test_cases_are_a_test_set():
    cases = bj.demos.rag_cases(NUM_CASES, seed=SEED)
    assert cases["rewrite"].shape == (NUM_CASES, 2, 3)
    assert cases["retrieve"].shape == (NUM_CASES, 2, 3, 3)
    assert cases["answer"].shape == (NUM_CASES, 2, 3, 3)
    assert cases["verify"].shape == (NUM_CASES, 2, 3, 2)
    for name, options in (
        ("rewrite", bj.demos.REWRITE_OPTIONS),
        ("retrieve", bj.demos.RETRIEVE_OPTIONS),
        ("answer", bj.demos.ANSWER_OPTIONS),
        ("verify", bj.demos.VERIFY_OPTIONS),
    ):
        table = np.asarray(cases[name], np.float64)
        assert table.shape[-1] == len(options)
        assert np.isfinite(table).all()
        # the questions differ: no two cases share a factual table
        flat = table[:, 0].reshape(NUM_CASES, -1)
        assert len(np.unique(flat.round(5), axis=0)) == NUM_CASES
        # the fix is the factual logits plus the same shift for every case, never a forced
        # outcome, and in every row the good option (0 for the first three steps) gains most
        shift = table[:, 1] - table[:, 0]
        np.testing.assert_allclose(
            shift, np.broadcast_to(_rag.FIX_SHIFTS[name], shift.shape), atol=1e-5
        )
        if name != "verify":
            assert (shift[..., 0] >= shift.max(axis=-1) - 1e-6).all()
    # the verifier's fix favours accept for a correct answer and reject for a wrong one
    verify_shift = _rag.FIX_SHIFTS["verify"]
    assert verify_shift[0, 0] > verify_shift[0, 1]
    assert (verify_shift[1:, 1] > verify_shift[1:, 0]).all()
    # same seed, same cases; another seed, other cases
    again = bj.demos.rag_cases(NUM_CASES, seed=SEED)
    other = bj.demos.rag_cases(NUM_CASES, seed=SEED + 1)
    np.testing.assert_array_equal(cases["answer"], again["answer"])
    assert not np.allclose(cases["answer"], other["answer"])


def test_rag_cases_errors():
    with pytest.raises(ValueError, match="`num_cases` must be a positive int, got 0"):
        bj.demos.rag_cases(0)
    with pytest.raises(ValueError, match="`seed` must be an int, got 1.5"):
        bj.demos.rag_cases(10, seed=1.5)


def test_about_three_quarters_fail(rag):
    scores = rag["scores"]
    assert set(np.unique(scores)) <= {0.0, 1.0}
    assert 0.65 <= np.mean(scores < 1) <= 0.85


def test_recorded_blame_beats_last_step(rag):
    result = rag["recorded"]
    num = result.num_failures
    assert result.steps == _rag.STEPS
    np.testing.assert_allclose(result.empty, 0.0)  # replaying a failure fails again
    shapley = np.asarray(result.shapley)
    # efficiency: the shares add up to the repair of the fully fixed run
    np.testing.assert_allclose(shapley.sum(1), np.asarray(result.total), atol=1e-5)
    # Shapley puts retrieve and rewrite above answer and verify, each gap > 2 standard errors
    # (over seeds 0..7 the smallest gap, rewrite over answer, is 2.6 to 4.6 standard errors)
    for upstream in (REWRITE, RETRIEVE):
        for downstream in (ANSWER, VERIFY):
            gap, se = _paired_gap(shapley[:, upstream], shapley[:, downstream])
            assert gap > 2 * se, (upstream, downstream, gap, se)
    # the naive rule names the verifier for most failures ...
    last = np.asarray(result.last_step[:, 0])
    assert np.mean(last == VERIFY) > 0.8
    # ... although fixing the verifier alone saves fewer runs than fixing either upstream step
    fix_alone = np.asarray(result.fix_alone)
    for upstream in (REWRITE, RETRIEVE):
        gap, se = _paired_gap(fix_alone[:, upstream], fix_alone[:, VERIFY])
        assert gap > 3 * se, (upstream, gap, se)
    assert num > 100 and fix_alone[:, VERIFY].mean() < 0.25 * np.mean(last == VERIFY)


def test_inferred_noise_gives_the_recorded_ranking(rag):
    recorded = np.asarray(rag["recorded"].shapley)
    worlds = bj.inferred_worlds(
        bj.demos.rag_pipeline, rag["cases_f"], rag["observed_f"], SEED, NUM_WORLDS
    )
    inferred = np.asarray(bj.exact_blame(bj.demos.rag_pipeline, rag["cases_f"], worlds).shapley)
    # the recorded noise is one draw from the posterior the inferred worlds sample, so the
    # mean over failures agrees within the noise of the per-failure differences
    for step in range(4):
        gap, se = _paired_gap(inferred[:, step], recorded[:, step])
        assert abs(gap) < 4 * se, (step, gap, se)
    for upstream in (REWRITE, RETRIEVE):
        for downstream in (ANSWER, VERIFY):
            gap, se = _paired_gap(inferred[:, upstream], inferred[:, downstream])
            assert gap > 2 * se, (upstream, downstream, gap, se)


def test_fresh_noise_gives_smaller_values(rag):
    recorded = rag["recorded"]
    worlds = bj.fresh_worlds(SEED, rag["failed"], NUM_WORLDS)
    fresh = bj.exact_blame(bj.demos.rag_pipeline, rag["cases_f"], worlds)
    # new luck often succeeds without any fix, so v(empty) > 0 and less is left to repair
    assert np.asarray(fresh.empty).mean() > 0.1
    gap, se = _paired_gap(recorded.total, fresh.total)
    assert gap > 3 * se, (gap, se)
    # every step's mean share is smaller too (a direction, not a separation, per step)
    assert (np.asarray(fresh.shapley).mean(0) < np.asarray(recorded.shapley).mean(0)).all()
