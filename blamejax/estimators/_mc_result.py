"""The result of `mc_shapley`: estimates, intervals and how each failure stopped."""

from __future__ import annotations

import equinox as eqx
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ..report import number, step_rows
from ..stats import _anytime as _bounds

RADII = ("bernstein", "hoeffding", "normal")
RULE_NAMES = ("budget",) + _bounds.RULES


class MCHistory(eqx.Module):
    """What each failure's estimate and intervals were at every checkpoint (NaN once the
    failure had stopped).

    - `t`: `Int[Array, "K"]`, the sample count of each checkpoint.
    - `values`, `variance`, `lower`, `upper`: `Float[Array, "F K n"]`.
    """

    t: Int[Array, " K"]
    values: Float[Array, "F K n"]
    variance: Float[Array, "F K n"]
    lower: Float[Array, "F K n"]
    upper: Float[Array, "F K n"]


class MCResult(eqx.Module):
    """Monte Carlo Shapley values of F failures over the n steps in `steps`. Its arrays
    are host NumPy arrays (the statistics in float64).

    - `steps`: the step names (static), the order of every `n` axis.
    - `values`: `Float[Array, "F n"]`, the estimates (they add up to `full - empty`).
    - `lower`, `upper`: `Float[Array, "F n"]`, the intervals at the checkpoint where the
      failure stopped. With `radius="bernstein"` or `"hoeffding"`, with probability at least
      1 - delta *per failure*, every interval of that failure at every checkpoint contains
      the exact value; `"normal"` intervals have no such guarantee (asymptotic only).
    - `variance`: `Float[Array, "F n"]`, the sample variance of one sample.
    - `empty`, `full`: `Float[Array, "F"]`, v(empty) and v(all) (mean over worlds).
    - `num_samples`: `Int[Array, "F"]`, the samples t used (orders, or antithetic pairs).
    - `evaluations`: `Int[Array, "F"]`, the coalition evaluations spent on the failure.
    - `converged`: `Bool[Array, "F"]`, a requested stopping rule held (not just the budget).
    - `rule`: `Int[Array, "F"]`, which rule stopped the failure, an index into `rule_names`.
    - `checkpoint`: `Int[Array, "F"]`, the 1-based checkpoint at which it stopped.
    - `history`: an `MCHistory`, or `None` unless requested.
    - static settings: `antithetic`, `radius`, `delta`, `epsilon`, `stop`, `score_range`,
      `rule_names`, `evaluations_computed` (every evaluation the compiled calls ran,
      including idle lanes, padding slots and the padding of each order's prefixes
      (`blamejax.scored_prefixes`), which no failure is charged for).
    """

    steps: tuple[str, ...] = eqx.field(static=True)
    values: Float[Array, "F n"]
    lower: Float[Array, "F n"]
    upper: Float[Array, "F n"]
    variance: Float[Array, "F n"]
    empty: Float[Array, " F"]
    full: Float[Array, " F"]
    num_samples: Int[Array, " F"]
    evaluations: Int[Array, " F"]
    converged: Bool[Array, " F"]
    rule: Int[Array, " F"]
    checkpoint: Int[Array, " F"]
    history: MCHistory | None
    antithetic: bool = eqx.field(static=True)
    radius: str = eqx.field(static=True)
    delta: float = eqx.field(static=True)
    epsilon: float = eqx.field(static=True)
    stop: tuple[str, ...] = eqx.field(static=True)
    score_range: tuple[float, float] = eqx.field(static=True)
    evaluations_computed: int = eqx.field(static=True)
    rule_names: tuple[str, ...] = eqx.field(static=True, default=RULE_NAMES)

    @property
    def num_failures(self) -> int:
        return int(self.values.shape[0])

    @property
    def total(self) -> Float[Array, " F"]:
        """The total repair `v(all) - v(empty)` per failure (the estimates sum to it)."""
        return self.full - self.empty

    @property
    def num_permutations(self) -> Int[Array, " F"]:
        """Orders evaluated per failure (twice `num_samples` when antithetic)."""
        return self.num_samples * (2 if self.antithetic else 1)

    @property
    def rule_fired(self) -> list[str]:
        """The name of the rule that stopped each failure."""
        return [self.rule_names[int(r)] for r in np.asarray(self.rule)]

    def table(self, failure: int = 0, digits: int = 4) -> str:
        """A plain-text table of one failure's estimates and intervals."""
        if not 0 <= failure < self.num_failures:
            raise ValueError(f"`failure` must be in [0, {self.num_failures}), got {failure}")
        lines = step_rows(
            self.steps,
            [
                ("estimate", 9, number(self.values[failure], digits)),
                ("lower", 9, number(self.lower[failure], digits)),
                ("upper", 9, number(self.upper[failure], digits)),
            ],
        )
        unit = "antithetic pairs" if self.antithetic else "orders"
        level = (
            "asymptotic, no finite-sample guarantee"
            if self.radius == "normal"
            else "valid at every checkpoint"
        )
        lines.append(
            f"{int(self.num_samples[failure])} {unit}, {int(self.evaluations[failure])} evaluations; "
            f"stopped by: {self.rule_fired[failure]}"
            + ("" if bool(self.converged[failure]) else " (no requested rule held)")
        )
        lines.append(
            f"{self.radius} intervals at 1 - delta = {1 - self.delta:g} per failure ({level}); "
            f"v(empty) = {float(self.empty[failure]):.{digits}f}, v(all) = {float(self.full[failure]):.{digits}f}"
        )
        return "\n".join(lines)
