"""The synthetic-SCM benchmark for one configuration, end to end, and its markdown tables.

`single_culprit_benchmark` and `multi_culprit_benchmark` put it together for one
configuration and return plain, JSON-ready results; `results_markdown` renders them. Timings
are kept in their own field, so two runs with the same seeds give identical tables once the
timings are left out.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.random as jr
import numpy as np

from ...noise import as_key
from .._rates import proportion
from ._compare import compare_methods
from ._culprits import MultiCulpritCases, multi_culprit_cases
from ._inject import InjectedFailures, inject_errors
from ._methods import CREDIT_METHODS, METHODS, method_label
from ._metrics import agent_hits, culprit_hits, split_error, step_hits
from ._model import SCM


# -- one configuration, end to end ------------------------------------------------------------------
def _timing(comparison) -> dict:
    """Each method's first-call and steady wall time, for the results' `timing` entry."""
    return {
        method: dict(
            first_s=float(comparison.seconds[m]), steady_s=float(comparison.steady_seconds[m])
        )
        for m, method in enumerate(comparison.methods)
    }


def _method_rows(comparison, scores) -> list[dict]:
    """One row per method: its name and label, what `scores(row, m, method, predicted)`
    adds (the benchmark's metrics), and its cost in pipeline runs per failure."""
    rows = []
    for m, method in enumerate(comparison.methods):
        predicted = np.asarray(comparison.predicted[m])
        label = method_label(method, comparison.mc_orders, comparison.num_rollouts)
        row = dict(method=method, label=label)
        scores(row, m, method, predicted)
        row["evaluations"] = float(comparison.evaluations[m])
        rows.append(row)
    return rows


def _scm_config(scm: SCM) -> dict:
    return dict(
        num_steps=scm.num_steps,
        num_options=scm.num_options,
        topology=scm.topology,
        parents=[list(p) for p in scm.parents],
        num_agents=scm.num_agents,
        noise=scm.noise,
        recovery=scm.recovery,
        fix_noise=scm.fix_noise,
        fix_recovery=scm.fix_recovery,
        leak=scm.leak,
    )


def _default_name(scm: SCM) -> str:
    return f"n={scm.num_steps} {scm.topology}"


def single_culprit_benchmark(
    key,
    scm: SCM,
    num_failures: int,
    *,
    methods: Sequence[str] = METHODS,
    mc_orders: int = 16,
    num_rollouts: int = 200,
    within: Sequence[int] = (0, 1, 2),
    delta: float = 0.05,
    repeat: int = 0,
    name: str | None = None,
) -> dict:
    """Inject errors into `scm` (`inject_errors`), run `compare_methods` on the failures and
    score every method: Step@k for each k in `within`, agent-level accuracy, how often it
    names no step; with Wilson intervals at level 1 - `delta`.

    `name` labels the configuration in tables (default "n=8 chain").

    **Returns:** a JSON-ready dict: `config`, `generator` (counts and rejection rate),
    `methods` (one dict per method), `check` (the share of failures whose earliest repairing
    fix is the label: 1.0 by construction) and `timing` (seconds per method; the only part
    that differs between two runs with the same seeds).

    ```python
    # doctest: slow (compiles every method of the benchmark, about 30 s)
    from blamejax.benchmarks import scm
    report = scm.single_culprit_benchmark(0, scm.make_scm(0, 6, steps_per_agent=2), 50, num_rollouts=20)
    print(scm.results_markdown([report]))
    ```
    """
    key_inject, key_methods = jr.split(as_key(key))
    failures: InjectedFailures = inject_errors(key_inject, scm, num_failures)
    settings = dict(mc_orders=mc_orders, num_rollouts=num_rollouts, delta=delta, repeat=repeat)
    comparison = compare_methods(
        scm.pipeline, failures.cases, failures.worlds, key_methods, methods=methods, **settings
    )
    culprit = np.asarray(failures.culprit)

    def scores(row, m, method, predicted):
        for k in within:
            row[f"step@{k}"] = proportion(step_hits(predicted, culprit, k), delta)
        row["agent"] = proportion(agent_hits(predicted, culprit, scm.agents), delta)
        row["no_answer"] = int(np.sum(predicted < 0))

    rows = _method_rows(comparison, scores)
    timing = _timing(comparison)
    return dict(
        config=dict(
            _scm_config(scm),
            name=name or _default_name(scm),
            num_failures=num_failures,
            mc_orders=mc_orders,
            num_rollouts=num_rollouts,
            delta=delta,
        ),
        generator=dict(
            candidates=failures.num_candidates,
            successful=failures.num_successful,
            still_successful=failures.num_still_successful,
            repaired_earlier=failures.num_repaired_earlier,
            kept=failures.num_failures,
            rejection_rate=failures.rejection_rate,
            culprit_counts=np.bincount(culprit, minlength=scm.num_steps).tolist(),
        ),
        methods=rows,
        check=dict(
            earliest_repair_is_label=float(
                np.mean(np.asarray(comparison.earliest_repair) == culprit)
            )
        ),
        timing=timing,
    )


def multi_culprit_benchmark(
    key,
    scm: SCM,
    num_cases: int,
    *,
    num_culprits: int = 2,
    kind: str = "conjunctive",
    methods: Sequence[str] = METHODS,
    mc_orders: int = 16,
    num_rollouts: int = 200,
    delta: float = 0.05,
    repeat: int = 0,
    name: str | None = None,
) -> dict:
    """Multi-culprit cases (`multi_culprit_cases`) with every method: how often the named
    step is a culprit, and for the methods that give credits, the split error against the
    analytic Shapley values (mean total variation distance with its standard error).

    **Returns:** a JSON-ready dict: `config`, `methods`, `check` (the largest |exact Shapley -
    analytic| over all cases and steps) and `timing`.

    ```python
    # doctest: slow (compiles every method of the benchmark, about 30 s)
    from blamejax.benchmarks import scm
    report = scm.multi_culprit_benchmark(0, scm.make_scm(0, 6), 50, kind="disjunctive", num_rollouts=20)
    print(scm.results_markdown(multi=[report]))
    ```
    """
    key_cases, key_methods = jr.split(as_key(key))
    cases: MultiCulpritCases = multi_culprit_cases(
        key_cases, scm, num_cases, num_culprits=num_culprits, kind=kind
    )
    settings = dict(mc_orders=mc_orders, num_rollouts=num_rollouts, delta=delta, repeat=repeat)
    comparison = compare_methods(
        scm.pipeline, cases.cases, cases.worlds, key_methods, methods=methods, **settings
    )
    culprits = np.asarray(cases.culprits)
    analytic = np.asarray(cases.analytic_shapley, np.float64)
    check = None

    def scores(row, m, method, predicted):
        nonlocal check
        row["culprit_hit"] = proportion(culprit_hits(predicted, culprits), delta)
        row["no_answer"] = int(np.sum(predicted < 0))
        credits = comparison.credits[m]
        if credits is not None and method in CREDIT_METHODS:
            error = split_error(credits, analytic)
            row["split_error"] = dict(
                mean=float(error.mean()),
                stderr=float(error.std(ddof=1) / np.sqrt(error.size))
                if error.size > 1
                else float("nan"),
            )
            if method == "exact_shapley":
                check = float(np.max(np.abs(np.asarray(credits, np.float64) - analytic)))

    rows = _method_rows(comparison, scores)
    timing = _timing(comparison)
    return dict(
        config=dict(
            _scm_config(scm),
            name=name or f"{_default_name(scm)}, {kind}, m={num_culprits}",
            num_cases=num_cases,
            num_culprits=num_culprits,
            kind=kind,
            mc_orders=mc_orders,
            num_rollouts=num_rollouts,
            delta=delta,
        ),
        methods=rows,
        check=dict(exact_max_abs_error=check),
        timing=timing,
    )


# -- markdown ----------------------------------------------------------------------------------------
def _cell(p: dict) -> str:
    return f"{100 * p['rate']:.1f} [{100 * p['low']:.1f}, {100 * p['high']:.1f}]"


def _no_answer_lines(results, methods, labels, what: str) -> list[str]:
    """The note under a table: per method, how many failures (or cases) got no answer in each
    configuration; nothing when every method always named a step."""
    counts = [
        (labels[name], [r["methods"][m]["no_answer"] for r in results])
        for m, name in enumerate(methods)
    ]
    counts = [(label, row) for label, row in counts if any(row)]
    if not counts:
        return []
    listed = "; ".join(f"{label}: " + ", ".join(str(c) for c in row) for label, row in counts)
    return [
        "",
        f"{what} for which a method named no step (counted as misses): {listed} (in the column order above).",
    ]


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def results_markdown(
    single: Sequence[dict] = (), multi: Sequence[dict] = (), *, timings: bool = True
) -> str:
    """Markdown tables of `single_culprit_benchmark` and `multi_culprit_benchmark` results:
    the generator's counts, Step@0 / Step@1 / agent-level accuracy (percent, with Wilson
    intervals) per method and configuration, cost, and the multi-culprit results.
    With `timings=False` the wall-time columns are left out, so that two runs with the same
    seeds give identical text."""
    lines: list[str] = []
    if single:
        names = [r["config"]["name"] for r in single]
        lines += ["### Generator: controlled injection", ""]
        lines += _table(
            [
                "configuration",
                "clean runs",
                "successful",
                "still successful",
                "repaired earlier",
                "kept failures",
                "rejection rate",
            ],
            [
                [
                    name,
                    str(g["candidates"]),
                    str(g["successful"]),
                    str(g["still_successful"]),
                    str(g["repaired_earlier"]),
                    str(g["kept"]),
                    f"{g['rejection_rate']:.3f}",
                ]
                for name, g in zip(names, (r["generator"] for r in single))
            ],
        )
        methods = [row["method"] for row in single[0]["methods"]]
        labels = {row["method"]: row["label"] for row in single[0]["methods"]}
        for metric, title in (
            ("step@0", "Step@0 (exact step)"),
            ("step@1", "Step@1 (within one step)"),
            ("agent", "Agent-level"),
        ):
            if metric not in single[0]["methods"][0]:
                continue
            lines += ["", f"### {title} accuracy, % [95% Wilson interval]", ""]
            body = []
            for m, name in enumerate(methods):
                body.append([labels[name]] + [_cell(r["methods"][m][metric]) for r in single])
            lines += _table(["method"] + names, body)
        lines += [
            "",
            "### Cost: pipeline runs per failure"
            + (
                " / wall time per failure in ms (steady state where measured, else first call)"
                if timings
                else ""
            ),
            "",
        ]
        body = []
        for m, name in enumerate(methods):
            cells = []
            for r in single:
                cell = f"{r['methods'][m]['evaluations']:g}"
                if timings:
                    t = r["timing"][name]
                    seconds = t["steady_s"] if np.isfinite(t["steady_s"]) else t["first_s"]
                    cell += f" / {1000 * seconds / r['generator']['kept']:.3f}"
                cells.append(cell)
            body.append([labels[name]] + cells)
        lines += _table(["method"] + names, body)
        lines += _no_answer_lines(single, methods, labels, "Failures")
        checks = [r["check"]["earliest_repair_is_label"] for r in single]
        lines += [
            "",
            f"Check: the earliest step whose fix alone repairs the run is the golden label in "
            f"{min(checks) * 100:.1f}% of the failures (100% by construction).",
        ]
    if multi:
        lines += [
            "",
            "### Multi-culprit cases: named step is a culprit, % [95% Wilson interval]; split error (total variation distance to the analytic Shapley split, mean ± s.e.)",
            "",
        ]
        names = [r["config"]["name"] for r in multi]
        methods = [row["method"] for row in multi[0]["methods"]]
        labels = {row["method"]: row["label"] for row in multi[0]["methods"]}
        body = []
        for m, name in enumerate(methods):
            cells = []
            for r in multi:
                row = r["methods"][m]
                cell = _cell(row["culprit_hit"])
                if "split_error" in row:
                    cell += (
                        f"; {row['split_error']['mean']:.3f} ± {row['split_error']['stderr']:.3f}"
                    )
                cells.append(cell)
            body.append([labels[name]] + cells)
        lines += _table(["method"] + names, body)
        lines += _no_answer_lines(multi, methods, labels, "Cases")
        worst = max(r["check"]["exact_max_abs_error"] for r in multi)
        lines += [
            "",
            f"Check: largest |exact Shapley - analytic value| over all multi-culprit cases and steps: {worst:.2e}.",
        ]
    return "\n".join(lines) + "\n"
