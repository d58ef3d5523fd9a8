"""Reports of a `BatchResult`: a terminal table, plain dicts/JSON, a pandas DataFrame and a
single self-contained HTML file (inline CSS and SVG, no script, no network, no external
assets)."""

from __future__ import annotations

import html

import numpy as np

from ._json import result_to_dict

CAVEAT = (
    "Blame is relative to the fixes supplied. Under recorded or inferred noise it assumes the "
    "Gumbel-max coupling, which data cannot identify: another coupling with the same "
    "interventional behaviour gives different blame."
)


def _interval_label(result) -> str:
    if result.interval == "bernstein":
        return "empirical Bernstein, finite-sample, anytime valid"
    return "normal approximation, asymptotic only (no finite-sample guarantee)"


def _stopping_lines(result) -> list[str]:
    lines = []
    for rule, at in result.separated_at.items():
        label = "finite-sample Bernstein" if rule == "bernstein" else "asymptotic normal"
        if at is None:
            lines.append(f"{label} rule: top step not separated within {result.num_analysed} failures")
        else:
            lines.append(f"{label} rule: top step separated after {at} failures")
    return lines


def batch_table(result) -> str:
    """One row per step: mean Shapley [interval], share of repair, fix-alone resolve rate,
    last-step share."""
    head = [
        f"noise: {result.noise} — {result.question}",
        f"{result.num_cases} cases, {result.num_failures} failures (score < {result.threshold:g}), "
        f"{result.num_analysed} analysed ({result.estimator}); {result.evaluations} coalition evaluations",
    ]
    if result.num_analysed == 0:
        head.append(f"No failures: all {result.num_cases} cases passed, so there is nothing to blame.")
        return "\n".join(head)
    width = max(6, *(len(s) for s in result.steps))
    cols = f"{'step':<{width}}  {'mean shapley':>12}  {'interval':>19}  {'share':>7}  {'fix-alone':>9}  {'last-step':>9}"
    lines = head + [f"interval: {1 - result.delta:.0%} {_interval_label(result)}", "", cols, "-" * len(cols)]
    order = np.argsort(-np.asarray(result.mean_shapley))
    for i in order:
        lines.append(
            f"{result.steps[i]:<{width}}  {float(result.mean_shapley[i]):>+12.4f}  "
            f"[{float(result.lower[i]):+.3f}, {float(result.upper[i]):+.3f}]  "
            f"{float(result.share_of_repair[i]):>7.1%}  {float(result.resolve_rate[i]):>9.1%}  "
            f"{float(result.last_step_rate[i]):>9.1%}"
        )
    lines.append("")
    lines.extend(_stopping_lines(result))
    lines.append(CAVEAT)
    return "\n".join(lines)


def batch_to_dict(result) -> dict:
    """Every field of a `BatchResult` as plain Python values, in the strict JSON encoding of
    `result_to_dict` (NaN -> `None`, +-inf -> `"inf"`/`"-inf"`, arrays with their dtype and
    shape under `"arrays"`)."""
    return result_to_dict(result)


def batch_dataframe(result):
    try:
        import pandas as pd
    except ImportError as error:
        raise ImportError("`to_dataframe` needs pandas: pip install pandas") from error
    return pd.DataFrame(
        {
            "mean_shapley": np.asarray(result.mean_shapley),
            "lower": np.asarray(result.lower),
            "upper": np.asarray(result.upper),
            "share_of_repair": np.asarray(result.share_of_repair),
            "fix_alone_resolve_rate": np.asarray(result.resolve_rate),
            "last_step_rate": np.asarray(result.last_step_rate),
        },
        index=pd.Index(result.steps, name="step"),
    )


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:24px 0 8px}
.muted{color:#666;font-size:13px} .caveat{background:#fff7e0;border-left:4px solid #e0a800;padding:8px 12px;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:6px 0} th,td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left} .differs{background:#fde2e2}
details{margin:2px 0} summary{cursor:pointer;font-size:13px}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 14px;vertical-align:middle}
"""

_COLORS = {"shapley": "#3366cc", "share": "#8fb3e8", "resolve": "#5aa469", "last": "#d9534f"}


def _chart(result) -> str:
    """Grouped horizontal bars per step: mean Shapley with interval whiskers, then the
    baselines (share of repair, fix-alone resolve rate, last-step share)."""
    n = len(result.steps)
    left, width, row = 120, 560, 64
    height = 30 + n * row
    # The axis covers 0..1 (the shares and rates) and the intervals, clipped to the range a
    # Shapley value can take, [-R, R] with R the width of the score range: an interval of
    # few failures can be infinite.
    reach = float(result.score_range[1] - result.score_range[0])
    lo = min(0.0, max(-reach, float(np.nanmin(np.asarray(result.lower)))))
    hi = max(1.0, min(reach, float(np.nanmax(np.asarray(result.upper)))))
    scale = width / (hi - lo)

    def x(value):
        return left + (value - lo) * scale

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 40}" height="{height}" role="img" aria-label="blame per step">']
    parts.append(f'<line x1="{x(0):.1f}" y1="10" x2="{x(0):.1f}" y2="{height - 10}" stroke="#999"/>')
    step_size = _tick_step(hi - lo)
    for tick in np.arange(np.ceil(lo / step_size) * step_size, hi + 1e-9, step_size):
        parts.append(f'<text x="{x(tick):.1f}" y="{height - 2}" font-size="10" text-anchor="middle" fill="#666">{tick:.2f}</text>')
    series = [
        ("shapley", np.asarray(result.mean_shapley)),
        ("share", np.asarray(result.share_of_repair)),
        ("resolve", np.asarray(result.resolve_rate)),
        ("last", np.asarray(result.last_step_rate)),
    ]
    for i, step in enumerate(result.steps):
        top = 14 + i * row
        parts.append(f'<text x="{left - 8}" y="{top + 22}" font-size="13" text-anchor="end">{html.escape(step)}</text>')
        for j, (name, values) in enumerate(series):
            y = top + j * 12
            value = float(values[i])
            a, b = sorted((x(0), x(value)))
            parts.append(
                f'<rect class="bar-{name}" data-step="{html.escape(step)}" data-value="{value!r}" x="{a:.1f}" y="{y}" '
                f'width="{max(b - a, 0.5):.1f}" height="10" fill="{_COLORS[name]}"/>'
            )
            if name == "shapley":
                l_, u_ = float(result.lower[i]), float(result.upper[i])
                lx, ux = (x(float(np.clip(b, lo, hi))) for b in (l_, u_))  # drawn clipped to the axis
                cy = y + 5
                parts.append(
                    f'<path class="whisker" data-step="{html.escape(step)}" data-lower="{l_!r}" data-upper="{u_!r}" '
                    f'd="M{lx:.1f},{cy} H{ux:.1f} M{lx:.1f},{cy - 4} V{cy + 4} M{ux:.1f},{cy - 4} V{cy + 4}" '
                    'stroke="#111" stroke-width="1.2" fill="none"/>'
                )
    parts.append("</svg>")
    return "".join(parts)


def _tick_step(span: float) -> float:
    """The spacing of the axis labels: the smallest of 0.1, 0.25, 0.5, 1, 2.5, ... that puts
    at most about ten labels on an axis `span` wide."""
    for size in (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0):
        if span / size <= 10.65:
            return size
    return span / 10


def _option(result, step_index_in_sites: int, option: int) -> str:
    step = result.site_steps[step_index_in_sites]
    if result.option_names is not None:
        for name, labels in result.option_names:
            if name == step and labels is not None:
                return html.escape(str(labels[option]))
    return str(option)


def batch_html(result) -> str:
    esc = html.escape
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">', "<title>blamejax report</title>", f"<style>{_CSS}</style></head><body>"]
    out.append("<h1>blamejax: which step is to blame</h1>")
    out.append(
        f'<p class="muted">Noise mode <b>{esc(result.noise)}</b>: {esc(result.question)}<br>'
        f"{result.num_cases} cases, {result.num_failures} failures (score &lt; {result.threshold:g}), "
        f"{result.num_analysed} analysed with the {esc(result.estimator)} estimator; "
        f"{result.evaluations} coalition evaluations.</p>"
    )
    if result.num_analysed == 0:
        out.append(f"<p>No failures: all {result.num_cases} cases passed, so there is nothing to blame.</p></body></html>")
        return "".join(out)
    out.append("<h2>Blame per step</h2>")
    legend = "".join(
        f'<span style="background:{_COLORS[k]}"></span>{label}'
        for k, label in (("shapley", "mean Shapley value (whiskers: interval)"), ("share", "share of repair"), ("resolve", "fix-alone resolve rate"), ("last", "last-step blame"))
    )
    out.append(f'<div class="legend muted">{legend}</div>')
    out.append(_chart(result))
    out.append(
        f'<p class="muted">Intervals: {1 - result.delta:.0%} {esc(_interval_label(result))}. '
        + " ".join(esc(line) + "." for line in _stopping_lines(result))
        + "</p>"
    )
    out.append('<table id="summary"><tr><th>step</th><th>mean Shapley</th><th>lower</th><th>upper</th><th>share of repair</th><th>fix-alone resolves</th><th>last-step blame</th></tr>')
    for i, step in enumerate(result.steps):
        vals = [result.mean_shapley[i], result.lower[i], result.upper[i], result.share_of_repair[i], result.resolve_rate[i], result.last_step_rate[i]]
        cells = "".join(f'<td data-value="{float(v)!r}">{float(v):.4f}</td>' for v in vals)
        out.append(f'<tr data-step="{esc(step)}"><td>{esc(step)}</td>{cells}</tr>')
    out.append("</table>")
    out.append(f'<p class="caveat">{esc(CAVEAT)}</p>')
    out.append("<h2>Failures</h2><p class=\"muted\">Each step's output in the failed run and in the fully fixed run (world 0); rows that differ are shaded.</p>")
    steps = result.steps
    for a in range(result.num_analysed):
        fid = int(result.failure_ids[a])
        phi = np.asarray(result.shapley[a])
        top = steps[int(np.argmax(phi))]
        out.append(f'<details data-failure="{fid}"><summary>case {fid}: score {float(result.factual_score[a]):.3g}, total repair {float(result.total[a]):+.3f}, largest blame: {esc(top)}</summary>')
        out.append("<table><tr><th>step</th><th>failed run</th><th>fully fixed run</th><th>Shapley</th></tr>")
        for s, site_step in enumerate(result.site_steps):
            failed_opt = int(result.factual_choice[a, s])
            fixed_opt = int(result.fixed_choice[a, s])
            cls = ' class="differs"' if failed_opt != fixed_opt else ""
            value = f"{float(phi[steps.index(site_step)]):+.4f}" if site_step in steps else ""
            out.append(f"<tr{cls}><td>{esc(site_step)}</td><td>{_option(result, s, failed_opt)}</td><td>{_option(result, s, fixed_opt)}</td><td>{value}</td></tr>")
        out.append("</table></details>")
    out.append("</body></html>")
    return "".join(out)
