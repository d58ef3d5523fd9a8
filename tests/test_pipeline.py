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
        cube = bj.coalitions.coalition_values(two_step, structure, case, world, players, fixes, mode)

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
    num_cases, worlds = 6, bj.fresh_worlds(0, 6, 3)
    finite = bj.exact_blame(two_step, _unreached_cases(np.random.default_rng(3), num_cases, "finite"), worlds)
    cases = _unreached_cases(np.random.default_rng(3), num_cases, "all -inf")
    result = bj.exact_blame(two_step, cases, worlds)
    for name in ("shapley", "banzhaf", "empty", "full", "last_step"):
        np.testing.assert_array_equal(getattr(result, name), getattr(finite, name), err_msg=name)
    assert np.isfinite(np.asarray(result.shapley)).all()
    # the quick check alone flags every coalition of every world: the second pass is needed
    structure = bj.discover(two_step, first(cases))
    world = jax.tree_util.tree_map(lambda x: x[0, 0], worlds)
    quick = bj.coalitions.coalition_values(
        two_step, structure, first(cases), world, _UNREACHED_PLAYERS, _UNREACHED_FIXES, rows_per_world=True
    )
    assert np.isnan(np.asarray(quick)).all()


@pytest.mark.parametrize("mode", [bj.Hard(), bj.Relaxed(tau=0.5)], ids=["hard", "relaxed"])
def test_neg_inf_in_unreached_row_changes_nothing(mode):
    """Option 2 of step `a` is impossible, so row 2 of `b`'s table is never reached (in
    relaxed mode its weight is exactly 0). Making that row partly or wholly -inf changes
    no coalition's score (`coalition_values`) and no run's choices, and gives no NaN."""
    num_cases, num_worlds = 6, 3
    worlds = bj.fresh_worlds(0, num_cases, num_worlds)
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
    with pytest.raises(ValueError, match="step 'b' have 5 rows on parent axis 0 but the parent choice has 4 options"):
        bj.exact_blame(pipeline, cases, bj.recorded_worlds(0, 2))
    cases = dict(a=jnp.zeros((2, 2, 4)), b=jnp.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match=r"logits of step 'b' must have shape \[V, K_parent0, K\]"):
        bj.exact_blame(pipeline, cases, bj.recorded_worlds(0, 2))


def test_error_nan_logits(getkey):
    cases = random_chain_cases(getkey(), 3, num_cases=2)
    cases["tables"][1] = cases["tables"][1].at[1, 0, 2, 1].set(jnp.nan)
    with pytest.raises(ValueError, match=r"\['tables'\]\[1\]` contains NaN \(first at index \[1, 0, 2, 1\]\)"):
        bj.exact_blame(chain_pipeline, cases, bj.recorded_worlds(0, 2))


def test_error_pipeline_returns_vector():
    def pipeline(ctx, case):
        a = ctx.choose("a", case["a"])
        return jnp.stack([a.index, a.index]).astype(jnp.float32)

    with pytest.raises(ValueError, match=r"must return a scalar score, got an output of shape \(2,\)"):
        bj.exact_blame(pipeline, dict(a=jnp.zeros((1, 2, 3))), bj.recorded_worlds(0, 1))


def test_error_same_slot_twice():
    def pipeline(ctx, case):
        ctx.choose("a", case["a"])
        return ctx.choose("a", case["a"]).take(jnp.ones(3))

    with pytest.raises(ValueError, match="step 'a' draws twice in slot 0"):
        bj.exact_blame(pipeline, dict(a=jnp.zeros((1, 2, 3))), bj.recorded_worlds(0, 1))


def test_error_bad_tau():
    with pytest.raises(ValueError, match="`tau` must be a positive scalar temperature, got 0.0"):
        bj.Relaxed(tau=0.0)
