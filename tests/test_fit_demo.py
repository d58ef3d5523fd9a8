"""The fitted-fix demo: the fit beats the hand-written fix on held-out failures in hard mode,
the constraints hold, the paired interval covers, and relaxed blame approaches exact blame
on the demos as tau falls."""

import jax.numpy as jnp
import numpy as np
import pytest

from blamejax._cli import DEFAULT_CASES, DEMOS, main
from blamejax.demos._fit import (
    TAUS,
    fit_rag_fix,
    paired_difference_interval,
    project_shift,
    tau_gaps,
)
from blamejax.demos._rag import FIX_SHIFTS


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
    np.testing.assert_array_equal(np.asarray(fit.fitted_shift)[2], 0.0)  # the hand-written row is zero


def test_project_shift():
    hand = jnp.array([[3.0, 4.0], [0.0, 0.0]])  # row norms 5 and 0, total 5
    shift = jnp.array([[6.0, 8.0], [1.0, 0.0]])
    np.testing.assert_allclose(project_shift(shift, hand, "rows"), [[3.0, 4.0], [0.0, 0.0]], rtol=1e-6)
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
