"""The worlds a failure is replayed in: inferred (abducted) worlds, and replay fidelity.

Abduction is posterior Gumbel noise given an observed Gumbel-max choice. The real check is
against rejection sampling: draw prior Gumbels, keep those under which the observed option
wins, and read the counterfactual choice under changed logits. A wrong posterior would
still replay the factual run (every sample forces the observed option), so replaying the
factual run alone proves little; the counterfactual frequencies do.
"""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import failures

import blamejax as bj
from blamejax.demos import interaction_cases, interaction_pipeline

NEG = -np.inf

# (factual logits l, observed option k, counterfactual logits l'), K = 3..6. Every observed
# option has probability >= 0.1 under l (checked below).
CASES = [
    ([0.0, 0.0, 0.0], 0, [0.0, 1.0, 0.0]),
    ([1.0, 0.0, NEG, 0.3], 1, [1.0, 0.8, 0.5, -0.2]),  # -inf in l where l' is finite
    ([0.2, -0.4, 0.9, 0.0, -1.0], 2, [0.2, -0.4, NEG, 0.5, 1.0]),  # l' forbids the observed option
    ([NEG, 0.5, 0.0, NEG, 1.0, -0.5], 1, [0.3, 0.5, NEG, 0.0, 1.5, NEG]),  # -inf in both
    ([2.0, 0.0, 0.0], 1, [1.0, 0.0, 1.5]),  # an observation of probability 0.107
    (
        [0.13, -0.13, 0.64, 0.1, -0.54, 0.36],
        2,
        [1.07, -0.2, 0.5, -0.7, -0.9, 0.9],
    ),
]
NUM_PRIOR = 600_000  # prior draws for rejection sampling (>= 60,000 accepted in every case)
NUM_POSTERIOR = 200_000  # posterior draws from `abduct_gumbels`
NUM_SE = 5.0
FLOAT = jnp.result_type(float)  # float32, or float64 under JAX_ENABLE_X64


def _argmax(x):
    return jnp.argmax(x, axis=-1).astype(jnp.int32)


def _counts(choices, num_options, weights=None):
    if weights is None:
        weights = jnp.ones(choices.shape, jnp.int32)
    return jnp.zeros(num_options, jnp.int32).at[choices].add(weights)


@jax.jit
def _rejection(key, logits, observed, counterfactual):
    gumbels = jr.gumbel(key, (NUM_PRIOR, logits.shape[0]), logits.dtype)
    accepted = _argmax(logits[None, :] + gumbels) == observed
    choices = _argmax(counterfactual[None, :] + gumbels)
    return _counts(choices, logits.shape[0], accepted.astype(jnp.int32)), accepted.sum()


@jax.jit
def _posterior(key, logits, observed, counterfactual):
    keys = jr.split(key, NUM_POSTERIOR)
    # unchecked (a program JAX can cache): an impossible observation would show as `finite`
    # false, which the tests assert against
    abduct = functools.partial(bj.noise.abduct_gumbels, check=False)
    gumbels = jax.vmap(abduct, in_axes=(0, None, None))(keys, logits, observed)
    replays = jnp.all(_argmax(logits[None, :] + gumbels) == observed)
    finite = jnp.all(jnp.isfinite(gumbels))
    choices = _argmax(counterfactual[None, :] + gumbels)
    return _counts(choices, logits.shape[0]), replays, finite


@jax.jit
def _naive_posterior(key, logits, observed, counterfactual):
    """A wrong posterior that still replays the factual run: prior Gumbels, with the
    observed option's Gumbel raised just enough to win."""
    gumbels = jr.gumbel(key, (NUM_POSTERIOR, logits.shape[0]), logits.dtype)
    is_observed = jnp.arange(logits.shape[0], dtype=jnp.int32) == observed
    best_other = jnp.max(
        jnp.where(is_observed[None, :], -jnp.inf, logits[None, :] + gumbels), axis=-1
    )
    winner = jnp.maximum(gumbels[:, observed], best_other - logits[observed] + 1e-3)
    gumbels = jnp.where(is_observed[None, :], winner[:, None], gumbels)
    replays = jnp.all(_argmax(logits[None, :] + gumbels) == observed)
    choices = _argmax(counterfactual[None, :] + gumbels)
    return _counts(choices, logits.shape[0]), replays


def _arrays(case):
    logits, observed, counterfactual = case
    return (
        jnp.asarray(logits, FLOAT),
        jnp.int32(observed),
        jnp.asarray(counterfactual, FLOAT),
    )


@functools.cache
def _reference(index):
    """Rejection-sampling counts of the counterfactual choice, and the number accepted."""
    counts, accepted = _rejection(jr.key(1000 + index), *_arrays(CASES[index]))
    return np.asarray(counts, np.float64), int(accepted)


def _z_scores(counts_a, num_a, counts_b, num_b):
    """|p_a - p_b| / se per option, with the pooled standard error of a difference of two
    proportions, se = sqrt(p (1 - p) (1/n_a + 1/n_b)), p = (c_a + c_b) / (n_a + n_b). An
    option neither sample ever picked has z = 0."""
    p_a, p_b = counts_a / num_a, counts_b / num_b
    pooled = (counts_a + counts_b) / (num_a + num_b)
    se = np.sqrt(pooled * (1 - pooled) * (1 / num_a + 1 / num_b))
    return np.where(se > 0, np.abs(p_a - p_b) / np.where(se > 0, se, 1.0), 0.0)


@pytest.mark.parametrize("index", range(len(CASES)))
def test_abduction_matches_rejection_sampling(index):
    """Probabilistic, with fixed seeds. The counterfactual choice frequencies under l'
    from `abduct_gumbels` posterior noise (200,000 draws) equal those from rejection
    sampling (600,000 prior draws, the accepted ones kept) within 5 standard errors per
    option, the standard error being that of the difference of two proportions,
    sqrt(p (1 - p) (1/n_rejection + 1/n_posterior)) with p the pooled frequency. With
    27 comparisons (one per option and case), a correct posterior fails somewhere at 5 SE
    with probability about 27 x 5.7e-7 < 2e-5 (normal approximation)."""
    logits, observed, counterfactual = _arrays(CASES[index])
    assert float(jax.nn.softmax(logits)[observed]) >= 0.1  # the case meets its premise
    reference, accepted = _reference(index)
    assert accepted >= 60_000
    counts, replays, finite = _posterior(jr.key(2000 + index), logits, observed, counterfactual)
    counts = np.asarray(counts, np.float64)
    assert bool(replays), "a posterior sample does not replay the observed choice"
    assert bool(finite), "a posterior sample holds NaN or inf"
    assert counts.sum() == NUM_POSTERIOR
    # the counterfactual is not trivial: at least two options happen
    assert np.sum(reference / accepted > 0.05) >= 2
    # an option impossible under l' never happens under either
    impossible = np.isneginf(np.asarray(counterfactual))
    assert np.all(counts[impossible] == 0) and np.all(reference[impossible] == 0)
    z = _z_scores(reference, accepted, counts, NUM_POSTERIOR)
    assert np.all(z < NUM_SE), (reference / accepted, counts / NUM_POSTERIOR, z)


def test_rejection_check_catches_a_wrong_posterior():
    """Negative control: a wrong posterior that also replays the factual run (prior
    Gumbels, the observed option's Gumbel raised just enough to win) fails the same
    5-standard-error comparison by a wide margin in at least one case."""
    worst = []
    for index, case in enumerate(CASES):
        reference, accepted = _reference(index)
        counts, replays = _naive_posterior(jr.key(3000 + index), *_arrays(case))
        assert bool(replays)
        worst.append(
            _z_scores(reference, accepted, np.asarray(counts, np.float64), NUM_POSTERIOR).max()
        )
    assert max(worst) > 10 * NUM_SE, worst
    assert sum(z > NUM_SE for z in worst) >= 3, worst


# --------------------------------------------------------------------------------------
# -inf logits
# --------------------------------------------------------------------------------------


def test_neg_inf_option_keeps_prior_gumbel():
    """Probabilistic, fixed seed. An option with logit -inf gets a prior standard Gumbel
    (its mean, Euler's gamma, and CDF exp(-exp(-x)) within 5 standard errors over
    100,000 draws), never NaN or inf; no output holds NaN or inf; the observed option
    still wins. Also when the observed option is the only possible one."""
    num = 100_000
    keys = jr.split(jr.key(7), num)
    for logits, observed in (([NEG, 0.3, -0.2, NEG, 1.0], 1), ([NEG, 2.0, NEG], 1)):
        logits = jnp.asarray(logits, FLOAT)
        gumbels = jax.jit(jax.vmap(bj.noise.abduct_gumbels, in_axes=(0, None, None)))(
            keys, logits, observed
        )
        gumbels = np.asarray(gumbels, np.float64)
        assert np.all(np.isfinite(gumbels))
        assert np.all(np.argmax(np.asarray(logits) + gumbels, axis=-1) == observed)
        for j in np.flatnonzero(np.isneginf(np.asarray(logits))):
            x = gumbels[:, j]
            assert abs(x.mean() - np.euler_gamma) < NUM_SE * math.sqrt(math.pi**2 / 6 / num)
            for q in (-1.0, 0.0, 1.0, 3.0):
                p = math.exp(-math.exp(-q))
                assert abs(np.mean(x <= q) - p) < NUM_SE * math.sqrt(p * (1 - p) / num)


def test_abduct_gumbels_impossible_observation_raises_under_jit():
    logits = jnp.asarray([0.0, NEG, 1.0], jnp.float32)
    message = "abduct_gumbels: the observed option has logit -inf"
    with pytest.raises(eqx.EquinoxRuntimeError, match=message):
        eqx.filter_jit(bj.noise.abduct_gumbels)(jr.key(0), logits, jnp.int32(1))
    with pytest.raises(RuntimeError, match=message):
        jax.jit(bj.noise.abduct_gumbels)(jr.key(0), logits, jnp.int32(1))
    # one bad element of a vmapped batch is enough
    batch = jnp.stack([logits, logits])
    with pytest.raises(eqx.EquinoxRuntimeError, match=message):
        eqx.filter_jit(jax.vmap(bj.noise.abduct_gumbels))(
            jr.split(jr.key(0), 2), batch, jnp.asarray([0, 1], jnp.int32)
        )
    # a possible observation is fine under the same compiled function
    out = jax.jit(bj.noise.abduct_gumbels)(jr.key(0), logits, jnp.int32(2))
    assert np.all(np.isfinite(np.asarray(out)))


def test_unchecked_abduction_is_the_same_noise_in_a_cacheable_program():
    """`check=False` (what `inferred_worlds` and the MDP functions use, after checking the
    observations eagerly) draws bit for bit the noise the checked function draws, and its
    program holds no host callback, so JAX's persistent compile cache can keep it; the
    checked program holds one (equinox's `error_if`)."""
    keys = jr.split(jr.key(4), 6)
    logits = jnp.asarray([[0.0, NEG, 1.0], [0.5, -0.5, 0.2]] * 3, FLOAT)
    observed = jnp.asarray([0, 2, 2, 1, 0, 0], jnp.int32)

    def abduct(check):
        return jax.jit(jax.vmap(functools.partial(bj.noise.abduct_gumbels, check=check)))

    checked, unchecked = (np.asarray(abduct(c)(keys, logits, observed)) for c in (True, False))
    np.testing.assert_array_equal(unchecked, checked)
    assert np.all(np.argmax(np.asarray(logits) + unchecked, axis=-1) == np.asarray(observed))
    texts = [abduct(c).lower(keys, logits, observed).as_text() for c in (True, False)]
    assert "callback" in texts[0] and "callback" not in texts[1]


def _root_then_child(ctx, case):
    a = ctx.choose("a", case["a"])
    b = ctx.choose("b", case["b"], given=a)
    return b.take(case["reward"])


def test_inferred_worlds_impossible_observation_names_step():
    a = np.zeros((2, 1, 2), np.float32)
    b = np.zeros((2, 1, 2, 3), np.float32)
    b[1, 0, 1, 2] = -np.inf  # case 1: option 2 of b is impossible after a = 1
    cases = dict(a=jnp.asarray(a), b=jnp.asarray(b), reward=jnp.ones((2, 3), jnp.float32))
    bad = jnp.asarray([[1, 2], [1, 2]], jnp.int32)
    with pytest.raises(
        ValueError, match=r"case 1: the observed option 2 of step 'b' \(slot 0\) has logit -inf"
    ):
        bj.inferred_worlds(_root_then_child, cases, bad, 0, num_worlds=2)


# --------------------------------------------------------------------------------------
# An abducted world reproduces the factual run exactly
# --------------------------------------------------------------------------------------


def _table(rng, shape, neg_inf=0.3):
    """Random logits with some -inf entries, at least one finite option per row."""
    table = (1.5 * rng.normal(size=shape)).astype(np.float32)
    impossible = rng.random(shape) < neg_inf
    keep = rng.integers(shape[-1], size=shape[:-1])
    np.put_along_axis(impossible, keep[..., None], False, axis=-1)
    table[impossible] = -np.inf
    return table


def dag(ctx, case):
    a = ctx.choose("a", case["a"])
    b = ctx.choose("b", case["b"], given=a)
    c = ctx.choose("c", case["c"], given=(a, b))  # two parents
    d0 = ctx.choose("d", case["d"], given=c, slot=0)  # a step that draws twice
    d1 = ctx.choose("d", case["d"], given=c, slot=1)
    logits = case["e"] + d1.take(case["e_bias"])[None, :]  # free-form logits
    e = ctx.choose("e", logits)
    return (d0.take(case["reward_d"]) + e.take(case["reward_e"])) / 2


def dag_cases(rng, f):
    return dict(
        a=jnp.asarray(_table(rng, (f, 2, 3))),
        b=jnp.asarray(_table(rng, (f, 2, 3, 4))),
        c=jnp.asarray(_table(rng, (f, 2, 3, 4, 6))),
        d=jnp.asarray(_table(rng, (f, 2, 6, 3))),
        e=jnp.asarray(_table(rng, (f, 2, 4))),
        e_bias=jnp.asarray(rng.normal(size=(f, 3, 4)).astype(np.float32)),
        reward_d=jnp.asarray(rng.random((f, 3)).astype(np.float32)),
        reward_e=jnp.asarray(rng.random((f, 4)).astype(np.float32)),
    )


def test_inferred_worlds_reproduce_factual_run():
    """48 random cases of a pipeline with a chain of tabulated steps (`given`), a
    two-parent step, a step that draws twice and a free-form step, in tables with -inf
    entries: every one of 4 inferred worlds, replayed with the factual plan, makes exactly
    the observed choices and gets exactly the factual score; no abducted Gumbel is NaN or
    inf."""
    pipeline = dag
    num_cases, num_worlds = 48, 4
    cases = dag_cases(np.random.default_rng(11), num_cases)
    factual = bj.replay(pipeline, cases, bj.recorded_worlds(5, range(num_cases)))
    observed = factual["choice"][:, 0]
    # the factual runs took -inf-free options and the tables do hold -inf entries
    assert any(np.isneginf(np.asarray(x)).any() for x in jax.tree_util.tree_leaves(cases))
    worlds = bj.inferred_worlds(pipeline, cases, observed, jr.key(9), num_worlds=num_worlds)
    assert worlds.key.shape == (num_cases, num_worlds)
    for override in worlds.overrides:
        assert np.all(np.isfinite(np.asarray(override)))
    replayed = bj.replay(pipeline, cases, worlds)
    np.testing.assert_array_equal(
        np.asarray(replayed["choice"]),
        np.broadcast_to(np.asarray(observed)[:, None], replayed["choice"].shape),
    )
    np.testing.assert_array_equal(
        np.asarray(replayed["score"]),
        np.broadcast_to(np.asarray(factual["score"]), replayed["score"].shape),
    )
    # the abducted noise is what the run used, and it is not the recorded noise
    for i, override in enumerate(worlds.overrides):
        np.testing.assert_array_equal(np.asarray(replayed["noise"][i]), np.asarray(override))
        assert np.all(np.asarray(override) != np.asarray(factual["noise"][i]))
    # the scores are not all alike, so "exactly the factual score" is a real check
    assert len(np.unique(np.asarray(factual["score"]))) > num_cases // 2


def _demo_worlds_in_mode(x64: bool):
    """The refund demo's recorded replay, 3 inferred worlds per case abducted from it, and
    their replay under a fix of the planner, with `jax_enable_x64` on or off."""
    with jax.enable_x64(x64):
        cases = bj.demos.refund_cases(64)
        ids = np.arange(64)
        recorded = bj.replay(bj.demos.refund_pipeline, cases, bj.recorded_worlds(0, ids))
        observed = np.asarray(recorded["choice"][:, 0])
        worlds = bj.inferred_worlds(bj.demos.refund_pipeline, cases, observed, 3, 3)
        structure = bj.discover(bj.demos.refund_pipeline, jax.tree.map(lambda x: x[0], cases))
        planner = structure.step_index("planner")
        plan = bj.pipeline.set_step(bj.pipeline.factual_plan(structure), planner, variant=1)
        fixed = bj.replay(bj.demos.refund_pipeline, cases, worlds, plan)
        return recorded, worlds, fixed


def test_worlds_are_the_same_with_and_without_x64():
    """The same seed and case ids give the same worlds in float32 and in float64: the
    recorded noise equal, the same observed choices and scores on a demo, the abducted noise
    equal up to rounding, and the same counterfactual choices under it (one process)."""
    recorded32, worlds32, fixed32 = _demo_worlds_in_mode(False)
    recorded64, worlds64, fixed64 = _demo_worlds_in_mode(True)
    assert worlds32.overrides[0].dtype == jnp.float32
    assert worlds64.overrides[0].dtype == jnp.float64
    for low, high in zip(recorded32["noise"], recorded64["noise"]):
        np.testing.assert_array_equal(np.asarray(low, np.float64), np.asarray(high))
    for low, high in zip(worlds32.overrides, worlds64.overrides):
        np.testing.assert_allclose(np.asarray(low, np.float64), high, rtol=2e-6, atol=2e-6)
    for first, second in ((recorded32, recorded64), (fixed32, fixed64)):
        np.testing.assert_array_equal(first["choice"], second["choice"])
        np.testing.assert_array_equal(np.asarray(first["score"], np.float64), second["score"])
    failed = np.asarray(recorded32["score"][:, 0]) < 1
    assert 0 < failed.sum() < failed.size  # some failures, and some successes, to agree on
    assert (np.asarray(fixed32["choice"]) != np.asarray(recorded32["choice"])).any()


# --------------------------------------------------------------------------------------
# Vectorization
# --------------------------------------------------------------------------------------


def test_abduct_gumbels_vmap_equals_loop():
    """`abduct_gumbels` vmapped over [failures, worlds, sites] (logits and observations
    shared by the worlds of a failure) equals a Python loop over the same elements."""
    num_failures, num_worlds, num_sites, num_options = 2, 3, 4, 6
    rng = np.random.default_rng(2)
    logits = _table(rng, (num_failures, num_sites, num_options))
    observed = np.zeros((num_failures, num_sites), np.int32)
    for f in range(num_failures):
        for s in range(num_sites):
            observed[f, s] = rng.choice(np.flatnonzero(np.isfinite(logits[f, s])))
    keys = jr.split(jr.key(4), (num_failures, num_worlds, num_sites))
    logits, observed = jnp.asarray(logits), jnp.asarray(observed)

    per_site = jax.vmap(bj.noise.abduct_gumbels)  # keys [S], logits [S, K], observed [S]
    per_world = jax.vmap(per_site, in_axes=(0, None, None))
    batched = np.asarray(jax.jit(jax.vmap(per_world))(keys, logits, observed))
    assert batched.shape == (num_failures, num_worlds, num_sites, num_options)

    one = jax.jit(bj.noise.abduct_gumbels)
    looped = np.stack(
        [
            np.stack(
                [
                    np.stack(
                        [
                            np.asarray(one(keys[f, w, s], logits[f, s], observed[f, s]))
                            for s in range(num_sites)
                        ]
                    )
                    for w in range(num_worlds)
                ]
            )
            for f in range(num_failures)
        ]
    )
    np.testing.assert_array_equal(batched, looped)
    assert np.all(np.isfinite(batched))
    winners = np.argmax(np.asarray(logits)[:, None] + batched, axis=-1)
    np.testing.assert_array_equal(
        winners, np.broadcast_to(np.asarray(observed)[:, None], winners.shape)
    )


# --------------------------------------------------------------------------------------
# Replay fidelity
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def interaction():
    return failures(interaction_pipeline, interaction_cases, 4)


def test_replay_fidelity(interaction):
    """Replaying a record with its addressed noise or with noise abducted from it reproduces
    every choice: the action-match rate is exactly 1.0. Fresh noise does not."""
    cases, worlds = interaction
    structure = bj.discover(interaction_pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    case = jax.tree_util.tree_map(lambda x: x[0], cases)
    record = jnp.stack(
        [
            bj.pipeline.trace_run(interaction_pipeline, structure, case, bj.World(key=k))["choice"]
            for k in worlds.key[:, 0]
        ]
    )
    recorded = bj.worlds.replay_fidelity(interaction_pipeline, cases, worlds, record)
    assert recorded.rate == 1.0
    np.testing.assert_array_equal(recorded.per_run, 1.0)
    inferred = bj.inferred_worlds(interaction_pipeline, cases, record, 3, 8)
    assert bj.worlds.replay_fidelity(interaction_pipeline, cases, inferred, record).rate == 1.0
    fresh = bj.worlds.replay_fidelity(
        interaction_pipeline, cases, bj.fresh_worlds(3, range(4), 1), record
    )
    assert fresh.rate < 1.0  # the negative control: expected (0.3 + 0.3 + 0.5) / 3 = 0.37
    assert fresh.sites == ("id_check", "fraud_check", "logger")
