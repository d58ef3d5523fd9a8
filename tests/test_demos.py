"""The built-in demos and the command line.

- The refund-policy demo: exact values known by hand.
- The stochastic-RAG demo: a test set where last-step blame misleads and Shapley does not.
  The demo is stochastic; every seed here is fixed. Rankings are asserted with margins of
  a few standard errors of the per-failure differences, computed from the data.
- The fitted-fix demo: the fit beats the hand-written fix on held-out failures in hard mode,
  the constraints hold, the paired interval covers, and relaxed blame approaches exact
  blame on the demos as tau falls.
- The `demo` commands of `python -m blamejax` (refund, fit, car).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blamejax as bj
from blamejax._cli import DEFAULT_CASES, DEMOS, main
from blamejax.demos import _rag
from blamejax.demos._fit import (
    TAUS,
    fit_rag_fix,
    paired_difference_interval,
    project_shift,
    tau_gaps,
)
from blamejax.demos._rag import FIX_SHIFTS


# -- the refund demo ----------------------------------------------------------------------
def _failures(mechanism, num_cases=40, seed=0):
    cases = bj.demos.refund_cases(num_cases, mechanism)
    scores = bj.replay(bj.demos.refund_pipeline, cases, bj.recorded_worlds(seed, range(num_cases)))[
        "score"
    ]
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


# -- the stochastic-RAG demo ----------------------------------------------------------------
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
    out = bj.replay(bj.demos.rag_pipeline, cases, bj.recorded_worlds(SEED, range(NUM_CASES)))
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


# -- the fitted-fix demo --------------------------------------------------------------------
def test_fitted_retrieve_fix_beats_hand_written_on_held_out_failures():
    """Seeded and deterministic (200 cases, seed 0, 73 held-out failures): measured 23.3 % ->
    35.6 % repaired, paired 95% interval [+4.8, +20.0] points. The test asks only that the
    fit improves its own relaxed objective and that, in hard mode on failures the fit never
    saw, the fitted fix repairs more and the interval excludes zero."""
    fit = fit_rag_fix("retrieve", "ball", num_cases=200, seed=0, num_steps=100)
    assert float(fit.losses[-1]) < float(fit.losses[0])
    assert float(jnp.linalg.norm(fit.fitted_shift)) <= fit.radius * (1 + 1e-5)
    assert fit.radius == pytest.approx(float(np.linalg.norm(FIX_SHIFTS["retrieve"])), rel=1e-6)
    # training and held-out failures are disjoint and together all the failures
    assert not set(np.asarray(fit.train_ids).tolist()) & set(np.asarray(fit.test_ids).tolist())
    hand, fitted = float(jnp.mean(fit.test_hand)), float(jnp.mean(fit.test_fitted))
    assert fitted > hand, (hand, fitted)
    assert fit.difference == pytest.approx(fitted - hand, abs=1e-6)
    assert fit.low > 0, (fit.low, fit.high)


def test_row_constraint_keeps_every_row_within_the_hand_written_row():
    fit = fit_rag_fix("answer", "rows", num_cases=120, seed=1, num_steps=30)
    rows = np.linalg.norm(np.asarray(fit.fitted_shift), axis=-1)
    hand = np.linalg.norm(FIX_SHIFTS["answer"], axis=-1)
    assert np.all(rows <= hand * (1 + 1e-5) + 1e-6), (rows, hand)
    np.testing.assert_array_equal(
        np.asarray(fit.fitted_shift)[2], 0.0
    )  # the hand-written row is zero


def test_project_shift():
    hand = jnp.array([[3.0, 4.0], [0.0, 0.0]])  # row norms 5 and 0, total 5
    shift = jnp.array([[6.0, 8.0], [1.0, 0.0]])
    np.testing.assert_allclose(
        project_shift(shift, hand, "rows"), [[3.0, 4.0], [0.0, 0.0]], rtol=1e-6
    )
    ball = project_shift(shift, hand, "ball")
    np.testing.assert_allclose(float(jnp.linalg.norm(ball)), 5.0, rtol=1e-6)
    np.testing.assert_allclose(ball, shift * (5.0 / float(jnp.linalg.norm(shift))), rtol=1e-6)
    inside = jnp.array([[0.3, 0.4], [0.0, 0.0]])
    np.testing.assert_allclose(project_shift(inside, hand, "ball"), inside, rtol=1e-6)


def test_paired_interval_covers():
    """Probabilistic, seeded: 2000 simulated paired samples of 100 units with correlated
    outcomes (cells both/only-first/only-second/neither = 0.25, 0.12, 0.03, 0.60, true
    difference 0.09). A 95% interval should miss about 100 times; we fail above 130 (the
    binomial standard deviation of the misses is about 10)."""
    rng = np.random.default_rng(0)
    cells = np.array([0.25, 0.12, 0.03, 0.60])
    misses = 0
    for _ in range(2000):
        kind = rng.choice(4, size=100, p=cells)
        first = ((kind == 0) | (kind == 1)).astype(float)
        second = ((kind == 0) | (kind == 2)).astype(float)
        _, low, high = paired_difference_interval(first, second, 0.05)
        misses += not (low <= 0.09 <= high)
    assert misses <= 130, misses


def test_paired_interval_approaches_the_paired_normal_interval_for_large_samples():
    """For large N the score interval tends to the normal interval of the paired differences,
    which depends on the correlation: a wrong sign of the correlation term would not."""
    rng = np.random.default_rng(1)
    kind = rng.choice(4, size=20000, p=[0.25, 0.12, 0.03, 0.60])
    first = ((kind == 0) | (kind == 1)).astype(float)
    second = ((kind == 0) | (kind == 2)).astype(float)
    diff, low, high = paired_difference_interval(first, second, 0.05)
    d = first - second
    radius = 1.959964 * d.std(ddof=0) / np.sqrt(d.size)
    assert diff == pytest.approx(d.mean())
    assert low == pytest.approx(diff - radius, abs=5e-4)
    assert high == pytest.approx(diff + radius, abs=5e-4)


def test_paired_interval_bad_input():
    with pytest.raises(ValueError, match="same non-zero length"):
        paired_difference_interval([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="0/1 outcomes"):
        paired_difference_interval([1, 0.5], [1, 0])


@pytest.mark.parametrize("demo", ["refund", "rag"])
def test_relaxed_blame_converges_to_exact_on_the_demos(demo):
    """Failures of 200 cases, seed 0. The gap of the mean Shapley values falls with tau
    (monotone up to 1e-3) and is below 0.005 at tau = 0.01 (measured: refund 0.0006, rag
    0.0014). Single failures converge more slowly (near-ties in the perturbed logits), so
    for them we ask only that the gap at 0.01 is smaller than at 1."""
    gaps = tau_gaps(demo, TAUS, num_cases=200, seed=0)
    mean_gap, one_gap = gaps[:, 0], gaps[:, 1]
    assert np.all(np.diff(mean_gap) <= 1e-3), mean_gap
    assert mean_gap[-1] < 0.005 and mean_gap[0] > 0.05, mean_gap
    assert one_gap[-1] < one_gap[0], one_gap


def test_fit_is_a_command_line_demo():
    assert "fit" in DEMOS and DEFAULT_CASES["fit"] >= 200


@pytest.mark.slow
def test_fit_demo_runs(tmp_path, capsys):
    assert main(["demo", "fit", "--cases", "120", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "retrieve  ball" in out and "Largest |relaxed - exact|" in out
    assert (tmp_path / "summary.json").exists()


# -- the car demos' command ------------------------------------------------------------------
@pytest.mark.slow
def test_cli_demo_car(capsys):
    from blamejax._cli import main

    assert main(["demo", "car", "--cases", "3"]) == 0
    out = capsys.readouterr().out
    assert "point of commitment (held): decide in 3 of 3 failures" in out
    assert "0.455" in out and "recorded noise 1.000, abducted noise 1.000" in out


@pytest.mark.slow
def test_demo_agent8_command(capsys):
    """The `agent8` demo runs and prints every part the issue asks for (slow: it compiles
    exact blame, Monte Carlo and the coalition tables of two demos)."""
    from blamejax._cli import main

    assert main(["demo", "agent8", "--cases", "30"]) == 0
    out = capsys.readouterr().out
    for text in (
        "Exact Shapley values (all 256 coalitions)",
        "MC estimate",
        "stopped after",
        "Largest |MC - exact| over the steps",
        "Antithetic pairs",
        "agent8",
    ):
        assert text in out
