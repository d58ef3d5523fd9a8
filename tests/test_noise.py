"""Addressed noise and common random numbers.

Every Gumbel is a pure function of its address (root key, failure, world, step, slot,
option), so switching a step to its fix can never shift another step's noise. These tests
check the address scheme itself (`stable_hash`, `gumbel_at`, `gumbel_sites`), that a run's
noise does not depend on its plan, and that fixing one step changes nothing upstream or
beside it.
"""

import functools
import json
import math
import os
import subprocess
import sys
import zlib

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import blamejax as bj
from blamejax.noise import _gumbel as noise
from blamejax.noise import gumbel_sites

NAMES = ("planner", "retriever", "writer", "reviewer", "verify", "étape-ü")


# --------------------------------------------------------------------------------------
# stable_hash
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_stable_hash_is_crc32(name):
    expected = zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF
    assert bj.noise.stable_hash(name) == expected
    assert 0 <= bj.noise.stable_hash(name) < 2**31


@pytest.mark.slow  # multi-process: two child Python processes
def test_stable_hash_same_in_other_processes():
    """The hash of a step name is the same in processes with different string-hash salts
    (`PYTHONHASHSEED`), while Python's own `hash` differs between them: the check would
    fail for a hash built on `hash`."""
    code = (
        "import json, sys; from blamejax.noise import stable_hash; "
        "names = json.loads(sys.argv[1]); "
        "print(json.dumps([[stable_hash(n) for n in names], [hash(n) for n in names]]))"
    )
    results = []
    procs = []
    for seed in ("1", "987654"):
        env = dict(os.environ, PYTHONHASHSEED=seed, JAX_PLATFORMS="cpu")
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code, json.dumps(NAMES)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    expected = [zlib.crc32(n.encode("utf-8")) & 0x7FFFFFFF for n in NAMES]
    (stable_1, salted_1), (stable_2, salted_2) = results
    assert stable_1 == expected
    assert stable_2 == expected
    assert stable_1 == [bj.noise.stable_hash(n) for n in NAMES]
    # the salt really differs between the two processes
    assert salted_1 != salted_2


def test_stable_hash_rejects_non_str():
    with pytest.raises(TypeError, match="`name` must be a str, got int"):
        bj.noise.stable_hash(3)


# --------------------------------------------------------------------------------------
# gumbel_at / gumbel_sites: a pure function of the address
# --------------------------------------------------------------------------------------


def _bits(x):
    return np.atleast_1d(np.asarray(x)).view(np.uint32)


def _gumbel_ref(key, shape=()):
    """What every Gumbel is: jax.random's float32 draw, cast to the default float dtype."""
    return jr.gumbel(key, shape, jnp.float32).astype(jnp.result_type(float))


def _uniform_ref(key):
    return jr.uniform(key, (), jnp.float32).astype(jnp.result_type(float))


def test_gumbel_at_same_address_same_values():
    key = bj.noise.world_key(jr.key(3), 5, 2)
    first = bj.noise.gumbel_at(key, "retriever", 1, 6)
    again = bj.noise.gumbel_at(bj.noise.world_key(jr.key(3), 5, 2), "retriever", 1, 6)
    np.testing.assert_array_equal(_bits(first), _bits(again))
    # the same under jit, with a traced slot and traced failure / world indices
    jitted = jax.jit(
        lambda f, w, slot: bj.noise.gumbel_at(
            bj.noise.world_key(jr.key(3), f, w), "retriever", slot, 6
        )
    )(jnp.int32(5), jnp.int32(2), jnp.int32(1))
    np.testing.assert_array_equal(_bits(first), _bits(jitted))
    assert np.all(np.isfinite(np.asarray(first)))


@pytest.mark.parametrize(
    "other",
    [
        dict(step="writer"),
        dict(slot=1),
        dict(world=3),
        dict(failure=1),
        dict(root=8),
    ],
    ids=lambda d: next(iter(d)),
)
def test_gumbel_at_different_address_different_values(other):
    base = dict(root=7, failure=0, world=2, step="retriever", slot=0)
    changed = {**base, **other}

    def draw(a):
        return np.asarray(
            bj.noise.gumbel_at(
                bj.noise.world_key(jr.key(a["root"]), a["failure"], a["world"]),
                a["step"],
                a["slot"],
                8,
            )
        )

    x, y = draw(base), draw(changed)
    # independent continuous draws: no option coincides
    assert np.all(x != y), (x, y)


def test_gumbel_at_options_differ_and_do_not_depend_on_num_options():
    key = bj.noise.world_key(jr.key(11), 2, 1)
    wide = np.asarray(bj.noise.gumbel_at(key, "writer", 2, 12))
    assert len(np.unique(wide)) == 12  # different option -> different value
    for num_options in (1, 3, 5, 11):
        narrow = np.asarray(bj.noise.gumbel_at(key, "writer", 2, num_options))
        np.testing.assert_array_equal(_bits(narrow), _bits(wide[:num_options]))


def test_gumbel_sites_rows_equal_gumbel_at():
    key = bj.noise.world_key(jr.key(4), 3, 0)
    steps = ("planner", "retriever", "retriever", "writer", "étape-ü")
    slots = (0, 0, 3, 1, 0)
    for num_options in (2, 7):
        table = np.asarray(gumbel_sites(key, steps, slots, num_options))
        assert table.shape == (len(steps), num_options)
        for row, (step, slot) in zip(table, zip(steps, slots)):
            np.testing.assert_array_equal(
                _bits(row), _bits(bj.noise.gumbel_at(key, step, slot, num_options))
            )
    jitted = jax.jit(lambda k: gumbel_sites(k, steps, slots, 7))(key)
    np.testing.assert_array_equal(_bits(jitted), _bits(gumbel_sites(key, steps, slots, 7)))


# --------------------------------------------------------------------------------------
# the unrolled Threefry hash reproduces jax.random bit for bit
# --------------------------------------------------------------------------------------


def test_threefry2x32_equals_jax():
    from jax.extend.random import threefry_2x32

    rng = np.random.default_rng(0)
    words = rng.integers(0, 2**32, size=(64, 4), dtype=np.uint64).astype(np.uint32)
    for k1, k2, x1, x2 in words:
        ours = noise.threefry2x32(k1, k2, x1, x2)
        theirs = threefry_2x32((jnp.uint32(k1), jnp.uint32(k2)), jnp.asarray([x1, x2], jnp.uint32))
        assert [int(v) for v in ours] == [int(v) for v in theirs]


@pytest.mark.parametrize("data", [0, 1, 7, 0x47554D42, 2**32 - 1])
def test_fold_in_split_gumbel_uniform_equal_jax_random(data):
    """Under jit and eagerly: the addressed noise is exactly jax.random's float32 draw (cast
    to the default float dtype), only computed faster."""
    key = jr.key(123)
    folded = noise.fold_in(key, data)
    assert jr.key_data(folded).tolist() == jr.key_data(jr.fold_in(key, data)).tolist()
    jitted = jax.jit(noise.fold_in)(key, jnp.uint32(data))
    assert jr.key_data(jitted).tolist() == jr.key_data(jr.fold_in(key, data)).tolist()
    ours = [jr.key_data(k).tolist() for k in noise._split2(folded)]
    assert ours == jr.key_data(jr.split(folded)).tolist()
    np.testing.assert_array_equal(_bits(noise._gumbels(folded)), _bits(_gumbel_ref(folded)))
    np.testing.assert_array_equal(
        _bits(noise._gumbels(folded, 9)), _bits(_gumbel_ref(folded, (9,)))
    )
    site = jr.fold_in(
        jr.fold_in(jr.fold_in(key, bj.noise.UNIFORM_TAG), bj.noise.stable_hash("w")), 2
    )
    np.testing.assert_array_equal(
        _bits(bj.noise.uniform_at(key, "w", 2, data)), _bits(_uniform_ref(jr.fold_in(site, data)))
    )


def test_gumbel_at_is_jax_random_at_its_address():
    key = bj.noise.world_key(jr.key(5), 3, 2)
    reference_key = jr.fold_in(jr.fold_in(jr.key(5), 3), 2)
    assert jr.key_data(key).tolist() == jr.key_data(reference_key).tolist()
    site = jr.fold_in(
        jr.fold_in(jr.fold_in(key, bj.noise.GUMBEL_TAG), bj.noise.stable_hash("writer")), 1
    )
    expected = np.stack([np.asarray(_gumbel_ref(jr.fold_in(site, j))) for j in range(6)])
    np.testing.assert_array_equal(_bits(bj.noise.gumbel_at(key, "writer", 1, 6)), _bits(expected))


def _loop_reference(key, sites, num_options):
    rows = []
    for step, slot in sites:
        site = jr.fold_in(
            jr.fold_in(jr.fold_in(key, bj.noise.GUMBEL_TAG), bj.noise.stable_hash(step)), slot
        )
        rows.append([np.asarray(_gumbel_ref(jr.fold_in(site, j))) for j in range(num_options)])
    return np.asarray(rows)


def test_non_partitionable_threefry_falls_back_to_jax_random():
    """In JAX's older (non-partitionable) Threefry mode the unrolled hash would differ, so
    the draws go through jax.random itself and still equal it at every address."""
    sites = (("a", 0), ("b", 1))
    with jax.threefry_partitionable(False):
        key = jr.key(3)
        table = gumbel_sites(key, ("a", "b"), (0, 1), 4)
        np.testing.assert_array_equal(_bits(table), _bits(_loop_reference(key, sites, 4)))
        assert (
            jr.key_data(noise.fold_in(key, 9)).tolist() == jr.key_data(jr.fold_in(key, 9)).tolist()
        )


def test_other_key_implementation_uses_jax_random():
    """An `rbg` key goes through jax.random (its draws are not vmap-invariant, so only
    determinism and the distribution's support are checked)."""
    key = jr.key(3, impl="rbg")
    table = np.asarray(gumbel_sites(key, ("a", "b"), (0, 1), 4))
    assert table.shape == (2, 4) and np.all(np.isfinite(table))
    np.testing.assert_array_equal(_bits(table), _bits(gumbel_sites(key, ("a", "b"), (0, 1), 4)))
    assert jr.key_data(noise.fold_in(key, 9)).tolist() == jr.key_data(jr.fold_in(key, 9)).tolist()


def test_gumbel_at_is_standard_gumbel():
    """Probabilistic (fixed seed): 20,000 addressed draws (options of one address and
    worlds of one step) have the mean (Euler's gamma), variance (pi^2/6) and CDF
    exp(-exp(-x)) of a standard Gumbel within 5 standard errors."""
    key = bj.noise.world_key(jr.key(0), 0, 0)
    over_options = np.asarray(bj.noise.gumbel_at(key, "planner", 0, 20_000), np.float64)
    keys = jax.vmap(lambda w: bj.noise.world_key(jr.key(0), 0, w))(jnp.arange(20_000))
    over_worlds = np.asarray(
        jax.vmap(lambda k: bj.noise.gumbel_at(k, "planner", 0, 1)[0])(keys), np.float64
    )
    for x in (over_options, over_worlds):
        n = x.size
        variance = math.pi**2 / 6
        assert abs(x.mean() - np.euler_gamma) < 5 * math.sqrt(variance / n)
        # var of the sample variance for a Gumbel: (mu4 - sigma^4) / n, excess kurtosis 12/5
        var_se = math.sqrt((12 / 5 + 2) * variance**2 / n)
        assert abs(x.var() - variance) < 5 * var_se
        for q in (-1.0, 0.0, 0.5, 2.0, 4.0):
            p = math.exp(-math.exp(-q))
            assert abs(np.mean(x <= q) - p) < 5 * math.sqrt(p * (1 - p) / n)


# --------------------------------------------------------------------------------------
# The noise does not depend on the precision mode
# --------------------------------------------------------------------------------------


def _draws_in_mode(x64: bool, partitionable: bool = True):
    """Every kind of addressed draw at a few addresses, computed with `jax_enable_x64` on
    or off (one process: the compiled draws are cached per mode)."""
    with jax.enable_x64(x64), jax.threefry_partitionable(partitionable):
        world = bj.noise.world_key(bj.noise.as_key(7), 3, 1)
        logits = jnp.asarray([0.3, -1.2, 2.0, -jnp.inf, 0.0], jnp.result_type(float))
        abducted = [
            bj.noise.abduct_gumbels(bj.noise.abduction_key(world, "s", slot), logits, slot % 3)
            for slot in range(4)
        ]
        return dict(
            dtype=jnp.result_type(float),
            gumbel_at=bj.noise.gumbel_at(world, "planner", 2, 7),
            sites=gumbel_sites(world, ("a", "b", "a"), (0, 0, 1), 5),
            fresh=bj.noise.gumbel_at(bj.noise.fresh_key(world, jnp.int32(4)), "b", 0, 3),
            uniform=jnp.stack([bj.noise.uniform_at(world, "u", 1, i) for i in range(5)]),
            abducted=jnp.stack(abducted),
        )


@pytest.mark.parametrize("partitionable", [True, False], ids=["unrolled", "jax.random"])
def test_noise_is_the_same_with_and_without_x64(partitionable):
    """The same address gives the same Gumbels and uniforms in float32 and in float64 (the
    float32 numbers, cast), and the same posterior Gumbels up to float32 rounding; the
    abducted noise still makes the observed option win in both."""
    x32 = _draws_in_mode(False, partitionable)
    x64 = _draws_in_mode(True, partitionable)
    assert x32["dtype"] == jnp.float32 and x64["dtype"] == jnp.float64
    for name in ("gumbel_at", "sites", "fresh", "uniform"):
        assert x64[name].dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(x32[name], np.float64), np.asarray(x64[name]))
    low, high = np.asarray(x32["abducted"], np.float64), np.asarray(x64["abducted"])
    np.testing.assert_allclose(low, high, rtol=2e-6, atol=2e-6)
    assert np.abs(low - high).max() > 0  # transformed in each mode's own precision
    logits = np.asarray([0.3, -1.2, 2.0, -np.inf, 0.0])
    assert np.argmax(logits + high, axis=1).tolist() == [0, 1, 2, 0]


# --------------------------------------------------------------------------------------
# Random pipelines: a chain and a DAG (a two-parent step, a two-slot step, a free-form step)
# --------------------------------------------------------------------------------------


def _table(rng, shape, neg_inf=0.25):
    """Random logits with some -inf entries, at least one finite option per row."""
    table = rng.normal(size=shape).astype(np.float32)
    impossible = rng.random(shape) < neg_inf
    keep = rng.integers(shape[-1], size=shape[:-1])
    np.put_along_axis(impossible, keep[..., None], False, axis=-1)
    table[impossible] = -np.inf
    return table


def chain(ctx, case):
    a = ctx.choose("a", case["a"])
    b = ctx.choose("b", case["b"], given=a)
    c = ctx.choose("c", case["c"], given=b)
    d = ctx.choose("d", case["d"], given=c)
    return d.take(case["reward"])


CHAIN_PARENTS = {"a": (), "b": ("a",), "c": ("b",), "d": ("c",)}


def chain_cases(rng, num_cases, num_options=(3, 4, 2, 5), num_variants=(2, 3, 2, 2)):
    ka, kb, kc, kd = num_options
    va, vb, vc, vd = num_variants
    f = num_cases
    return dict(
        a=jnp.asarray(_table(rng, (f, va, ka))),
        b=jnp.asarray(_table(rng, (f, vb, ka, kb))),
        c=jnp.asarray(_table(rng, (f, vc, kb, kc))),
        d=jnp.asarray(_table(rng, (f, vd, kc, kd))),
        reward=jnp.asarray(rng.random((f, kd)).astype(np.float32)),
    )


def dag(ctx, case):
    a = ctx.choose("a", case["a"])
    b = ctx.choose("b", case["b"], given=a)
    c = ctx.choose("c", case["c"], given=a)  # drawn after b, but not a descendant of b
    d = ctx.choose("d", case["d"], given=(b, c))  # two parents
    e0 = ctx.choose("e", case["e"], given=d, slot=0)  # a step that draws twice
    e1 = ctx.choose("e", case["e"], given=d, slot=1)
    # a free-form step: its logits are computed from an upstream choice
    logits = case["f"] + c.take(case["f_bias"])[None, :]
    f = ctx.choose("f", logits)
    return (
        0.5 * e0.take(case["reward_e"])
        + 0.25 * e1.take(case["reward_e"])
        + 0.25 * f.take(case["reward_f"])
    )


DAG_PARENTS = {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c"), "e": ("d",), "f": ("c",)}


def dag_cases(rng, num_cases):
    f = num_cases
    ka, kb, kc, kd, ke, kf = 3, 2, 4, 3, 5, 3
    return dict(
        a=jnp.asarray(_table(rng, (f, 2, ka))),
        b=jnp.asarray(_table(rng, (f, 2, ka, kb))),
        c=jnp.asarray(_table(rng, (f, 3, ka, kc))),
        d=jnp.asarray(_table(rng, (f, 2, kb, kc, kd))),
        e=jnp.asarray(_table(rng, (f, 2, kd, ke))),
        f=jnp.asarray(_table(rng, (f, 2, kf))),
        f_bias=jnp.asarray(rng.normal(size=(f, kc, kf)).astype(np.float32)),
        reward_e=jnp.asarray(rng.random((f, ke)).astype(np.float32)),
        reward_f=jnp.asarray(rng.random((f, kf)).astype(np.float32)),
    )


def _descendants(parents, step):
    out = {step}
    changed = True
    while changed:
        changed = False
        for child, ps in parents.items():
            if child not in out and any(p in out for p in ps):
                out.add(child)
                changed = True
    return out


def _first(cases):
    return jax.tree_util.tree_map(lambda x: x[0], cases)


PIPELINES = [
    pytest.param(chain, chain_cases, CHAIN_PARENTS, id="chain"),
    pytest.param(dag, dag_cases, DAG_PARENTS, id="dag"),
]


NUM_PLAN_CASES = 24


@functools.cache
def _plan_traces(pipeline, make_cases):
    """Traces of random cases of `pipeline` under several plans, from one compiled call:
    the factual plan, each step fixed alone (`mask_plan` with one bit set), every step
    fixed, and every draw forced to a random option."""
    rng = np.random.default_rng(1)
    cases = make_cases(rng, NUM_PLAN_CASES)
    structure = bj.discover(pipeline, _first(cases))
    num_steps = structure.num_steps
    players = tuple(range(num_steps))
    fixes = tuple(1 for _ in players)
    keys = bj.recorded_worlds(2, range(NUM_PLAN_CASES)).key[:, 0]
    forced = rng.integers(0, 2, size=(NUM_PLAN_CASES, len(structure.sites)))

    def run(case, key, forced_row):
        world = bj.World(key=key)

        def trace(plan):
            return bj.pipeline.trace_run(pipeline, structure, case, world, plan)

        def fixed_one(mask):
            return trace(bj.coalitions.mask_plan(structure, players, fixes, mask))

        return dict(
            factual=trace(bj.pipeline.factual_plan(structure)),
            fixed_one=jax.vmap(fixed_one)(jnp.eye(num_steps, dtype=bool)),
            fixed_all=trace(
                bj.coalitions.mask_plan(structure, players, fixes, jnp.ones(num_steps, bool))
            ),
            forced=trace(bj.worlds.observed_plan(structure, forced_row)),
        )

    out = jax.jit(jax.vmap(run))(cases, keys, jnp.asarray(forced, jnp.int32))
    return structure, keys, out


@pytest.mark.parametrize("pipeline, make_cases, parents", PIPELINES)
def test_noise_does_not_depend_on_plan(pipeline, make_cases, parents):
    """The noise every draw sees is its addressed Gumbel (`gumbel_at` of the world key,
    step, slot), whatever the plan: factual, one step fixed, all fixed, or every draw
    forced to some option."""
    structure, keys, out = _plan_traces(pipeline, make_cases)
    for i, site in enumerate(structure.sites):
        addressed = jax.vmap(
            lambda k: bj.noise.gumbel_at(k, site.step, site.slot, site.num_options)
        )(keys)
        for name in ("factual", "fixed_all", "forced"):
            np.testing.assert_array_equal(
                _bits(out[name]["noise"][i]), _bits(addressed), err_msg=f"{name}, {site}"
            )
        for step in range(structure.num_steps):
            np.testing.assert_array_equal(
                _bits(out["fixed_one"]["noise"][i][:, step]), _bits(addressed)
            )
    # the plans really differ: forcing and fixing change some choices
    for name in ("fixed_all", "forced"):
        assert np.any(np.asarray(out[name]["choice"]) != np.asarray(out["factual"]["choice"]))


@pytest.mark.parametrize("pipeline, make_cases, parents", PIPELINES)
def test_common_random_numbers_one_step_fixed(pipeline, make_cases, parents):
    """Fixing exactly one step (a `mask_plan` with one bit set) leaves the noise of every
    site bit-identical, and every choice of a step that is not a descendant of the fixed
    step unchanged (in particular every site drawn before it). The fixes must change some
    downstream choice somewhere, or the check would be empty."""
    structure, _, out = _plan_traces(pipeline, make_cases)
    assert set(structure.steps) == set(parents)
    factual, fixed = out["factual"], out["fixed_one"]
    some_change = False
    for i, step in enumerate(structure.steps):
        first_site = min(j for j, s in enumerate(structure.sites) if s.step == step)
        downstream = _descendants(parents, step)
        for j, site in enumerate(structure.sites):
            np.testing.assert_array_equal(
                _bits(fixed["noise"][j][:, i]),
                _bits(factual["noise"][j]),
                err_msg=f"fix {step}, site {site}",
            )
            same = np.asarray(fixed["choice"][:, i, j]) == np.asarray(factual["choice"][:, j])
            if j < first_site or site.step not in downstream:
                assert same.all(), f"fixing {step!r} changed the choice of {site}"
                np.testing.assert_array_equal(
                    np.asarray(fixed["logits"][j][:, i]), np.asarray(factual["logits"][j])
                )
            elif not same.all():
                some_change = True
        assert np.all(
            np.asarray(fixed["variant"][:, i])
            == np.asarray([s.step == step for s in structure.sites])
        )
    assert some_change
