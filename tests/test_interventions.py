"""Interventions: the do-operators, each changing exactly what it names and nothing upstream,
composing; then the contrastive estimator, its intervals and the point of commitment, and
CAR's re-draw game, checked against the analytic values of the pivotal and interaction SCMs.

Monte Carlo tests are probabilistic with fixed seeds: each compares an estimate with its
exact value within 4 standard errors (a false failure has probability about 6e-5 per
comparison); the standard errors are stated next to each check.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import failures

import blamejax as bj
from blamejax.demos import (
    interaction_analytic,
    interaction_cases,
    interaction_pipeline,
    pivotal_analytic,
    pivotal_cases,
    pivotal_pipeline,
)
from blamejax.noise import fresh_key


def tool_pipeline(ctx, case):
    """query -> search (a deterministic tool) -> answer (free-form logits) -> check."""
    query = ctx.choose("query", case["query"])  # [V=2, K=3]
    hits = ctx.deterministic("search", case["index"][query.index])  # [4]
    answer = ctx.choose("answer", case["answer"] + hits[None, :])  # free-form [V=2, 4]
    check = ctx.choose("check", case["check"], given=answer)  # [V=2, 4, 2]
    return check.take(case["ok"])


def tool_case():
    rng = np.random.default_rng(0)
    return dict(
        query=jnp.asarray(rng.normal(size=(2, 3)), jnp.float32),
        index=jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
        answer=jnp.asarray(rng.normal(size=(2, 4)), jnp.float32),
        check=jnp.asarray(rng.normal(size=(2, 4, 2)), jnp.float32),
        ok=jnp.asarray([1.0, 0.0], jnp.float32),
    )


def refund_case():
    return jax.tree_util.tree_map(lambda x: x[0], bj.demos.refund_cases(1))


PIPELINES = [
    ("refund", bj.demos.refund_pipeline, refund_case),
    ("tool", tool_pipeline, tool_case),
]
WORLDS = [bj.World(key=bj.noise.world_key(jax.random.key(7), f, 0)) for f in range(3)]


def _trace(pipeline, structure, case, world, plan=None):
    out = bj.pipeline.trace_run(pipeline, structure, case, world, plan)
    return dict(
        choice=np.asarray(out["choice"]),
        variant=np.asarray(out["variant"]),
        noise=[np.asarray(x) for x in out["noise"]],
        logits=[np.asarray(x) for x in out["logits"]],
        values=[np.asarray(x) for x in out["values"]],
        score=float(out["score"]),
    )


def _site_steps(structure):
    return [structure.step_index(s.step) for s in structure.sites]


def _assert_upstream_identical(structure, factual, run, k):
    """Sites of steps before k saw the same noise and made the same choice."""
    for i, step in enumerate(_site_steps(structure)):
        if step < k:
            np.testing.assert_array_equal(run["noise"][i], factual["noise"][i])
            np.testing.assert_array_equal(run["logits"][i], factual["logits"][i])
            assert run["choice"][i] == factual["choice"][i]
            assert run["variant"][i] == 0


@pytest.mark.parametrize("name, pipeline, make_case", PIPELINES)
@pytest.mark.parametrize("downstream", ["held", "fresh", "direct"])
def test_resample_changes_only_step_k(name, pipeline, make_case, downstream):
    case = make_case()
    structure = bj.discover(pipeline, case)
    steps = _site_steps(structure)
    for world in WORLDS:
        factual = _trace(pipeline, structure, case, world)
        for k in range(structure.num_steps):
            stream = 2 + k
            kwargs = dict(factual=jnp.asarray(factual["choice"])) if downstream == "direct" else {}
            plan = bj.interventions.do_resample(
                structure, k, stream, downstream=downstream, **kwargs
            )
            run = _trace(pipeline, structure, case, world, plan)
            _assert_upstream_identical(structure, factual, run, k)
            np.testing.assert_array_equal(run["variant"], 0)
            for i, site in enumerate(structure.sites):
                fresh = np.asarray(
                    bj.noise.gumbel_at(
                        fresh_key(world.key, stream), site.step, site.slot, site.num_options
                    )
                )
                if steps[i] == k:  # step k: the fresh stream, not the world's noise
                    np.testing.assert_array_equal(run["noise"][i], fresh)
                    assert not np.array_equal(run["noise"][i], factual["noise"][i])
                elif steps[i] > k and downstream == "fresh":
                    np.testing.assert_array_equal(run["noise"][i], fresh)
                elif steps[i] > k:  # held and direct keep the world's noise downstream
                    np.testing.assert_array_equal(run["noise"][i], factual["noise"][i])
                if steps[i] > k and downstream == "direct":
                    assert run["choice"][i] == factual["choice"][i]


@pytest.mark.parametrize("name, pipeline, make_case", PIPELINES)
def test_action_forces_option(name, pipeline, make_case):
    case = make_case()
    structure = bj.discover(pipeline, case)
    steps = _site_steps(structure)
    world = WORLDS[0]
    factual = _trace(pipeline, structure, case, world)
    for k in range(structure.num_steps):
        for option in range(structure.num_options[k]):
            run = _trace(
                pipeline, structure, case, world, bj.interventions.do_action(structure, k, option)
            )
            _assert_upstream_identical(structure, factual, run, k)
            for i in range(len(structure.sites)):
                np.testing.assert_array_equal(
                    run["noise"][i], factual["noise"][i]
                )  # luck untouched
                if steps[i] == k:
                    assert run["choice"][i] == option


@pytest.mark.parametrize("name, pipeline, make_case", PIPELINES)
def test_context_shifts_logits(name, pipeline, make_case):
    case = make_case()
    structure = bj.discover(pipeline, case)
    steps = _site_steps(structure)
    world = WORLDS[1]
    factual = _trace(pipeline, structure, case, world)
    for k in range(structure.num_steps):
        site = steps.index(k)
        num_options = structure.num_options[k]
        # remove the factual choice (and shift the rest): the step must choose otherwise
        shift = np.linspace(-0.5, 0.5, num_options).astype(np.float32)
        shift[factual["choice"][site]] = -np.inf
        run = _trace(
            pipeline,
            structure,
            case,
            world,
            bj.interventions.do_context(structure, k, jnp.asarray(shift)),
        )
        _assert_upstream_identical(structure, factual, run, k)
        np.testing.assert_array_equal(run["noise"][site], factual["noise"][site])  # same luck
        finite = np.isfinite(run["logits"][site])
        if np.isfinite(factual["logits"][site]).sum() > 1:  # another option is possible
            assert run["choice"][site] != factual["choice"][site]
        # where the upstream choice is unchanged, the seen logits are the factual ones + shift
        np.testing.assert_allclose(
            run["logits"][site][finite], (factual["logits"][site] + shift)[finite], rtol=1e-6
        )


@pytest.mark.parametrize("name, pipeline, make_case", PIPELINES)
def test_policy_switches_k_and_later(name, pipeline, make_case):
    case = make_case()
    structure = bj.discover(pipeline, case)
    steps = np.asarray(_site_steps(structure))
    world = WORLDS[2]
    factual = _trace(pipeline, structure, case, world)
    for k in range(structure.num_steps):
        run = _trace(pipeline, structure, case, world, bj.interventions.do_policy(structure, k, 1))
        _assert_upstream_identical(structure, factual, run, k)
        np.testing.assert_array_equal(run["variant"], (steps >= k).astype(np.int32))
        for i in range(len(structure.sites)):
            np.testing.assert_array_equal(run["noise"][i], factual["noise"][i])


@pytest.mark.parametrize("downstream", ["held", "fresh", "direct"])
def test_observation_replaces_tool_output(downstream):
    case = tool_case()
    structure = bj.discover(tool_pipeline, case)
    assert structure.values[0].position == 1  # the tool runs after the query's draw
    new = jnp.asarray([5.0, -5.0, 0.0, 0.0], jnp.float32)
    for world in WORLDS:
        factual = _trace(tool_pipeline, structure, case, world)
        kwargs = dict(factual=jnp.asarray(factual["choice"])) if downstream == "direct" else {}
        if downstream == "fresh":
            kwargs = dict(stream=4)
        plan = bj.interventions.do_observation(
            structure, "search", new, downstream=downstream, **kwargs
        )
        run = _trace(tool_pipeline, structure, case, world, plan)
        np.testing.assert_array_equal(run["values"][0], np.asarray(new))
        # upstream of the tool (the query) is untouched
        np.testing.assert_array_equal(run["noise"][0], factual["noise"][0])
        assert run["choice"][0] == factual["choice"][0]
        # the answer decides from the new tool output
        expected = np.asarray(case["answer"][0]) + np.asarray(new)
        np.testing.assert_allclose(run["logits"][1], expected, rtol=1e-6)
        for i in (1, 2):
            if downstream == "held":
                np.testing.assert_array_equal(run["noise"][i], factual["noise"][i])
            elif downstream == "fresh":
                assert not np.array_equal(run["noise"][i], factual["noise"][i])
            else:
                assert run["choice"][i] == factual["choice"][i]


def test_interventions_compose():
    case = refund_case()
    structure = bj.discover(bj.demos.refund_pipeline, case)
    world = WORLDS[0]
    factual = _trace(bj.demos.refund_pipeline, structure, case, world)
    plan = bj.interventions.do_action(structure, "planner", 1)
    plan = bj.interventions.do_resample(structure, "reviewer", 3, plan=plan)
    plan = bj.interventions.do_policy(structure, "writer", 1, plan=plan)
    run = _trace(bj.demos.refund_pipeline, structure, case, world, plan)
    assert run["choice"][0] == 1
    np.testing.assert_array_equal(run["variant"], [0, 0, 1, 1])
    np.testing.assert_array_equal(run["noise"][1], factual["noise"][1])
    fresh = bj.noise.gumbel_at(fresh_key(world.key, 3), "reviewer", 0, 2)
    np.testing.assert_array_equal(run["noise"][3], np.asarray(fresh))


def test_stacked_plans_match_single_runs():
    """vmap over a batch of mixed interventions equals a Python loop; jit equals eager."""
    case = tool_case()
    structure = bj.discover(tool_pipeline, case)
    world = WORLDS[0]
    factual = bj.pipeline.trace_run(tool_pipeline, structure, case, world)["choice"]
    plans = [
        bj.pipeline.factual_plan(structure),
        bj.interventions.do_resample(structure, "answer", 1),
        bj.interventions.do_action(structure, "query", 2, downstream="direct", factual=factual),
        bj.interventions.do_context(structure, "check", jnp.asarray([0.0, 3.0])),
        bj.interventions.do_observation(
            structure, "search", jnp.ones(4), downstream="fresh", stream=5
        ),
        bj.interventions.do_policy(structure, "query", 1),
    ]
    batched = bj.pipeline.plan_values(
        tool_pipeline, structure, case, world, bj.interventions.stack_plans(structure, plans)
    )
    loop = [bj.pipeline.run_score(tool_pipeline, structure, case, world, p) for p in plans]
    np.testing.assert_array_equal(np.asarray(batched), np.asarray(loop))
    jitted = jax.jit(lambda p: bj.pipeline.run_score(tool_pipeline, structure, case, world, p))
    for plan, eager in zip(plans, loop):
        assert float(jitted(bj.interventions.full_plan(structure, plan))) == float(eager)


def test_zero_shift_and_no_shift_agree():
    case = refund_case()
    structure = bj.discover(bj.demos.refund_pipeline, case)
    for world in WORLDS:
        base = bj.pipeline.trace_run(bj.demos.refund_pipeline, structure, case, world)
        zero = bj.interventions.do_context(structure, "writer", jnp.zeros(3))
        run = bj.pipeline.trace_run(bj.demos.refund_pipeline, structure, case, world, zero)
        np.testing.assert_array_equal(np.asarray(run["choice"]), np.asarray(base["choice"]))


# -- bad input -------------------------------------------------------------------------------
@pytest.fixture
def structure():
    return bj.discover(tool_pipeline, tool_case())


def test_error_step_out_of_range(structure):
    with pytest.raises(ValueError, match=r"`step` = 3 is out of range: this pipeline has 3 steps"):
        bj.interventions.do_resample(structure, 3, 0)
    with pytest.raises(ValueError, match=r"`step` = -1 is out of range"):
        bj.interventions.do_action(structure, -1, 0)
    with pytest.raises(TypeError, match=r"`step` must be a step index \(int\) or a step name"):
        bj.interventions.do_action(structure, 1.0, 0)


def test_error_unknown_step(structure):
    with pytest.raises(
        ValueError,
        match=r"`step` = 'rerank' is not a step of this pipeline; its steps are \['query', 'answer', 'check'\]",
    ):
        bj.interventions.do_resample(structure, "rerank", 0)
    with pytest.raises(ValueError, match=r"'search' is a deterministic site .* use do_observation"):
        bj.interventions.do_action(structure, "search", 0)


def test_error_option_out_of_range(structure):
    with pytest.raises(ValueError, match=r"`option` of step 'query' must be in \[0, 3\), got 3"):
        bj.interventions.do_action(structure, "query", 3)
    with pytest.raises(ValueError, match=r"`option` of step 'check' must be in \[0, 2\), got -1"):
        bj.interventions.do_action(structure, "check", -1)
    with pytest.raises(TypeError, match=r"`option` of step 'check' must be an integer scalar"):
        bj.interventions.do_action(structure, "check", 0.5)


def test_error_observation_on_sampling_step(structure):
    with pytest.raises(
        ValueError, match=r"`name` = 'answer' is a step that samples .* use do_action"
    ):
        bj.interventions.do_observation(structure, "answer", jnp.zeros(4))
    with pytest.raises(ValueError, match=r"`name` = 'lookup' is not a deterministic site"):
        bj.interventions.do_observation(structure, "lookup", jnp.zeros(4))
    with pytest.raises(
        ValueError,
        match=r"`value` for deterministic site 'search' must have shape \[4\], got \[3\]",
    ):
        bj.interventions.do_observation(structure, "search", jnp.zeros(3))


def test_error_other_arguments(structure):
    with pytest.raises(ValueError, match=r"`downstream` must be one of"):
        bj.interventions.do_resample(structure, 0, 0, downstream="sideways")
    with pytest.raises(ValueError, match=r"downstream='fresh' needs `stream`"):
        bj.interventions.do_action(structure, 0, 1, downstream="fresh")
    with pytest.raises(ValueError, match=r"downstream='direct' needs `factual`"):
        bj.interventions.do_action(structure, 0, 1, downstream="direct")
    with pytest.raises(
        ValueError, match=r"`factual` must be the factual run's choice at every draw site"
    ):
        bj.interventions.do_action(
            structure, 0, 1, downstream="direct", factual=jnp.zeros(2, jnp.int32)
        )
    with pytest.raises(ValueError, match=r"`stream` must be a non-negative integer, got -2"):
        bj.interventions.do_resample(structure, 0, -2)
    with pytest.raises(ValueError, match=r"`variant` = 2 does not exist at step 'query'"):
        bj.interventions.do_policy(structure, 0, 2)
    with pytest.raises(
        ValueError, match=r"`shift` of step 'check' must be a float array of shape \[2\]"
    ):
        bj.interventions.do_context(structure, "check", jnp.zeros(3))
    with pytest.raises(ValueError, match=r"`shift` of step 'check' must be real or -inf"):
        bj.interventions.do_context(structure, "check", jnp.asarray([0.0, jnp.inf]))
    with pytest.raises(TypeError, match=r"`plan` must be a blamejax.Plan"):
        bj.interventions.do_resample(structure, 0, 0, plan="factual")


# ==========================================================================================
# The contrastive estimator and CAR's re-draw game, on the pivotal and interaction SCMs
# ==========================================================================================

P = 0.3  # the mistake probability at the pivotal / interacting steps


@pytest.fixture(scope="module")
def pivotal():
    """300 failed runs of the pivotal SCM, each with its own recorded noise."""
    return failures(pivotal_pipeline, pivotal_cases, 300)


@pytest.fixture(scope="module")
def pivotal_results(pivotal):
    """Contrastive effects of the 300 pivotal failures, 200 rollouts, each downstream rule."""
    cases, worlds = pivotal
    return {
        mode: bj.contrastive(pivotal_pipeline, cases, worlds, num_rollouts=200, downstream=mode)
        for mode in ("held", "fresh", "direct")
    }


@pytest.fixture(scope="module")
def interaction():
    return failures(interaction_pipeline, interaction_cases, 4)


# -- the pivotal SCM ---------------------------------------------------------------------------
@pytest.mark.parametrize("downstream", ["held", "fresh", "direct"])
def test_pivotal_effects_and_commitment(pivotal_results, downstream):
    """Effects within 4 s.e. of the analytic ones; s.e. of the mean over 300 failures x 200
    rollouts = sqrt(0.21 / 60000) = 0.0019. Where the truth is deterministic (0), exact.
    The point of commitment is `decide` in 300 of 300 failures (rate 1.0; with 200 rollouts
    it is missed only if all 200 re-draws fail again, probability 0.3^200)."""
    result = pivotal_results[downstream]
    truth = np.asarray(pivotal_analytic()[downstream])
    assert result.steps == ("read", "decide", "notify")
    effect = np.asarray(result.effect)
    np.testing.assert_allclose(effect.mean(0), truth, atol=4 * math.sqrt(P * (1 - P) / 60_000))
    for i, value in enumerate(truth):
        if value == 0.0:
            np.testing.assert_array_equal(effect[:, i], 0.0)  # no downstream effect at all
    np.testing.assert_array_equal(result.commitment, 1)
    assert not np.asarray(result.significant)[:, 2].any()  # nothing after `decide` is significant
    assert result.commitment_step(0) == "decide"


def test_held_and_fresh_differ_upstream_of_the_locus(pivotal_results):
    """Re-reading cannot change `decide` when its noise is held (0); with fresh downstream
    noise the re-read is credited with `decide`'s own luck, 1 - p."""
    held, fresh = pivotal_results["held"], pivotal_results["fresh"]
    np.testing.assert_array_equal(held.effect[:, 0], 0.0)
    assert abs(float(fresh.effect[:, 0].mean()) - (1 - P)) < 4 * math.sqrt(P * (1 - P) / 60_000)
    assert (
        not np.asarray(held.significant)[:, 0].any() and np.asarray(fresh.significant)[:, 0].all()
    )


def test_good_run_has_negative_effect():
    """On a run that went well, re-deciding can only hurt: effect = -P(bad | do) = -p."""
    cases, worlds = failures(pivotal_pipeline, pivotal_cases, 300, bad=False)
    result = bj.contrastive(pivotal_pipeline, cases, worlds, num_rollouts=200)
    effect = np.asarray(result.effect)
    assert abs(effect[:, 1].mean() + P) < 4 * math.sqrt(P * (1 - P) / 60_000)
    np.testing.assert_array_equal(effect[:, [0, 2]], 0.0)
    np.testing.assert_array_equal(result.commitment, 1)
    assert (np.asarray(result.high)[:, 1] < 0).all()


def test_estimated_baseline_telescopes(interaction):
    """baseline='rollouts' with fresh downstream noise: effect_k = P(bad | k kept, later
    re-drawn) - P(bad | k re-drawn too). Interaction SCM: (p - p^2, 1 - p, 0) = (0.21, 0.7, 0),
    adding up to 1 - p^2 = 0.91. s.e. of each mean over 4 x 1000 runs per side
    <= sqrt(2 * 0.25 / 4000) = 0.0112."""
    cases, worlds = interaction
    result = bj.contrastive(
        interaction_pipeline,
        cases,
        worlds,
        num_rollouts=1000,
        downstream="fresh",
        baseline="rollouts",
    )
    effect = np.asarray(result.effect).mean(0)
    np.testing.assert_allclose(effect, [P - P**2, 1 - P, 0.0], atol=4 * 0.0112)
    assert abs(effect.sum() - (1 - P**2)) < 4 * 0.0112 * math.sqrt(2)
    np.testing.assert_allclose(np.asarray(result.baseline).mean(0), [P, 1.0, 1.0], atol=4 * 0.0073)
    # the logger can change nothing: both sides are exactly 1, and its interval holds 0
    assert (np.asarray(result.low)[:, 2] <= 0).all() and (np.asarray(result.high)[:, 2] >= 0).all()
    np.testing.assert_array_equal(result.commitment, 1)


def test_custom_intervention(pivotal):
    """Any plan can be the intervention: forcing option 0 (read: routine, decide: deny,
    notify: email) saves the run only at `decide`."""
    cases, worlds = pivotal
    structure = bj.discover(pivotal_pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))

    def force_first(k, rollout, factual):
        return bj.interventions.do_action(structure, k, 0)

    result = bj.contrastive(
        pivotal_pipeline, cases, worlds, num_rollouts=3, intervention=force_first
    )
    np.testing.assert_array_equal(result.effect, np.tile([0.0, 1.0, 0.0], (300, 1)))
    np.testing.assert_array_equal(result.commitment, 1)
    assert "force_first" in result.table(0)


def test_custom_resample_equals_default(pivotal, pivotal_results):
    """The default re-draw, rebuilt from the public operators (traced rollout index, fresh
    downstream noise), gives exactly the same counts."""
    cases, worlds = pivotal
    structure = bj.discover(pivotal_pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))

    def redraw_fresh(k, rollout, factual):
        return bj.interventions.do_resample(structure, k, rollout, downstream="fresh")

    result = bj.contrastive(
        pivotal_pipeline, cases, worlds, num_rollouts=200, intervention=redraw_fresh
    )
    np.testing.assert_array_equal(result.num_bad, pivotal_results["fresh"].num_bad)


def test_table(pivotal_results):
    result = pivotal_results["held"]
    table = result.table(3)
    assert "decide" in table and "point of commitment: decide" in table and "1 - 0.05/3" in table
    assert "1[factual run bad] = 1" in table and "200 runs per step" in table
    with pytest.raises(ValueError, match=r"`failure` must be an int in \[0, 300\), got 300"):
        result.table(300)
    # when no step qualifies, the result says so
    none = eqx.tree_at(lambda r: r.commitment, result, jnp.full((300,), -1, jnp.int32))
    assert none.commitment_step(0) is None
    assert "point of commitment: none" in none.table(0)


# -- the interaction SCM -------------------------------------------------------------------------
def test_interaction_effects_over_count(interaction):
    """Single-step effects (held 0.7, 0.7, 0; fresh 0.91, 0.7, 0) add up to more than the
    total 0.91 that the Shapley values share. s.e. of the means over 4 x 1000 runs <=
    sqrt(0.21 / 4000) = 0.0073."""
    cases, worlds = interaction
    truth = interaction_analytic()
    for downstream in ("held", "fresh"):
        result = bj.contrastive(
            interaction_pipeline, cases, worlds, num_rollouts=1000, downstream=downstream
        )
        effect = np.asarray(result.effect).mean(0)
        np.testing.assert_allclose(effect, truth[downstream], atol=4 * 0.0073)
        assert effect.sum() > 1 - P**2 + 0.3  # 1.4 or 1.61 against 0.91
        np.testing.assert_array_equal(result.commitment, 1)  # the later check


def test_interaction_resample_shapley(interaction):
    """CAR's game: Shapley (1 - p^2)/2 = 0.455 for each check, 0 for the logger, sum 1 - p^2.
    Per rollout, phi_id = A (1 - B/2) with A, B ~ Bernoulli(0.7): sd = sqrt(0.3325 - 0.455^2)
    = 0.3542; over 4 x 2000 rollouts the s.e. is 0.0040."""
    cases, worlds = interaction
    game = bj.interventions.resample_shapley(interaction_pipeline, cases, worlds, num_rollouts=2000)
    sd = math.sqrt(0.7 * (0.3 + 0.7 * 0.25) - 0.455**2)
    se = sd / math.sqrt(8000)
    shapley = np.asarray(game.shapley)
    np.testing.assert_allclose(shapley.mean(0), [0.455, 0.455, 0.0], atol=4 * se)
    np.testing.assert_array_equal(shapley[:, 2], 0.0)  # the logger is a null player, exactly
    np.testing.assert_allclose(shapley.sum(1), np.asarray(game.total), atol=1e-5)  # efficiency
    np.testing.assert_allclose(np.asarray(game.empty), 0.0)
    assert abs(float(game.full.mean()) - (1 - P**2)) < 4 * math.sqrt(0.91 * 0.09 / 8000)
    # the reported standard error estimates sd / sqrt(R)
    np.testing.assert_allclose(np.asarray(game.stderr)[:, :2], sd / math.sqrt(2000), rtol=0.1)
    np.testing.assert_allclose(np.asarray(game.fix_alone).mean(0), [0.7, 0.7, 0.0], atol=4 * 0.0073)
    assert "id_check" in game.table(0)


def test_blamejax_game_oracle_is_exact(interaction):
    """blamejax's own game, oracle fix under the same noise: exactly 1/2, 1/2, 0."""
    cases, worlds = interaction
    result = bj.exact_blame(
        interaction_pipeline, cases, worlds, fixes={"id_check": 2, "fraud_check": 2}
    )
    np.testing.assert_allclose(result.shapley, np.tile([0.5, 0.5, 0.0], (4, 1)), atol=1e-6)


def test_blamejax_game_better_model(interaction):
    """Better model (mistakes 0.1) under the failure's abducted noise: a missed check turns
    good with probability c = (0.9 - 0.7)/0.3 = 2/3, Shapley c (1 - c/2) = 4/9 each, total
    8/9. Per world phi = A (1 - B/2) with A, B ~ Bernoulli(2/3): sd = sqrt(11)/9 = 0.3685;
    with 2000 worlds the s.e. is 0.0082."""
    cases, worlds = interaction
    one = jax.tree_util.tree_map(lambda x: x[:1], cases)
    structure = bj.discover(interaction_pipeline, jax.tree_util.tree_map(lambda x: x[0], one))
    world = bj.World(key=worlds.key[0, 0])
    observed = bj.pipeline.trace_run(
        interaction_pipeline, structure, jax.tree_util.tree_map(lambda x: x[0], one), world
    )["choice"][None]
    np.testing.assert_array_equal(observed[0, :2], [1, 1])  # both checks missed
    inferred = bj.inferred_worlds(interaction_pipeline, one, observed, 5, 2000)
    result = bj.exact_blame(interaction_pipeline, one, inferred)
    truth = interaction_analytic()
    se = math.sqrt(11) / 9 / math.sqrt(2000)
    np.testing.assert_allclose(result.shapley[0], truth["better_shapley"], atol=4 * se)
    np.testing.assert_allclose(truth["better_shapley"], [4 / 9, 4 / 9, 0.0])
    assert abs(float(result.total[0]) - 8 / 9) < 4 * math.sqrt((8 / 9) * (1 / 9) / 2000)


# -- bad input ---------------------------------------------------------------------------------
def test_errors(pivotal):
    cases, worlds = pivotal
    run = lambda **kw: bj.contrastive(pivotal_pipeline, cases, worlds, num_rollouts=4, **kw)  # noqa: E731
    with pytest.raises(ValueError, match=r"`steps` = 'rerank' is not a step of this pipeline"):
        run(steps=["rerank"])
    with pytest.raises(ValueError, match=r"`steps` = 3 is out of range: this pipeline has 3 steps"):
        run(steps=[3])
    with pytest.raises(ValueError, match=r"`steps` lists a step twice"):
        run(steps=["decide", 1])
    with pytest.raises(ValueError, match=r"`num_rollouts` must be a positive int, got 0"):
        bj.contrastive(pivotal_pipeline, cases, worlds, num_rollouts=0)
    with pytest.raises(ValueError, match=r"`downstream` must be one of"):
        run(downstream="sideways")
    with pytest.raises(ValueError, match=r"`baseline` must be one of"):
        run(baseline="median")
    with pytest.raises(ValueError, match=r"`delta` must be an error level in \(0, 1\), got 1.5"):
        run(delta=1.5)
    with pytest.raises(ValueError, match=r"a custom `intervention` sets its own downstream rule"):
        run(intervention=lambda k, r, f: None, downstream="fresh")
    # fresh worlds disagree on the run's outcome: the factual baseline is not fixed
    two = jax.tree_util.tree_map(lambda x: x[:2], cases)
    with pytest.raises(
        ValueError, match=r"run \d is bad in \d of its 8 worlds, so `baseline='factual'`"
    ):
        bj.contrastive(pivotal_pipeline, two, bj.fresh_worlds(0, range(2), 8), num_rollouts=4)
    with pytest.raises(
        ValueError, match=r"`observed` must be an int array of shape \[F, sites\] = \[300, 3\]"
    ):
        bj.worlds.replay_fidelity(pivotal_pipeline, cases, worlds, jnp.zeros((300, 2), jnp.int32))


# -- slow statistical checks --------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("downstream", ["held", "fresh", "direct"])
def test_commitment_rate_many_seeds(downstream):
    """With R = 2 rollouts, `decide` is found iff one of its 2 re-draws is good: probability
    1 - p^2 = 0.91; otherwise no step qualifies (never `read` or `notify`: under fresh noise
    `read`'s rollouts re-draw `decide` with the same streams, so they fail together). Over
    2000 failures from 4 root seeds, the rate's s.e. is sqrt(0.91 * 0.09 / 2000) = 0.0064."""
    hits, total = 0, 0
    for seed in range(4):
        cases, worlds = failures(pivotal_pipeline, pivotal_cases, 500, seed=100 + seed)
        result = bj.contrastive(
            pivotal_pipeline, cases, worlds, num_rollouts=2, downstream=downstream
        )
        commitment = np.asarray(result.commitment)
        assert set(np.unique(commitment)) <= {-1, 1}
        hits, total = hits + int(np.sum(commitment == 1)), total + commitment.size
    rate = hits / total
    assert abs(rate - (1 - P**2)) < 4 * math.sqrt((1 - P**2) * P**2 / total), rate


@pytest.mark.slow
def test_pivotal_games(pivotal):
    """The pivotal SCM under both games: CAR's re-draw game (0, 1 - p, 0) (s.e. over 300 x
    200 rollouts: sqrt(0.21 / 60000) = 0.0019) and blamejax's, oracle (0, 1, 0) exactly."""
    cases, worlds = pivotal
    truth = pivotal_analytic()
    game = bj.interventions.resample_shapley(pivotal_pipeline, cases, worlds, num_rollouts=200)
    np.testing.assert_allclose(
        np.asarray(game.shapley).mean(0), truth["resample_shapley"], atol=4 * 0.0019
    )
    result = bj.exact_blame(pivotal_pipeline, cases, worlds, fixes={"decide": 2})
    np.testing.assert_allclose(
        result.shapley, np.tile(truth["oracle_shapley"], (300, 1)), atol=1e-6
    )


@pytest.mark.slow
def test_wilson_coverage_of_effect_intervals():
    """The effect interval of `decide` (truth 0.7) at level 1 - 0.1/3 covers the truth in
    about 96.7% of 2000 failures (Wilson is approximate; 30 rollouts). s.e. 0.004; we
    require coverage >= 0.967 - 0.03."""
    cases, worlds = failures(pivotal_pipeline, pivotal_cases, 2000, seed=3)
    result = bj.contrastive(pivotal_pipeline, cases, worlds, num_rollouts=30, delta=0.1)
    low, high = np.asarray(result.low)[:, 1], np.asarray(result.high)[:, 1]
    coverage = float(np.mean((low <= 0.7) & (0.7 <= high)))
    assert coverage >= 1 - 0.1 / 3 - 0.03, coverage
