"""All worlds, integrated: blame in expectation over the noise, exactly.

`expected_worlds` stands for infinitely many worlds per case. With no observations it is the
limit of `fresh_worlds` (interventional); with the observed choices it is the limit of
`inferred_worlds` (counterfactual, the Gumbel-max posterior). The structured path computes
the game averaged over that noise exactly, by transition matrices in place of one world's
maps (`blamejax.structured`), so the values carry no Monte Carlo error and are smooth in the
logits.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int, UInt32

from ._worlds import _case_ids


class ExpectedWorlds(eqx.Module):
    """Every world of each case, integrated (see `expected_worlds`).

    - `case_id`: `UInt32[Array, "F"]`, each case's id.
    - `observed`: `None` (interventional: fresh noise integrated) or `Int[Array, "F sites"]`,
      the observed option of every draw site (counterfactual: the noise's posterior given
      the observed run, integrated).
    """

    case_id: UInt32[Array, " F"]
    observed: Int[Array, "F sites"] | None = None

    @property
    def kind(self) -> str:
        """`"fresh"` (interventional) or `"inferred"` (counterfactual)."""
        return "fresh" if self.observed is None else "inferred"


def expected_worlds(case_ids, observed=None) -> ExpectedWorlds:
    """All worlds of each case, integrated: blame in expectation over the noise, exactly.

    The limit of `fresh_worlds(key, case_ids, W)` (no `observed`) or of
    `inferred_worlds(pipeline, cases, observed, key, W)` (with `observed`) as W grows,
    computed without sampling by the structured path (`exact_blame`, `blame_batch`,
    `shapley_values`, `total_repair`): a tabulated pipeline in hard mode. Values are smooth
    in the logits, so their gradients are exact. Last-step blame is not defined (no single
    failed run): `last_step` is -1.

    **Arguments:**
    - `case_ids`: the cases' ids, an int array `[F]` (they label the result; no noise is
      drawn).
    - `observed`: `None`, or the observed option of every draw site of every case,
      `Int[Array, "F sites"]` (in `discover(pipeline, case).sites` order), as for
      `inferred_worlds`.

    **Returns:** an `ExpectedWorlds`.

    **Raises:** `TypeError`/`ValueError` for malformed ids or observations.

    ```python
    import blamejax as bj
    cases = bj.demos.refund_cases(num_cases=1)
    result = bj.exact_blame(bj.demos.refund_pipeline, cases, bj.expected_worlds(range(1)))
    ```
    """
    ids = _case_ids(case_ids)
    if observed is not None:
        observed = np.asarray(observed)
        if observed.ndim != 2 or observed.shape[0] != ids.size:
            raise ValueError(
                f"`observed` must be an int array [F, sites] with F = {ids.size} (one row per "
                f"case id), got shape {observed.shape}"
            )
        if not np.issubdtype(observed.dtype, np.integer):
            raise ValueError(f"`observed` must be an int array, got dtype {observed.dtype}")
        observed = jnp.asarray(observed, jnp.int32)
    return ExpectedWorlds(case_id=jnp.asarray(ids.astype(np.uint32)), observed=observed)


def one_case(worlds: ExpectedWorlds, index) -> ExpectedWorlds:
    """Case `index`'s row of `worlds` (for the per-case differentiable functions)."""
    return jax.tree_util.tree_map(lambda x: x[index], worlds)
