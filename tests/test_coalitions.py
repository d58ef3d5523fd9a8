"""Coalition tables: the nested-vmap cube equals a loop over masks, jit equals eager, prefix sharing
costs about 2^(n+1) step evaluations, and relaxed mode approaches hard mode with finite gradients.
"""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import (
    chain_pipeline,
    dag_pipeline,
    first,
    masks,
    random_chain_cases,
    random_dag_cases,
)

import blamejax as bj


def test_vmapped_cube_equals_mask_loop(getkey):
    n = 5
    cases = random_chain_cases(getkey(), n, num_cases=1, neg_inf=0.3)
    case = first(cases)
    structure = bj.discover(chain_pipeline, case)
    world = bj.World(key=getkey())
    cube = bj.coalitions.coalition_values(chain_pipeline, structure, case, world, range(n), [1] * n)
    by_mask = bj.coalitions.mask_values(
        chain_pipeline, structure, case, world, range(n), [1] * n, jnp.asarray(masks(n))
    )
    np.testing.assert_array_equal(cube, by_mask)
    assert not np.isnan(np.asarray(cube)).any()


def test_jit_equals_eager(getkey):
    n = 4
    case = first(random_chain_cases(getkey(), n, num_cases=1))
    structure = bj.discover(chain_pipeline, case)
    world = bj.World(key=getkey())

    def f(c, w):
        return bj.attribute(
            bj.coalitions.coalition_values(chain_pipeline, structure, c, w, range(n), [1] * n)
        ).shapley

    np.testing.assert_allclose(f(case, world), jax.jit(f)(case, world), atol=1e-6)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8])
def test_prefix_sharing_cost(n):
    """A chain's table costs 2^(n+1) - 2 step evaluations, not n * 2^n."""
    case = first(random_chain_cases(jr.key(0), n, num_cases=1))
    structure = bj.discover(chain_pipeline, case)
    count = bj.coalitions.count_step_evaluations(
        chain_pipeline, structure, case, bj.World(key=jr.key(1))
    )
    assert count == 2 ** (n + 1) - 2
    if n >= 3:
        assert count < n * 2**n


def test_prefix_sharing_cost_dag():
    """In the DAG, s1 and s2 each see 2 bits (4 runs), s3 sees all 4 bits (16 runs)."""
    case = first(random_dag_cases(jr.key(0), 1))
    structure = bj.discover(dag_pipeline, case)
    assert (
        bj.coalitions.count_step_evaluations(dag_pipeline, structure, case, bj.World(key=jr.key(1)))
        == 2 + 4 + 4 + 16
    )


def test_relaxed_gradients_finite_nonzero(getkey):
    n = 3
    case = first(random_chain_cases(getkey(), n, num_cases=1))
    structure = bj.discover(chain_pipeline, case)
    world = bj.World(key=getkey())

    def blame_of_last(tables):
        c = dict(case, tables=tables)
        v = bj.coalitions.coalition_values(
            chain_pipeline, structure, c, world, range(n), [1] * n, bj.Relaxed(0.5)
        )
        return bj.attribute(v, interactions=False).shapley[-1]

    grads = jax.jit(jax.grad(blame_of_last))(case["tables"])
    fix_grads = [np.asarray(g[1]) for g in grads]  # variant 1 = the fix
    assert all(np.isfinite(g).all() for g in fix_grads)
    assert max(np.abs(g).max() for g in fix_grads) > 1e-4


def test_relaxed_approaches_hard(getkey):
    n = 3
    case = first(random_chain_cases(getkey(), n, num_cases=1))
    structure = bj.discover(chain_pipeline, case)
    world = bj.World(key=getkey())
    hard = bj.coalitions.coalition_values(chain_pipeline, structure, case, world, range(n), [1] * n)
    soft = bj.coalitions.coalition_values(
        chain_pipeline, structure, case, world, range(n), [1] * n, bj.Relaxed(1e-3)
    )
    np.testing.assert_allclose(soft, hard, atol=1e-3)
