"""Monte Carlo Shapley values: convergence to the exact values, interval coverage, budget
accounting, adaptive stopping, recompiles, and the differentiable fixed-budget path.

The Monte Carlo tests are probabilistic. Their seeds are fixed, so they are deterministic,
and each one states the error it allows (in standard errors, or as a binomial quantile).
"""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import chain_pipeline, dag_pipeline, random_chain_cases, random_dag_cases
from jax.experimental import io_callback

import blamejax as bj
import blamejax.estimators._advance as advance
import blamejax.estimators._mc as driver
import blamejax.estimators._permutation as permutation
import blamejax.estimators._prefixes as prefixes
from blamejax._compile import trace_count

NEG = -np.inf


# ------------------------------------------------------------------------------------
# Games as pipelines: n deterministic steps (factual = bad, fix = good) and a score read
# from the game's table, so any game with known exact values can be sampled.
# ------------------------------------------------------------------------------------


def make_game_pipeline(n, counter=None):
    def pipeline(ctx, case):
        index = jnp.zeros((), jnp.int32)
        for i in range(n):
            index = index + ctx.choose(f"p{i}", case["step"]).index * (1 << i)
        score = case["game"][index]
        if counter is not None:
            # An unordered io_callback, not jax.debug.callback: under vmap it becomes a rolled
            # loop of callbacks, where debug.callback is unrolled once per element of every
            # vmapped axis (thousands of callbacks, twice the compile time). Either way a
            # program with a host callback is compiled afresh, never loaded from the cache.
            io_callback(lambda x: counter.append(np.size(x)), None, score, ordered=False)
        return score

    return pipeline


GAME8 = make_game_pipeline(8)
GAME4 = make_game_pipeline(4)


def game_cases(tables):
    tables = np.asarray(tables, np.float32)
    num = tables.shape[0]
    step = np.array([[0.0, NEG], [NEG, 0.0]], np.float32)
    return dict(step=jnp.asarray(np.broadcast_to(step, (num, 2, 2))), game=jnp.asarray(tables))


def popcount(n):
    return np.array([bin(m).count("1") for m in range(1 << n)])


def unanimity(n, carrier):
    return ((np.arange(1 << n) & carrier) == carrier).astype(np.float32)


def majority(n, quota):
    return (popcount(n) >= quota).astype(np.float32)


def exact_shapley(tables):
    return np.asarray(
        jax.vmap(lambda v: bj.attribute(v, interactions=False).shapley)(jnp.asarray(tables))
    )


def replicate(cases, num):
    """`num` copies of one case (seeded runs of the same game)."""
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (num,) + x.shape), cases)


def same_world(world_key, num):
    return bj.World(key=jnp.broadcast_to(world_key, (num, 1)))


def agent8_failures(num_cases=60, seed=0):
    cases = bj.demos.agent8_cases(num_cases)
    scores = np.asarray(
        bj.replay(bj.demos.agent8_pipeline, cases, bj.recorded_worlds(seed, range(num_cases)))[
            "score"
        ][:, 0]
    )
    failed = np.flatnonzero(scores < 1)
    cases_f = jax.tree_util.tree_map(lambda x: x[failed], cases)
    return cases_f, bj.recorded_worlds(seed, failed)


def agent8_tables(cases, worlds):
    structure = bj.discover(bj.demos.agent8_pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    fn = jax.vmap(
        lambda c, k: bj.coalitions.coalition_values(
            bj.demos.agent8_pipeline, structure, c, bj.World(key=k[0]), tuple(range(8)), (1,) * 8
        )
    )
    return np.asarray(jax.jit(fn)(cases, worlds.key))


@pytest.fixture(scope="module")
def agent8():
    """The first 24 failures of the agent demo (seed 0), their recorded worlds, three fresh
    worlds each, and the exact Shapley values under both."""
    cases, worlds = agent8_failures(40)
    cases = jax.tree_util.tree_map(lambda x: x[:24], cases)
    worlds = bj.World(key=worlds.key[:24])
    fresh = bj.fresh_worlds(3, range(24), 3)
    return dict(
        cases=cases,
        worlds=worlds,
        fresh=fresh,
        exact=bj.exact_blame(bj.demos.agent8_pipeline, cases, worlds),
        exact_fresh=bj.exact_blame(bj.demos.agent8_pipeline, cases, fresh),
    )


def agent8_game():
    """The game of one agent failure whose exact values are all distinct and not all zero."""
    cases, worlds = agent8_failures(40)
    tables = agent8_tables(cases, worlds)
    phi = exact_shapley(tables)
    spread = np.array([len(np.unique(np.round(p, 6))) for p in phi])
    return tables[int(np.argmax(spread))]


# ------------------------------------------------------------------------------------
# Efficiency, consistency, antithetic sampling.
# ------------------------------------------------------------------------------------


def test_estimates_add_up(agent8):
    """Every estimate sums to v(all) - v(empty) within 1e-6 in float32: on fractional games
    (plain orders) and on the agent demo with three fresh worlds per failure (antithetic
    pairs), where v(empty) and v(all) also equal `exact_blame`'s."""
    rng = np.random.default_rng(0)
    tables = rng.uniform(size=(16, 256)).astype(np.float32)
    result = bj.mc_shapley(
        GAME8,
        game_cases(tables),
        bj.recorded_worlds(0, range(16)),
        key=1,
        max_evaluations=2 + 7 * 200,
        stop=(),
    )
    np.testing.assert_allclose(
        np.asarray(result.values).sum(1), tables[:, 255] - tables[:, 0], atol=1e-6
    )
    np.testing.assert_allclose(result.empty, tables[:, 0])
    np.testing.assert_allclose(result.full, tables[:, 255])
    np.testing.assert_array_equal(result.evaluations, 2 + 7 * 200)

    exact = agent8["exact_fresh"]
    budget = 6 + 3 * 7 * 2 * 60  # 3 worlds: 2 W + 60 pairs x 2 W (n - 1)
    result = bj.mc_shapley(
        bj.demos.agent8_pipeline,
        agent8["cases"],
        agent8["fresh"],
        key=2,
        max_evaluations=budget,
        stop=(),
        antithetic=True,
    )
    np.testing.assert_allclose(result.empty, exact.empty, atol=1e-6)
    np.testing.assert_allclose(result.full, exact.full, atol=1e-6)
    np.testing.assert_allclose(np.asarray(result.values).sum(1), exact.total, atol=1e-6)
    np.testing.assert_array_equal(result.evaluations, budget)
    np.testing.assert_array_equal(result.num_permutations, 120)


@pytest.mark.slow
@pytest.mark.parametrize("antithetic", [False, True])
def test_converges_to_exact_like_one_over_sqrt_t(antithetic):
    """128 seeded runs on the game of one agent-demo failure and 128 on a random fractional
    game: at every checkpoint t = 64 ... 2048 the mean error of each step is within 4
    standard errors of zero, and the mean squared error is within [0.6, 1.6] of its exact
    value sum_i Var_i / t (`sampling_variance`): the error shrinks like 1 / sqrt(t)."""
    runs = 128
    games = [agent8_game(), np.random.default_rng(1).uniform(size=256).astype(np.float32)]
    tables = np.repeat(np.stack(games), runs, axis=0)
    unit = 7 * (2 if antithetic else 1)
    result = bj.mc_shapley(
        GAME8,
        game_cases(tables),
        bj.recorded_worlds(0, range(2 * runs)),
        key=3,
        max_evaluations=2 + unit * 2048,
        stop="width",
        epsilon=1e-9,
        history=True,
        schedule=bj.stats.Schedule(first=64, growth=2.0),
        antithetic=antithetic,
    )
    hist = result.history
    np.testing.assert_array_equal(hist.t, [64, 128, 256, 512, 1024, 2048])
    for g, game in enumerate(games):
        exact = exact_shapley(game[None])[0]
        var = bj.reduction.sampling_variance(game)
        per_sample = var.antithetic if antithetic else var.plain
        assert per_sample.sum() > 0.05  # not a trivial game
        for k, t in enumerate(np.asarray(hist.t)):
            err = np.asarray(hist.values[g * runs : (g + 1) * runs, k]) - exact  # [runs, n]
            se = np.sqrt(per_sample / t / runs)
            assert np.all(np.abs(err.mean(0)) <= 4 * se + 1e-7), (g, t, err.mean(0), se)
            ratio = (err**2).sum(1).mean() / (per_sample.sum() / t)
            assert 0.6 < ratio < 1.6, (g, t, ratio)


def test_converges_on_the_demo_pipeline(agent8):
    """On the agent demo itself: with 1000 orders per failure every estimate is within 5
    standard errors (from its own sample variance) of the exact value, and 16 times as many
    orders shrink the total error about 4 times (between 2.5 and 6.5)."""
    exact = np.asarray(agent8["exact"].shapley)
    errors = {}
    for t in (62, 992):
        result = bj.mc_shapley(
            bj.demos.agent8_pipeline,
            agent8["cases"],
            agent8["worlds"],
            key=4,
            max_evaluations=2 + 7 * t,
            stop=(),
        )
        err = np.asarray(result.values) - exact
        errors[t] = np.sqrt((err**2).sum())
        se = np.sqrt(np.asarray(result.variance, np.float64) / t)
        assert np.all(np.abs(err) <= 5 * se + 1e-6)
    assert 2.5 < errors[62] / errors[992] < 6.5


def test_sampling_variance_matches_enumeration():
    """Exact variances from the table equal brute force over all 4! orders; on a majority
    game an order's and its reverse's marginals are equal (correlation 1), so antithetic
    pairs double the variance per evaluation."""
    rng = np.random.default_rng(2)
    v = rng.uniform(size=16)
    plain, pair = [], []
    for order in itertools.permutations(range(4)):

        def marginals(order):
            out, mask = np.zeros(4), 0
            for i in order:
                out[i] = v[mask | 1 << i] - v[mask]
                mask |= 1 << i
            return out

        m, r = marginals(order), marginals(order[::-1])
        plain.append(m)
        pair.append((m + r) / 2)
    got = bj.reduction.sampling_variance(v)
    np.testing.assert_allclose(got.plain, np.var(plain, axis=0), atol=1e-12)
    np.testing.assert_allclose(got.antithetic, np.var(pair, axis=0), atol=1e-12)
    maj = bj.reduction.sampling_variance(majority(3, 2))
    np.testing.assert_allclose(maj.correlation, 1.0)
    np.testing.assert_allclose(2 * maj.antithetic, 2 * maj.plain)
    una = bj.reduction.sampling_variance(unanimity(4, 15))
    assert np.all(una.correlation < 0)  # last in an order is never last in its reverse


# ------------------------------------------------------------------------------------
# Coverage.
# ------------------------------------------------------------------------------------


def coverage_games():
    """1000 seeded runs on games with known exact values: 250 unanimity (a step's marginal
    is non-zero in one order out of 8: skewed), 250 majority, 250 of 5 agent-demo failures,
    250 of 5 random fractional games."""
    n = 8
    cases, worlds = agent8_failures()
    agent = agent8_tables(cases, worlds)
    phi = exact_shapley(agent)
    agent = agent[np.argsort(-np.abs(phi).sum(1))[:5]]
    rng = np.random.default_rng(3)
    randoms = rng.uniform(size=(5, 256)).astype(np.float32)
    tables = np.concatenate(
        [
            np.tile(unanimity(n, 255), (250, 1)),
            np.tile(majority(n, 5), (250, 1)),
            np.repeat(agent, 50, axis=0),
            np.repeat(randoms, 50, axis=0),
        ]
    )
    return tables


def misses(history, exact, radius_fn=None):
    """Runs in which some step's interval, at some checkpoint up to stopping, excludes the
    exact value. `radius_fn(t, variance)` replaces the stored intervals when given."""
    values = np.asarray(history.values)
    lower, upper = np.asarray(history.lower), np.asarray(history.upper)
    if radius_fn is not None:
        t = np.asarray(history.t)[None, :, None]
        half = radius_fn(t, np.asarray(history.variance, np.float64))
        lower, upper = values - half, values + half
    reached = ~np.isnan(values)
    out = reached & ((exact[:, None, :] < lower - 1e-6) | (exact[:, None, :] > upper + 1e-6))
    return int(out.any(axis=(1, 2)).sum())


@pytest.mark.slow  # a statistical test of 1000 seeded runs
def test_coverage_of_anytime_intervals():
    """delta = 0.1, N = 1000 seeded runs on games with known exact values; a miss is any
    step's interval, at any checkpoint up to stopping, excluding the exact value. The test
    fails iff misses > 137, the 1 - 1e-4 quantile of Binomial(1000, 0.1), so a false failure
    has probability <= 1e-4. Negative control: a plain normal interval at level 0.1, checked
    at every checkpoint with no correction, fails the same test on the same runs."""
    tables = coverage_games()
    exact = exact_shapley(tables)
    num = tables.shape[0]
    result = bj.mc_shapley(
        GAME8,
        game_cases(tables),
        bj.recorded_worlds(0, range(num)),
        key=4,
        interval=bj.stats.Interval("bernstein", delta=0.1),
        max_evaluations=2 + 7 * 1000,
        stop="top1",
        schedule=bj.stats.Schedule(first=4, growth=1.5),
        history=True,
    )
    bernstein = misses(result.history, exact)
    uncorrected = misses(result.history, exact, lambda t, var: bj.stats.normal_radius(t, var, 0.1))
    corrected_normal = misses(
        result.history,
        exact,
        lambda t, var: bj.stats.normal_radius(
            t, var, bj.stats.look_delta(0.1, 8, np.arange(1, t.shape[1] + 1))[None, :, None]
        ),
    )
    print(
        f"\nmisses in 1000 runs: bernstein {bernstein}, normal with the checkpoint correction "
        f"{corrected_normal} (reported only), uncorrected normal {uncorrected}"
    )
    assert bernstein <= 137
    assert uncorrected > 137


# ------------------------------------------------------------------------------------
# Budget accounting and stopping.
# ------------------------------------------------------------------------------------


def test_scored_prefixes():
    """An order's n - 1 interior prefixes fill blocks of at most 8 (one block up to 8
    prefixes, padded to 8 only when that adds at most one prefix for every 7; otherwise
    ceil((n - 1) / 8) blocks as even as can be): the padding is at most one prefix for
    every 7 and less than one per block."""
    for n in range(2, 300):
        scored, interior = bj.estimators.scored_prefixes(n), n - 1
        num_blocks, block = prefixes.prefix_blocks(n)
        assert scored == num_blocks * block and block <= 8
        assert num_blocks == max(1, -(-interior // 8))
        assert 0 <= scored - interior < num_blocks or (num_blocks == 1 and scored == 8)
        assert 7 * (scored - interior) <= interior
    sizes = (4, 8, 12, 16, 20, 32, 256)
    assert [bj.estimators.scored_prefixes(n) for n in sizes] == [3, 8, 12, 16, 21, 32, 256]


_SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    "antithetic, n",
    # Antithetic pairs at n = 4 and 8 run with the slow tests (each compiles its own game);
    # the fast run keeps every n plain and the hardest antithetic case (n = 10, the ends
    # scored in the loop).
    [(False, 4), (False, 8), (False, 10), (True, 10)]
    + [pytest.param(True, 4, marks=_SLOW), pytest.param(True, 8, marks=_SLOW)],
)
def test_budget_accounting_is_exact(antithetic, n):
    """A counter inside the pipeline (a host callback per evaluation) sees exactly the
    evaluations reported: when every slot and lane is used (32 failures, 32 lanes, a fixed
    budget of 16 samples), the budget charged to each failure, plus at n = 8 the padding of
    each order's 7 interior prefixes to `scored_prefixes(8)` = 8 (at n = 4 there is none),
    and at n = 10 the padding of 9 prefixes to 2 blocks of 5 and the ends scored in the
    loop (one block of 5 in each of the 32 lanes, of which 2 per failure are charged);
    and `evaluations_computed` in total otherwise."""
    counter = []
    pipeline = make_game_pipeline(n, counter)
    rng = np.random.default_rng(5)
    tables = rng.uniform(size=(32, 1 << n)).astype(np.float32)
    pair = 2 if antithetic else 1
    result = bj.mc_shapley(
        pipeline,
        game_cases(tables),
        bj.recorded_worlds(0, range(32)),
        key=5,
        max_evaluations=2 + (n - 1) * pair * 16,
        stop=(),
        lanes=32,
        antithetic=antithetic,
    )
    jax.effects_barrier()
    np.testing.assert_array_equal(result.evaluations, 2 + (n - 1) * pair * 16)
    np.testing.assert_array_equal(result.num_permutations, 16 * pair)
    assert bj.estimators.scored_prefixes(n) == {4: 3, 8: 8, 10: 10}[n]
    padding = 32 * 16 * pair * (bj.estimators.scored_prefixes(n) - (n - 1))
    if n == 10:
        assert prefixes.prefix_blocks(n) == (2, 5) and prefixes.ends_in_loop(n)
        padding += 32 * pair * 5 - 32 * 2
    else:
        assert not prefixes.ends_in_loop(n)
    assert sum(counter) == result.evaluations_computed
    assert sum(counter) == int(np.asarray(result.evaluations).sum()) + padding
    if n != 4:
        return

    counter.clear()
    tables = np.stack(
        [unanimity(4, 1), unanimity(4, 15), rng.uniform(size=16), unanimity(4, 3)]
    ).astype(np.float32)
    result = bj.mc_shapley(
        pipeline,
        game_cases(tables),
        bj.recorded_worlds(0, range(4)),
        key=5,
        max_evaluations=2 + 3 * pair * 400,
        epsilon=0.05,
        lanes=32,
        antithetic=antithetic,
    )
    jax.effects_barrier()
    assert sum(counter) == result.evaluations_computed
    used = np.asarray(result.evaluations)
    np.testing.assert_array_equal(used, 2 + 3 * pair * np.asarray(result.num_samples))
    assert used.sum() <= result.evaluations_computed


def test_stopped_failure_spends_nothing_more():
    """A failure whose top step is clear (a dictator game) stops at the first checkpoint
    where the Bernstein intervals separate 1 from 0; a failure with four tied steps in the
    same batch runs to the budget; after the first stops, the work done is the survivor's
    (plus at most one iteration of idle lanes per checkpoint)."""
    tables = np.stack([unanimity(4, 1), unanimity(4, 15)])
    schedule, budget, lanes = bj.stats.Schedule(first=8, growth=1.25), 4000, 32
    result = bj.mc_shapley(
        GAME4,
        game_cases(tables),
        bj.recorded_worlds(0, range(2)),
        key=6,
        max_evaluations=2 + 3 * budget,
        schedule=schedule,
        lanes=lanes,
    )
    schedule = bj.stats.looks(schedule, budget)
    # Dictator: step 0's marginal is always 1, the others' always 0 (zero variance), so it
    # separates when the range term of the radius drops below 1/2 (R = 2).
    k_stop = next(
        k
        for k, t in enumerate(schedule, 1)
        if bj.stats.bernstein_radius(t, 0.0, 2.0, bj.stats.look_delta(0.1, 4, k)) < 0.5
    )
    t_stop = schedule[k_stop - 1]
    assert result.rule_fired == ["top1", "budget"]
    np.testing.assert_array_equal(result.converged, [True, False])
    np.testing.assert_array_equal(result.num_samples, [t_stop, budget])
    np.testing.assert_array_equal(result.evaluations, [2 + 3 * t_stop, 2 + 3 * budget])
    np.testing.assert_array_equal(result.look, [k_stop, len(schedule)])
    idle = result.evaluations_computed - int(np.asarray(result.evaluations).sum()) - 30 * 2
    assert 0 <= idle <= len(schedule) * lanes * 3  # (30 padding slots score their ends)
    assert result.evaluations_computed < 0.6 * 2 * (2 + 3 * budget)  # not both to the end


def test_no_recompile_across_checkpoints():
    """One compiled function serves every checkpoint, every number of active failures and
    every batch of up to 32 failures: it is traced once."""
    pipeline = make_game_pipeline(5)
    rng = np.random.default_rng(7)
    tables = np.concatenate(
        [
            np.stack([unanimity(5, 1 << (i % 5)) for i in range(8)]),
            rng.uniform(size=(6, 32)),
            np.tile(majority(5, 3), (2, 1)),
        ]
    ).astype(np.float32)
    schedule = bj.stats.Schedule(first=4, growth=1.5)
    kw = dict(max_evaluations=2 + 4 * 3000, schedule=schedule, epsilon=0.02)
    before = trace_count("mc.advance")
    result = bj.mc_shapley(
        pipeline, game_cases(tables), bj.recorded_worlds(0, range(16)), key=8, **kw
    )
    assert len(set(np.asarray(result.num_samples).tolist())) >= 3  # stopped at different times
    assert len(bj.stats.looks(schedule, 3000)) > 10
    again = bj.mc_shapley(
        pipeline, game_cases(tables[:11]), bj.recorded_worlds(1, range(11)), key=9, **kw
    )
    assert again.num_failures == 11
    assert trace_count("mc.advance") - before == 1


def test_width_rule_and_epsilon_rules(agent8):
    """On the agent demo: the width rule stops with every interval at most epsilon wide;
    with a margin epsilon, the top-1 and ranking rules pick, for every failure that
    converged, a top step within epsilon of the best and an order in which no step is
    ranked above a step better by more than epsilon (checked against exact values). The
    Bernstein intervals contain the exact values."""
    exact = np.asarray(agent8["exact"].shapley)
    args = (bj.demos.agent8_pipeline, agent8["cases"], agent8["worlds"])
    result = bj.mc_shapley(*args, key=10, max_evaluations=40_000, stop="width", epsilon=0.3)
    width = np.asarray(result.upper - result.lower)
    assert np.asarray(result.converged).all() and np.all(width <= 0.3)
    assert result.rule_fired == ["width"] * 24
    eps = 0.05
    for rule in ("top1", "ranking"):
        result = bj.mc_shapley(*args, key=11, max_evaluations=40_000, stop=rule, epsilon=eps)
        conv = np.asarray(result.converged)
        assert conv.sum() >= 12
        est, lower, upper = (np.asarray(x) for x in (result.values, result.lower, result.upper))
        assert np.all((lower <= exact + 1e-6) & (exact <= upper + 1e-6))
        chosen = est.argmax(1)
        assert np.all(exact[np.arange(24), chosen][conv] >= exact.max(1)[conv] - eps)
        if rule == "ranking":
            above = est[:, :, None] >= est[:, None, :]
            worse = exact[:, :, None] < exact[:, None, :] - eps
            assert not np.any((above & worse)[conv])


def test_intervals_use_the_declared_range():
    """The intervals are the estimates plus and minus the radius of the checkpoint where the
    failure stopped, with R = 2 (s_max - s_min) from the declared range (here (0, 2): R = 4),
    recomputed here from the formulas."""
    rng = np.random.default_rng(11)
    tables = rng.uniform(size=(3, 16)).astype(np.float32)
    for kind in ("bernstein", "hoeffding", "normal"):
        result = bj.mc_shapley(
            GAME4,
            game_cases(tables),
            bj.recorded_worlds(0, range(3)),
            key=12,
            lanes=32,
            score_range=(0.0, 2.0),
            interval=bj.stats.Interval(kind),
            max_evaluations=2 + 3 * 300,
            schedule=bj.stats.Schedule(first=8, growth=1.25),
        )
        t = np.asarray(result.num_samples)[:, None].astype(np.float64)
        var = np.asarray(result.variance, np.float64)
        d = 0.1 / (4 * np.asarray(result.look)[:, None] * (np.asarray(result.look)[:, None] + 1))
        want = dict(
            bernstein=np.sqrt(2 * var * np.log(4 / d) / t)
            + 7 * 4.0 * np.log(4 / d) / (3 * (t - 1)),
            hoeffding=4.0 * np.sqrt(np.log(2 / d) / (2 * t)) + 0 * var,
            normal=-scipy_ndtri(d / 2) * np.sqrt(var / t),
        )[kind]
        np.testing.assert_allclose(
            np.asarray(result.upper - result.values), want, rtol=2e-5, atol=2e-6
        )
        np.testing.assert_allclose(
            np.asarray(result.values - result.lower), want, rtol=2e-5, atol=2e-6
        )


def scipy_ndtri(p):
    from scipy.special import ndtri

    return ndtri(p)


# ------------------------------------------------------------------------------------
# Reproducibility and the fixed-budget path.
# ------------------------------------------------------------------------------------


def test_reproducible_and_independent_of_batching():
    """The same key gives the same result; other slot and lane counts give the same samples
    (the same estimates up to float summation order); another key gives other estimates."""
    rng = np.random.default_rng(13)
    tables = rng.uniform(size=(5, 16)).astype(np.float32)
    args = (GAME4, game_cases(tables), bj.recorded_worlds(0, range(5)))
    kw = dict(max_evaluations=2 + 3 * 500, epsilon=0.1)
    a = bj.mc_shapley(*args, key=14, lanes=32, **kw)
    b = bj.mc_shapley(*args, key=14, lanes=32, **kw)
    # 2 failure slots per call (3 calls per checkpoint) and the default 4096 lanes
    c = bj.mc_shapley(*args, key=jr.key(14), block_size=2, **kw)
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.num_samples, c.num_samples)
    np.testing.assert_allclose(a.values, c.values, atol=1e-6)
    d = bj.mc_shapley(*args, key=15, lanes=32, **kw)
    assert not np.allclose(a.values, d.values)


@pytest.mark.parametrize("antithetic", [False, True])
def test_fixed_path_matches_adaptive(agent8, antithetic):
    """Failure f of `mc_shapley` (key k) draws the orders of `mc_shapley_fixed` with key
    `fold_in(k, f)`: plain orders with the recorded world, antithetic pairs with three fresh
    worlds."""
    cases = agent8["cases"]
    worlds = agent8["fresh"] if antithetic else agent8["worlds"]
    structure = bj.discover(bj.demos.agent8_pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    f = 5
    case_f = jax.tree_util.tree_map(lambda x: x[f], cases)
    fixed = bj.estimators.mc_shapley_fixed(
        bj.demos.agent8_pipeline,
        structure,
        case_f,
        bj.World(key=worlds.key[f]),
        jr.fold_in(jr.key(17), f),
        24,
        tuple(range(8)),
        (1,) * 8,
        antithetic=antithetic,
    )
    num_worlds = worlds.key.shape[1]
    adaptive = bj.mc_shapley(
        bj.demos.agent8_pipeline,
        cases,
        worlds,
        key=17,
        stop=(),
        antithetic=antithetic,
        max_evaluations=2 * num_worlds + num_worlds * 7 * 24 * (2 if antithetic else 1),
    )
    np.testing.assert_allclose(adaptive.values[f], fixed.values, atol=1e-5)
    np.testing.assert_allclose(adaptive.variance[f], fixed.variance, atol=1e-5)
    np.testing.assert_allclose(np.asarray(fixed.values).sum(), adaptive.total[f], atol=1e-6)


def test_fixed_path_jit_equals_eager_and_differentiates():
    """`mc_shapley_fixed` (here on the refund demo, two fresh worlds, antithetic pairs) gives
    the same under `jit` as eagerly in relaxed mode, where its gradient with respect to the
    logits is finite and not zero. (Hard mode runs jitted throughout the other tests.)"""
    case = bj.demos.refund_tables("A")
    structure = bj.discover(bj.demos.refund_pipeline, case)
    worlds = bj.World(key=bj.fresh_worlds(19, range(1), 2).key[0])

    def planner_blame(planner_logits, mode):
        c = dict(case, planner=planner_logits)
        est = bj.estimators.mc_shapley_fixed(
            bj.demos.refund_pipeline,
            structure,
            c,
            worlds,
            jr.key(18),
            12,
            (0, 1, 2, 3),
            (1, 1, 1, 1),
            antithetic=True,
            mode=mode,
        )
        return est.values[0]

    mode = bj.Relaxed(0.5)
    eager = planner_blame(case["planner"], mode)
    jitted = eqx.filter_jit(planner_blame)(case["planner"], mode)
    np.testing.assert_allclose(jitted, eager, atol=1e-6)
    grad = eqx.filter_jit(jax.grad(planner_blame))(case["planner"], mode)
    assert np.all(np.isfinite(np.asarray(grad)))
    assert float(jnp.abs(grad).sum()) > 0


# ------------------------------------------------------------------------------------
# Pipelines with `given` (chain, a two-parent DAG) and free-form steps: Monte Carlo
# against exact_blame (brute force over every coalition), prefixes scored block by block.
# ------------------------------------------------------------------------------------


def free_form_pipeline(ctx, case):
    """Ten free-form steps: each step's logits `[3, K]` (3 variants, so not tabulated) are
    computed by JAX code from the previous choice, the last choice is scored."""
    choice = ctx.choose("f0", case["base"][0])
    for i in range(1, case["base"].shape[0]):
        hot = jax.nn.one_hot(choice.index, 4, dtype=case["base"].dtype)[None, :]
        logits = case["base"][i] + case["shift"][i] * hot  # [3, 4]
        choice = ctx.choose(f"f{i}", logits)
    return choice.take(case["score"])


def free_form_cases(key, num_steps, num_cases):
    keys = jr.split(key, 3)
    return dict(
        base=1.5 * jr.normal(keys[0], (num_cases, num_steps, 3, 4)),
        shift=2.0 * jr.normal(keys[1], (num_cases, num_steps, 1, 1)),
        score=jr.uniform(keys[2], (num_cases, 4)),
    )


def pipelines_with_exact():
    return {
        "chain": (chain_pipeline, random_chain_cases(jr.key(21), 10, 12)),
        "dag": (dag_pipeline, random_dag_cases(jr.key(22), 12)),
        "free-form": (free_form_pipeline, free_form_cases(jr.key(23), 10, 12)),
    }


@pytest.mark.parametrize("name", ["chain", "dag", "free-form"])
def test_matches_exact_on_given_and_free_form_pipelines(name):
    """On a 10-step chain written with `given`, a 4-step DAG with a two-parent step and a
    10-step free-form pipeline (12 failures, two fresh worlds each, 400 orders): every
    estimate is within 5 standard errors of `exact_blame`'s Shapley value (the exact
    sampling variance, from every coalition's value: a step that matters in few orders
    may show no variance in 400), every Bernstein interval contains it, the estimates add
    up to exact's v(all) - v(empty) within 1e-5, and v(empty), v(all) are exact's."""
    pipeline, cases = pipelines_with_exact()[name]
    worlds = bj.fresh_worlds(24, range(12), 2)
    exact = bj.exact_blame(pipeline, cases, worlds)
    n = len(exact.steps)
    t = 400
    result = bj.mc_shapley(
        pipeline, cases, worlds, key=25, max_evaluations=4 + 2 * (n - 1) * t, stop=()
    )
    np.testing.assert_array_equal(result.num_samples, t)
    structure = bj.discover(pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    table = jax.jit(
        jax.vmap(
            jax.vmap(
                lambda c, k: bj.coalitions.coalition_values(
                    pipeline, structure, c, bj.World(key=k), tuple(range(n)), (1,) * n
                ),
                in_axes=(None, 0),
            )
        )
    )(cases, worlds.key).mean(axis=1)  # [F, 2^n], mean over the worlds
    variance = np.stack([bj.reduction.sampling_variance(v).plain for v in np.asarray(table)])
    phi = np.asarray(exact.shapley)
    err = np.asarray(result.values) - phi
    se = np.sqrt(variance / t)
    assert np.all(np.abs(err) <= 5 * se + 1e-6), np.abs(err / (se + 1e-12)).max()
    assert np.all(
        (np.asarray(result.lower) <= phi + 1e-6) & (phi - 1e-6 <= np.asarray(result.upper))
    )
    np.testing.assert_allclose(result.empty, exact.empty, atol=1e-6)
    np.testing.assert_allclose(result.full, exact.full, atol=1e-6)
    np.testing.assert_allclose(np.asarray(result.values).sum(1), exact.total, atol=1e-5)
    assert np.abs(err).max() > 0  # sampled, not enumerated


@pytest.mark.parametrize("name", ["chain", pytest.param("dag", marks=pytest.mark.slow)])
def test_deferred_draws_give_the_same_estimates(name, monkeypatch):
    """Monte Carlo draws one by one below `DEFER_FROM` draw sites and defers its tabulated
    draws from there on (one scan over them, `Context`). On the 10-step chain and the DAG,
    with deferral forced, the estimates are bit for bit those of draws one by one, plain and
    antithetic, fixed budget and adaptive; and the scan is used only when forced."""
    from blamejax.pipeline import _context

    pipeline, cases = pipelines_with_exact()[name]
    worlds = bj.fresh_worlds(24, range(12), 2)
    assert len(bj.Game.make(pipeline, cases).structure.sites) < permutation.DEFER_FROM
    resolved = []
    resolve = _context._resolve_chain
    monkeypatch.setattr(
        _context, "_resolve_chain", lambda *a, **k: resolved.append(1) or resolve(*a, **k)
    )
    settings = [
        dict(stop=()),
        dict(stop=(), antithetic=True),
        dict(epsilon=0.05, schedule=bj.stats.Schedule(first=8, growth=1.25)),
    ]

    def run():
        bj.clear_caches()
        return [
            bj.mc_shapley(pipeline, cases, worlds, key=25, max_evaluations=2000, **kw)
            for kw in settings
        ]

    try:
        one_by_one = run()
        assert not resolved
        monkeypatch.setattr(permutation, "DEFER_FROM", 0)
        deferred = run()
        assert resolved
    finally:
        monkeypatch.undo()
        bj.clear_caches()
    for a, b in zip(one_by_one, deferred, strict=True):
        for field in (
            "values",
            "variance",
            "lower",
            "upper",
            "empty",
            "full",
            "num_samples",
            "evaluations",
        ):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert np.abs(np.asarray(deferred[0].values)).max() > 1e-3


@pytest.mark.parametrize("antithetic", [False, True])
def test_blocks_of_prefixes_equal_one_batch(monkeypatch, antithetic):
    """Scoring an order's prefixes block by block in a scan (a 20-step chain: 3 blocks of
    7) gives the marginals of scoring them all in one batch (the former design) on the
    same orders, and the same under `jit` as eagerly."""
    n = 20
    assert prefixes.prefix_blocks(n) == (3, 7)
    case = jax.tree_util.tree_map(lambda x: x[0], random_chain_cases(jr.key(26), n, 1))
    structure = bj.discover(chain_pipeline, case)
    worlds = bj.World(key=bj.fresh_worlds(27, range(1), 2).key[0])

    def estimate(case):
        return bj.estimators.mc_shapley_fixed(
            chain_pipeline,
            structure,
            case,
            worlds,
            jr.key(28),
            16,
            tuple(range(n)),
            (1,) * n,
            antithetic=antithetic,
        )

    blocks = estimate(case)
    jitted = jax.jit(estimate)(case)
    monkeypatch.setattr(prefixes, "prefix_blocks", lambda n: (1, n - 1))
    one_batch = estimate(case)
    for field in ("values", "variance", "low", "high"):
        np.testing.assert_allclose(getattr(blocks, field), getattr(one_batch, field), atol=1e-6)
        np.testing.assert_allclose(getattr(jitted, field), getattr(blocks, field), atol=1e-6)
    assert float(jnp.abs(blocks.values).max()) > 0


def test_ends_in_the_loop_trace_the_pipeline_once(monkeypatch):
    """With more than one block of prefixes per order (a 12-step chain: 2 blocks), the
    compiled call traces the pipeline once: the empty and the full coalition are scored by
    its loop, in a first iteration. Its answers are bit for bit those of scoring them in a
    separate batch (the former design, which traces the pipeline twice), plain and
    antithetic, adaptive and fixed budget; at n = 6 (one block) the separate batch stays."""
    calls = []

    def pipeline(ctx, case):
        calls.append(1)
        return chain_pipeline(ctx, case)

    def run(n, **kw):
        cases = random_chain_cases(jr.key(40 + n), n, 5)
        worlds = bj.fresh_worlds(41, range(5), 2)
        bj.Game.make(pipeline, cases)  # discovery (cached) before counting
        before = len(calls)
        result = bj.mc_shapley(
            pipeline, cases, worlds, key=42, max_evaluations=4 + 2 * (n - 1) * 300, lanes=64, **kw
        )
        return result, len(calls) - before

    settings = [
        dict(stop=()),
        dict(stop=(), antithetic=True),
        dict(epsilon=0.05, schedule=bj.stats.Schedule(first=8, growth=1.25)),
    ]
    bj.clear_caches()
    merged = [run(12, **kw) for kw in settings]
    assert prefixes.ends_in_loop(12) and not prefixes.ends_in_loop(6)
    # (the adaptive run reuses the first run's compiled call: no trace)
    assert [traces for _, traces in merged] == [1, 1, 0]
    assert run(6)[1] == 2
    # (the loop and the driver import it by name: replaced in both)
    monkeypatch.setattr(advance, "ends_in_loop", lambda n: False)
    monkeypatch.setattr(driver, "ends_in_loop", lambda n: False)
    bj.clear_caches()
    separate = [run(12, **kw) for kw in settings]
    assert [traces for _, traces in separate] == [2, 2, 0]
    for (a, _), (b, _) in zip(merged, separate):
        for field in ("values", "variance", "lower", "upper", "empty", "full", "num_samples"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
        np.testing.assert_array_equal(a.evaluations, b.evaluations)
    assert np.all(np.asarray(merged[2][0].look) > 1)  # later calls: the ends given
    bj.clear_caches()


# ------------------------------------------------------------------------------------
# Errors and the table.
# ------------------------------------------------------------------------------------


def test_errors_name_the_argument():
    cases = game_cases(np.random.default_rng(0).uniform(size=(2, 16)))
    worlds = bj.recorded_worlds(0, range(2))
    kw = dict(key=0, lanes=32)
    with pytest.raises(TypeError, match="max_evaluations"):
        bj.mc_shapley(GAME4, cases, worlds, **kw)
    with pytest.raises(
        ValueError,
        match="does not reach the first look: the schedule's first look = 16 samples cost 50",
    ):
        bj.mc_shapley(GAME4, cases, worlds, max_evaluations=40, **kw)
    # A fixed budget has one checkpoint, the budget: two samples (2 + 2 x 3 = 8) suffice.
    assert bj.mc_shapley(GAME4, cases, worlds, max_evaluations=8, stop=(), **kw).num_samples[0] == 2
    with pytest.raises(
        ValueError, match=r"2 \(a fixed budget needs a sample variance\) samples cost 8"
    ):
        bj.mc_shapley(GAME4, cases, worlds, max_evaluations=7, stop=(), **kw)
    with pytest.raises(ValueError, match="unknown rule 'top2'"):
        bj.mc_shapley(GAME4, cases, worlds, max_evaluations=1000, stop="top2", **kw)
    with pytest.raises(ValueError, match="'width' rule needs `epsilon` > 0"):
        bj.mc_shapley(GAME4, cases, worlds, max_evaluations=1000, stop="width", **kw)
    with pytest.raises(ValueError, match="`kind` must be one of"):
        bj.stats.Interval("chernoff")
    with pytest.raises(TypeError, match="`interval` must be a blamejax.stats.Interval"):
        bj.mc_shapley(GAME4, cases, worlds, max_evaluations=1000, interval="normal", **kw)
    with pytest.raises(TypeError, match="`schedule` must be a blamejax.stats.Schedule"):
        bj.mc_shapley(GAME4, cases, worlds, max_evaluations=1000, schedule=(4, 1.5), **kw)
    with pytest.raises(ValueError, match="at least 2 steps"):
        bj.mc_shapley(GAME4, cases, worlds, max_evaluations=1000, steps=["p0"], **kw)
    with pytest.raises(ValueError, match="outside the declared `score_range`"):
        bj.mc_shapley(GAME4, cases, worlds, max_evaluations=1000, score_range=(0.0, 0.5), **kw)


def test_table_mentions_rule_and_budget():
    result = bj.mc_shapley(
        GAME4,
        game_cases(unanimity(4, 1)[None]),
        bj.recorded_worlds(0, range(1)),
        key=0,
        max_evaluations=2000,
        lanes=32,
    )
    text = result.table(0)
    assert "p0" in text and "stopped by: top1" in text
    assert f"{int(result.evaluations[0])} evaluations" in text


def test_take_slots_equals_a_gather_per_leaf():
    """The lanes' cases come out of one gather per dtype, cut apart again: the same arrays as
    gathering every leaf, whatever its shape (a zero-size leaf and a key array included)."""
    from blamejax.estimators._advance import take_slots as _take_slots

    tree = dict(
        a=jnp.arange(12.0).reshape(3, 4),
        empty=jnp.zeros((3, 0)),
        ids=jnp.arange(3),
        d=jnp.ones((3, 2, 2)),
        keys=jax.random.split(jax.random.key(0), 3),
    )
    slot = jnp.array([2, 0, 1, 2])
    parts, rebuild = _take_slots(tree, slot)
    out = jax.jit(rebuild)(parts)
    assert len(parts) == 3  # float, int, key
    for name, leaf in tree.items():
        want = leaf[slot]
        if name == "keys":
            want, got = jax.random.key_data(want), jax.random.key_data(out[name])
        else:
            got = out[name]
        assert got.shape == want.shape and np.array_equal(got, want), name


def test_old_keywords_warn_and_give_the_same_result():
    """The deprecation period: `radius=`, `delta=`, `first_checkpoint=` and `growth=` still
    work, each naming the new spelling in a `DeprecationWarning`, with the same values; old
    and new together are an error; `MCResult.radius` (now `interval`) warns, and a dict
    exported before the rename reads back."""
    cases = game_cases(np.random.default_rng(5).uniform(size=(2, 16)))
    worlds = bj.recorded_worlds(0, range(2))
    kw = dict(key=3, max_evaluations=2 + 3 * 400, lanes=32, epsilon=0.05)
    new = bj.mc_shapley(
        GAME4,
        cases,
        worlds,
        interval=bj.stats.Interval("hoeffding", delta=0.2),
        schedule=bj.stats.Schedule(first=8, growth=1.5),
        **kw,
    )
    with pytest.warns(DeprecationWarning) as record:
        old = bj.mc_shapley(
            GAME4,
            cases,
            worlds,
            radius="hoeffding",
            delta=0.2,
            first_checkpoint=8,
            growth=1.5,
            **kw,
        )
    said = [str(w.message) for w in record]
    assert said == [
        "`radius=`, `delta=` of `mc_shapley` is deprecated and will be removed; pass "
        "`interval=Interval(kind='hoeffding', delta=0.2)`",
        "`first_checkpoint=`, `growth=` of `mc_shapley` is deprecated and will be removed; "
        "pass `schedule=Schedule(first=8, growth=1.5)`",
    ]
    for field in ("values", "lower", "upper", "num_samples", "evaluations", "look"):
        np.testing.assert_array_equal(getattr(old, field), getattr(new, field), err_msg=field)
    # one old keyword: the other fields keep mc_shapley's defaults (first look 16)
    with pytest.warns(
        DeprecationWarning, match=r"pass `schedule=Schedule\(first=16, growth=2.0\)`"
    ):
        bj.mc_shapley(GAME4, cases, worlds, growth=2.0, **kw)
    with pytest.raises(TypeError, match="got `interval` and the old `delta` together"):
        bj.mc_shapley(GAME4, cases, worlds, interval=bj.stats.Interval(), delta=0.2, **kw)
    with pytest.warns(DeprecationWarning, match="use `MCResult.interval`"):
        assert new.radius == new.interval == "hoeffding"
    with pytest.warns(DeprecationWarning, match="use `MCResult.look`"):
        assert new.checkpoint is new.look
    exported = new.to_dict()
    exported["radius"] = exported.pop("interval")  # as written before the renames
    exported["checkpoint"] = exported.pop("look")
    exported["arrays"]["checkpoint"] = exported["arrays"].pop("look")
    again = bj.MCResult.from_dict(exported)
    assert again.interval == "hoeffding" and np.array_equal(again.values, new.values)
    assert np.array_equal(again.look, new.look) and again.look.dtype == new.look.dtype
