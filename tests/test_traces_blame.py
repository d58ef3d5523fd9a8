"""Blaming traces (bj.traces.trace_cases / blame_runs) and reading results out
(bj.traces.readout).

Ground truth: a hand-written pipeline blamed directly with the same inferred worlds (the
trace route must agree bit for bit), and two-step runs whose values follow by hand.
"""

import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import blamejax as bj
from blamejax.traces import Run, Step

NEG = float("-inf")
OPTIONS = {"s0": ("a", "b", "c"), "s1": ("x", "y"), "s2": ("p", "q", "r")}


def direct(ctx, case):
    """The hand-written pipeline the traces are recorded from."""
    a = ctx.choose("s0", case["s0"])
    b = ctx.choose("s1", case["s1"], given=a)
    c = ctx.choose("s2", case["s2"], given=b)
    return a.take(case["ok0"]) * c.take(case["ok2"])


def _direct_cases(num_runs: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    s0 = rng.normal(size=(num_runs, 2, 3))
    s1 = rng.normal(size=(num_runs, 2, 3, 2))
    s2 = rng.normal(size=(num_runs, 2, 2, 3))
    s2[:, :, 1, 2] = NEG  # an impossible option, in both variants
    ok0 = np.ones((num_runs, 3))
    ok0[:, 2] = 0.0  # "c" is wrong at s0
    ok2 = np.zeros((num_runs, 3))
    ok2[:, 0] = 1.0  # only "p" is right at s2
    return {"s0": s0, "s1": s1, "s2": s2, "ok0": ok0, "ok2": ok2}


def _recorded_runs(cases, seed: int = 7):
    """Run `direct` once per case under its recorded noise and write down what a log keeps:
    the tables, the choices and the accept labels."""
    num_runs = cases["s0"].shape[0]
    out = bj.replay(direct, cases, bj.recorded_worlds(seed, range(num_runs)))
    choices = np.asarray(out["choice"])[:, 0]  # [F, sites]
    scores = np.asarray(out["score"])[:, 0]
    runs = []
    for f in range(num_runs):
        steps = []
        for i, name in enumerate(("s0", "s1", "s2")):
            table = cases[name][f]
            accept = {"s0": ("a", "b"), "s2": ("p",)}.get(name)
            steps.append(
                Step(
                    name,
                    agent={"s0": "Planner", "s1": "Searcher", "s2": "Planner"}[name],
                    parents=() if i == 0 else (("s0", "s1")[i - 1],),
                    given=None if i == 0 else ("s0", "s1")[i - 1],
                    options=OPTIONS[name],
                    logits={"factual": table[0].tolist(), "fix": table[1].tolist()},
                    accept=accept,
                    choice=OPTIONS[name][choices[f, i]],
                )
            )
            if i == 0:
                steps.append(Step("think", agent="Planner", output="free text"))
        runs.append(Run(f"run-{f}", tuple(steps), passed=bool(scores[f] >= 1)))
    return runs, choices


def test_trace_blame_equals_direct_blame_bit_for_bit():
    cases = _direct_cases(6)
    runs, choices = _recorded_runs(cases)
    tc = bj.traces.trace_cases(runs)
    assert tc.steps == ("s0", "s1", "s2") and tc.players == tc.steps
    assert tc.unblamable == {"think": bj.traces.NO_OPTIONS}
    np.testing.assert_array_equal(tc.observed, choices)
    for name in ("s0", "s1", "s2"):
        np.testing.assert_array_equal(tc.cases["logits"][name], cases[name])
    out = bj.traces.blame_runs(runs, key=3, num_worlds=4)
    worlds = bj.inferred_worlds(direct, cases, choices, jr.key(3), 4)
    expected = bj.exact_blame(direct, cases, worlds)
    for field in ("shapley", "banzhaf", "fix_alone", "leave_one_out", "empty", "full", "last_step"):
        np.testing.assert_array_equal(
            np.asarray(getattr(out.result, field)), np.asarray(getattr(expected, field))
        )
    for ours, theirs in zip(out.worlds.overrides, worlds.overrides):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    # The inferred worlds reproduce every observed choice.
    fidelity = bj.worlds.replay_fidelity(tc.pipeline, tc.cases, out.worlds, tc.observed)
    assert fidelity.rate == 1.0
    # The score of the observed choices is what the log recorded.
    assert out.mismatched == ()
    assert not np.allclose(np.asarray(out.result.shapley), 0.0)  # a non-trivial instance


@pytest.mark.slow
def test_trace_blame_mc_equals_direct_mc_bit_for_bit():
    cases = _direct_cases(3, seed=1)
    runs, choices = _recorded_runs(cases, seed=2)
    out = bj.traces.blame_runs(
        runs, key=5, num_worlds=2, estimator="mc", max_evaluations=200, stop=()
    )
    worlds = bj.inferred_worlds(direct, cases, choices, jr.key(5), 2)
    expected = bj.mc_shapley(
        direct, cases, worlds, jr.fold_in(jr.key(5), 1), max_evaluations=200, stop=()
    )
    np.testing.assert_array_equal(np.asarray(out.result.values), np.asarray(expected.values))
    np.testing.assert_array_equal(np.asarray(out.result.lower), np.asarray(expected.lower))


def _two_step(s1_rows, s0_choice="bad", s1_choice="bad", passed=False, fix1=None):
    """s0 picks good/bad; s1 (given s0) picks ok/bad; the run passes iff s1 says ok."""
    s0 = Step(
        "s0",
        agent="A",
        options=("good", "bad"),
        logits={"factual": (0.0, 0.0), "fix": (0.0, NEG)},
        choice=s0_choice,
    )
    s1 = Step(
        "s1",
        agent="B",
        parents=("s0",),
        given="s0",
        options=("ok", "bad"),
        logits={"factual": s1_rows, "fix": fix1 or ((0.0, NEG), (0.0, NEG))},
        accept=("ok",),
        choice=s1_choice,
    )
    return Run("two", (s0, s1), passed=passed)


def test_two_steps_by_hand_either_fix_repairs():
    # s1 follows s0 for sure: given good it says ok, given bad it says bad. Each fix alone
    # repairs the run: v = 0, 1, 1, 1, so Shapley 1/2 each, fix-alone 1 each.
    run = _two_step(((0.0, NEG), (NEG, 0.0)))
    out = bj.traces.blame_runs([run], num_worlds=4)
    np.testing.assert_allclose(np.asarray(out.result.shapley[0]), [0.5, 0.5], atol=1e-7)
    np.testing.assert_allclose(np.asarray(out.result.fix_alone[0]), [1.0, 1.0], atol=1e-7)
    read = bj.traces.readout(out.result, out.cases.agent_map)
    assert read.when == ("s0", "s1") and read.who == ("A", "B")  # tied, both named
    assert read.earliest_repair == "s0" and read.repairs == ("s0", "s1")
    assert read.ranks == (1, 1)


def test_two_steps_by_hand_same_luck_same_choice():
    # s1's logits are the same (0, 0) whatever s0 chose: under the Gumbel-max coupling the
    # same noise then makes the same choice, so fixing s0 alone never helps: Shapley (0, 1).
    run = _two_step(((0.0, 0.0), (0.0, 0.0)))
    out = bj.traces.blame_runs([run], num_worlds=4)
    np.testing.assert_allclose(np.asarray(out.result.shapley[0]), [0.0, 1.0], atol=1e-7)
    read = bj.traces.readout(out.result, out.cases.agent_map)
    assert read.earliest_repair == "s1" and read.who == ("B",)


def test_two_steps_abduction_matches_closed_form():
    # Given s0 = good, s1's logits are (log 3, 0). The run chose bad under (0, 0), so
    # D = g_ok - g_bad ~ Logistic is known to be < 0; fixing s0 alone passes iff D > -log 3:
    # P = (1/2 - sigmoid(-log 3)) / (1/2) = 1/2. With 4000 worlds the mean has standard error
    # 0.008; the test allows 0.04 (5 standard errors; fixed seed).
    run = _two_step(((np.log(3.0), 0.0), (0.0, 0.0)))
    out = bj.traces.blame_runs([run], key=11, num_worlds=4000)
    alone = float(out.result.empty[0] + out.result.fix_alone[0, 0])
    assert abs(alone - 0.5) < 0.04


def test_user_score_equals_default_rule():
    run = _two_step(((0.0, 0.0), (0.0, 0.0)))
    default = bj.traces.blame_runs([run], num_worlds=4)
    score = lambda choices: (choices["s1"].index == 0).astype(jnp.float32)
    custom = bj.traces.blame_runs([run], num_worlds=4, score=score)
    np.testing.assert_array_equal(
        np.asarray(default.result.shapley), np.asarray(custom.result.shapley)
    )


def test_equal_runs_reuse_the_compiled_functions():
    # The pipeline is a frozen value: blaming equal runs again traces nothing new.
    from blamejax._compile import trace_count

    run = _two_step(((0.0, NEG), (NEG, 0.0)))
    first = bj.traces.trace_cases([run])
    assert first.pipeline == bj.traces.trace_cases([run]).pipeline
    bj.traces.blame_runs([run], num_worlds=4)
    before = trace_count("exact.chunk")
    bj.traces.blame_runs([run], num_worlds=4)
    assert trace_count("exact.chunk") == before


def test_runs_with_different_steps_are_grouped_or_refused():
    one = _two_step(((0.0, NEG), (NEG, 0.0)))
    other = Run(
        "other",
        (
            Step(
                "t0",
                options=("x", "y"),
                logits={"factual": (0.0, 0.0), "fix": (1.0, 0.0)},
                accept=("x",),
                choice="y",
            ),
        ),
        passed=False,
    )
    with pytest.raises(
        ValueError, match=r"'two' and 'other' have different drawn steps.*group_runs"
    ):
        bj.traces.trace_cases([one, other])
    groups = bj.traces.group_runs([one, other, one])
    assert [[r.run for r in g] for g in groups] == [["two", "two"], ["other"]]


def test_unblamable_steps_are_named_with_their_reason():
    free = Step("chat", agent="A", output="some text")
    no_logits = Step("vote", agent="B", options=("yes", "no"), choice="no")
    no_fix = Step("s9", agent="C", options=("u", "v"), logits={"factual": (0.0, 0.0)}, choice="u")
    base = _two_step(((0.0, NEG), (NEG, 0.0)))
    run = Run("mixed", (free, no_logits, no_fix) + base.steps, passed=False)
    tc = bj.traces.trace_cases([run])
    assert tc.steps == ("s9", "s0", "s1") and tc.players == ("s0", "s1")
    assert tc.unblamable == {
        "chat": bj.traces.NO_OPTIONS,
        "vote": bj.traces.NO_LOGITS,
        "s9": "no 'fix' variant in its logits (drawn with its factual logits, not blamed)",
    }
    out = bj.traces.blame_runs([run], num_worlds=4)
    assert out.result.steps == ("s0", "s1") and out.unblamable == tc.unblamable
    np.testing.assert_allclose(np.asarray(out.result.shapley[0]), [0.5, 0.5], atol=1e-7)


def test_recorded_outcome_that_disagrees_with_the_score_is_reported():
    run = _two_step(((0.0, NEG), (NEG, 0.0)), passed=True)  # its choices fail the accept rule
    assert bj.traces.blame_runs([run], num_worlds=4).mismatched == ("two",)


def test_bad_traces_get_clear_errors():
    with pytest.raises(ValueError, match=r"run 'two', step 's1'.*no observed `choice`"):
        bj.traces.trace_cases([_two_step(((0.0, NEG), (NEG, 0.0)), s1_choice=None)])
    with pytest.raises(ValueError, match=r"run 'two', step 's1'.*'ok' has factual logit -inf"):
        bj.traces.trace_cases([_two_step(((0.0, NEG), (NEG, 0.0)), s1_choice="ok")])
    s0 = Step("s0", options=("a", "b"), choice="a")
    s1 = Step(
        "s1",
        parents=("s0",),
        given="s0",
        options=("a", "b"),
        logits={"factual": ((0.0, 0.0), (0.0, 0.0)), "fix": ((0.0, 0.0), (0.0, 0.0))},
        accept=("a",),
        choice="a",
    )
    with pytest.raises(ValueError, match=r"step 's1': it is given step 's0', which is not drawn"):
        bj.traces.trace_cases([Run("g", (s0, s1), passed=False)])
    plain = Step(
        "s0", options=("a", "b"), logits={"factual": (0.0, 0.0), "fix": (0.0, 0.0)}, choice="a"
    )
    with pytest.raises(ValueError, match=r"no drawn step has `accept` labels.*give `score=`"):
        bj.traces.trace_cases([Run("n", (plain,), passed=False)])
    with pytest.raises(ValueError, match=r"no decision step with options, logits and a choice"):
        bj.traces.trace_cases([Run("t", (Step("x", output="text"),), passed=False)])
    with pytest.raises(TypeError, match=r"`runs\[0\]` must be a bj.traces.Run"):
        bj.traces.trace_cases([{"run": "x"}])
    with pytest.raises(ValueError, match=r"`estimator` must be one of"):
        bj.traces.blame_runs([_two_step(((0.0, NEG), (NEG, 0.0)))], estimator="batch")
    with pytest.raises(ValueError, match=r"`max_evaluations`.*required"):
        bj.traces.blame_runs([_two_step(((0.0, NEG), (NEG, 0.0)))], estimator="mc")


# --------------------------------------------------------------------------------------
# Read-outs.
# --------------------------------------------------------------------------------------

REFUND_AGENTS = {"planner": "A", "retriever": "B", "writer": "B", "reviewer": "A"}


def _refund_result():
    cases = bj.demos.refund_cases(num_cases=1)
    return bj.exact_blame(bj.demos.refund_pipeline, cases, bj.recorded_worlds(0, range(1)))


def test_readout_of_the_refund_game_by_hand():
    # Shapley 5/12, 5/12, 1/12, 1/12; agent A = 5/12 + 1/12 = 1/2 = agent B.
    read = bj.traces.readout(_refund_result(), REFUND_AGENTS)
    np.testing.assert_allclose(read.per_step, [5 / 12, 5 / 12, 1 / 12, 1 / 12], atol=1e-6)
    assert read.per_agent.keys() == {"A", "B"}
    np.testing.assert_allclose(list(read.per_agent.values()), [0.5, 0.5], atol=1e-6)
    assert read.who == ("A", "B") and read.when == ("planner", "retriever")
    assert [s for s, _ in read.ranking] == ["planner", "retriever", "writer", "reviewer"]
    assert read.ranks == (1, 1, 3, 3)
    assert read.earliest_repair == "planner" and read.repairs == ("planner", "retriever")


def _exact(shapley, fix_alone, empty=0.0, full=1.0):
    n = len(shapley)
    return bj.ExactResult(
        steps=tuple(f"s{i}" for i in range(n)),
        shapley=jnp.asarray([shapley]),
        banzhaf=jnp.asarray([shapley]),
        fix_alone=jnp.asarray([fix_alone]),
        leave_one_out=jnp.asarray([shapley]),
        interactions=None,
        empty=jnp.asarray([empty]),
        full=jnp.asarray([full]),
        last_step=jnp.zeros((1, 1), jnp.int32),
        score_range=(0.0, 1.0),
    )


def test_readout_ties_within_the_tolerance_only():
    result = _exact([0.3, 0.2, 0.3 - 5e-7, 0.2 - 2e-6], [0.5, 1.0, 0.25, 1.0])
    read = bj.traces.readout(result, {"s0": "A", "s1": "B", "s2": "C", "s3": "B"})
    assert read.when == ("s0", "s2")  # within 1e-6 of the top
    assert read.ranks == (1, 1, 3, 4)  # s3 is 2e-6 below s1: not tied
    assert read.who == ("B",)  # 0.4 - 2e-6 against 0.3
    assert read.earliest_repair == "s1"  # the first with v({i}) = 1
    loose = bj.traces.readout(result, tolerance=1e-5)
    assert loose.ranks == (1, 1, 3, 3) and loose.who == () and loose.per_agent == {}
    strict = bj.traces.readout(result, tolerance=0.0)
    assert strict.when == ("s0",)
    assert bj.traces.readout(result, threshold=0.5).earliest_repair == "s0"


@pytest.mark.slow
def test_readout_of_monte_carlo_and_batch_results():
    cases = bj.demos.refund_cases(num_cases=2)
    mc = bj.mc_shapley(
        bj.demos.refund_pipeline,
        cases,
        bj.recorded_worlds(0, range(2)),
        0,
        max_evaluations=400,
        stop=(),
    )
    read = bj.traces.readout(mc, REFUND_AGENTS, failure=0)  # case 0 fails: no repair to name
    np.testing.assert_array_equal(read.per_step, np.asarray(mc.values[0], np.float64))
    assert float(mc.empty[0]) < 1.0
    assert read.earliest_repair is None and "no fix-alone" in read.repair_note
    read = bj.traces.readout(mc, REFUND_AGENTS, failure=1)  # case 1's factual replay passes
    np.testing.assert_array_equal(read.per_step, np.asarray(mc.values[1], np.float64))
    assert float(mc.empty[1]) == 1.0
    assert read.earliest_repair is None and "not a failure at these steps" in read.repair_note
    batch = bj.blame_batch(bj.demos.refund_pipeline, bj.demos.refund_cases(num_cases=20), 0)
    read = bj.traces.readout(batch, REFUND_AGENTS)
    np.testing.assert_array_equal(read.per_step, batch.shapley[0])
    first = [s for s, r in zip(batch.steps, batch.resolve[0]) if r >= 1.0]
    assert read.repairs == tuple(first) and read.earliest_repair == (first[0] if first else None)


def test_readout_errors():
    result = _refund_result()
    with pytest.raises(ValueError, match=r"`failure` must be an int in \[0, 1\), got 1"):
        bj.traces.readout(result, failure=1)
    with pytest.raises(ValueError, match=r"`agents` names steps \['nope'\]"):
        bj.traces.readout(result, {"nope": "A"})
    with pytest.raises(
        TypeError, match=r"`result` must be an ExactResult, MCResult or BatchResult"
    ):
        bj.traces.readout({"shapley": 1})
    with pytest.raises(ValueError, match=r"`tolerance` must be a finite number >= 0"):
        bj.traces.readout(result, tolerance=-1.0)
