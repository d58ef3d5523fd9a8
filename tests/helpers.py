"""Random pipelines for tests, written with the public API, and the first failures of a demo
SCM under recorded noise."""

import functools

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import blamejax as bj


# Compiled once per shape: drawn op by op, every new shape compiled a dozen small programs.
@functools.partial(
    jax.jit, static_argnames=("num_steps", "num_cases", "num_options", "num_variants", "neg_inf")
)
def random_chain_cases(key, num_steps, num_cases, num_options=4, num_variants=2, neg_inf=0.0):
    """Tables for a chain: step 0 has logits [V, K], step i>0 has [V, K, K] given step i-1.
    `neg_inf` is the probability that a logit entry is -inf (never a whole row)."""
    # Drawn in float32 and cast, so that the same key gives the same cases with and without
    # 64-bit mode (as blamejax draws its noise).
    # Steps 1.. are drawn by one vmapped draw over their keys (the same numbers as a draw per
    # key, in one small program instead of one per step).
    dtype = jnp.result_type(float)
    keys = jr.split(key, num_steps + 2)

    def table(key, shape):
        logits = (1.5 * jr.normal(key, shape, jnp.float32)).astype(dtype)
        if neg_inf > 0:
            drop = jr.bernoulli(jr.fold_in(key, 1), jnp.float32(neg_inf), shape)
            drop = drop.at[..., 0].set(False)  # keep option 0 possible in every row
            logits = jnp.where(drop, -jnp.inf, logits)
        return logits

    tables = [table(keys[0], (num_cases, num_variants, num_options))]
    if num_steps > 1:
        shape = (num_cases, num_variants, num_options, num_options)
        later = jax.vmap(table, in_axes=(0, None))(keys[1:num_steps], shape)
        tables += list(later)
    score = jr.uniform(keys[-1], (num_cases, num_options), jnp.float32).astype(dtype)
    return dict(tables=tables, score=score)


def chain_pipeline(ctx, case):
    choice = ctx.choose("s0", case["tables"][0])
    for i in range(1, len(case["tables"])):
        choice = ctx.choose(f"s{i}", case["tables"][i], given=choice)
    return choice.take(case["score"])


def dag_pipeline(ctx, case):
    """s0 -> s1, s0 -> s2, (s1, s2) -> s3: a step with two parents."""
    t = case["tables"]
    a = ctx.choose("s0", t[0])
    b = ctx.choose("s1", t[1], given=a)
    c = ctx.choose("s2", t[2], given=a)
    d = ctx.choose("s3", t[3], given=(b, c))
    return d.take(case["score"])


@functools.partial(jax.jit, static_argnames=("num_cases", "num_options"))
def random_dag_cases(key, num_cases, num_options=3):
    keys = jr.split(key, 5)
    k, n = num_options, num_cases
    tables = [
        jr.normal(keys[0], (n, 2, k)),
        jr.normal(keys[1], (n, 2, k, k)),
        jr.normal(keys[2], (n, 2, k, k)),
        jr.normal(keys[3], (n, 2, k, k, k)),
    ]
    return dict(tables=tables, score=jr.uniform(keys[4], (n, k)))


def first(cases):
    return jax.tree_util.tree_map(lambda x: x[0], cases)


def take(cases, i):
    return jax.tree_util.tree_map(lambda x: x[i], cases)


def masks(n):
    return ((np.arange(1 << n)[:, None] >> np.arange(n)) & 1).astype(bool)


_SCORERS: dict = {}


def factual_scores(pipeline, make_cases, seed, ids):
    """The factual score of customers `ids` (every customer has the same tables; they
    differ in their recorded noise), compiled once per pipeline."""
    if pipeline not in _SCORERS:
        case = jax.tree_util.tree_map(lambda x: x[0], make_cases(1))
        structure = bj.discover(pipeline, case)
        plan = bj.pipeline.factual_plan(structure)
        one = lambda key: bj.pipeline.run_score(pipeline, structure, case, bj.World(key=key), plan)  # noqa: E731
        _SCORERS[pipeline] = jax.jit(jax.vmap(one))
    return np.asarray(_SCORERS[pipeline](bj.recorded_worlds(seed, ids).key[:, 0]))


def failures(pipeline, make_cases, count, seed=0, bad=True):
    """The first `count` failed runs (or good runs, `bad=False`) among customers 0, 1, ...
    with recorded noise under root `seed`: (cases, worlds)."""
    ids, start = [], 0
    while len(ids) < count:
        batch = np.arange(start, start + 1024)
        scores = factual_scores(pipeline, make_cases, seed, batch)
        ids += batch[(scores < 0.5) == bad].tolist()
        start += 1024
    ids = np.asarray(ids[:count])
    cases = jax.tree_util.tree_map(lambda x: x[:count], make_cases(count))
    return cases, bj.recorded_worlds(seed, ids)


def without_compile_cache(env: dict[str, str]) -> dict[str, str]:
    """`env` for a child process that must compile for real, not load the test run's compiled
    programs (tests/conftest.py): one that is sent Ctrl-C while it compiles, or that counts what
    a fresh process compiles."""
    return {name: value for name, value in env.items() if name != "JAX_COMPILATION_CACHE_DIR"}


def public_namespaces() -> list[str]:
    """The package's public namespaces, dotted below `blamejax`: its subpackages (`dir`,
    not `vars`: the applications load on first use) and the namespaces a subpackage
    re-exports by name (`from . import scm as scm`: `benchmarks.scm`), each with its own
    API page."""
    import ast
    import inspect

    top = sorted(
        name for name in dir(bj) if not name.startswith("_") and inspect.ismodule(getattr(bj, name))
    )
    inner = []
    for sub in top:
        tree = ast.parse(inspect.getsource(getattr(bj, sub)))
        inner += [
            f"{sub}.{alias.name}"
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None
            for alias in node.names
            if alias.asname == alias.name
        ]
    return sorted(top + inner)


def public_module(dotted: str):
    """The module `blamejax.<dotted>` as the package exposes it (`benchmarks.scm`)."""
    module = bj
    for part in dotted.split("."):
        module = getattr(module, part)
    return module
