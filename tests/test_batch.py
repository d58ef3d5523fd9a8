"""Batch blame over a test set: agreement with a per-failure loop, noise modes, the
across-failure stopping rule's coverage, reports and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import chain_pipeline, random_chain_cases

import blamejax as bj


def _batch_cases(num_cases=24):
    cases = random_chain_cases(
        jax.random.key(11), 3, num_cases=num_cases, num_options=3, neg_inf=0.2
    )
    cases["score"] = (cases["score"] > 0.5).astype(jnp.float32)  # pass/fail scores
    return cases


def test_batch_equals_per_failure_loop():
    cases = _batch_cases()
    result = bj.blame_batch(
        chain_pipeline,
        cases,
        3,
        noise="fresh",
        num_worlds=2,
        schedule=bj.stats.Schedule(first=4, growth=1.5),
    )
    run = bj.replay(chain_pipeline, cases, bj.recorded_worlds(3, range(24)))
    factual = np.asarray(run["score"][:, 0])
    failing = set(np.flatnonzero(factual < 1).tolist())
    ids = np.asarray(result.failure_ids)
    assert set(ids.tolist()) == failing and len(ids) == len(failing) == result.num_failures
    assert 0 < len(ids) < 24  # some pass: passes are never analysed
    structure = bj.discover(chain_pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    shapley, total, resolve = [], [], []
    for f in ids:  # one failure at a time
        one = jax.tree_util.tree_map(lambda x: x[f : f + 1], cases)
        worlds = bj.fresh_worlds(3, np.array([f]), 2)
        exact = bj.exact_blame(chain_pipeline, one, worlds)
        shapley.append(np.asarray(exact.shapley[0]))
        total.append(float(exact.total[0]))
        hits = []
        for w in range(2):
            case = jax.tree_util.tree_map(lambda x: x[0], one)
            world = bj.World(key=worlds.key[0, w])
            v = bj.coalitions.coalition_values(
                chain_pipeline, structure, case, world, range(3), [1] * 3
            )
            hits.append([float(v[1 << i]) >= 1.0 for i in range(3)])
        resolve.append(np.mean(hits, axis=0))
    shapley, total, resolve = np.array(shapley), np.array(total), np.array(resolve)
    np.testing.assert_allclose(result.shapley, shapley, atol=1e-6)
    np.testing.assert_allclose(result.mean_shapley, shapley.mean(0), atol=1e-6)
    np.testing.assert_allclose(result.share_of_repair, shapley.sum(0) / total.sum(), atol=1e-6)
    np.testing.assert_allclose(result.resolve_rate, resolve.mean(0), atol=1e-6)
    assert abs(float(result.share_of_repair.sum()) - 1.0) < 1e-5
    # The drill-down: each analysed failure's failed run and fully fixed run, under its own noise.
    recorded = bj.recorded_worlds(3, range(24))
    fixed = bj.replay(
        chain_pipeline,
        cases,
        recorded,
        plan=bj.coalitions.mask_plan(structure, range(3), [1] * 3, np.ones(3, bool)),
    )
    np.testing.assert_array_equal(result.factual_choice, np.asarray(run["choice"][:, 0])[ids])
    np.testing.assert_array_equal(result.fixed_choice, np.asarray(fixed["choice"][:, 0])[ids])
    assert np.any(result.fixed_choice != result.factual_choice)  # the check is not vacuous
    # every case once, every failure's fully fixed run (the drill-down), then the structured
    # path's direct runs of every failure and world: v(empty), v(all) and each fix alone
    assert result.evaluations == 24 + len(ids) + len(ids) * 2 * (2 + 3)


def test_batch_monte_carlo_equals_per_failure_loop():
    """The fixed-budget Monte Carlo path: per failure, `mc_shapley_fixed` with the key of its
    place in the stream; fix-alone resolve from the same worlds; the evaluations counted."""
    cases = _batch_cases()
    num_orders = 8
    result = bj.blame_batch(
        chain_pipeline,
        cases,
        3,
        noise="fresh",
        num_worlds=2,
        estimator="mc",
        num_permutations=num_orders,
    )
    assert result.estimator.startswith("mc")
    ids = np.asarray(result.failure_ids)
    structure = bj.discover(chain_pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    block_key = jax.random.fold_in(jax.random.key(3), 0)  # the first (and only) block
    for i, f in enumerate(ids):
        case = jax.tree_util.tree_map(lambda x: x[f], cases)
        worlds = bj.World(key=bj.fresh_worlds(3, np.array([f]), 2).key[0])
        key = jax.random.fold_in(block_key, i)
        estimate = bj.estimators.mc_shapley_fixed(
            chain_pipeline, structure, case, worlds, key, num_orders, range(3), [1] * 3
        )
        np.testing.assert_allclose(result.shapley[i], estimate.values, atol=1e-6)
        v = [
            bj.coalitions.coalition_values(
                chain_pipeline, structure, case, bj.World(key=k), range(3), [1] * 3
            )
            for k in worlds.key
        ]
        hits = [[float(table[1 << j]) >= 1.0 for j in range(3)] for table in v]
        np.testing.assert_allclose(result.resolve[i], np.mean(hits, axis=0), atol=1e-6)
        np.testing.assert_allclose(result.total[i], np.mean([t[-1] - t[0] for t in v]), atol=1e-6)
    # every case once, every failure's fully fixed run, then per failure and world: the two
    # ends, n - 1 per order, the n fixes alone
    assert result.evaluations == 24 + len(ids) + len(ids) * 2 * (2 + num_orders * 2 + 3)


def test_visiting_order_is_seeded():
    cases = _batch_cases()
    a = bj.blame_batch(chain_pipeline, cases, 3)
    b = bj.blame_batch(chain_pipeline, cases, 3)
    np.testing.assert_array_equal(a.failure_ids, b.failure_ids)
    assert not np.all(np.diff(np.asarray(a.failure_ids)) > 0)  # not simply sorted


def test_inferred_worlds_reproduce_each_failure():
    cases = _batch_cases()
    result = bj.blame_batch(chain_pipeline, cases, 5, noise="inferred", num_worlds=3)
    # Before any fix, every posterior world replays the observed failure exactly.
    np.testing.assert_array_equal(result.empty, result.factual_score)
    assert "abducted" in result.question and result.noise == "inferred"


def test_stopping_early_uses_fewer_failures():
    cases = bj.demos.refund_cases(120)
    normal = bj.stats.Interval("normal")
    full = bj.blame_batch(bj.demos.refund_pipeline, cases, 0, interval=normal)
    early = bj.blame_batch(bj.demos.refund_pipeline, cases, 0, interval=normal, stop="top1")
    # planner and retriever tie at 5/12: the top step never separates, so no early stop
    assert not full.separated and early.num_analysed == full.num_analysed


def test_stopping_early_stops_at_the_first_separated_look():
    # On the 8-step agent the normal rule separates the top step after about 150 of 326
    # failures (the finite-sample rule needs more than this test set has).
    cases = bj.demos.agent8_cases(400)
    schedule = bj.stats.Schedule(first=4, growth=1.5)
    kwargs = dict(interval=bj.stats.Interval("normal"), schedule=schedule)
    full = bj.blame_batch(bj.demos.agent8_pipeline, cases, 0, **kwargs)
    early = bj.blame_batch(bj.demos.agent8_pipeline, cases, 0, stop="top1", **kwargs)
    stop = full.separated_at["normal"]
    assert full.separated and stop is not None and stop < full.num_analysed  # it does stop early
    # The early run analyses exactly the failures up to that checkpoint, in the same order,
    # with the same per-failure values, and looks at no checkpoint after it.
    assert early.separated and early.num_analysed == early.separated_at["normal"] == stop
    np.testing.assert_array_equal(early.failure_ids, full.failure_ids[:stop])
    np.testing.assert_allclose(early.shapley, full.shapley[:stop], atol=1e-6)
    other = early.separated_at["bernstein"]
    assert other is None or other <= stop
    k = bj.stats.looks(schedule, full.num_analysed).index(stop) + 1
    _, lo, hi, sep = bj.stats.look_interval(
        np.asarray(full.shapley[:stop], np.float64), k, "normal", 0.1, 2.0
    )
    assert sep
    np.testing.assert_allclose(early.lower, lo, atol=1e-6)
    np.testing.assert_allclose(early.upper, hi, atol=1e-6)


def test_all_passing_test_set():
    cases = dict(_batch_cases(), score=jnp.ones((24, 3)))  # every run scores 1: all pass
    result = bj.blame_batch(chain_pipeline, cases, 3)
    assert result.num_failures == 0 and result.num_analysed == 0
    assert "No failures: all 24 cases passed" in result.table()
    assert "No failures" in result.to_html()


def test_bad_input():
    cases = _batch_cases()
    with pytest.raises(
        ValueError,
        match=r"`noise` must be one of \['fresh', 'inferred', 'recorded'\], got 'replayed'",
    ):
        bj.blame_batch(chain_pipeline, cases, 0, noise="replayed")
    with pytest.raises(ValueError, match=r"`num_worlds` must be a positive int, got 0"):
        bj.blame_batch(chain_pipeline, cases, 0, noise="fresh", num_worlds=0)
    bad = dict(cases, score=cases["score"][:5])
    with pytest.raises(
        ValueError, match="every leaf of `cases` must share one leading failure axis"
    ):
        bj.blame_batch(chain_pipeline, bad, 0)
    with pytest.raises(ValueError, match=r"`threshold` must lie in \(0.0, 1.0\], got 2.0"):
        bj.blame_batch(chain_pipeline, cases, 0, threshold=2.0)


def _guess_pipeline(ctx, case):
    """guess -> check: the run passes exactly when `guess` picks option 0 (the check only
    decorates), so a case's outcome is decided by its guess alone."""
    guess = ctx.choose("guess", case["guess"])  # [V=2, K=2], near even odds
    ctx.choose("check", case["check"], given=guess)  # [V=2, K=2, K=2]
    return guess.take(jnp.array([1.0, 0.0]))


def test_observed_choices_decide_which_cases_failed():
    # A log's observed choices, not a replay under recorded noise, say which runs failed: the
    # failures are exactly the cases whose observed guess is option 1, every factual run
    # replays its log, and the drill-down's empty coalition shows the observed path.
    num = 24
    rng = np.random.default_rng(3)
    cases = dict(
        guess=jnp.asarray(rng.normal(scale=0.1, size=(num, 2, 2)), jnp.float32),
        check=jnp.asarray(rng.normal(size=(num, 2, 2, 2)), jnp.float32),
    )
    observed = np.stack([np.arange(num) % 3 == 0, rng.integers(0, 2, num)], axis=1).astype(np.int32)
    replay = bj.blame_batch(_guess_pipeline, cases, 0, noise="inferred", num_worlds=2)
    assert set(replay.failure_ids.tolist()) != set(np.flatnonzero(observed[:, 0]).tolist())
    result = bj.blame_batch(
        _guess_pipeline,
        cases,
        0,
        noise="inferred",
        num_worlds=2,
        observed=observed,
        keep_coalitions=True,
    )
    ids = np.asarray(result.failure_ids)
    assert sorted(ids.tolist()) == np.flatnonzero(observed[:, 0]).tolist()
    assert result.num_failures == int(observed[:, 0].sum())
    np.testing.assert_array_equal(result.factual_choice, observed[ids])
    np.testing.assert_array_equal(result.factual_score, 0.0)
    np.testing.assert_array_equal(result.empty, 0.0)  # every posterior world replays the failure
    np.testing.assert_array_equal(np.asarray(result.coalition_choices)[:, 0], observed[ids])


def test_old_keywords_warn_and_give_the_same_result():
    """The deprecation period: `interval="normal"` (a string), `delta=`, `first_checkpoint=`,
    `growth=` and `stop_early=` still work, each naming the new spelling in a
    `DeprecationWarning`, with the same result; old and new together are an error."""
    cases = bj.demos.refund_cases(60)
    new = bj.blame_batch(
        bj.demos.refund_pipeline,
        cases,
        0,
        interval=bj.stats.Interval("normal", delta=0.05),
        schedule=bj.stats.Schedule(first=4, growth=2.0),
        stop="top1",
    )
    with pytest.warns(DeprecationWarning) as record:
        old = bj.blame_batch(
            bj.demos.refund_pipeline,
            cases,
            0,
            interval="normal",
            delta=0.05,
            first_checkpoint=4,
            growth=2.0,
            stop_early=True,
        )
    assert [str(w.message) for w in record] == [
        "`interval=`, `delta=` of `blame_batch` is deprecated and will be removed; pass "
        "`interval=Interval(kind='normal', delta=0.05)`",
        "`first_checkpoint=`, `growth=` of `blame_batch` is deprecated and will be removed; "
        "pass `schedule=Schedule(first=4, growth=2.0)`",
        "`stop_early=` of `blame_batch` is deprecated and will be removed; pass `stop=('top1',)`",
    ]
    for name in ("failure_ids", "shapley", "mean_shapley", "lower", "upper"):
        np.testing.assert_array_equal(getattr(old, name), getattr(new, name), err_msg=name)
    assert (old.interval, old.delta, old.separated_at) == (
        new.interval,
        new.delta,
        new.separated_at,
    )
    with pytest.raises(TypeError, match="`stop_early` must be a bool"):  # before the warning
        bj.blame_batch(bj.demos.refund_pipeline, cases, 0, stop_early="yes")
    with pytest.raises(TypeError, match="got `schedule` and the old `growth` together"):
        bj.blame_batch(
            bj.demos.refund_pipeline, cases, 0, schedule=bj.stats.Schedule(4, 2.0), growth=2.0
        )
