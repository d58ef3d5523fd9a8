"""Blame in expectation over the noise (`expected_worlds`): the posterior transition against
rejection sampling, the structured contraction against enumeration of the expected game,
sampled worlds converging to it, exact gradients, and the differentiable API's checks."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import blamejax as bj
from blamejax.structured import posterior_transition, prior_transition

TOL = 1e-6  # the float32 contraction of a 5-step game stays within it (measured ~1e-7)
K = 3
PARENTS = ((), (0,), (1,), (1, 2), (3,))  # a DAG: s3 reads two parents
SCOPE = (2, 4)  # the score reads s2 and s4


def dag_pipeline(ctx, case):
    t = case["tables"]
    s0 = ctx.choose("s0", t[0])
    s1 = ctx.choose("s1", t[1], given=s0)
    s2 = ctx.choose("s2", t[2], given=s1)
    s3 = ctx.choose("s3", t[3], given=(s1, s2))
    s4 = ctx.choose("s4", t[4], given=s3)
    return case["score"][s2.index, s4.index]


def dag_cases(seed=0, num_cases=2, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    tables = [
        jnp.asarray(rng.standard_normal((num_cases, 2) + (K,) * len(p) + (K,)) * 1.5, dtype)
        for p in PARENTS
    ]
    score = jnp.asarray(rng.uniform(size=(num_cases, K, K)), dtype)
    return dict(tables=tables, score=score)


OBSERVED = np.array([[0, 1, 2, 0, 1], [2, 2, 0, 1, 0]])


def _transitions(case, observed):
    """Every site's transition `[2, *K_parents, K]` in float64 (NumPy arrays)."""
    out = []
    with jax.enable_x64(True):
        for s, parents in enumerate(PARENTS):
            table = jnp.asarray(np.asarray(case["tables"][s], np.float64))
            if observed is None:
                out.append(np.asarray(prior_transition(table)))
                continue
            b = table[0][tuple(int(observed[p]) for p in parents)]
            rows = table.reshape(-1, K)
            post = jax.vmap(posterior_transition, in_axes=(0, None, None))(
                rows, b, int(observed[s])
            )
            out.append(np.asarray(post).reshape(table.shape))
    return out


def brute_force(case, observed):
    """The expected game by enumeration: every coalition, every path of options with its
    exact probability; then Shapley, Banzhaf, fix-alone and leave-one-out from the table."""
    trans = _transitions(case, observed)
    score = np.asarray(case["score"], np.float64)
    n = len(PARENTS)
    v = np.zeros(2**n)
    for mask in range(2**n):
        total = 0.0
        for path in itertools.product(range(K), repeat=n):
            p = 1.0
            for s, parents in enumerate(PARENTS):
                variant = (mask >> s) & 1
                p *= trans[s][(variant,) + tuple(path[q] for q in parents) + (path[s],)]
                if p == 0:
                    break
            total += p * score[path[SCOPE[0]], path[SCOPE[1]]]
        v[mask] = total
    shapley, banzhaf = np.zeros(n), np.zeros(n)
    for j in range(n):
        for mask in range(2**n):
            if mask >> j & 1:
                continue
            size = bin(mask).count("1")
            gain = v[mask | 1 << j] - v[mask]
            shapley[j] += (
                math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n) * gain
            )
            banzhaf[j] += gain / 2 ** (n - 1)
    full = 2**n - 1
    fix_alone = np.array([v[1 << j] - v[0] for j in range(n)])
    loo = np.array([v[full] - v[full & ~(1 << j)] for j in range(n)])
    return dict(
        shapley=shapley,
        banzhaf=banzhaf,
        fix_alone=fix_alone,
        leave_one_out=loo,
        empty=v[0],
        full=v[full],
    )


@pytest.fixture(scope="module")
def cases():
    return dag_cases()


@pytest.mark.parametrize("kind", ["fresh", "inferred"])
def test_expected_blame_equals_enumeration_of_the_expected_game(cases, kind):
    observed = OBSERVED if kind == "inferred" else None
    worlds = bj.expected_worlds(np.arange(2), observed)
    result = bj.exact_blame(dag_pipeline, cases, worlds)
    assert result.method == "structured"
    assert (np.asarray(result.last_step) == -1).all()
    for f in range(2):
        case = jax.tree_util.tree_map(lambda x: x[f], cases)
        want = brute_force(case, None if observed is None else observed[f])
        for name, value in want.items():
            got = np.asarray(getattr(result, name))[f]
            np.testing.assert_allclose(got, value, atol=TOL, rtol=0, err_msg=name)
        assert np.abs(want["shapley"]).max() > 1e-2  # a non-trivial game


@pytest.mark.parametrize("noise", ["expected-fresh", "expected-inferred"])
def test_blame_batch_takes_expected_noise(noise):
    cases = dag_cases(seed=3, num_cases=24)
    result = bj.blame_batch(dag_pipeline, cases, 0, noise=noise, threshold=0.5)
    ids = np.asarray(result.failure_ids)
    assert ids.size > 5
    sub = jax.tree_util.tree_map(lambda x: x[ids], cases)
    observed = None
    if noise == "expected-inferred":  # the failures' runs as they happened: recorded noise
        out = bj.replay(dag_pipeline, cases, bj.recorded_worlds(0, np.arange(24)))
        observed = np.asarray(out["choice"][ids, 0])
    want = bj.exact_blame(dag_pipeline, sub, bj.expected_worlds(ids, observed))
    np.testing.assert_allclose(result.shapley, np.asarray(want.shapley), atol=TOL, rtol=0)
    with pytest.raises(ValueError, match="estimator='mc'"):
        bj.blame_batch(dag_pipeline, cases, 0, noise=noise, estimator="mc")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_posterior_transition_matches_rejection_sampling(seed):
    """Probabilistic (fixed seeds): each probability within 4.5 standard errors of the share
    of 2,000,000 accepted Gumbel draws (rejection sampling of the observation)."""
    rng = np.random.default_rng(seed)
    num = 4
    b = rng.standard_normal(num)
    a = b + 1.5 * rng.standard_normal(num)
    if seed == 1:
        b[2] = -np.inf  # impossible in the observed run: keeps its prior noise
    if seed == 2:
        a[1] = -np.inf  # impossible under the intervention
    o = 0
    with jax.enable_x64(True):
        got = np.asarray(posterior_transition(jnp.asarray(a), jnp.asarray(b), o))
    counts, accepted = np.zeros(num), 0
    while accepted < 2_000_000:
        g = rng.gumbel(size=(1_000_000, num))
        keep = np.argmax(b + g, 1) == o
        counts += np.bincount(np.argmax(a + g[keep], 1), minlength=num)
        accepted += keep.sum()
    share = counts / accepted
    se = np.sqrt(share * (1 - share) / accepted) + 1e-12
    assert np.all(np.abs(got - share) <= 4.5 * se), (got, share, se)
    np.testing.assert_allclose(got.sum(), 1, atol=1e-12)


def test_posterior_transition_of_the_factual_logits_is_the_observation():
    b = jnp.asarray([0.3, -1.0, 2.0, 0.0])
    for o in range(4):
        np.testing.assert_allclose(posterior_transition(b, b, o), np.eye(4)[o], atol=1e-6)


def _converges(cases, kind, num_groups=20, per_group=100):
    """Sampled worlds: `num_groups` independent batches of worlds, their means' spread."""
    observed = OBSERVED if kind == "inferred" else None
    exact = np.asarray(
        bj.exact_blame(dag_pipeline, cases, bj.expected_worlds(range(2), observed)).shapley
    )
    means = []
    for g in range(num_groups):
        if kind == "fresh":
            worlds = bj.fresh_worlds(100 + g, np.arange(2), per_group)
        else:
            worlds = bj.inferred_worlds(dag_pipeline, cases, observed, 100 + g, per_group)
        means.append(np.asarray(bj.exact_blame(dag_pipeline, cases, worlds).shapley, np.float64))
    means = np.stack(means)
    mean = means.mean(0)
    se = means.std(0, ddof=1) / np.sqrt(num_groups) + 1e-9
    return exact, mean, se


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fresh", "inferred"])
def test_sampled_worlds_converge_to_the_expected_values(cases, kind):
    """Probabilistic (fixed seeds): the mean over 2,000 sampled worlds lies within 4.5
    standard errors (of 20 batch means) of the expected value, for every step and case."""
    exact, mean, se = _converges(cases, kind)
    assert np.all(np.abs(mean - exact) <= 4.5 * se), (exact, mean, se)


def test_gradients_equal_central_differences_float64():
    with jax.enable_x64(True):
        cases64 = dag_cases(dtype=jnp.float64)
        case = jax.tree_util.tree_map(lambda x: x[0], cases64)
        for observed in (None, OBSERVED[:1]):
            worlds = jax.tree_util.tree_map(lambda x: x[0], bj.expected_worlds([0], observed))

            def f(tables, worlds=worlds):
                c = dict(case, tables=tables)
                return jnp.concatenate(
                    [
                        bj.shapley_values(dag_pipeline, c, worlds).shapley,
                        bj.differentiable.total_repair(dag_pipeline, c, worlds)[None],
                    ]
                )

            f = jax.jit(f)
            assert np.abs(np.asarray(f(case["tables"]))).max() > 1e-2
            check_grads(
                f, (case["tables"],), order=1, modes=("rev",), eps=1e-6, atol=1e-6, rtol=1e-6
            )


def test_shapley_values_refuses_40_players_at_once():
    def long_chain(ctx, case):
        c = ctx.choose("s0", case["tables"][0])
        for i in range(1, 40):
            c = ctx.choose(f"s{i}", case["tables"][i], given=c)
        return c.take(case["score"])

    case = dict(
        tables=[jnp.zeros((2, 2) if i == 0 else (2, 2, 2)) for i in range(40)],
        score=jnp.zeros(2),
    )
    world = jax.tree_util.tree_map(lambda x: x[0], bj.fresh_worlds(0, range(1), 2))
    with pytest.raises(ValueError, match=r"n = 40 steps needs 2\^40 coalitions"):
        bj.shapley_values(long_chain, case, world)
    # expected worlds take the structured path at any n
    expected = jax.tree_util.tree_map(lambda x: x[0], bj.expected_worlds(range(1)))
    assert bj.shapley_values(long_chain, case, expected).shapley.shape == (40,)


def test_shapley_values_checks_nan_logits_and_score_range(cases):
    case = jax.tree_util.tree_map(lambda x: x[0], cases)
    world = jax.tree_util.tree_map(lambda x: x[0], bj.fresh_worlds(0, range(1), 2))
    expected = jax.tree_util.tree_map(lambda x: x[0], bj.expected_worlds(range(1)))
    bad = dict(case, tables=[case["tables"][0].at[0, 0].set(jnp.nan)] + case["tables"][1:])
    for w in (world, expected):
        with pytest.raises(ValueError, match="NaN"):
            bj.shapley_values(dag_pipeline, bad, w)
        with pytest.raises(ValueError, match="score_range"):
            bj.shapley_values(dag_pipeline, dict(case, score=case["score"] + 2), w)
    with pytest.raises(ValueError, match="expected_worlds.*mode"):
        bj.shapley_values(dag_pipeline, case, expected, mode=bj.Relaxed(0.5))


def test_expected_worlds_refuse_enumeration_and_impossible_observations(cases):
    worlds = bj.expected_worlds(np.arange(2), OBSERVED)
    with pytest.raises(ValueError, match="needs the structured path"):
        bj.exact_blame(dag_pipeline, cases, worlds, method="enumerate")
    tables = list(cases["tables"])
    tables[1] = tables[1].at[0, 0, OBSERVED[0, 0], OBSERVED[0, 1]].set(-jnp.inf)
    with pytest.raises(ValueError, match="could not have been chosen"):
        bj.exact_blame(dag_pipeline, dict(cases, tables=tables), worlds)
    with pytest.raises(ValueError, match="observed"):
        bj.expected_worlds(np.arange(2), OBSERVED[:1])


def chain_pipeline(ctx, case):
    choice = ctx.choose("s0", case["tables"][0])
    for i in range(1, len(case["tables"])):
        choice = ctx.choose(f"s{i}", case["tables"][i], given=choice)
    return choice.take(case["score"])


@pytest.mark.parametrize("kind", ["fresh", "inferred"])
def test_a_chain_takes_the_scans_and_agrees_with_the_contraction(kind):
    """A chain in expectation runs as two scans (`_expected_chain`); `interactions=True`
    takes the general contraction. Both give the same values up to rounding."""
    rng = np.random.default_rng(5)
    n, num = 9, 3
    cases = dict(
        tables=[
            jnp.asarray(rng.standard_normal((num, 2) + ((K,) if i else ()) + (K,)), jnp.float32)
            for i in range(n)
        ],
        score=jnp.asarray(rng.uniform(size=(num, K)), jnp.float32),
    )
    observed = None
    if kind == "inferred":
        out = bj.replay(chain_pipeline, cases, bj.recorded_worlds(0, np.arange(num)))
        observed = np.asarray(out["choice"][:, 0])
    worlds = bj.expected_worlds(np.arange(num), observed)
    scans = bj.exact_blame(chain_pipeline, cases, worlds)
    general = bj.exact_blame(chain_pipeline, cases, worlds, interactions=True)
    for name in ("shapley", "banzhaf", "leave_one_out", "fix_alone", "empty", "full"):
        np.testing.assert_allclose(
            np.asarray(getattr(scans, name)),
            np.asarray(getattr(general, name)),
            atol=TOL,
            rtol=0,
            err_msg=name,
        )
    assert np.abs(np.asarray(scans.shapley)).max() > 1e-2
