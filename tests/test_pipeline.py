"""Runs of a pipeline: how a run treats its tables.

A `-inf` in a table row that no run reaches changes nothing, in hard and in relaxed mode:
not a coalition's score, not a run's choices, not the relaxed gradient (no NaN).
"""

import functools

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import (
    chain_pipeline,
    first,
    random_chain_cases,
)

import blamejax as bj

# --------------------------------------------------------------------------------------
# A -inf in a row no run reaches changes nothing (hard and relaxed)
# --------------------------------------------------------------------------------------


def two_step(ctx, case):
    a = ctx.choose("a", case["a"])
    b = ctx.choose("b", case["b"], given=a)
    c = ctx.choose("c", case["c"], given=b)
    return c.take(case["reward"])


def _unreached_cases(rng, num_cases, row):
    """Option 2 of step `a` is impossible in every variant, so row 2 of `b`'s table is
    never reached. `row` is what that row holds: finite, partly -inf, or all -inf."""
    a = rng.normal(size=(num_cases, 2, 3)).astype(np.float32)
    a[:, :, 2] = -np.inf
    b = rng.normal(size=(num_cases, 2, 3, 4)).astype(np.float32)
    if row == "partly -inf":
        b[:, :, 2, 1:3] = -np.inf
    elif row == "all -inf":
        b[:, :, 2, :] = -np.inf
    c = rng.normal(size=(num_cases, 2, 4, 3)).astype(np.float32)
    return dict(
        a=jnp.asarray(a),
        b=jnp.asarray(b),
        c=jnp.asarray(c),
        reward=jnp.asarray(rng.random((num_cases, 3)).astype(np.float32)),
    )


_UNREACHED_PLAYERS, _UNREACHED_FIXES = (0, 1, 2), (1, 1, 1)


@functools.cache
def _unreached_runner(mode):
    """One compiled function per mode: every coalition's score from the cube
    (`coalition_values`) and, from `trace_run`, every coalition's choices and score."""
    structure = bj.discover(
        two_step, first(_unreached_cases(np.random.default_rng(0), 1, "finite"))
    )
    players, fixes = _UNREACHED_PLAYERS, _UNREACHED_FIXES
    masks = jnp.asarray([[(m >> j) & 1 for j in range(3)] for m in range(8)], bool)

    def one_world(case, key):
        world = bj.World(key=key)
        cube = bj.coalitions.coalition_values(
            two_step, structure, case, world, players, fixes, mode
        )

        def traced(mask):
            plan = bj.coalitions.mask_plan(structure, players, fixes, mask)
            out = bj.pipeline.trace_run(two_step, structure, case, world, plan, mode)
            return out["choice"], out["score"]

        choices, scores = jax.vmap(traced)(masks)
        return cube, choices, scores

    return jax.jit(jax.vmap(jax.vmap(one_world, in_axes=(None, 0))))


def test_exact_blame_redoes_a_pass_flagged_by_an_unreached_row():
    """exact_blame first checks the table rows once per world, so an all -inf row that no run
    reaches makes its world's coalitions NaN there; it then redoes the call with the check
    per run, which gives exactly the values of the same cases with that row finite."""
    num_cases, worlds = 6, bj.fresh_worlds(0, range(6), 3)
    finite = bj.exact_blame(
        two_step, _unreached_cases(np.random.default_rng(3), num_cases, "finite"), worlds
    )
    cases = _unreached_cases(np.random.default_rng(3), num_cases, "all -inf")
    result = bj.exact_blame(two_step, cases, worlds)
    for name in ("shapley", "banzhaf", "empty", "full", "last_step"):
        np.testing.assert_array_equal(getattr(result, name), getattr(finite, name), err_msg=name)
    assert np.isfinite(np.asarray(result.shapley)).all()
    # the quick check alone flags every coalition of every world: the second pass is needed
    structure = bj.discover(two_step, first(cases))
    world = jax.tree_util.tree_map(lambda x: x[0, 0], worlds)
    quick = bj.coalitions.coalition_values(
        two_step,
        structure,
        first(cases),
        world,
        _UNREACHED_PLAYERS,
        _UNREACHED_FIXES,
        rows_per_world=True,
    )
    assert np.isnan(np.asarray(quick)).all()


@pytest.mark.parametrize("mode", [bj.Hard(), bj.Relaxed(tau=0.5)], ids=["hard", "relaxed"])
def test_neg_inf_in_unreached_row_changes_nothing(mode):
    """Option 2 of step `a` is impossible, so row 2 of `b`'s table is never reached (in
    relaxed mode its weight is exactly 0). Making that row partly or wholly -inf changes
    no coalition's score (`coalition_values`) and no run's choices, and gives no NaN."""
    num_cases, num_worlds = 6, 3
    worlds = bj.fresh_worlds(0, range(num_cases), num_worlds)
    run = _unreached_runner(mode)
    v_finite, c_finite, s_finite = (
        np.asarray(x)
        for x in run(_unreached_cases(np.random.default_rng(3), num_cases, "finite"), worlds.key)
    )
    assert v_finite.shape == (num_cases, num_worlds, 8)
    # the values are not trivial: they differ across coalitions and cases
    assert len(np.unique(v_finite)) > 4
    # trace and cube agree (exactly when hard; to float rounding when relaxed, since the
    # two are compiled differently)
    if isinstance(mode, bj.Hard):
        np.testing.assert_array_equal(s_finite, v_finite)
    else:
        np.testing.assert_allclose(s_finite, v_finite, rtol=1e-6)
    for row in ("partly -inf", "all -inf"):
        cases = _unreached_cases(np.random.default_rng(3), num_cases, row)
        assert np.isneginf(np.asarray(cases["b"])).any()
        v_inf, c_inf, s_inf = (np.asarray(x) for x in run(cases, worlds.key))
        assert np.all(np.isfinite(v_inf)) and np.all(np.isfinite(s_inf))
        np.testing.assert_array_equal(v_inf, v_finite, err_msg=row)
        np.testing.assert_array_equal(c_inf, c_finite, err_msg=row)
        np.testing.assert_array_equal(s_inf, s_finite, err_msg=row)


def test_neg_inf_in_unreached_row_relaxed_gradient_is_finite():
    """In relaxed mode the score and its gradient with respect to the tables hold no NaN
    when a table row is partly or wholly -inf (`0 * -inf` or a softmax over a row of
    -inf alone would give NaN)."""
    case = first(_unreached_cases(np.random.default_rng(4), 1, "finite"))
    structure = bj.discover(two_step, case)
    world = bj.World(key=bj.noise.world_key(jr.key(0), 0, 1))
    plan = bj.pipeline.factual_plan(structure)

    @jax.jit
    def value_and_grad(tables):
        def score(tables):
            return bj.pipeline.run_score(
                two_step, structure, {**case, **tables}, world, plan, bj.Relaxed(tau=0.5)
            )

        return jax.value_and_grad(score)(tables)

    for row in ("partly -inf", "all -inf"):
        cases = first(_unreached_cases(np.random.default_rng(4), 1, row))
        value, grads = value_and_grad({"a": cases["a"], "b": cases["b"], "c": cases["c"]})
        assert np.isfinite(float(value)), row
        for name, g in grads.items():
            assert np.all(np.isfinite(np.asarray(g))), (row, name)
        assert any(np.any(np.asarray(g) != 0) for g in grads.values())


def test_error_wrong_table_shape():
    def pipeline(ctx, case):
        a = ctx.choose("a", case["a"])
        b = ctx.choose("b", case["b"], given=a)
        return b.take(jnp.ones(3))

    cases = dict(a=jnp.zeros((2, 2, 4)), b=jnp.zeros((2, 2, 5, 3)))
    with pytest.raises(
        ValueError,
        match="step 'b' have 5 rows on parent axis 0 but the parent choice has 4 options",
    ):
        bj.exact_blame(pipeline, cases, bj.recorded_worlds(0, range(2)))
    cases = dict(a=jnp.zeros((2, 2, 4)), b=jnp.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match=r"logits of step 'b' must have shape \[V, K_parent0, K\]"):
        bj.exact_blame(pipeline, cases, bj.recorded_worlds(0, range(2)))


def test_error_nan_logits(getkey):
    cases = random_chain_cases(getkey(), 3, num_cases=2)
    cases["tables"][1] = cases["tables"][1].at[1, 0, 2, 1].set(jnp.nan)
    with pytest.raises(
        ValueError, match=r"\['tables'\]\[1\]` contains NaN \(first at index \[1, 0, 2, 1\]\)"
    ):
        bj.exact_blame(chain_pipeline, cases, bj.recorded_worlds(0, range(2)))


def test_error_pipeline_returns_vector():
    def pipeline(ctx, case):
        a = ctx.choose("a", case["a"])
        return jnp.stack([a.index, a.index]).astype(jnp.float32)

    with pytest.raises(
        ValueError, match=r"must return a scalar score, got an output of shape \(2,\)"
    ):
        bj.exact_blame(pipeline, dict(a=jnp.zeros((1, 2, 3))), bj.recorded_worlds(0, range(1)))


def test_error_same_slot_twice():
    def pipeline(ctx, case):
        ctx.choose("a", case["a"])
        return ctx.choose("a", case["a"]).take(jnp.ones(3))

    with pytest.raises(ValueError, match="step 'a' draws twice in slot 0"):
        bj.exact_blame(pipeline, dict(a=jnp.zeros((1, 2, 3))), bj.recorded_worlds(0, range(1)))


def test_error_bad_tau():
    with pytest.raises(ValueError, match="`tau` must be a positive scalar temperature, got 0.0"):
        bj.Relaxed(tau=0.0)


# --------------------------------------------------------------------------------------
# Deferred draws (`Context(defer=True)`, what Monte Carlo uses): the same integers as the
# draws made one by one, for chains, DAGs, mixed and free-form pipelines
# --------------------------------------------------------------------------------------


def _mixed(ctx, case):
    """A chain whose middle index is read by user code (a free-form step from it), and a
    step nobody reads (its invalid row still counts)."""
    t = case["tables"]
    a = ctx.choose("s0", t[0])
    b = ctx.choose("s1", t[1], given=a)
    # reading b makes the chain so far; a free-form step computed from it
    free = ctx.choose("free", t[2][:, b.index] + 0.5 * b.index.astype(t[2].dtype))
    c = ctx.choose("s3", t[3], given=(a, free))  # parents made before this batch
    ctx.choose("unread", t[1], given=c)
    d = ctx.choose("s5", t[3], given=(c, b))
    return d.take(case["score"]) + 0.1 * a.index.astype(case["score"].dtype)


def _reads_inside_jit(ctx, case):
    """The first read of a deferred index happens inside the user's own `jax.jit` and
    `vmap`: the draws must still be made at the pipeline's level (no leaked tracer)."""
    t = case["tables"]
    a = ctx.choose("s0", t[0])
    b = ctx.choose("s1", t[1], given=a)
    c = ctx.choose("s2", t[1], given=b)
    picked = jax.jit(lambda score: score[b.index])(case["score"])
    rows = jax.vmap(lambda row: row[c.index])(jnp.stack([case["score"], 2 * case["score"]]))
    return picked + rows.sum() + 0.1 * a.index.astype(picked.dtype)


def _mixed_cases(key, num_cases, k=3):
    keys = jr.split(key, 5)
    tables = [
        jr.normal(keys[0], (num_cases, 2, k)),
        jr.normal(keys[1], (num_cases, 2, k, k)),
        jr.normal(keys[2], (num_cases, 3, k, k)),
        jr.normal(keys[3], (num_cases, 2, k, k, k)),
    ]
    return dict(tables=tables, score=jr.uniform(keys[4], (num_cases, k)))


def _deferred_and_not(pipeline, cases, num_worlds=3, overrides=False):
    """Every coalition's score in every world, with and without deferred draws, jitted.
    With `overrides`, every other site's Gumbels come from the world's overrides (what
    inferred worlds carry), the rest from its key."""
    structure = bj.discover(pipeline, first(cases))
    n = structure.num_steps
    players, fixes = tuple(range(n)), tuple(1 for _ in range(n))
    cube = jnp.asarray(((np.arange(1 << n)[:, None] >> np.arange(n)) & 1).astype(bool))

    def scores(case, key, defer):
        world = bj.World(key=key)
        if overrides:
            sites = structure.sites
            gumbels = tuple(
                jr.gumbel(jr.fold_in(key, i), (site.num_options,)) for i, site in enumerate(sites)
            )
            valid = tuple(jnp.asarray(i % 2 == 0) for i in range(len(sites)))
            world = bj.World(key=key, overrides=gumbels, valid=valid)
        return bj.coalitions.mask_values(
            pipeline, structure, case, world, players, fixes, cube, defer=defer
        )

    keys = jr.split(jr.key(3), num_worlds)
    out = []
    for defer in (False, True):
        run = jax.jit(
            jax.vmap(
                jax.vmap(functools.partial(scores, defer=defer), in_axes=(None, 0)),
                in_axes=(0, None),
            )
        )
        out.append(np.asarray(run(cases, keys)))
    return out


@pytest.mark.parametrize(
    "name", ["chain", "dag", "mixed", "neg_inf", "overrides", "read_inside_jit"]
)
def test_deferred_draws_equal_draws_one_by_one(name):
    from helpers import dag_pipeline, random_dag_cases

    key = jr.key(11)
    pipeline, cases = {
        "chain": lambda: (chain_pipeline, random_chain_cases(key, 6, 4)),
        "dag": lambda: (dag_pipeline, random_dag_cases(key, 4)),
        "mixed": lambda: (_mixed, _mixed_cases(key, 4)),
        "neg_inf": lambda: (chain_pipeline, random_chain_cases(key, 5, 4, neg_inf=0.4)),
        "overrides": lambda: (dag_pipeline, random_dag_cases(key, 4)),
        "read_inside_jit": lambda: (_reads_inside_jit, _mixed_cases(key, 4)),
    }[name]()
    eager, deferred = _deferred_and_not(pipeline, cases, overrides=name == "overrides")
    assert np.isfinite(eager).all() and np.ptp(eager) > 0
    assert np.array_equal(eager, deferred)


def test_deferred_draws_keep_a_row_without_options_invalid():
    """A row with no valid option that some coalition reaches makes exactly those runs NaN,
    deferred or not; an unread step's invalid draw counts too."""
    cases = _mixed_cases(jr.key(5), 3)
    unread = np.asarray(cases["tables"][1]).copy()
    unread[:, :, 1, :] = -np.inf  # row 1 of every variant: reached only when s1 chose 1
    cases["tables"][1] = jnp.asarray(unread)
    eager, deferred = _deferred_and_not(_mixed, cases)
    assert np.isnan(eager).any() and not np.isnan(eager).all()
    assert np.array_equal(np.isnan(eager), np.isnan(deferred))
    assert np.array_equal(eager, deferred, equal_nan=True)


def test_deferred_registers_reuse_what_no_later_draw_reads():
    from blamejax.pipeline._deferred import _registers

    chain = np.array([[-1], [0], [1], [2], [3]])
    source, target, count = _registers(chain)
    assert count == 2  # one kept option and one scratch register, whatever the length
    for k in range(1, 5):
        assert source[k, 0] == target[k - 1]
    # s3 reads s1 and s2 (made outside as 3 and 4): all kept until read
    dag = np.array([[-1, -1], [0, -1], [0, -1], [1, 2], [5, 3]])
    source, target, count = _registers(dag)
    assert source[4, 0] == 0  # the index made before the batch sits in register 0
    assert source[3, 0] == target[1] and source[3, 1] == target[2] and target[1] != target[2]
    assert source[4, 1] == target[3]
    assert target[4] == count - 1  # nobody reads the last draw: the scratch register


# --------------------------------------------------------------------------------------
# Traces (`trace_run`, `bj.replay`) make their hard draws deferred: the same record, from a
# compiled program that does not grow with the number of draws
# --------------------------------------------------------------------------------------


def _traces(pipeline, cases, plan_of=None, mode=bj.Hard()):
    """Every case's trace in three worlds, with the draws made one by one and deferred,
    jitted; `plan_of(structure)` gives the plan (default: the factual one)."""
    structure = bj.discover(pipeline, first(cases))
    plan = None if plan_of is None else plan_of(structure)
    keys = jr.split(jr.key(4), 3)
    out = []
    for defer in (False, True):

        def one(case, key, defer=defer):
            world = bj.World(key=key)
            trace = bj.pipeline.trace_run(pipeline, structure, case, world, plan, mode)
            stacked = bj.pipeline.trace_arrays(
                pipeline, structure, case, world, plan, mode, defer=defer
            )
            return trace, stacked

        run = jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None)))
        out.append(run(cases, keys))
    return structure, out


def _force_second_site(structure):
    """Site 1 forced to option 0: a draw made on its own between deferred ones."""
    plan = bj.pipeline.factual_plan(structure)
    forced = tuple(np.int32(0 if i == 1 else -1) for i in range(len(structure.sites)))
    return plan._replace(forced_sites=forced)


@pytest.mark.parametrize("name", ["chain", "dag", "mixed", "neg_inf", "forced", "relaxed"])
def test_traces_with_deferred_draws_equal_draws_one_by_one(name):
    from helpers import dag_pipeline, random_dag_cases

    key = jr.key(12)
    pipeline, cases, plan_of, mode = {
        "chain": lambda: (chain_pipeline, random_chain_cases(key, 6, 4), None, bj.Hard()),
        "dag": lambda: (dag_pipeline, random_dag_cases(key, 4), None, bj.Hard()),
        "mixed": lambda: (_mixed, _mixed_cases(key, 4), None, bj.Hard()),
        "neg_inf": lambda: (
            chain_pipeline,
            random_chain_cases(key, 5, 4, neg_inf=0.4),
            None,
            bj.Hard(),
        ),
        "forced": lambda: (_mixed, _mixed_cases(key, 4), _force_second_site, bj.Hard()),
        "relaxed": lambda: (_mixed, _mixed_cases(key, 4), None, bj.Relaxed(0.5)),
    }[name]()
    structure, ((_, one_by_one), (trace, deferred)) = _traces(pipeline, cases, plan_of, mode)
    for field in ("score", "choice", "variant", "invalid", "values"):
        assert jax.tree.all(jax.tree.map(np.array_equal, one_by_one[field], deferred[field]))
    assert np.ptp(np.asarray(deferred["choice"])) > 0
    for field in ("logits", "noise"):  # stacked rows, padded past each site's options
        for i, site in enumerate(structure.sites):
            row = np.asarray(trace[field][i])
            assert row.shape == (4, 3, site.num_options)
            assert np.array_equal(row, np.asarray(deferred[field])[:, :, i, : site.num_options])
            assert np.array_equal(row, np.asarray(one_by_one[field])[:, :, i, : site.num_options])


def test_replay_returns_one_array_per_site_from_a_program_that_does_not_grow():
    """`bj.replay` splits the stacked rows outside its compiled program: the program's
    outputs and its argmax reductions are as many at 40 steps as at 10."""
    from blamejax.pipeline import factual_plan
    from blamejax.worlds._replay import _plan_features, _replay_function

    counts = []
    for n in (10, 40):
        cases = random_chain_cases(jr.key(n), n, 2)
        worlds = bj.recorded_worlds(0, range(2))
        structure = bj.discover(chain_pipeline, first(cases))
        plan = factual_plan(structure)
        function = _replay_function(chain_pipeline, structure, bj.Hard(), _plan_features(plan))
        lowered = function.lower(cases, worlds, plan)
        text = lowered.as_text()
        counts.append((len(jax.tree.leaves(lowered.out_info)), text.count("stablehlo.reduce")))
        out = bj.replay(chain_pipeline, cases, worlds)
        assert len(out["logits"]) == len(out["noise"]) == n
        assert out["logits"][n - 1].shape == out["noise"][0].shape == (2, 1, 4)
    assert counts[0] == counts[1]
