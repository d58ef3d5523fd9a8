"""Exact blame by structure (`blamejax.structured`) against enumeration: chains, DAGs with
two-parent steps, several fix variants, -inf options, every noise mode, steps= subsets, a
step that draws twice, a score over two steps; the path `exact_blame` chooses and its errors;
the axioms at n = 200; float32 against a float64 reference at n = 1,000."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import chain_pipeline, dag_pipeline, random_chain_cases, random_dag_cases

import blamejax as bj
from benchmarks._reference import chain_shapley_of, numpy_chain_cases
from blamejax.estimators import _exact

FIELDS = ("shapley", "banzhaf", "fix_alone", "leave_one_out", "empty", "full")
TOL = 1e-6 if jax.config.jax_enable_x64 else 1e-5


def assert_same(structured, enumerated, interactions=False):
    assert structured.method == "structured" and enumerated.method == "enumerate"
    for field in FIELDS + (("interactions",) if interactions else ()):
        np.testing.assert_allclose(
            getattr(structured, field), getattr(enumerated, field), atol=TOL, rtol=0, err_msg=field
        )
    np.testing.assert_array_equal(structured.last_step, enumerated.last_step)
    assert np.abs(np.asarray(enumerated.shapley)).max() > 1e-3  # not a trivial instance


def both(pipeline, cases, worlds, **kwargs):
    s = bj.exact_blame(pipeline, cases, worlds, method="structured", **kwargs)
    e = bj.exact_blame(pipeline, cases, worlds, method="enumerate", **kwargs)
    return s, e


def inferred(pipeline, cases, key, num_worlds=3):
    num = jax.tree_util.tree_leaves(cases)[0].shape[0]
    observed = bj.replay(pipeline, cases, bj.recorded_worlds(0, range(num)))["choice"][:, 0]
    return bj.inferred_worlds(pipeline, cases, observed, key, num_worlds)


@pytest.mark.parametrize("noise", ["recorded", "fresh", "inferred"])
def test_chain_equals_enumeration(noise, getkey):
    cases = random_chain_cases(getkey(), 9, num_cases=6, num_options=4, num_variants=3, neg_inf=0.2)
    if noise == "recorded":
        worlds = bj.recorded_worlds(0, range(6))
    elif noise == "fresh":
        worlds = bj.fresh_worlds(getkey(), range(6), 3)
    else:
        worlds = inferred(chain_pipeline, cases, getkey())
    assert_same(*both(chain_pipeline, cases, worlds, interactions=True), interactions=True)
    fixes = {"s1": 2, "s4": 2, "s8": 2}
    assert_same(*both(chain_pipeline, cases, worlds, fixes=fixes, steps=["s1", "s2", "s4", "s8"]))


def test_chain_equals_enumeration_at_n14(getkey):
    cases = random_chain_cases(getkey(), 14, num_cases=3, num_options=3)
    assert_same(*both(chain_pipeline, cases, bj.fresh_worlds(getkey(), range(3), 2)))


@pytest.mark.parametrize("noise", ["fresh", "inferred"])
def test_dag_equals_enumeration(noise, getkey):
    cases = random_dag_cases(getkey(), num_cases=6)
    if noise == "fresh":
        worlds = bj.fresh_worlds(getkey(), range(6), 3)
    else:
        worlds = inferred(dag_pipeline, cases, getkey())
    assert_same(*both(dag_pipeline, cases, worlds, interactions=True), interactions=True)


def wide_pipeline(ctx, case):
    """A DAG the chain path does not take: two-parent steps, a step that draws twice (one fix
    bit for both draws), and a score over two steps read as a [K, K] table."""
    t = case["tables"]
    a = ctx.choose("plan", t[0])
    b = ctx.choose("search", t[1], given=a)
    c = ctx.choose("plan", t[2], given=b, slot=1)
    d = ctx.choose("read", t[3], given=(a, c))
    e = ctx.choose("write", t[4], given=(d, b))
    return e.take(d.take(case["pair"]))


def wide_cases(key, num_cases, k=3):
    keys = jr.split(key, 6)
    shapes = [(2, k), (2, k, k), (2, k, k), (2, k, k, k), (2, k, k, k)]
    tables = [1.5 * jr.normal(kk, (num_cases,) + s) for kk, s in zip(keys, shapes)]
    tables[3] = tables[3].at[:, 1, 0, 1, 2].set(-jnp.inf)  # an impossible option in the fix
    return dict(tables=tables, pair=jr.uniform(keys[5], (num_cases, k, k)))


def test_dag_with_repeated_step_and_pair_score(getkey):
    cases = wide_cases(getkey(), 6)
    worlds = bj.fresh_worlds(getkey(), range(6), 4)
    s, e = both(wide_pipeline, cases, worlds, interactions=True)
    assert_same(s, e, interactions=True)
    elim, graph, reason = bj.structured.structured_plan(bj.Game.make(wide_pipeline, cases), cases)
    assert reason is None and not elim.chain and graph.scope == (3, 4)


def test_demos_take_the_structured_path():
    for pipeline, cases in [
        (bj.demos.refund_pipeline, bj.demos.refund_cases(8)),
        (bj.demos.rag_pipeline, bj.demos.rag_cases(24)),
        (bj.demos.agent8_pipeline, bj.demos.agent8_cases(6)),
        (bj.demos.interaction_pipeline, bj.demos.interaction_cases(8)),
        (bj.demos.pivotal_pipeline, bj.demos.pivotal_cases(8)),
    ]:
        num = jax.tree_util.tree_leaves(cases)[0].shape[0]
        worlds = bj.fresh_worlds(3, range(num), 2)
        s = bj.exact_blame(pipeline, cases, worlds)
        e = bj.exact_blame(pipeline, cases, worlds, method="enumerate")
        assert s.method == "structured"
        for field in FIELDS:
            np.testing.assert_allclose(getattr(s, field), getattr(e, field), atol=TOL, rtol=0)


def free_pipeline(ctx, case):
    a = ctx.choose("s0", case["tables"][0])
    b = ctx.choose("s1", case["tables"][1][:, a.index] * 2.0)  # logits computed from a draw
    return b.take(case["score"])


def test_free_form_pipeline_enumerates_and_says_why_past_max_steps(getkey):
    cases = random_chain_cases(getkey(), 2, num_cases=3)
    result = bj.exact_blame(free_pipeline, cases, bj.recorded_worlds(0, range(3)))
    assert result.method == "enumerate"
    with pytest.raises(
        ValueError,
        match=r"method='structured'.*step 's1' computes its logits from the option of 's0'",
    ):
        bj.exact_blame(free_pipeline, cases, bj.recorded_worlds(0, range(3)), method="structured")
    with pytest.raises(
        ValueError, match=r"n = 2 steps.*`max_steps` = 1.*step 's1' computes.*mc_shapley"
    ):
        bj.exact_blame(free_pipeline, cases, bj.recorded_worlds(0, range(3)), max_steps=1)
    with pytest.raises(
        ValueError,
        match=r"`method` must be one of \['auto', 'structured', 'enumerate'\], got 'exact'",
    ):
        bj.exact_blame(free_pipeline, cases, bj.recorded_worlds(0, range(3)), method="exact")


def scope_pipeline(ctx, case):
    """A score that reads all nine steps: a table of 4^9 joint options, too wide."""
    choices = [ctx.choose(f"s{i}", case["tables"][i]) for i in range(9)]
    return jnp.mean(jnp.stack([c.take(case["score"]) for c in choices]))


def test_too_wide_a_score_says_so(getkey):
    keys = jr.split(getkey(), 2)
    cases = dict(
        tables=[jr.normal(jr.fold_in(keys[0], i), (2, 2, 4)) for i in range(9)],
        score=jr.uniform(keys[1], (2, 4)),
    )
    with pytest.raises(
        ValueError, match=r"the score reads 9 steps .*262,144 joint options, above 65,536"
    ):
        bj.exact_blame(scope_pipeline, cases, bj.recorded_worlds(0, range(2)), method="structured")
    assert (
        bj.exact_blame(scope_pipeline, cases, bj.recorded_worlds(0, range(2))).method == "enumerate"
    )


def test_unreached_invalid_row_is_harmless_and_reached_one_is_an_error(getkey):
    cases = random_chain_cases(getkey(), 4, num_cases=2, num_options=3)
    tables = list(cases["tables"])
    worlds = bj.recorded_worlds(0, range(2))
    trace = bj.replay(chain_pipeline, cases, worlds)["choice"][:, 0]
    # A row of the fix of s2 that the factual choice of s1 does not select, made impossible:
    # reached only if some coalition changes s1, so compare with enumeration either way.
    other = (np.asarray(trace[:, 1]) + 1) % 3
    t2 = np.array(tables[2])
    for f in range(2):
        t2[f, 1, other[f], :] = -np.inf
    tables[2] = jnp.asarray(t2)
    bad = dict(cases, tables=tables)
    try:
        expected = bj.exact_blame(chain_pipeline, bad, worlds, method="enumerate")
    except ValueError as error:
        with pytest.raises(ValueError, match="no valid option"):
            bj.exact_blame(chain_pipeline, bad, worlds)
        assert "no valid option" in str(error)
    else:
        got = bj.exact_blame(chain_pipeline, bad, worlds)
        np.testing.assert_allclose(got.shapley, expected.shapley, atol=TOL)
    # Every row of s3's tables impossible: every run draws from one; an error on both paths.
    t3 = np.array(tables[3])
    t3[:] = -np.inf
    with pytest.raises(ValueError, match="no valid option"):
        bj.exact_blame(chain_pipeline, dict(cases, tables=tables[:3] + [jnp.asarray(t3)]), worlds)


def sure(table_of):
    """A `[2, K, K]` table whose argmax is `table_of(v, x)` in every world (margin 60)."""
    t = np.zeros((2, 4, 4))
    for v in range(2):
        for x in range(4):
            t[v, x, table_of(v, x)] = 60.0
    return jnp.asarray(t)


def test_axioms_at_n200(getkey):
    """A 200-step chain whose first two steps count how many of them run their fix (so the
    two are symmetric players: the rest reads only the count) and whose step 100's fix is its
    factual table (a null player); efficiency on top."""
    n, num = 200, 2
    cases = numpy_chain_cases(0, n, num_cases=num, num_options=4)
    tables = list(cases["tables"])
    tables[0] = jnp.broadcast_to(sure(lambda v, x: v)[:, 0], (num, 2, 4)).astype(
        jnp.float32
    )  # 1 if fixed
    tables[1] = jnp.broadcast_to(sure(lambda v, x: min(x + v, 3)), (num, 2, 4, 4)).astype(
        jnp.float32
    )  # + 1
    tables[100] = jnp.broadcast_to(tables[100][:, :1], tables[100].shape)  # fix == factual
    cases = dict(cases, tables=tables)
    result = bj.exact_blame(chain_pipeline, cases, bj.fresh_worlds(getkey(), range(num), 2))
    assert result.method == "structured" and len(result.steps) == n
    shapley = np.asarray(result.shapley)
    np.testing.assert_allclose(shapley.sum(1), result.total, atol=10 * TOL)  # efficiency
    np.testing.assert_allclose(shapley[:, 0], shapley[:, 1], atol=TOL)  # symmetry
    assert np.all(shapley[:, 100] == 0)  # null player, exactly
    assert np.abs(shapley).max() > 1e-3


def test_n1000_matches_a_float64_reference(getkey):
    n, k = 1000, 4
    cases = numpy_chain_cases(1, n, num_cases=2, num_options=k)
    worlds = bj.fresh_worlds(getkey(), range(2), 1)
    result = bj.exact_blame(chain_pipeline, cases, worlds)
    for f in range(2):
        expected = chain_shapley_of(chain_pipeline, cases, worlds, f, 0)
        np.testing.assert_allclose(result.shapley[f], expected, atol=TOL, rtol=0)
        assert np.abs(expected).max() > 1e-3


def test_jit_equals_eager(getkey):
    cases = wide_cases(getkey(), 1)
    game = bj.Game.make(wide_pipeline, cases)
    elim, graph, _ = bj.structured.structured_plan(game, cases)
    function = _exact._structured_function(game, elim, graph, False)
    worlds = bj.fresh_worlds(getkey(), range(1), 1)
    compiled = function(cases, worlds)
    with jax.disable_jit():
        eager = function(cases, worlds)
    for a, b in zip(jax.tree_util.tree_leaves(compiled), jax.tree_util.tree_leaves(eager)):
        np.testing.assert_allclose(a, b, atol=TOL, rtol=0)


def test_batch_and_traces_use_it(getkey):
    cases = random_chain_cases(getkey(), 24, num_cases=40, num_options=3)
    result = bj.blame_batch(chain_pipeline, cases, key=0, estimator="exact")
    assert len(result.steps) == 24 and np.isfinite(np.asarray(result.mean_shapley)).all()


def trace_like(given, accept_steps):
    """A pipeline as `bj.traces` builds one: each step given one earlier step (or none), and a
    score that is the product of the accepted-option tables of some steps."""

    def pipeline(ctx, case):
        made = []
        for i, g in enumerate(given):
            made.append(
                ctx.choose(f"s{i}", case["tables"][i], given=None if g is None else made[g])
            )
        value = jnp.ones((), case["accept"][0].dtype)
        for i in accept_steps:
            value = value * made[i].take(case["accept"][i])
        return value

    return pipeline


def trace_like_cases(seed, given, num_cases):
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(2, 5)) for _ in given]
    tables, accept = [], []
    for i, g in enumerate(given):
        shape = (num_cases, 2) + (() if g is None else (sizes[g],)) + (sizes[i],)
        ok = rng.uniform(size=(num_cases, sizes[i])) < 0.6
        ok[:, 0] = True  # some option is accepted
        logits = 1.5 * rng.standard_normal(shape)
        # The fix leans towards accepted options (so that coalitions differ).
        logits[:, 1] += 3.0 * ok.reshape((num_cases,) + (1,) * (len(shape) - 3) + (sizes[i],))
        tables.append(jnp.asarray(logits, jnp.float32))
        accept.append(jnp.asarray(ok, jnp.float32))
    return dict(tables=tables, accept=accept)


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_product_score_is_carried_as_factors(shape, getkey):
    """A score over every step (3^14 joint options, too wide for one table) that is a product
    of one factor per step: carried as factors, equal to enumeration."""
    n = 14
    rng = np.random.default_rng(3)
    given = [None] + [i - 1 if shape == "chain" else int(rng.integers(0, i)) for i in range(1, n)]
    given[5] = None  # a root in the middle
    pipeline = trace_like(tuple(given), tuple(range(n)))
    cases = trace_like_cases(4, given, 4)
    worlds = bj.fresh_worlds(getkey(), range(4), 2)
    game = bj.Game.make(pipeline, cases)
    elim, graph, reason = bj.structured.structured_plan(game, cases)
    assert reason is None and len(elim.factors) == n + 1 and elim.chain == (shape == "chain")
    s, e = both(pipeline, cases, worlds)
    assert_same(s, e)


# The general contraction as one scan over the draws (`blamejax.structured._scan`), which
# `structured_plan` picks for pipelines of `SCAN_MIN_SITES` draws or more; here forced on
# short pipelines (monkeypatched) to check it against enumeration and the draw-by-draw form.


def skip_pipeline(ctx, case):
    """A skip-chain: every third draw also reads the draw three before it; step s4 draws twice
    (one fix bit for both draws); the score reads the last draw."""
    t = case["tables"]
    made = [ctx.choose("s0", t[0])]
    for i in range(1, len(t)):
        given = (made[i - 1], made[i - 3]) if i % 3 == 0 else made[i - 1]
        step, slot = ("s4", 1) if i == 5 else (f"s{i}", 0)
        made.append(ctx.choose(step, t[i], given=given, slot=slot))
    return made[-1].take(case["score"])


def skip_cases(seed, num_draws, num_cases, k=3):
    rng = np.random.default_rng(seed)
    tables = []
    for i in range(num_draws):
        parents = 0 if i == 0 else (2 if i % 3 == 0 else 1)
        table = 1.5 * rng.standard_normal((num_cases, 2) + (k,) * parents + (k,))
        table[rng.uniform(size=table.shape) < 0.15] = -np.inf  # some impossible options,
        table[..., 0] = np.maximum(table[..., 0], -5.0)  # but none a row of no valid option
        tables.append(jnp.asarray(table, jnp.float32))
    return dict(tables=tables, score=jnp.asarray(rng.uniform(size=(num_cases, k)), jnp.float32))


@pytest.fixture
def scan_everywhere(monkeypatch):
    """`structured_plan` runs every pipeline that is no chain by the scan."""
    monkeypatch.setattr(bj.structured._plan, "SCAN_MIN_SITES", 1)


def plan_of(pipeline, cases):
    elim, graph, reason = bj.structured.structured_plan(bj.Game.make(pipeline, cases), cases)
    assert reason is None
    return elim, graph


@pytest.mark.parametrize("noise", ["fresh", "inferred"])
def test_scan_equals_enumeration(noise, scan_everywhere, getkey):
    cases = skip_cases(0, 9, 4)
    assert plan_of(skip_pipeline, cases)[0].scan
    if noise == "fresh":
        worlds = bj.fresh_worlds(getkey(), range(4), 3)
    else:
        worlds = inferred(skip_pipeline, cases, getkey())
    assert_same(*both(skip_pipeline, cases, worlds, interactions=True), interactions=True)


def test_scan_equals_enumeration_with_several_factors(scan_everywhere, getkey):
    """A tree of steps with 2 to 4 options (padded slots), a root in the middle, and a score
    that is one factor per step (and a constant one)."""
    n = 12
    rng = np.random.default_rng(5)
    given = [None] + [int(rng.integers(0, i)) for i in range(1, n)]
    given[5] = None
    pipeline = trace_like(tuple(given), tuple(range(n)))
    cases = trace_like_cases(6, given, 3)
    elim, _ = plan_of(pipeline, cases)
    assert elim.scan and len(elim.factors) == n + 1
    assert_same(*both(pipeline, cases, bj.fresh_worlds(getkey(), range(3), 2)))


@pytest.mark.parametrize("observed", [False, True])
def test_scan_equals_the_draw_by_draw_contraction_in_expected_noise(observed, monkeypatch):
    cases = skip_cases(1, 9, 3)
    seen = None
    if observed:
        seen = bj.replay(skip_pipeline, cases, bj.recorded_worlds(0, range(3)))["choice"][:, 0]
    worlds = bj.expected_worlds(np.arange(3), seen)
    out = []
    for least in (1, 10**9):
        monkeypatch.setattr(bj.structured._plan, "SCAN_MIN_SITES", least)
        assert plan_of(skip_pipeline, cases)[0].scan == (least == 1)
        out.append(bj.exact_blame(skip_pipeline, cases, worlds, interactions=True))
    for field in FIELDS + ("interactions",):
        a, b = (np.asarray(getattr(r, field)) for r in out)
        np.testing.assert_allclose(a, b, atol=TOL, rtol=0, err_msg=field)
    assert np.abs(np.asarray(out[1].shapley)).max() > 1e-3


def random_maps(seed, graph, sizes, num_worlds):
    """Per site `[worlds, 2, *K_parents]` int32 maps; in the second half of the worlds about
    one row in ten has no valid option (-1)."""
    rng = np.random.default_rng(seed)
    maps = []
    for s, parents in enumerate(graph.parents):
        shape = (num_worlds, 2) + tuple(sizes[p] for p in parents)
        m = rng.integers(0, sizes[s], shape)
        bad = rng.uniform(size=shape) < 0.1
        bad[: num_worlds // 2] = False
        maps.append(jnp.asarray(np.where(bad, -1, m), jnp.int32))
    return tuple(maps)


def test_scan_world_blame_equals_draw_by_draw_with_rows_of_no_valid_option(scan_everywhere):
    cases = skip_cases(2, 9, 1)
    elim, graph = plan_of(skip_pipeline, cases)
    maps = random_maps(3, graph, elim.sizes, 16)
    score = (jnp.asarray(np.random.default_rng(4).uniform(size=(3,)), jnp.float32),)

    def blame(elim):  # one compiled program each (op by op, it compiled hundreds)
        return jax.jit(jax.vmap(lambda m: bj.structured.world_blame(elim, m, score, True)))(maps)

    scanned, unrolled = blame(elim), blame(elim._replace(scan=False))
    for a, b in zip(scanned, unrolled):
        np.testing.assert_allclose(a, b, atol=TOL, rtol=0)  # NaN where the other is NaN
    nan = np.isnan(np.asarray(scanned.shapley)).any(1)
    assert nan.any() and not nan.all()


def test_scan_jit_equals_eager(scan_everywhere):
    cases = skip_cases(3, 9, 1)
    game = bj.Game.make(skip_pipeline, cases)
    elim, graph = plan_of(skip_pipeline, cases)
    function = _exact._structured_function(game, elim, graph, False)
    worlds = bj.fresh_worlds(0, range(1), 1)
    compiled = function(cases, worlds)
    with jax.disable_jit():
        eager = function(cases, worlds)
    for a, b in zip(jax.tree_util.tree_leaves(compiled), jax.tree_util.tree_leaves(eager)):
        np.testing.assert_allclose(a, b, atol=TOL, rtol=0)


def test_scan_program_does_not_grow_with_n(scan_everywhere):
    """The scan's contraction lowers to the same program at 21 and 60 draws (both end on a
    one-parent draw, so they have the same signatures); one world's whole blame (maps stacked
    in) grows by a few lines per draw, the draw-by-draw one by far more."""
    from blamejax.structured import _scan

    def lines(num_draws, scan):
        cases = skip_cases(4, num_draws, 1)
        elim, graph = plan_of(skip_pipeline, cases)
        elim = elim._replace(scan=scan)
        maps = tuple(m[0] for m in random_maps(5, graph, elim.sizes, 1))
        score = (jnp.ones((3,), jnp.float32),)
        layout = _scan.scan_layout(elim)
        pairs = _scan.stack_maps(layout, elim, maps)
        dtype = jnp.result_type(float)
        rows = _scan.stack_unary(layout, score, dtype)
        t = jnp.full((3, elim.num_players), 0.5, dtype)

        def core(pairs, rows, t):
            gains = jax.grad(
                lambda t: _scan.scan_extension(layout, elim, pairs, rows, score, t).sum()
            )
            masks = _scan.scan_reachable(layout, elim, pairs, dtype)
            runs = _scan.scan_runs(layout, elim, pairs, score, t > 0.7)
            return gains(t), masks, runs

        def whole(maps):
            return bj.structured.world_blame(elim, maps, score)

        core_text = jax.jit(core).lower(pairs, rows, t).as_text()
        return len(core_text.splitlines()), len(jax.jit(whole).lower(maps).as_text().splitlines())

    core21, scanned21 = lines(21, True)
    core60, scanned60 = lines(60, True)
    _, unrolled21 = lines(21, False)
    _, unrolled60 = lines(60, False)
    assert core21 == core60
    assert (scanned60 - scanned21) * 10 < unrolled60 - unrolled21
