"""The interactive page of a `BatchResult`: toggle fixes, edit coalitions, watch every rule move.

`interactive_html(result)` (also `result.to_html(interactive=True)`) writes one
self-contained HTML file: no network, no external script, font or style. It holds, for each
analysed failure, every coalition's score in every world and every draw's output under the
failure's recorded noise with that coalition's fixes (the result must come from
`blame_batch(..., keep_coalitions=True)`). The reader picks a failure, toggles the steps'
fixes with checkboxes (the coalition they make is shown with its value and the outputs of
every step), flips a coalition's pass/fail or sets its success rate, and the page recomputes
in the browser, per failure, Shapley, Banzhaf, fix-alone, leave-one-out and last-step blame,
and the batch table (their means over failures, share of repair, fix-alone resolve rate,
last-step share). Every control is a native button, checkbox, select or number input with a
label, in reading order, so the page is used by keyboard alone. Its steps are listed as in every
other report, by mean Shapley value, largest first (the result's `step_order`, embedded as
`order`), and stay in that order while edits move the values; the coalition bits and the
numbers the page returns keep the pipeline's order of `steps`.

**Edits.** Setting a coalition's success rate to r gives it the score r in every world (its
value, the mean over worlds, is then r); flipping a passing coalition (value >= threshold)
gives it the bottom of the score range in every world, flipping a failing one the top. Last-step
blame is a rule over outputs, not values: edits of values never move it (which is why it is a
poor rule), and the page recomputes its shares from the stored per-world verdicts.

**What is bit-identical, and to what.** JAX computes a result's attributions in float32 (float64
under `JAX_ENABLE_X64`) with matrix products whose summation order XLA leaves unspecified, so
no script can promise to repeat them bit for bit. The page instead follows
`interactive_reduction`, a reference reduction written here in plain Python floats (IEEE
float64) with every operation in a fixed order, and its script (`interactive.js`, inlined)
performs the same operations in the same order on the same float64 numbers, also IEEE float64
without fused multiply-add: the numbers the page shows and returns (`blamejax.numbers()`) equal
`interactive_reduction`'s bit for bit, before and after any edit (tested in headless
Chromium, `tests/test_interactive.py`). The reference agrees with the JAX values of the result
within the JAX dtype's rounding, not bit for bit (tested: within 16 eps of that dtype for the
refund demo's 4 steps, within 8 n eps on random tables of n <= 5 steps).
The order, per failure with scores `x[w][m]` (W worlds, coalition m fixing step j when bit j
of m is set):

- `v[m] = (((0 + x[0][m]) + x[1][m]) + ...) / W`;
- `D[i][s]`: for m = 0, 1, ..., 2^n - 1 and each step i not in m, in increasing i,
  `D[i][popcount m] += v[m | 2^i] - v[m]` (starting from 0);
- Shapley `phi[i] = sum over s = 0..n-1, in order, of w[s] * D[i][s]`, with
  `w[s] = 1 / (n C(n-1, s))` rounded once from the exact fraction;
- Banzhaf `(sum over s, in order, of D[i][s]) * 2^-(n-1)`;
- fix-alone `v[2^i] - v[0]`; leave-one-out `v[2^n - 1] - v[2^n - 1 - 2^i]`; total repair
  `v[2^n - 1] - v[0]`;
- fix-alone resolve rate: (worlds with `x[w][2^i] >= threshold`) / W; last-step share: the
  worlds whose verdict names step i, / W;
- the batch: each per-failure quantity summed over failures in visiting order from 0, then
  divided by the number of failures; share of repair `(sum_f phi[f][i]) / (sum_f total_f)`
  (NaN when that sum is 0); last-step share over all (failure, world) pairs.

The intervals of the batch report are not recomputed on the page: they need logarithms and
quantiles, which JavaScript does not round as Python does.

The file's size grows like A W 2^n numbers: for the 146 failures of `python -m blamejax demo
rag` (n = 4) it is 0.06 MB under recorded noise and 0.13 MB with 8 inferred or fresh worlds
(the command prints each page's size).
"""

from __future__ import annotations

import html
import json
from importlib import resources

import numpy as np

from ..reduction import shapley_weights
from ._batch import CAVEAT, closed


def _check(result) -> None:
    if (
        getattr(result, "coalition_scores", None) is None
        or getattr(result, "coalition_choices", None) is None
    ):
        raise ValueError(
            "`interactive=True` needs every coalition's score: run "
            "blame_batch(..., keep_coalitions=True) (exact estimator); this result has none"
        )
    scores = np.asarray(result.coalition_scores)
    n = len(result.steps)
    if scores.ndim != 3 or scores.shape[0] != result.num_analysed or scores.shape[2] != 1 << n:
        raise ValueError(
            f"`coalition_scores` must have shape [analysed failures, worlds, 2**n] = "
            f"[{result.num_analysed}, W, {1 << n}], got {list(scores.shape)}"
        )


def interactive_reduction(scores, last_step, threshold: float) -> dict:
    """The reference reduction the interactive page repeats bit for bit (see the module
    docstring for the order of every operation), in plain Python float64.

    **Arguments:**
    - `scores`: `Float[ndarray, "A W 2**n"]`, every coalition's score per failure and world.
    - `last_step`: `Int[ndarray, "A W"]`, last-step verdicts (index of a step, -1 for none).
    - `threshold`: a run passes when its score is >= threshold.

    **Returns:** a dict of lists of Python floats: per failure (`[A][n]`) `shapley`,
    `banzhaf`, `fix_alone`, `leave_one_out`, `resolve`, `last_step`, and (`[A]`) `empty`,
    `full`, `total`, `value` (`[A][2**n]`, the mean over worlds); and `batch`, a dict of the
    same per-step quantities' means over failures (`[n]`) plus `share_of_repair`,
    `resolve_rate` and `last_step_rate`.

    ```python
    import numpy as np
    from blamejax.report import interactive_reduction
    # The refund game: the planner or the retriever's fix alone repairs the run; the writer's
    # and the reviewer's fixes repair it only together.
    v = [0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]
    out = interactive_reduction(np.array([[v]], float), np.array([[1]]), 1.0)
    print([round(x * 12, 6) for x in out["shapley"][0]])  # [5.0, 5.0, 1.0, 1.0]
    ```
    """
    scores = np.asarray(scores, dtype=np.float64)
    last_step = np.asarray(last_step)
    if scores.ndim != 3:
        raise ValueError(
            f"`scores` must have shape [failures, worlds, 2**n], got {list(scores.shape)}"
        )
    num_f, num_w, size = scores.shape
    n = size.bit_length() - 1
    if n < 1 or 1 << n != size:
        raise ValueError(
            f"`scores` must have 2**n coalitions (n >= 1) on its last axis, got {size}"
        )
    if last_step.shape != (num_f, num_w):
        raise ValueError(
            f"`last_step` must have shape [{num_f}, {num_w}], got {list(last_step.shape)}"
        )
    weights = [float(w) for w in shapley_weights(n)]
    scale = 2.0 ** -(n - 1)
    threshold = float(threshold)
    rows = {
        k: [] for k in ("shapley", "banzhaf", "fix_alone", "leave_one_out", "resolve", "last_step")
    }
    rows.update(empty=[], full=[], total=[], value=[])
    for f in range(num_f):
        x = scores[f].tolist()
        last = [int(a) for a in last_step[f]]
        v = []
        for m in range(size):
            acc = 0.0
            for w in range(num_w):
                acc += x[w][m]
            v.append(acc / num_w)
        d = [[0.0] * n for _ in range(n)]
        for m in range(size):
            s = bin(m).count("1")
            for i in range(n):
                bit = 1 << i
                if not m & bit:
                    d[i][s] += v[m | bit] - v[m]
        shapley, banzhaf = [], []
        for i in range(n):
            acc, plain = 0.0, 0.0
            for s in range(n):
                acc += weights[s] * d[i][s]
                plain += d[i][s]
            shapley.append(acc)
            banzhaf.append(plain * scale)
        full = size - 1
        rows["shapley"].append(shapley)
        rows["banzhaf"].append(banzhaf)
        rows["fix_alone"].append([v[1 << i] - v[0] for i in range(n)])
        rows["leave_one_out"].append([v[full] - v[full - (1 << i)] for i in range(n)])
        rows["resolve"].append(
            [sum(1 for w in range(num_w) if x[w][1 << i] >= threshold) / num_w for i in range(n)]
        )
        rows["last_step"].append([sum(1 for a in last if a == i) / num_w for i in range(n)])
        rows["empty"].append(v[0])
        rows["full"].append(v[full])
        rows["total"].append(v[full] - v[0])
        rows["value"].append(v)

    def mean(name):
        out = []
        for i in range(n):
            acc = 0.0
            for f in range(num_f):
                acc += rows[name][f][i]
            out.append(acc / num_f)
        return out

    batch = {name: mean(name) for name in ("shapley", "banzhaf", "fix_alone", "leave_one_out")}
    total = 0.0
    for f in range(num_f):
        total += rows["total"][f]
    share = []
    for i in range(n):
        acc = 0.0
        for f in range(num_f):
            acc += rows["shapley"][f][i]
        share.append(acc / total if total != 0.0 else float("nan"))
    batch["share_of_repair"] = share
    batch["resolve_rate"] = mean("resolve")
    pairs = num_f * num_w
    batch["last_step_rate"] = [int(np.sum(last_step == i)) / pairs for i in range(n)]
    return dict(rows, batch=batch)


def _labels(result) -> list:
    """Each draw site's option names (a list of strings, or None)."""
    names = dict(result.option_names or ())
    return [
        None if names.get(step) is None else [str(x) for x in names[step]]
        for step in result.site_steps
    ]


def page_data(result) -> dict:
    """What the page holds: settings, weights and, per failure, its scores, outputs and
    last-step verdicts (plain Python values; floats exactly as float64)."""
    _check(result)
    n = len(result.steps)
    scores = np.asarray(result.coalition_scores, np.float64)
    choices = np.asarray(result.coalition_choices)
    last = np.asarray(result.last_step)
    failures = []
    for a in range(result.num_analysed):
        failures.append(
            dict(
                id=int(result.failure_ids[a]),
                scores=scores[a].tolist(),
                choices=choices[a].astype(int).tolist(),
                last=last[a].astype(int).tolist(),
            )
        )
    low, high = result.score_range
    return dict(
        steps=list(result.steps),
        order=[result.steps.index(s) for s in result.step_order],  # how the page lists them
        sites=list(result.site_steps),
        site_player=[result.steps.index(s) if s in result.steps else -1 for s in result.site_steps],
        labels=_labels(result),
        threshold=float(result.threshold),
        low=float(low),
        high=float(high),
        noise=result.noise,
        question=result.question,
        weights=[float(w) for w in shapley_weights(n)],
        scale=2.0 ** -(n - 1),
        failures=failures,
    )


def _script() -> str:
    text = resources.files("blamejax.report").joinpath("interactive.js").read_text(encoding="utf-8")
    if "</script" in text.lower():  # would end the inline script early
        raise RuntimeError("interactive.js must not contain '</script'")
    return text


_CSS = """
.bj-page{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1100px}
.bj-page h1{font-size:22px;margin:0 0 4px}.bj-page h2{font-size:17px;margin:22px 0 8px}
.bj-page .muted{color:#555;font-size:13px}
.bj-page .caveat{background:#fff7e0;border-left:4px solid #e0a800;padding:8px 12px;font-size:13px}
.bj-page table{border-collapse:collapse;font-size:13px;margin:6px 0}
.bj-page th,.bj-page td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}
.bj-page th:first-child,.bj-page td:first-child{text-align:left}
.bj-page .differs{background:#fde2e2}.bj-page .edited{background:#e6f0ff}
.bj-page .selected{outline:2px solid #3366cc}
.bj-page fieldset{border:1px solid #ccc;margin:8px 0;padding:6px 12px}
.bj-page label{margin-right:14px;font-size:14px}
.bj-page button{font-size:13px;margin:2px 6px 2px 0}
.bj-page :focus-visible{outline:3px solid #e0a800;outline-offset:1px}
.bj-page .error{color:#b00020}
"""


def interactive_html(result) -> str:
    """The interactive page of a batch result (see the module docstring): one self-contained
    HTML file whose script recomputes every rule bit-identically to `interactive_reduction`.

    A result with no failure gives a page that says so.

    **Raises:** `ValueError` when the result holds no coalition scores (run
    `blame_batch(..., keep_coalitions=True)`).
    """
    if result.num_analysed == 0:  # nothing to blame is not an error (as in the static report)
        return (
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>blamejax: interactive blame'
            f'</title><style>{_CSS}</style></head><body><main class="bj-page"><h1>blamejax</h1><p>No failures: all '
            f"{result.num_cases} cases passed, so there is nothing to blame.</p></main></body></html>"
        )
    data = page_data(result)
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    esc = html.escape
    return "".join(
        [
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>blamejax: interactive blame ({esc(result.noise)} noise)</title>",
            f"<style>{_CSS}</style></head><body>",
            '<main class="bj-page" id="bj-app">',
            "<h1>blamejax: toggle fixes, edit coalitions, recompute blame</h1>",
            f'<p class="muted">Noise mode <b>{esc(result.noise)}</b>: {esc(closed(result.question))} '
            f"{result.num_analysed} failures analysed exactly; a run passes when its score is at least "
            f"{result.threshold:g}.</p>",
            '<p class="muted">Every number below is recomputed in this page after each edit, with the '
            "operations of blamejax's reference reduction (blamejax.report.interactive_reduction) in the "
            "same order on the same float64 numbers, so it equals Python's bit for bit. Intervals are "
            "not recomputed here (see the static report).</p>",
            f'<p class="caveat">{esc(CAVEAT)}</p>',
            '<noscript><p class="error">This page needs JavaScript to show its numbers.</p></noscript>',
            '<script type="application/json" id="bj-data">',
            payload,
            "</script>",
            f"<script>{_script()}</script>",
            "</main></body></html>",
        ]
    )
