"""What the estimators return: `ExactResult` (`exact_blame`), `MCResult` and `MCHistory`
(`mc_shapley`) and `BatchResult` (`blame_batch`). Each carries the case ids of the failures it
describes, and its per-failure views look a failure up by its case id.
"""

from __future__ import annotations

import dataclasses
import warnings

import equinox as eqx
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ..report import JSONExport, number, step_rows
from ..report import largest_blame as report_largest_blame
from ..report import step_order as report_step_order
from ..stats import RULES, BatchIntervals, batch_intervals


class ExactResult(JSONExport, eqx.Module):
    """Exact attributions of F failures over the n steps in `steps`.

    - `steps`: the step names (static), the order of every `n` axis below.
    - `shapley`, `banzhaf`, `fix_alone`, `leave_one_out`: `Float[Array, "F n"]`.
    - `interactions`: `Float[Array, "F n n"]` (pairwise Shapley interaction index, zero
      diagonal) or `None` when not requested.
    - `empty`, `full`: `Float[Array, "F"]`, v(empty) (the failed run, mean over worlds) and
      v(all) (the fully fixed run).
    - `last_step`: `Int[Array, "F W"]`, per world the index of the last step whose output
      differs between the failed and the fully fixed run, -1 if none (the naive baseline).
    - `score_range`: the declared (low, high) of the score.
    - `method`: the path that computed it: `"structured"` (the multilinear extension of a
      tabulated pipeline) or `"enumerate"` (every coalition).
    - `case_ids`: `Int[np.ndarray, "F"]`, the case id of each failure, as the worlds carried
      it (`recorded_worlds(key, ids)`); 0..F-1 for worlds that carry none.
    """

    steps: tuple[str, ...] = eqx.field(static=True)
    shapley: Float[Array, "F n"]
    banzhaf: Float[Array, "F n"]
    fix_alone: Float[Array, "F n"]
    leave_one_out: Float[Array, "F n"]
    interactions: Float[Array, "F n n"] | None
    empty: Float[Array, " F"]
    full: Float[Array, " F"]
    last_step: Int[Array, "F W"]
    score_range: tuple[float, float] = eqx.field(static=True)
    method: str = eqx.field(static=True, default="enumerate")
    case_ids: Int[np.ndarray, " F"] | None = None

    @property
    def total(self) -> Float[Array, " F"]:
        """The total repair `v(all) - v(empty)` per failure (the Shapley values sum to it)."""
        return self.full - self.empty

    @property
    def num_failures(self) -> int:
        """F, the number of failures blamed."""
        return int(self.shapley.shape[0])

    def row(self, case: int) -> int:
        """The row of the failure with case id `case` (see `case_ids`)."""
        return case_row(self.case_ids, self.num_failures, case)

    def table(self, case: int | None = None, digits: int = 4) -> str:
        """A plain-text table of every rule side by side for the failure with case id `case`
        (default: the first failure)."""
        failure = 0 if case is None else self.row(case)
        last = np.asarray(self.last_step[failure])
        share = [np.mean(last == i) for i in range(len(self.steps))]  # over worlds
        lines = step_rows(
            self.steps,
            [
                ("shapley", 9, number(self.shapley[failure], digits)),
                ("banzhaf", 9, number(self.banzhaf[failure], digits)),
                ("fix-alone", 9, number(self.fix_alone[failure], digits)),
                ("leave-1-out", 11, number(self.leave_one_out[failure], digits)),
                ("last-step", 9, number(share, 2)),
            ],
        )
        lines.append(
            f"v(empty) = {float(self.empty[failure]):.{digits}f}, v(all) = "
            f"{float(self.full[failure]):.{digits}f}, total repair = {float(self.total[failure]):.{digits}f}"
        )
        lines.append(
            "exact by structure (the game's multilinear extension, blamejax.structured)"
            if self.method == "structured"
            else f"exact by enumeration (all 2^{len(self.steps)} coalitions)"
        )
        return "\n".join(lines)


RULE_NAMES = ("budget",) + RULES


def case_row(case_ids, num_failures: int, case) -> int:
    """The row of the failure with case id `case` among `case_ids` (0..F-1 when `None`)."""
    ids = np.arange(num_failures) if case_ids is None else np.asarray(case_ids)
    if isinstance(case, bool) or not isinstance(case, (int, np.integer)):
        raise TypeError(f"`case` must be a case id (an int), got {case!r}")
    rows = np.flatnonzero(ids == case)
    if rows.size == 0:
        shown = ", ".join(str(int(i)) for i in ids[:8]) + (", ..." if ids.size > 8 else "")
        raise ValueError(
            f"`case` must be the id of a failure in this result, got {case}; its case ids are "
            f"[{shown}] (`result.case_ids`)"
        )
    return int(rows[0])


def _renamed_key(data: dict, old: str, new: str) -> dict:
    """A copy of the exported dict `data` with its key `old` read as `new` (a result written
    before a field was renamed); `data` itself when it has no `old`, or has `new` already (a
    dict with both is then refused for its unknown field)."""
    if old not in data or new in data:
        return data
    return {(new if name == old else name): value for name, value in data.items()}


class MCHistory(eqx.Module):
    """What each failure's estimate and intervals were at every look (NaN once the
    failure had stopped).

    - `t`: `Int[Array, "K"]`, the sample count of each look.
    - `values`, `variance`, `lower`, `upper`: `Float[Array, "F K n"]`.
    """

    t: Int[Array, " K"]
    values: Float[Array, "F K n"]
    variance: Float[Array, "F K n"]
    lower: Float[Array, "F K n"]
    upper: Float[Array, "F K n"]


class MCResult(JSONExport, eqx.Module):
    """Monte Carlo Shapley values of F failures over the n steps in `steps`. Its arrays
    are host NumPy arrays (the statistics in float64).

    - `steps`: the step names (static), the order of every `n` axis.
    - `values`: `Float[Array, "F n"]`, the estimates (they add up to `full - empty`).
    - `lower`, `upper`: `Float[Array, "F n"]`, the intervals at the look where the
      failure stopped. With a `"bernstein"` or `"hoeffding"` `interval`, with probability at least
      1 - delta *per failure*, every interval of that failure at every look contains
      the exact value; `"normal"` intervals have no such guarantee (asymptotic only).
    - `variance`: `Float[Array, "F n"]`, the sample variance of one sample.
    - `empty`, `full`: `Float[Array, "F"]`, v(empty) and v(all) (mean over worlds).
    - `num_samples`: `Int[Array, "F"]`, the samples t used (orders, or antithetic pairs).
    - `evaluations`: `Int[Array, "F"]`, the coalition evaluations spent on the failure.
    - `converged`: `Bool[Array, "F"]`, a requested stopping rule held (not just the budget).
    - `rule`: `Int[Array, "F"]`, which rule stopped the failure, an index into `rule_names`.
    - `look`: `Int[Array, "F"]`, the 1-based look at which it stopped (`checkpoint`, its
      old name, is deprecated).
    - `history`: an `MCHistory`, or `None` unless requested.
    - static settings: `antithetic`, `interval` (the kind of interval: `"bernstein"`,
      `"hoeffding"` or `"normal"`; `radius`, its old name, is deprecated), `delta`,
      `epsilon`, `stop`, `score_range`,
      `rule_names`, `evaluations_computed` (every evaluation the compiled calls ran,
      including idle lanes, padding slots and the padding of each order's prefixes
      (`blamejax.scored_prefixes`), which no failure is charged for).
    - `case_ids`: `Int[np.ndarray, "F"]`, the case id of each failure, as the worlds carried
      it; 0..F-1 for worlds that carry none.
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
    look: Int[Array, " F"]
    history: MCHistory | None
    antithetic: bool = eqx.field(static=True)
    interval: str = eqx.field(static=True)
    delta: float = eqx.field(static=True)
    epsilon: float = eqx.field(static=True)
    stop: tuple[str, ...] = eqx.field(static=True)
    score_range: tuple[float, float] = eqx.field(static=True)
    evaluations_computed: int = eqx.field(static=True)
    rule_names: tuple[str, ...] = eqx.field(static=True, default=RULE_NAMES)
    case_ids: Int[np.ndarray, " F"] | None = None

    @property
    def num_failures(self) -> int:
        """F, the number of failures estimated."""
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

    @property
    def radius(self) -> str:
        """Deprecated: `interval`, the kind of interval."""
        warnings.warn(
            "`MCResult.radius` is deprecated and will be removed; use `MCResult.interval`",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.interval

    @property
    def checkpoint(self) -> Int[Array, " F"]:
        """Deprecated: `look`, the 1-based look at which each failure stopped."""
        warnings.warn(
            "`MCResult.checkpoint` is deprecated and will be removed; use `MCResult.look`",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.look

    @classmethod
    def _nested(cls) -> dict:
        return {"history": MCHistory}

    @classmethod
    def from_dict(cls, data: dict):
        """The result `to_dict()` gave (a dict written before `radius` was renamed
        `interval` and `checkpoint` renamed `look` reads too)."""
        if isinstance(data, dict):
            old = {"radius": "interval", "checkpoint": "look"}
            data = {
                old.get(name, name) if old.get(name) not in data else name: v
                for name, v in data.items()
            }
            if isinstance(data.get("arrays"), dict) and "checkpoint" in data["arrays"]:
                arrays = dict(data["arrays"])
                arrays.setdefault("look", arrays.pop("checkpoint"))
                data["arrays"] = arrays
        return super().from_dict(data)

    def row(self, case: int) -> int:
        """The row of the failure with case id `case` (see `case_ids`)."""
        return case_row(self.case_ids, self.num_failures, case)

    def table(self, case: int | None = None, digits: int = 4) -> str:
        """A plain-text table of the estimates and intervals of the failure with case id
        `case` (default: the first failure). A step every sampled marginal of which was
        exactly 0 is marked: its interval is what the samples cannot rule out, not a
        measured spread."""
        failure = 0 if case is None else self.row(case)
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
            if self.interval == "normal"
            else "valid at every look"
        )
        lines.append(
            f"{int(self.num_samples[failure])} {unit}, {int(self.evaluations[failure])} evaluations; "
            f"stopped by: {self.rule_fired[failure]}"
            + ("" if bool(self.converged[failure]) else " (no requested rule held)")
        )
        lines.append(
            f"{self.interval} intervals at 1 - delta = {1 - self.delta:g} per failure ({level}); "
            f"v(empty) = {float(self.empty[failure]):.{digits}f}, v(all) = {float(self.full[failure]):.{digits}f}"
        )
        silent = (np.asarray(self.values[failure]) == 0) & (np.asarray(self.variance[failure]) == 0)
        if silent.any():
            names = ", ".join(step for step, zero in zip(self.steps, silent) if zero)
            lines.append(
                f"every sampled marginal of {names} was exactly 0: the interval is what "
                f"{int(self.num_samples[failure])} {unit} cannot rule out, not a measured spread"
            )
        return "\n".join(lines)


class BatchResult(JSONExport, eqx.Module):
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
      (rule `interval`) at the last look reached.
    - `share_of_repair`: `[n]`, `sum_f phi_fi / sum_f (v_f(all) - v_f(empty))`.
    - `resolve_rate`: `[n]`, mean of `resolve`; `last_step_rate`: `[n]`, the share of
      (failure, world) pairs whose last-step blame names the step.
    - `separated_at`: `{rule: failures needed or None}` for every interval rule on the same
      stream of failures; `separated`: whether the chosen rule separated the top step.
    - `interval_look`: k, the look of the failure stream at which `lower`, `upper` and the
      anytime intervals were formed (0 when nothing was analysed; `interval_checkpoint`, its
      old name, is deprecated).
    - `level`, `intervals`: the coverage of the fixed-sample intervals (default 0.95; see
      `with_level`) and a `blamejax.stats.BatchIntervals` with every interval the reports
      show (fixed-sample Student t, asymptotic and finite-sample anytime, fix-alone rate),
      each clipped to the range its quantity can take; computed from the per-failure values.
    - `step_order`: the steps by mean Shapley value, largest first (every report's order);
      `largest_blame`: per analysed failure, every step within 1e-6 of the score range of
      the largest Shapley value (ties), or `()` when the total repair is zero.
    - `factual_choice`, `fixed_choice`: `Int[np.ndarray, "A sites"]`, every draw's option in the
      failed run and in the fully fixed run (world 0), for the drill-down.
    - `evaluations`: pipeline runs made: one per case (run as it happened), one per failure to
      analyse (its fully fixed run, for the drill-down), plus the analysis's coalition
      evaluations (for exact blame by structure, which scores no coalition on its own, its
      direct runs: v(empty), v(all) and each fix alone, per world).
    - `coalition_scores`: `Float[np.ndarray, "A W 2**n"]`, every coalition's score in every
      world (coalition m fixes step j when bit j of m is set), and `coalition_choices`:
      `Int[np.ndarray, "A 2**n sites"]`, every draw's option under the failure's recorded
      noise with that coalition's fixes; `None` unless `blame_batch(..., keep_coalitions=True)`.
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
    coalition_scores: Float[np.ndarray, "A W 2**n"] | None = None
    coalition_choices: Int[np.ndarray, "A 2**n sites"] | None = None
    interval_look: int = eqx.field(static=True, default=0)
    level: float = eqx.field(static=True, default=0.95)
    intervals: BatchIntervals | None = None
    step_order: tuple[str, ...] | None = eqx.field(static=True, default=None)
    largest_blame: tuple[tuple[str, ...], ...] | None = eqx.field(static=True, default=None)

    def __post_init__(self):
        # What the reports show, computed once from the per-failure values.
        if self.intervals is None:
            self.intervals = batch_intervals(
                self.shapley,
                self.resolve,
                level=self.level,
                delta=self.delta,
                look=self.interval_look,
                score_range=self.score_range,
            )
        if self.step_order is None:
            self.step_order = tuple(self.steps[i] for i in report_step_order(self.mean_shapley))
        if self.largest_blame is None:
            self.largest_blame = report_largest_blame(
                self.shapley, self.total, self.steps, self.score_range
            )

    @classmethod
    def _nested(cls) -> dict:
        return {"intervals": BatchIntervals}

    @classmethod
    def from_dict(cls, data: dict):
        """The result `to_dict()` gave (a dict written before `interval_checkpoint` was
        renamed `interval_look`, and the `checkpoint` of its `intervals` renamed `look`,
        reads too)."""
        if isinstance(data, dict):
            data = dict(_renamed_key(data, "interval_checkpoint", "interval_look"))
            if isinstance(data.get("intervals"), dict):
                data["intervals"] = _renamed_key(data["intervals"], "checkpoint", "look")
        return super().from_dict(data)

    @property
    def interval_checkpoint(self) -> int:
        """Deprecated: `interval_look`, the look at which the intervals were formed."""
        warnings.warn(
            "`BatchResult.interval_checkpoint` is deprecated and will be removed; use "
            "`BatchResult.interval_look`",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.interval_look

    def with_level(self, level: float) -> BatchResult:
        """The same result with its fixed-sample intervals at coverage `level` (default
        0.95); the anytime intervals stay at `1 - delta`."""
        return dataclasses.replace(self, level=level, intervals=None)

    def plot(self, kind: str = "bars", **kwargs):
        """A matplotlib `Figure` (needs matplotlib): `kind="bars"`, each step's mean Shapley
        value with its fixed-sample and anytime intervals beside the baselines;
        `"failures"`, a heat map of the per-failure Shapley values; `"scatter"`, fix-alone
        resolve rate against mean Shapley value. See `blamejax.report.plot_batch`."""
        from ..report import plot_batch

        return plot_batch(self, kind, **kwargs)

    @property
    def num_analysed(self) -> int:
        """How many failures were analysed (the length of `failure_ids`)."""
        return int(self.failure_ids.shape[0])

    def row(self, case: int) -> int:
        """The row (of every failure axis) of the analysed failure with case id `case`: the
        failures come in a seeded random order, so look them up by id."""
        return case_row(self.failure_ids, self.num_analysed, case)

    def table(self) -> str:
        """The terminal table: one row per step."""
        from ..report import batch_table

        return batch_table(self)

    def to_dataframe(self):
        """Per-step summary as a pandas DataFrame (needs pandas installed)."""
        from ..report import batch_dataframe

        return batch_dataframe(self)

    def to_html(self, *, interactive: bool = False) -> str:
        """A single self-contained HTML report (no network, no external assets). With
        `interactive=True`, the page where the reader toggles fixes and edits coalitions and
        every rule is recomputed in the browser (`blamejax.report.interactive_html`; needs
        `blame_batch(..., keep_coalitions=True)`)."""
        if interactive:
            from ..report import interactive_html

            return interactive_html(self)
        from ..report import batch_html

        return batch_html(self)

    def save_html(self, path, *, interactive: bool = False) -> None:
        """Write `to_html(interactive=interactive)` to `path` (UTF-8), atomically: a failed
        write leaves an existing file as it was."""
        from ..report import write_atomic

        write_atomic(path, self.to_html(interactive=interactive))

    def _repr_html_(self) -> str:
        """An HTML fragment for notebooks: no `<html>` or `<body>`, styles scoped to the
        report's own class."""
        from ..report import batch_html_fragment

        return batch_html_fragment(self)

    def __str__(self) -> str:
        return self.table()
