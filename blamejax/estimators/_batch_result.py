"""`BatchResult`: blame over a test set, as returned by `blame_batch` (in `_batch.py`).

Its reports (table, dict/JSON, DataFrame, HTML) are built in `_report.py`; the interval
across failures and the stopping rule are in `_batch_interval.py`.
"""

from __future__ import annotations

import equinox as eqx
import numpy as np
from jaxtyping import Float, Int


class BatchResult(eqx.Module):
    """Blame over a test set. Step axes follow `steps`; failure axes follow `failure_ids`
    (the analysed failures, in the seeded order they were visited). Its arrays are NumPy
    arrays on the host: the statistics across failures are computed there, in float64.

    - `noise`, `question`: the noise mode and the question it answers.
    - `num_cases`, `num_failures`: cases run, and failures among them (score < threshold).
    - `failure_ids`: `Int[np.ndarray, "A"]`, case index of each analysed failure (A <= num_failures).
    - `shapley`: `Float[np.ndarray, "A n"]` per-failure Shapley values; `total`, `empty`, `full`:
      `[A]` total repair v(all) - v(empty), v(empty), v(all) (means over worlds).
    - `resolve`: `Float[np.ndarray, "A n"]`, per failure the share of worlds in which fixing the step
      alone reaches the threshold.
    - `last_step`: `Int[np.ndarray, "A W"]`, last-step blame per world (-1: no step differs).
    - `mean_shapley`, `lower`, `upper`: `[n]` mean Shapley value and its anytime-valid interval
      (rule `interval`) at the last checkpoint reached.
    - `share_of_repair`: `[n]`, `sum_f phi_fi / sum_f (v_f(all) - v_f(empty))`.
    - `resolve_rate`: `[n]`, mean of `resolve`; `last_step_rate`: `[n]`, the share of
      (failure, world) pairs whose last-step blame names the step.
    - `separated_at`: `{rule: failures needed or None}` for every interval rule on the same
      stream of failures; `separated`: whether the chosen rule separated the top step.
    - `factual_choice`, `fixed_choice`: `Int[np.ndarray, "A sites"]`, every draw's option in the
      failed run and in the fully fixed run (world 0), for the drill-down.
    - `evaluations`: pipeline runs made: one per case (run as it happened), one per failure to
      analyse (its fully fixed run, for the drill-down), plus the analysis's coalition
      evaluations.
    """

    steps: tuple[str, ...] = eqx.field(static=True)
    site_steps: tuple[str, ...] = eqx.field(static=True)
    option_names: tuple | None = eqx.field(static=True)
    noise: str = eqx.field(static=True)
    question: str = eqx.field(static=True)
    estimator: str = eqx.field(static=True)
    interval: str = eqx.field(static=True)
    delta: float = eqx.field(static=True)
    threshold: float = eqx.field(static=True)
    score_range: tuple[float, float] = eqx.field(static=True)
    num_cases: int = eqx.field(static=True)
    num_failures: int = eqx.field(static=True)
    evaluations: int = eqx.field(static=True)
    separated: bool = eqx.field(static=True)
    separated_at: dict = eqx.field(static=True)
    failure_ids: Int[np.ndarray, " A"]
    shapley: Float[np.ndarray, "A n"]
    total: Float[np.ndarray, " A"]
    empty: Float[np.ndarray, " A"]
    full: Float[np.ndarray, " A"]
    resolve: Float[np.ndarray, "A n"]
    last_step: Int[np.ndarray, "A W"]
    mean_shapley: Float[np.ndarray, " n"]
    lower: Float[np.ndarray, " n"]
    upper: Float[np.ndarray, " n"]
    share_of_repair: Float[np.ndarray, " n"]
    resolve_rate: Float[np.ndarray, " n"]
    last_step_rate: Float[np.ndarray, " n"]
    factual_choice: Int[np.ndarray, "A sites"]
    fixed_choice: Int[np.ndarray, "A sites"]
    factual_score: Float[np.ndarray, " A"]

    @property
    def num_analysed(self) -> int:
        return int(self.failure_ids.shape[0])

    def table(self) -> str:
        """The terminal table: one row per step."""
        from ..report import batch_table

        return batch_table(self)

    def to_dict(self) -> dict:
        """Every field as plain Python values (ready for `json.dump`)."""
        from ..report import batch_to_dict

        return batch_to_dict(self)

    def to_json(self, path) -> None:
        """Write `to_dict()` to `path` as JSON."""
        import json

        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    def to_dataframe(self):
        """Per-step summary as a pandas DataFrame (needs pandas installed)."""
        from ..report import batch_dataframe

        return batch_dataframe(self)

    def to_html(self) -> str:
        """A single self-contained HTML report (no network, no external assets)."""
        from ..report import batch_html

        return batch_html(self)

    def save_html(self, path) -> None:
        """Write `to_html()` to `path`."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_html())

    def _repr_html_(self) -> str:
        return self.to_html()

    def __str__(self) -> str:
        return self.table()
