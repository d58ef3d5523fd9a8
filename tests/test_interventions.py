"""The do-operators: each changes exactly what it names, nothing upstream, and they compose."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blamejax as bj
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
            plan = bj.interventions.do_resample(structure, k, stream, downstream=downstream, **kwargs)
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
            run = _trace(pipeline, structure, case, world, bj.interventions.do_action(structure, k, option))
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
            pipeline, structure, case, world, bj.interventions.do_context(structure, k, jnp.asarray(shift))
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
        plan = bj.interventions.do_observation(structure, "search", new, downstream=downstream, **kwargs)
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
        bj.interventions.do_observation(structure, "search", jnp.ones(4), downstream="fresh", stream=5),
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
        bj.interventions.do_action(structure, 0, 1, downstream="direct", factual=jnp.zeros(2, jnp.int32))
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
