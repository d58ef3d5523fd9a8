"""The inline SVG chart of a batch report: small multiples, one panel per quantity.

Each panel has its own labelled axis whose range comes from its quantity's own values (and
their fixed-sample intervals), rounded to a few ticks and kept within the range the quantity
can take. A whisker is drawn only where it carries information: finite, of non-zero width,
and not covering the quantity's whole range (as an anytime interval of a few failures does);
an anytime interval wider than the axis runs off it, marked by an arrowhead.
The SVG scales with its container (a `viewBox`, no fixed pixel size).
"""

from __future__ import annotations

import html
import math

import numpy as np

MAX_TICKS = 6
_BLUE, _GREEN, _GREY, _INK = "#3366cc", "#5aa469", "#8a8a8a", "#111"


def nice_axis(low: float, high: float, bounds: tuple[float, float], max_ticks: int = MAX_TICKS):
    """An axis `[lo, hi]` covering `[low, high]` with at most `max_ticks` ticks at a round
    spacing (1, 2, 2.5 or 5 times a power of ten), kept within `bounds`.

    **Returns:** `(lo, hi, ticks)`, ticks a tuple of floats from lo to hi.

    ```python
    from blamejax.report._chart import nice_axis
    assert nice_axis(-0.07, 0.76, (-1.0, 1.0)) == (-0.25, 0.75, (-0.25, 0.0, 0.25, 0.5, 0.75))
    ```
    """
    b_lo, b_hi = bounds
    low, high = max(float(low), b_lo), min(float(high), b_hi)
    if not high - low > 1e-12:  # one value: show a tenth of the possible range around it
        pad = 0.1 * (b_hi - b_lo)
        low, high = max(b_lo, low - (pad if low > 0 else 0.0)), min(b_hi, high + pad)
    span = high - low
    exponent = math.floor(math.log10(span / max(max_ticks - 1, 1)))
    for power in (exponent, exponent + 1, exponent + 2):
        for mantissa in (1.0, 2.0, 2.5, 5.0):
            step = mantissa * 10.0**power
            lo = math.floor(low / step + 1e-9) * step
            hi = math.ceil(high / step - 1e-9) * step
            if round((hi - lo) / step) + 1 <= max_ticks:
                lo, hi = max(lo, b_lo), min(hi, b_hi)
                count = round((hi - lo) / step)
                ticks = tuple(_tidy(lo + j * step) for j in range(count + 1))
                return _tidy(lo), _tidy(hi), ticks
    raise AssertionError("unreachable: the last spacing always fits")  # pragma: no cover


def _tidy(x: float) -> float:
    return float(round(x, 12)) + 0.0  # no -0.0


def _tick_text(ticks) -> list[str]:
    for digits in range(6):
        if all(abs(round(t, digits) - t) < 1e-9 for t in ticks):
            return [f"{t:.{digits}f}" for t in ticks]
    return [f"{t:g}" for t in ticks]


def _informative(lo: float, hi: float, bounds: tuple[float, float]) -> bool:
    """Whether an interval says something: finite, of non-zero width, and narrower than the
    whole range its quantity can take."""
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi - lo <= 1e-12:
        return False
    return hi - lo < (bounds[1] - bounds[0]) * (1 - 1e-9)


class _Panel:
    def __init__(self, quantity, title, values, bounds, whiskers, x0, width):
        self.quantity, self.title, self.values, self.bounds = quantity, title, values, bounds
        self.whiskers = whiskers  # [(name, lower [n], upper [n], style, clipped [n, 2])]
        self.x0, self.width = x0, width
        finite = [v for v in values if np.isfinite(v)] + [0.0]
        for _, lower, upper, style, _ in whiskers:
            if style != "fixed":  # an anytime whisker runs off the axis rather than squeeze it
                continue
            for lo, hi in zip(lower, upper, strict=True):
                if _informative(lo, hi, bounds):
                    finite += [lo, hi]
        max_ticks = max(3, min(MAX_TICKS, int(width // 55)))  # labels about 55 px apart at least
        self.lo, self.hi, self.ticks = nice_axis(min(finite), max(finite), bounds, max_ticks)

    def inside(self, value: float) -> bool:
        return self.lo - 1e-12 <= value <= self.hi + 1e-12

    def x(self, value: float) -> float:
        value = min(max(value, self.lo), self.hi)
        return self.x0 + (value - self.lo) / (self.hi - self.lo) * self.width


def _whisker(p: _Panel, name, style, step, lo, hi, clipped, cy) -> str:
    """One interval's whisker: a cap at a bound the data gave, none at a bound clipped to the
    quantity's range, and an arrowhead where the interval runs off the axis."""
    wy = cy if style == "fixed" else cy + 10
    lx, ux = p.x(lo), p.x(hi)
    cap = 5 if style == "fixed" else 3
    d = [f"M{lx:.1f},{wy:.1f} H{ux:.1f}"]
    for x, value, cut, sign in ((lx, lo, clipped[0], -1), (ux, hi, clipped[1], 1)):
        if not p.inside(value):  # off the axis: an arrowhead pointing on
            d.append(
                f"M{x - sign * 5:.1f},{wy - 3.5:.1f} L{x:.1f},{wy:.1f} L{x - sign * 5:.1f},{wy + 3.5:.1f}"
            )
        elif not cut:
            d.append(f"M{x:.1f},{wy - cap:.1f} V{wy + cap:.1f}")
    stroke = _INK if style == "fixed" else _GREY
    weight = 1.8 if style == "fixed" else 1.2
    return (
        f'<path class="whisker whisker-{style}" data-interval="{name}" data-step="{step}" '
        f'data-lower="{lo!r}" data-upper="{hi!r}" data-on-axis="{int(p.inside(lo) and p.inside(hi))}" '
        f'd="{" ".join(d)}" stroke="{stroke}" stroke-width="{weight}" fill="none"/>'
    )


_LABEL_W, _GAP, _ROW, _TOP = 118, 36, 30, 46  # label column, gap between panels, row, top
_COLORS = {"shapley": _BLUE, "share": "#7fa6de", "resolve": _GREEN, "last": "#d9534f"}


def batch_chart(result, order) -> str:
    """The SVG of a batch report: per step (rows in `order`), the mean Shapley value with its
    fixed-sample interval (thick whisker) and the anytime interval the stopping rule reads
    (thin whisker), then the share of repair, the fix-alone resolve rate with its interval and
    the last-step rate, each in a panel with its own axis."""
    steps = [result.steps[i] for i in order]
    panels = _panels(result, order)
    body = len(steps) * _ROW
    height = _TOP + body + 86
    total_w = panels[-1].x0 + panels[-1].width + 24
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {total_w} {height}" '
        f'class="chart" role="img" aria-label="blame per step: {len(panels)} panels, one axis each" '
        'font-family="system-ui,Helvetica,Arial,sans-serif">'
    ]
    out += _step_labels(steps, total_w)
    for p in panels:
        out += _panel_svg(p, steps, body)
    out += _legend(result, _TOP + body + 40)
    out.append("</svg>")
    return "".join(out)


def _panels(result, order) -> list[_Panel]:
    """The four panels, left to right: mean Shapley value (fixed-sample and anytime
    whiskers), share of repair, fix-alone resolve rate (its interval), last-step rate."""
    iv, rule = result.intervals, result.interval
    pick = lambda a: [float(np.asarray(a)[i]) for i in order]  # noqa: E731

    def interval(name, prefix, style):  # (name, lower [n], upper [n], style, clipped [n, 2])
        clipped = np.asarray(getattr(iv, f"{prefix}_clipped"))
        rows = [tuple(bool(c) for c in clipped[i]) for i in order]
        lower, upper = getattr(iv, f"{prefix}_lower"), getattr(iv, f"{prefix}_upper")
        return (name, pick(lower), pick(upper), style, rows)

    width = float(result.score_range[1] - result.score_range[0])
    shapley = [interval("fixed", "fixed", "fixed"), interval(rule, rule, "anytime")]
    panels = [
        _Panel(
            "shapley",
            "mean Shapley value",
            pick(result.mean_shapley),
            (-width, width),
            shapley,
            _LABEL_W,
            330,
        )
    ]
    x0 = _LABEL_W + 330 + _GAP
    for quantity, title, values, whiskers in (
        ("share", "share of repair", result.share_of_repair, []),
        (
            "resolve",
            "fix-alone resolve rate",
            result.resolve_rate,
            [interval("resolve", "resolve", "fixed")],
        ),
        ("last", "last-step blame", result.last_step_rate, []),
    ):
        bounds = (-1.0, 1.0) if quantity == "share" else (0.0, 1.0)  # a share can be negative
        panels.append(_Panel(quantity, title, pick(values), bounds, whiskers, x0, 150))
        x0 += 150 + _GAP
    return panels


def _step_labels(steps, total_w) -> list[str]:
    """The rows: a light band under every other one, and the step names right-aligned."""
    out = []
    for r, step in enumerate(steps):
        y = _TOP + r * _ROW + _ROW / 2
        if r % 2 == 0:
            out.append(
                f'<rect x="0" y="{_TOP + r * _ROW}" width="{total_w}" height="{_ROW}" fill="#f6f7f9"/>'
            )
        out.append(
            f'<text class="step-label" x="{_LABEL_W - 10}" y="{y + 4.5:.1f}" font-size="13" text-anchor="end">{html.escape(step)}</text>'
        )
    return out


def _panel_svg(p: _Panel, steps, body: int) -> list[str]:
    """One panel: its title, ticks and axis, then per step a bar and the informative whiskers."""
    esc, top = html.escape, _TOP
    out = [
        f'<g class="panel" data-quantity="{p.quantity}" data-min="{p.lo!r}" data-max="{p.hi!r}" '
        f'data-ticks="{len(p.ticks)}">',
        f'<text class="axis-title" x="{p.x0 + p.width / 2:.1f}" y="18" font-size="13" font-weight="600" text-anchor="middle">{esc(p.title)}</text>',
    ]
    for t, text in zip(p.ticks, _tick_text(p.ticks), strict=True):
        tx = p.x(t)
        stroke = "#9a9a9a" if t == 0 else "#dedede"
        out.append(
            f'<line x1="{tx:.1f}" y1="{top - 4}" x2="{tx:.1f}" y2="{top + body}" stroke="{stroke}"/>'
        )
        out.append(
            f'<text class="tick" x="{tx:.1f}" y="{top + body + 15}" font-size="11" fill="#555" text-anchor="middle">{text}</text>'
        )
    out.append(
        f'<line x1="{p.x0}" y1="{top + body}" x2="{p.x0 + p.width}" y2="{top + body}" stroke="#9a9a9a"/>'
    )
    for r, (step, value) in enumerate(zip(steps, p.values, strict=True)):
        cy = top + r * _ROW + _ROW / 2
        if np.isfinite(value):
            a, b = sorted((p.x(0.0), p.x(value)))
            out.append(
                f'<rect class="bar bar-{p.quantity}" data-step="{esc(step)}" data-value="{value!r}" '
                f'x="{a:.1f}" y="{cy - 7:.1f}" width="{max(b - a, 1.0):.1f}" height="14" fill="{_COLORS[p.quantity]}"/>'
            )
        for name, lower, upper, style, clipped in p.whiskers:
            lo, hi = lower[r], upper[r]
            if not _informative(lo, hi, p.bounds):
                continue
            out.append(_whisker(p, name, style, esc(step), lo, hi, clipped[r], cy))
    out.append("</g>")
    return out


def _legend(result, ly: float) -> list[str]:
    """The three lines under the chart: what the bars, whiskers, caps and arrowheads mean."""
    level = f"{100 * result.intervals.level:.4g}%"
    anytime = f"{100 * (1 - result.delta):.4g}%"
    kind = "finite-sample" if result.interval == "bernstein" else "asymptotic"
    legend = (
        f"Bars: the value. Black whisker: {level} fixed-sample interval. Grey whisker: {anytime} "
        f"anytime {kind} interval (the stopping rule's).",
        "No cap: a bound clipped to the possible range. Arrowhead: the interval runs past the "
        "axis (see the table).",
        "No whisker: the interval is of zero width or the whole possible range (too few failures).",
    )
    return [
        f'<text class="legend" x="{_LABEL_W}" y="{ly + 16 * j}" font-size="12" fill="#444">{html.escape(line)}</text>'
        for j, line in enumerate(legend)
    ]
