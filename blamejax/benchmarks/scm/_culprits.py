"""Multi-culprit cases of synthetic SCM pipelines, whose Shapley values are known exactly.

**Multi-culprit cases**: m culprit steps are corrupted outright (the good option impossible)
and their fixes always output the good option, whatever their input. *Conjunctive*: the
run fails only when every culprit is bad, so fixing any one repairs it. *Disjunctive*: any
bad culprit fails the run, so every culprit must be fixed. Either way the other steps, whose
fixes change their own outputs but not the score, are null players, and by symmetry each
culprit's Shapley value is exactly 1/m.

Here: `MultiCulpritCases` and `multi_culprit_cases`.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int

from ..._compile import compiled
from ...noise import as_key
from ...pipeline import World
from ._inject import check_steps, recorded_worlds_of
from ._model import (
    KINDS,
    RULE_ALL,
    RULE_ANY,
    SCM,
    SCMCase,
    count_of,
    culprit_case,
    params_of,
    shape_of,
)


# -- multi-culprit cases ------------------------------------------------------------------------
class MultiCulpritCases(eqx.Module):
    """Failures with several culprits and analytic Shapley values (`multi_culprit_cases`).

    - `scm`, `cases` (`SCMCase`, leading axis F), `worlds` (`[F, 1]`, recorded noise).
    - `culprits`: `Int[Array, "F m"]`, the culprit steps of each case (sorted).
    - `kind`: `"conjunctive"` (every culprit is needed for the failure: fixing any one
      repairs) or `"disjunctive"` (any one culprit suffices: all must be fixed).
    - `analytic_shapley`: `Float[Array, "F n"]`, 1/m on the culprits, 0 elsewhere (exact by
      construction, under any noise); they add up to the total repair, 1.
    """

    scm: SCM
    cases: SCMCase
    worlds: World
    culprits: Int[Array, "F m"]
    kind: str = eqx.field(static=True)
    analytic_shapley: Float[Array, "F n"]

    @property
    def pipeline(self):
        """The SCM's pipeline function (`scm.pipeline`)."""
        return self.scm.pipeline

    @property
    def num_failures(self) -> int:
        """The number of failures, `F`."""
        return int(self.culprits.shape[0])


def _culprit_function(scm: SCM):
    """Compiled: the multi-culprit cases of a batch of case ids."""
    return _culprit_function_for(shape_of(scm))


@compiled("scm.culprits")
def _culprit_function_for(shape):

    def one(params, key, case_id, culprits, rule):
        return culprit_case(shape, params, jr.fold_in(key, case_id), culprits, rule)

    return jax.jit(jax.vmap(one, in_axes=(None, None, 0, 0, None)))


def multi_culprit_cases(
    key,
    scm: SCM,
    num_cases: int,
    *,
    num_culprits: int = 2,
    kind: str = "conjunctive",
    culprits=None,
) -> MultiCulpritCases:
    """Failures with `num_culprits` culprits whose Shapley values are known in closed form.

    Each culprit is corrupted outright (its factual variant never outputs the good option)
    and its fix always outputs it, whatever its input; the other steps keep their stochastic
    factual and fix variants. The score reads only the culprits: with `kind="conjunctive"`
    the run succeeds when any culprit is good (it failed because all were bad, so fixing any
    one repairs it); with `"disjunctive"` it succeeds only when every culprit is good (any
    bad one fails it). The game is then a unanimity game (disjunctive) or its dual
    (conjunctive) on the culprits, and every culprit's Shapley value is 1/m, every other
    step's 0, under every world.

    **Arguments:**
    - `key`: an int seed or a typed key (tables, culprits and noise).
    - `scm`: the pipeline (`make_scm`).
    - `num_cases`: F >= 1.
    - `num_culprits`: m, 1 <= m <= n (drawn without replacement per case), unless
      `culprits` is given.
    - `kind`: `"conjunctive"` or `"disjunctive"`.
    - `culprits`: optional fixed culprit step indices, the same for every case.

    **Returns:** a `MultiCulpritCases`.

    **Raises:** `ValueError` naming the argument: an unknown kind, m out of range, a culprit
    index beyond n.

    ```python
    # doctest: slow (compiles the case generator and exact blame, about 8 s)
    import blamejax as bj
    from blamejax.benchmarks import scm
    model = scm.make_scm(0, num_steps=4)
    cases = scm.multi_culprit_cases(0, model, 20, num_culprits=2, kind="disjunctive")
    result = bj.exact_blame(cases.pipeline, cases.cases, cases.worlds)
    # result.shapley equals cases.analytic_shapley: 0.5 on both culprits, 0 elsewhere
    ```
    """
    if not isinstance(scm, SCM):
        raise TypeError(
            f"`scm` must be a blamejax.scm.SCM (see make_scm), got {type(scm).__name__}"
        )
    num_cases = count_of(num_cases, "num_cases", 1)
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}, got {kind!r}")
    n = scm.num_steps
    key_tables, key_culprits, key_noise = jr.split(as_key(key), 3)
    if culprits is not None:
        fixed = tuple(sorted(check_steps(culprits, n, "culprits")))
        chosen = np.tile(np.asarray(fixed, np.int32), (num_cases, 1))
    else:
        m = count_of(num_culprits, "num_culprits", 1)
        if m > n:
            raise ValueError(f"`num_culprits` = {m} is more than the pipeline's {n} steps")
        draw = jax.vmap(lambda c: jr.permutation(jr.fold_in(key_culprits, c), n)[:m])
        chosen = np.sort(np.asarray(draw(jnp.arange(num_cases))), axis=1).astype(np.int32)
    m = chosen.shape[1]
    rule = RULE_ANY if kind == "conjunctive" else RULE_ALL
    ids = np.arange(num_cases, dtype=np.int32)
    cases = _culprit_function(scm)(
        params_of(scm), key_tables, ids, jnp.asarray(chosen), jnp.asarray(rule, jnp.int32)
    )
    analytic = np.zeros((num_cases, n), np.float32)
    np.put_along_axis(analytic, chosen, np.float32(1.0 / m), axis=1)
    return MultiCulpritCases(
        scm=scm,
        cases=cases,
        worlds=recorded_worlds_of(key_noise, ids),
        culprits=jnp.asarray(chosen),
        kind=kind,
        analytic_shapley=jnp.asarray(analytic),
    )
