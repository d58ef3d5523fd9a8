"""Confidence radii, the checkpoint schedule, the stopping rules, the binomial intervals and
the point of commitment, on hand-computed inputs and published values.

The radii are conservative, so a wrong constant or a wrong range R would not show up as
missed coverage; these tests pin each formula to numbers worked out by hand.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blamejax as bj


def test_hoeffding_by_hand():
    # R sqrt(ln(2/delta) / (2t)): ln 20 = 2.9957323, / 200 = 0.01497866, sqrt = 0.12238734
    assert bj.stats.hoeffding_radius(100, 2.0, 0.1) == pytest.approx(2 * 0.12238734, rel=1e-7)
    # R = 1, t = 8, delta = 0.5: sqrt(ln 4 / 16) = sqrt(0.08664340) = 0.29435252
    assert bj.stats.hoeffding_radius(8, 1.0, 0.5) == pytest.approx(0.29435252, rel=1e-7)


def test_bernstein_by_hand():
    # t = 101, V = 0.25, R = 2, delta = 0.1; ln(4/0.1) = ln 40 = 3.6888795
    # sqrt(2 * 0.25 * 3.6888795 / 101) = sqrt(0.01826178) = 0.13513615
    # 7 * 2 * 3.6888795 / (3 * 100) = 0.17214771
    assert bj.stats.bernstein_radius(101, 0.25, 2.0, 0.1) == pytest.approx(
        0.13513615 + 0.17214771, rel=1e-7
    )
    # The range enters only the second term, linearly: R = 1 takes half of 0.17214771 off.
    diff = bj.stats.bernstein_radius(101, 0.25, 2.0, 0.1) - bj.stats.bernstein_radius(
        101, 0.25, 1.0, 0.1
    )
    assert diff == pytest.approx(0.17214771 / 2, rel=1e-7)
    # Zero variance leaves only the range term: t = 2, R = 1, delta = 0.4: 7 ln 10 / 3 = 5.3726985
    assert bj.stats.bernstein_radius(2, 0.0, 1.0, 0.4) == pytest.approx(5.3726985, rel=1e-7)


def test_normal_by_hand():
    # z_(0.975) = 1.95996398, sqrt(0.25 / 100) = 0.05
    assert bj.stats.normal_radius(100, 0.25, 0.05) == pytest.approx(1.95996398 * 0.05, rel=1e-7)
    # z_(0.95) = 1.64485363, sqrt(4 / 16) = 0.5
    assert bj.stats.normal_radius(16, 4.0, 0.1) == pytest.approx(1.64485363 * 0.5, rel=1e-7)
    # a tiny delta (as at a late checkpoint) must not round 1 - delta/2 to 1 in float32
    r = bj.stats.normal_radius(jnp.asarray(100), jnp.asarray(1.0), 1e-9)
    assert np.isfinite(float(r)) and float(r) == pytest.approx(0.6109410, rel=1e-5)  # z = 6.109410


@pytest.mark.parametrize("name", ["hoeffding", "bernstein", "normal"])
def test_numpy_and_jax_agree(name):
    t = np.array([2, 10, 1000])
    var = np.array([0.0, 0.3, 1.7])
    delta = np.array([0.1, 1e-3, 1e-6])
    fns = dict(
        hoeffding=lambda t, v, d: bj.stats.hoeffding_radius(t, 2.0, d),
        bernstein=lambda t, v, d: bj.stats.bernstein_radius(t, v, 2.0, d),
        normal=lambda t, v, d: bj.stats.normal_radius(t, v, d),
    )
    fn = fns[name]
    host = fn(t, var, delta)
    device = jax.jit(fn)(
        jnp.asarray(t),
        jnp.asarray(var, jnp.result_type(float)),
        jnp.asarray(delta, jnp.result_type(float)),
    )
    np.testing.assert_allclose(np.asarray(device), host, rtol=1e-5)


def test_radius_errors():
    with pytest.raises(ValueError, match="`t` .* at least 2"):
        bj.stats.bernstein_radius(1, 0.1, 1.0, 0.1)
    with pytest.raises(ValueError, match="`delta` must be an error level in \\(0, 1\\)"):
        bj.stats.hoeffding_radius(10, 1.0, 1.5)


def looks(first, growth, budget):
    return bj.stats.looks(bj.stats.Schedule(first=first, growth=growth), budget)


def test_looks_by_hand():
    assert looks(2, 2.0, 20) == (2, 4, 8, 16, 20)
    assert looks(2, 2.0, 16) == (2, 4, 8, 16)
    assert looks(5, 3.0, 5) == (5,)
    # 10 * 1.1^k: 10, 11, 12.1, 13.31, 14.64, 16.11 -> 10, 11, 13, 14, 15, 17 (11, not 12)
    assert looks(10, 1.1, 100)[:6] == (10, 11, 13, 14, 15, 17)
    # growth close to 1: repeated values are dropped, the schedule stays strictly increasing
    schedule = looks(2, 1.05, 40)
    assert schedule[:3] == (2, 3, 4) and all(b > a for a, b in zip(schedule, schedule[1:]))
    assert schedule[-1] == 40


def test_schedule_and_interval_check_their_fields_once():
    with pytest.raises(ValueError, match=r"`first` must be an int >= 2 \(the first look"):
        bj.stats.Schedule(first=1, growth=2.0)
    with pytest.raises(ValueError, match=r"`first` must be an int >= 2"):
        bj.stats.Schedule(first=True, growth=2.0)
    with pytest.raises(ValueError, match=r"`growth` must be a finite number >= 1 \+ 1e-4"):
        bj.stats.Schedule(first=2, growth=1.0)
    with pytest.raises(ValueError, match=r"`growth` must be a finite number"):
        bj.stats.Schedule(first=2, growth=float("inf"))
    with pytest.raises(ValueError, match=r"`budget` must be an int >= 4 \(at least the sched"):
        looks(4, 2.0, 3)
    with pytest.raises(TypeError, match="`schedule` must be a blamejax.stats.Schedule"):
        bj.stats.looks((2, 2.0), 20)
    with pytest.raises(ValueError, match="`kind` must be one of"):
        bj.stats.Interval("chernoff")
    with pytest.raises(ValueError, match=r"`delta` must be an error level in \(0, 1\), got 1.5"):
        bj.stats.Interval(delta=1.5)
    with pytest.raises(TypeError, match="`delta` must be an error level"):
        bj.stats.Interval(delta="0.1")
    # one definition of a valid delta: NumPy numbers are numbers
    assert bj.stats.Interval(delta=np.float32(0.25)).delta == 0.25
    assert bj.stats.Interval() == bj.stats.Interval("bernstein", delta=0.1)


def test_checkpoint_names_are_deprecated_for_looks():
    """The deprecation period: the old names warn with the new one and give the same."""
    with pytest.warns(DeprecationWarning, match=r"use `blamejax.stats.looks\(Schedule"):
        assert bj.stats.checkpoints(2, 2.0, 20) == looks(2, 2.0, 20)
    with pytest.warns(DeprecationWarning, match="use `blamejax.stats.look_delta`"):
        assert bj.stats.checkpoint_delta(0.1, 4, 3) == bj.stats.look_delta(0.1, 4, 3)
    values = np.random.default_rng(3).normal(size=(12, 3))
    with pytest.warns(DeprecationWarning, match="use `blamejax.stats.look_interval`"):
        old = bj.stats.checkpoint_interval(values, 2, "bernstein", 0.1, 2.0)
    new = bj.stats.look_interval(values, 2, "bernstein", 0.1, 2.0)
    for a, b in zip(old, new):
        np.testing.assert_array_equal(a, b)


def test_checkpoint_delta_sums_to_at_most_delta():
    assert bj.stats.look_delta(0.1, 4, 1) == pytest.approx(0.0125)
    assert bj.stats.look_delta(0.1, 8, 3) == pytest.approx(0.1 / 96)
    n = 7
    ks = np.arange(1, 100_001)
    total = n * bj.stats.look_delta(0.1, n, ks).sum()
    assert total <= 0.1 and total == pytest.approx(0.1 * (1 - 1 / 100_001))
    with pytest.raises(ValueError, match="1-based"):
        bj.stats.look_delta(0.1, 4, 0)


def test_top1_rule():
    values = np.array([[0.6, 0.2, 0.1], [0.6, 0.55, 0.1], [0.5, 0.5, 0.0]])
    lower = values - 0.1
    upper = values + 0.1
    # row 0: 0.5 > 0.3 and 0.5 > 0.2: separated; row 1: 0.5 < 0.65: not; row 2: tie: not
    np.testing.assert_array_equal(
        bj.stats.top1_separated(values, lower, upper), [True, False, False]
    )
    # a margin resolves the tie in row 2: 0.4 > 0.6 - 0.21 holds, 0.4 > 0.6 - 0.19 does not
    np.testing.assert_array_equal(
        bj.stats.top1_separated(values, lower, upper, 0.21), [True, True, True]
    )
    np.testing.assert_array_equal(
        bj.stats.top1_separated(values, lower, upper, 0.19), [True, True, False]
    )
    assert bool(
        jax.jit(bj.stats.top1_separated)(
            jnp.asarray(values[0]), jnp.asarray(lower[0]), jnp.asarray(upper[0])
        )
    )


def test_ranking_and_width_rules():
    values = np.array([[0.9, 0.5, 0.1], [0.9, 0.5, 0.45]])
    lower = values - 0.1
    upper = values + 0.1
    np.testing.assert_array_equal(bj.stats.ranking_separated(values, lower, upper), [True, False])
    np.testing.assert_array_equal(
        bj.stats.ranking_separated(values, lower, upper, 0.16), [True, True]
    )
    np.testing.assert_array_equal(bj.stats.widths_below(lower, upper, 0.201), [True, True])
    np.testing.assert_array_equal(bj.stats.widths_below(lower, upper, 0.199), [False, False])


def test_union_bound_total():
    """The per-interval deltas of the checkpoints actually used sum to at most delta."""
    schedule = looks(16, 1.25, 10_000)
    n = 8
    total = sum(n * bj.stats.look_delta(0.1, n, k) for k in range(1, len(schedule) + 1))
    assert total < 0.1
    assert math.isclose(total, 0.1 * len(schedule) / (len(schedule) + 1))


# -- binomial intervals and the point of commitment ----------------------------------
def test_wilson_published_values():
    # Newcombe (1998), single proportion, 81/263: Wilson score interval 0.2553 to 0.3662.
    low, high = bj.stats.wilson_interval(81, 263, 0.05)
    np.testing.assert_allclose([low, high], [0.2553, 0.3662], atol=5e-5)
    # The ends are exact: x = 0 gives low = 0, x = n gives high = 1.
    low, high = bj.stats.wilson_interval(np.array([0, 10, 9]), 10, 0.05)
    assert low[0] == 0.0 and high[1] == 1.0 and high[2] < 1.0 and low[1] > 0.0


def test_newcombe_published_values():
    # Newcombe (1998), method 10, 56/70 - 48/80: 0.0524 to 0.3339.
    low, high = bj.stats.newcombe_interval(56, 70, 48, 80, 0.05)
    np.testing.assert_allclose([low, high], [0.0524, 0.3339], atol=5e-5)


def test_point_of_commitment_rule():
    low = np.array([[0.1, 0.2, -0.1], [-0.1, -0.2, -0.3], [-0.5, 0.0, -0.1]])
    high = np.array([[0.3, 0.4, 0.1], [0.1, 0.2, 0.3], [-0.1, 0.2, 0.1]])
    np.testing.assert_array_equal(bj.stats.point_of_commitment(low, high), [1, -1, 0])


@pytest.mark.parametrize("rule", ["bernstein", "normal"])
def test_checkpoints_decided_at_once_equal_one_at_a_time(rule):
    """`top_separated_at` (running sums, every checkpoint at once) makes the decision of
    `look_interval` on `values[:t]` at every checkpoint (t >= 2; t = 1 never separates)."""
    rng = np.random.default_rng(7)
    decisions = []
    for trial in range(20):
        n = int(rng.integers(1, 5))
        values = rng.normal(rng.normal(size=n) * 0.3, 0.2, size=(80, n)).clip(-1, 1)
        marks = (1,) + looks(2 + trial % 3, 1.3, 80)  # t = 1: a batch of one failure
        ks = np.arange(1, len(marks) + 1)
        at_once = bj.stats._across_failures.top_separated_at(values, marks, ks, rule, 0.1, 2.0)
        one_by_one = [
            t >= 2 and bj.stats.look_interval(values[:t], k, rule, 0.1, 2.0)[3]
            for k, t in zip(ks, marks)
        ]
        np.testing.assert_array_equal(at_once, one_by_one)
        decisions += one_by_one
    assert 0 < sum(decisions) < len(decisions)  # both outcomes occur: the comparison is not vacuous


def test_stopping_rule_coverage():
    """δ = 0.1, 1000 seeded streams with known means; a miss = any step's interval at any
    checkpoint up to stopping excludes the true mean. Fails iff misses > 137 (the 1 - 1e-4
    quantile of Binomial(1000, 0.1)). The uncorrected normal rule (level δ at every look, no
    union bound) must fail the same test: the negative control."""
    rng = np.random.default_rng(2024)
    n, budget = 3, 60
    # Skewed per-failure values in [-1, 1]: step 0 is large and rare, others small.
    probs = np.array([0.04, 0.3, 0.5])
    heights = np.array([1.0, 0.2, 0.1])
    truth = probs * heights
    marks = looks(2, 1.5, budget)

    def misses(rule, corrected):
        count = 0
        for _ in range(1000):
            values = (rng.random((budget, n)) < probs) * heights
            missed = False
            for k, t in enumerate(marks, start=1):
                if corrected:
                    mean, lo, hi, sep = bj.stats.look_interval(values[:t], k, rule, 0.1, 2.0)
                else:
                    mean = values[:t].mean(0)
                    r = bj.stats.normal_radius(t, values[:t].var(0, ddof=1), 0.1)
                    lo, hi = mean - r, mean + r
                    sep = bj.stats._across_failures._top_separated(mean, lo, hi, 2.0)
                if np.any((truth < lo) | (truth > hi)):
                    missed = True
                    break
                if sep:
                    break
            count += missed
        return count

    assert misses("bernstein", corrected=True) <= 137
    assert misses(None, corrected=False) > 137
