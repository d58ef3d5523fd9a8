"""Reports of a `BatchResult`: a terminal table, plain dicts/JSON, a pandas DataFrame, an HTML
fragment for notebooks and a single self-contained HTML page (inline CSS and SVG, no script,
no network, no external assets).

Every report lists the steps in the same order, by mean Shapley value, largest first
(`step_order`), and writes every number as a fraction: Shapley values in units of the score,
shares and rates as fractions of the analysed failures (1 = all of them). Every interval is
clipped to the range its quantity can take, and a clipped bound is marked.
"""

from __future__ import annotations

import html

import numpy as np

from ._chart import batch_chart
from ._json import result_to_dict

CAVEAT = (
    "Blame is relative to the fixes supplied. Under recorded or inferred noise it assumes the "
    "Gumbel-max coupling, which data cannot identify: another coupling with the same "
    "interventional behaviour gives different blame."
)
"""The sentence every report carries: blame is relative to the fixes supplied, and replay
under recorded or inferred noise assumes the Gumbel-max coupling."""
TIE_TOLERANCE = 1e-6  # steps within this share of the score range of the largest value tie
"""Steps whose Shapley value lies within this share of the score range of the largest one
tie for "largest blame" (`largest_blame`)."""
ORDER_NOTE = "Steps are listed by mean Shapley value, largest first."
UNITS_NOTE = (
    "All numbers are fractions: Shapley values in units of the score, shares and rates as "
    "fractions of the analysed failures (1 = all of them)."
)
RULE_NAMES = {"bernstein": "finite-sample (empirical Bernstein)", "normal": "asymptotic (normal)"}


# --------------------------------------------------------------------------------------
# What every report shares.
# --------------------------------------------------------------------------------------


def step_order(mean_shapley) -> tuple[int, ...]:
    """The indices of the steps by mean Shapley value, largest first (ties and NaN keep
    pipeline order; NaN last)."""
    mean = np.asarray(mean_shapley, np.float64)
    key = np.where(np.isnan(mean), np.inf, -mean)
    return tuple(int(i) for i in np.argsort(key, kind="stable"))


def largest_blame(shapley, total, steps, score_range, tolerance: float = TIE_TOLERANCE):
    """Per failure, every step whose Shapley value is within `tolerance * (s_max - s_min)` of
    the largest (in `steps` order), or `()` when there is nothing to blame: the total repair
    is within that of zero, or no step's Shapley value is above it (no fix helps; fixing
    makes the run worse).

    **Arguments:**
    - `shapley`: `Float[ndarray, "A n"]`; `total`: `Float[ndarray, "A"]`, v(all) - v(empty).
    - `steps`: the n step names; `score_range`: `(s_min, s_max)`.

    **Returns:** a tuple of A tuples of step names.

    ```python
    import numpy as np
    from blamejax.report import largest_blame
    phi = np.array([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [0.2, 0.7, 0.1], [0.0, -0.1, -0.4]])
    out = largest_blame(phi, phi.sum(1), ("a", "b", "c"), (0.0, 1.0))
    assert out == (("a", "b"), (), ("b",), ())
    ```
    """
    shapley = np.asarray(shapley, np.float64)
    total = np.asarray(total, np.float64)
    tol = float(tolerance) * (float(score_range[1]) - float(score_range[0]))
    out = []
    for phi, repair in zip(shapley, total, strict=True):
        if abs(repair) <= tol or not np.isfinite(phi).any():
            out.append(())
            continue
        top = np.nanmax(phi)
        if top <= tol:  # no fix helps: a harmful step is not "the largest blame"
            out.append(())
            continue
        out.append(tuple(steps[i] for i in np.flatnonzero(phi >= top - tol)))
    return tuple(out)


def _repair_tolerance(result) -> float:
    return TIE_TOLERANCE * (float(result.score_range[1]) - float(result.score_range[0]))


def _label(result, a: int) -> str:
    """Failure a's largest blame in words: the step(s), or why there is none."""
    names = result.largest_blame[a]
    total = float(result.total[a])
    worse = total < -_repair_tolerance(result)
    if not names:
        if not worse:
            return "none (no repair)"
        phi = np.asarray(result.shapley[a], np.float64)
        harm = result.steps[int(np.nanargmin(phi))] if np.isfinite(phi).any() else None
        most = f" (most harmful fix: {harm})" if harm is not None else ""
        return f"none: no step helps, fixing makes this run worse{most}"
    text = names[0] if len(names) == 1 else ", ".join(names) + " (tied)"
    return text + ("; fixing every step makes this run worse" if worse else "")


def _worlds(result) -> int:
    return int(result.last_step.shape[1]) if result.last_step.ndim == 2 else 1


def _percent(level: float) -> str:
    return f"{100 * level:.4g}%"


def _interval_notes(result) -> list[str]:
    """The sentences that say what each interval is, which one the stopping rule read, and
    where the top step separated."""
    iv = result.intervals
    anytime = _percent(1 - result.delta)
    k = iv.look
    notes = [
        f"Fixed-sample: {_percent(iv.level)} Student t interval over the per-failure Shapley "
        "values (mean ± t quantile × s / √t). It assumes the analysed failures are independent "
        "draws from the population of failures and a number of failures fixed in advance; it is "
        "asymptotic (exact only for normal values; with few failures of skewed values it covers "
        "less than its level) and not valid after stopping early.",
        f"Anytime: {anytime} for every look together, formed at look k = {k} of the failure "
        f"stream; finite-sample = empirical Bernstein with range width 2 (s_max − s_min), "
        "guaranteed; asymptotic = normal approximation, no finite-sample guarantee.",
        f"Fix-alone rate: {_percent(iv.level)} "
        + (
            "Wilson score interval (each failure resolved or not)."
            if iv.resolve_method == "wilson"
            else "Student t interval over the per-failure shares of worlds resolved."
        ),
        "Each interval is clipped to the range its quantity can take: "
        f"[{iv.shapley_range[0]:g}, {iv.shapley_range[1]:g}] for a mean Shapley value, [0, 1] for "
        "a rate; a clipped bound is marked *.",
    ]
    used = RULE_NAMES[result.interval]
    notes.append(f"The stopping rule reads the {anytime} anytime {used} interval.")
    for rule in (result.interval, *(r for r in result.separated_at if r != result.interval)):
        at = result.separated_at[rule]
        name = RULE_NAMES[rule][:1].upper() + RULE_NAMES[rule][1:]
        if at is None:
            notes.append(
                f"{name} rule: the top step is not separated within {result.num_analysed} failures."
            )
        else:
            notes.append(f"{name} rule: the top step is separated after {at} failures.")
    if (
        result.separated
        and result.num_analysed == result.separated_at[result.interval]
        and (result.num_analysed < result.num_failures)
    ):
        notes.append(
            "This batch stopped early on the anytime rule, so the fixed-sample interval is shown "
            "for reference only."
        )
    return notes


def _order_note(result) -> str:
    return (
        "Failures are visited in a seeded random order (a permutation of the test set's "
        "failures drawn from the key), so the first t of them are a random sample and every "
        "look's statistics use the first t; they are listed in that order."
    )


def _drill_note(result) -> str:
    """What the drill-down's two runs are, in the result's noise mode."""
    w = _worlds(result)
    runs = (
        "Each step's output in the failed run as it happened and in the fully fixed run under "
        "the same recorded noise; rows that differ are shaded."
    )
    if result.noise == "recorded":
        return runs + " The blame replays exactly that noise."
    if result.noise == "inferred":
        return runs + (
            f" The blame averages {w} posterior worlds abducted from the observed choices, "
            "which these two runs do not show."
        )
    return runs + (
        f" The blame averages {w} fresh worlds, which these two runs do not show; in them the "
        "unfixed run can pass, so v(∅), the mean score without fixes over those worlds, can "
        "be above 0."
    )


def _bound(value: float, clipped: bool, sign: bool = True) -> str:
    text = f"{value:+.3f}" if sign else f"{value:.3f}"
    return text + ("*" if clipped else "")


def _interval_text(lo, hi, clipped, sign: bool = True) -> str:
    if np.isnan(lo) or np.isnan(hi):
        return "n/a"
    return f"[{_bound(lo, clipped[0], sign)}, {_bound(hi, clipped[1], sign)}]"


def closed(text: str) -> str:
    """`text` with a closing full stop, unless it already ends a sentence (`.`, `?`, `!`)."""
    text = text.strip()
    return text if text.endswith((".", "?", "!")) else text + "."


def _sentence(text: str) -> str:
    """`text` as a sentence: a capital first letter and a closing full stop."""
    text = closed(text)
    return text[:1].upper() + text[1:]


def _heading(result) -> list[str]:
    w = _worlds(result)
    worlds = "1 world" if w == 1 else f"{w} worlds"
    lines = [
        f"Noise: {result.noise}. {_sentence(result.question)}",
        f"{result.num_cases} cases, {result.num_failures} failures (score < {result.threshold:g}), "
        f"{result.num_analysed} analysed with the {result.estimator} estimator over {worlds} "
        f"each; {result.evaluations} pipeline evaluations.",
    ]
    if result.num_analysed:
        lines.append(
            f"Mean over the analysed failures: v(∅) = {float(np.mean(result.empty)):.3f} (no fix), "
            f"v(all) = {float(np.mean(result.full)):.3f} (every fix), total repair "
            f"{float(np.mean(result.total)):+.3f}."
        )
    return lines


def _largest_summary(result) -> str:
    labels = result.largest_blame
    single = {}
    for names in labels:
        if len(names) == 1:
            single[names[0]] = single.get(names[0], 0) + 1
    tied = sum(len(names) > 1 for names in labels)
    worse = np.asarray(result.total, np.float64) < -_repair_tolerance(result)
    harmful = sum(not names and bad for names, bad in zip(labels, worse, strict=True))
    none = sum(len(names) == 0 for names in labels) - harmful
    order = [result.steps[i] for i in step_order(result.mean_shapley)]
    parts = ", ".join(f"{s} {single[s]}" for s in order if s in single)
    parts = f" ({parts})" if parts else ""
    return (
        f"Largest blame per failure (ties within {TIE_TOLERANCE:g} of the score range): one step in "
        f"{sum(single.values())}{parts}, tied steps in {tied}, none (zero total repair) in {none}"
        + (f", no step helps (fixing makes the run worse) in {harmful}." if harmful else ".")
    )


# --------------------------------------------------------------------------------------
# Terminal.
# --------------------------------------------------------------------------------------


def batch_table(result) -> str:
    """The terminal report: the heading, one row per step (by mean Shapley value, largest
    first) with the fixed-sample and both anytime intervals, then the baselines, what each
    interval is, the largest blame per failure and the caveat. Every number is a fraction."""
    head = _heading(result)
    if result.num_analysed == 0:
        head.append(
            f"No failures: all {result.num_cases} cases passed, so there is nothing to blame."
        )
        return "\n".join(head)
    iv = result.intervals
    order = step_order(result.mean_shapley)
    width = max(8, *(len(s) for s in result.steps))
    fixed = f"{_percent(iv.level)} fixed-sample"
    finite = f"{_percent(1 - result.delta)} anytime, finite"
    asym = f"{_percent(1 - result.delta)} anytime, asympt."
    mark = {"bernstein": finite, "normal": asym}
    stop = mark[result.interval]
    mark[result.interval] = stop + " (stop)"
    cols = [("mean Shapley", 12), (fixed, 22), (mark["bernstein"], 26), (mark["normal"], 26)]
    header = f"{'step':<{width}}" + "".join(f"  {t:>{w}}" for t, w in cols)
    lines = head + ["", header, "-" * len(header)]
    for i in order:
        cells = [
            f"{float(result.mean_shapley[i]):+.3f}",
            _interval_text(iv.fixed_lower[i], iv.fixed_upper[i], iv.fixed_clipped[i]),
            _interval_text(iv.bernstein_lower[i], iv.bernstein_upper[i], iv.bernstein_clipped[i]),
            _interval_text(iv.normal_lower[i], iv.normal_upper[i], iv.normal_clipped[i]),
        ]
        lines.append(
            f"{result.steps[i]:<{width}}"
            + "".join(f"  {c:>{w}}" for c, (_, w) in zip(cells, cols, strict=True))
        )
    cols = [
        ("share of repair", 15),
        ("fix-alone resolves", 18),
        (f"{_percent(iv.level)} interval", 18),
        ("last-step blame", 15),
    ]
    header = f"{'step':<{width}}" + "".join(f"  {t:>{w}}" for t, w in cols)
    lines += ["", header, "-" * len(header)]
    for i in order:
        cells = [
            f"{float(result.share_of_repair[i]):.3f}",
            f"{float(result.resolve_rate[i]):.3f}",
            _interval_text(
                iv.resolve_lower[i], iv.resolve_upper[i], iv.resolve_clipped[i], sign=False
            ),
            f"{float(result.last_step_rate[i]):.3f}",
        ]
        lines.append(
            f"{result.steps[i]:<{width}}"
            + "".join(f"  {c:>{w}}" for c, (_, w) in zip(cells, cols, strict=True))
        )
    lines.append("")
    lines += [ORDER_NOTE, UNITS_NOTE]
    lines += _interval_notes(result)
    lines.append(_largest_summary(result))
    lines.append(_order_note(result))
    lines.append(CAVEAT)
    return "\n".join(line.rstrip() for line in lines)


# --------------------------------------------------------------------------------------
# JSON and DataFrame.
# --------------------------------------------------------------------------------------


def batch_to_dict(result) -> dict:
    """Every field of a `BatchResult` as plain Python values, in the strict JSON encoding of
    `result_to_dict` (NaN -> `None`, +-inf -> `"inf"`/`"-inf"`, arrays with their dtype and
    shape under `"arrays"`): with `"intervals"` (every interval, clipped, and which bounds
    were), `"step_order"` and `"largest_blame"` (the reports' order and labels)."""
    return result_to_dict(result)


def batch_dataframe(result):
    """One row per step, by mean Shapley value, largest first; every number a fraction.
    Columns: the mean Shapley value, its fixed-sample interval (`fixed_*`), its finite-sample
    and asymptotic anytime intervals (`bernstein_*`, `normal_*`), the share of repair, the
    fix-alone resolve rate and its interval (`resolve_*`), the last-step rate, and `clipped`
    (the bounds clipped to the range their quantity can take). `frame.attrs` holds the
    levels, the methods and the interval the stopping rule read (`stopping_interval`)."""
    try:
        import pandas as pd
    except ImportError as error:
        raise ImportError("`to_dataframe` needs pandas: pip install pandas") from error
    iv = result.intervals
    order = list(step_order(result.mean_shapley))
    columns = {"mean_shapley": result.mean_shapley}
    clipped = [[] for _ in result.steps]
    for name in ("fixed", "bernstein", "normal"):
        columns[f"{name}_lower"] = getattr(iv, f"{name}_lower")
        columns[f"{name}_upper"] = getattr(iv, f"{name}_upper")
    columns["share_of_repair"] = result.share_of_repair
    columns["fix_alone_resolve_rate"] = result.resolve_rate
    columns["resolve_lower"] = iv.resolve_lower
    columns["resolve_upper"] = iv.resolve_upper
    columns["last_step_rate"] = result.last_step_rate
    for name in ("fixed", "bernstein", "normal", "resolve"):
        flags = np.asarray(getattr(iv, f"{name}_clipped"))
        for i in range(len(result.steps)):
            clipped[i] += [
                f"{name}_{end}"
                for end, hit in zip(("lower", "upper"), flags[i], strict=True)
                if hit
            ]
    frame = pd.DataFrame(
        {name: np.asarray(value, np.float64)[order] for name, value in columns.items()},
        index=pd.Index([result.steps[i] for i in order], name="step"),
    )
    frame["clipped"] = [",".join(clipped[i]) for i in order]
    frame.attrs.update(
        level=iv.level,
        anytime_level=1 - result.delta,
        fixed_method=iv.fixed_method,
        resolve_method=iv.resolve_method,
        stopping_interval=result.interval,
        look=iv.look,
        order="mean Shapley value, largest first",
        units="fractions",
    )
    return frame


# --------------------------------------------------------------------------------------
# HTML.
# --------------------------------------------------------------------------------------

SCOPE = "blamejax-report"
_CSS = """
.S{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#222;max-width:1100px;line-height:1.35}
.S h2{font-size:20px;margin:0 0 6px} .S h3{font-size:16px;margin:20px 0 6px}
.S .muted{color:#555;font-size:13px} .S .caveat{background:#fff7e0;border-left:4px solid #e0a800;padding:8px 12px;font-size:13px}
.S table{border-collapse:collapse;font-size:13px;margin:6px 0} .S th,.S td{padding:3px 9px;border-bottom:1px solid #ddd;text-align:right}
.S th:first-child,.S td:first-child{text-align:left} .S tr.differs td{background:#fde2e2}
.S .stop{background:#eef3fb} .S .clipped{color:#a33}
.S details{margin:2px 0} .S summary{cursor:pointer;font-size:13px}
.S ul.notes{font-size:13px;color:#444;margin:4px 0 8px;padding-left:20px} .S ul.notes li{margin:2px 0}
.S svg{display:block;width:100%;height:auto;max-width:1000px;min-width:720px} .S .scroll{overflow-x:auto}
"""


def _style() -> str:
    return "<style>" + _CSS.replace(".S", f".{SCOPE}").strip() + "</style>"


def _option(result, site: int, option: int) -> str:
    step = result.site_steps[site]
    if result.option_names is not None:
        for name, labels in result.option_names:
            if name == step and labels is not None:
                return html.escape(str(labels[option]))
    return str(option)


def _cell(value: float, clipped: bool = False, sign: bool = True) -> str:
    value = float(value)
    if np.isnan(value):
        return '<td data-value="nan">n/a</td>'
    text = f"{value:+.3f}" if sign else f"{value:.3f}"
    if clipped:
        return f'<td class="clipped" data-value="{value!r}" data-clipped="1" title="clipped to the range the quantity can take">{text}*</td>'
    return f'<td data-value="{value!r}">{text}</td>'


def _summary_table(result) -> str:
    iv = result.intervals
    anytime = _percent(1 - result.delta)
    stop = {"bernstein": "", "normal": ""}
    stop[result.interval] = ' class="stop"'
    out = [
        '<table class="summary"><tr><th rowspan="2">step</th><th rowspan="2">mean Shapley</th>'
        f'<th colspan="2">{_percent(iv.level)} fixed-sample (t)</th>'
        f'<th colspan="2"{stop["bernstein"]}>{anytime} anytime, finite-sample</th>'
        f'<th colspan="2"{stop["normal"]}>{anytime} anytime, asymptotic</th>'
        '<th rowspan="2">share of repair</th><th rowspan="2">fix-alone resolves</th>'
        f'<th colspan="2">{_percent(iv.level)} interval</th><th rowspan="2">last-step blame</th></tr>'
        "<tr>" + "<th>lower</th><th>upper</th>" * 4 + "</tr>"
    ]
    for i in step_order(result.mean_shapley):
        step = html.escape(result.steps[i])
        cells = [_cell(result.mean_shapley[i])]
        for name in ("fixed", "bernstein", "normal"):
            flags = np.asarray(getattr(iv, f"{name}_clipped"))[i]
            cells.append(_cell(getattr(iv, f"{name}_lower")[i], flags[0]))
            cells.append(_cell(getattr(iv, f"{name}_upper")[i], flags[1]))
        cells.append(_cell(result.share_of_repair[i], sign=False))
        cells.append(_cell(result.resolve_rate[i], sign=False))
        cells.append(_cell(iv.resolve_lower[i], iv.resolve_clipped[i][0], sign=False))
        cells.append(_cell(iv.resolve_upper[i], iv.resolve_clipped[i][1], sign=False))
        cells.append(_cell(result.last_step_rate[i], sign=False))
        out.append(f'<tr data-step="{step}"><td>{step}</td>{"".join(cells)}</tr>')
    out.append("</table>")
    return "".join(out)


def _failures(result) -> list[str]:
    esc = html.escape
    steps = result.steps
    out = [
        "<h3>Failures</h3>",
        f'<p class="muted">{esc(_order_note(result))} {esc(_drill_note(result))} Largest blame names '
        f"every step within {TIE_TOLERANCE:g} of the score range of the largest Shapley value, or "
        "none when the total repair is zero or when no step's fix helps (fixing makes the run "
        "worse).</p>",
    ]
    for a in range(result.num_analysed):
        fid = int(result.failure_ids[a])
        phi = np.asarray(result.shapley[a])
        label = _label(result, a)
        out.append(
            f'<details data-failure="{fid}"><summary>#{a + 1}: case {fid}, score '
            f"{float(result.factual_score[a]):.3g}; v(∅) {float(result.empty[a]):.3f}, v(all) "
            f"{float(result.full[a]):.3f}, total repair {float(result.total[a]):+.3f}; largest blame: "
            f'<span class="largest">{esc(label)}</span></summary>'
        )
        out.append(
            "<table><tr><th>step</th><th>failed run</th><th>fully fixed run</th><th>Shapley</th></tr>"
        )
        for s, site_step in enumerate(result.site_steps):
            failed_opt = int(result.factual_choice[a, s])
            fixed_opt = int(result.fixed_choice[a, s])
            cls = ' class="differs"' if failed_opt != fixed_opt else ""
            value = f"{float(phi[steps.index(site_step)]):+.3f}" if site_step in steps else ""
            out.append(
                f"<tr{cls}><td>{esc(site_step)}</td><td>{_option(result, s, failed_opt)}</td>"
                f"<td>{_option(result, s, fixed_opt)}</td><td>{value}</td></tr>"
            )
        out.append("</table></details>")
    return out


def batch_html_fragment(result) -> str:
    """The report as an HTML fragment (for a notebook's `_repr_html_`): one `<div>` of class
    `blamejax-report`, its styles scoped to that class; no `<html>`, `<body>` or global CSS."""
    esc = html.escape
    out = [f'<div class="{SCOPE}">', _style(), "<h2>blamejax: which step is to blame</h2>"]
    out.append('<p class="muted">' + "<br>".join(esc(line) for line in _heading(result)) + "</p>")
    if result.num_analysed == 0:
        out.append(
            f"<p>No failures: all {result.num_cases} cases passed, so there is nothing to blame.</p></div>"
        )
        return "".join(out)
    out.append("<h3>Blame per step</h3>")
    out.append(f'<p class="muted">{esc(ORDER_NOTE)} {esc(UNITS_NOTE)}</p>')
    out.append(
        '<div class="scroll">' + batch_chart(result, step_order(result.mean_shapley)) + "</div>"
    )
    out.append('<div class="scroll">' + _summary_table(result) + "</div>")
    out.append(
        '<ul class="notes">'
        + "".join(f"<li>{esc(n)}</li>" for n in _interval_notes(result))
        + "</ul>"
    )
    out.append(f'<p class="muted">{esc(_largest_summary(result))}</p>')
    out.append(f'<p class="caveat">{esc(CAVEAT)}</p>')
    out += _failures(result)
    out.append("</div>")
    return "".join(out)


def batch_html(result) -> str:
    """The report as one self-contained HTML page (the fragment in a page of its own)."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>blamejax report</title><style>body{margin:24px}</style></head><body>"
        + batch_html_fragment(result)
        + "</body></html>"
    )
