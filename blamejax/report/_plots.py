"""Matplotlib figures of a `BatchResult` (matplotlib is optional: `pip install matplotlib`).

`plot_batch(result, kind)` returns a `matplotlib.figure.Figure`:
- `"bars"`: each step's mean Shapley value with its fixed-sample and anytime intervals, beside
  the share of repair, the fix-alone resolve rate (with its interval) and the last-step rate,
  one panel (and axis) per quantity;
- `"failures"`: a heat map of the per-failure Shapley values (failures in visiting order);
- `"scatter"`: per step, the fix-alone resolve rate against the mean Shapley value.
Steps follow the reports' order (mean Shapley value, largest first).
"""

from __future__ import annotations

import numpy as np

PLOT_KINDS = ("bars", "failures", "scatter")


def _figure_class():
    """matplotlib's `Figure` (no pyplot, no backend: the figure is not kept by any global
    state, and a notebook shows it as an image)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError("`BatchResult.plot` needs matplotlib: pip install matplotlib") from error
    return Figure


def plot_batch(result, kind: str = "bars", *, figsize=None):
    """A matplotlib `Figure` of a batch result (see the module docstring for `kind`).

    **Raises:** `ValueError` for an unknown `kind` or a result with no analysed failure;
    `ImportError` naming `pip install matplotlib` when matplotlib is missing.

    ```python
    import blamejax as bj
    result = bj.blame_batch(bj.demos.refund_pipeline, bj.demos.refund_cases(20), 0)
    figure = result.plot("scatter")
    assert figure.axes[0].get_xlabel() == "mean Shapley value"
    ```
    """
    if kind not in PLOT_KINDS:
        raise ValueError(f"`kind` must be one of {PLOT_KINDS}, got {kind!r}")
    if result.num_analysed == 0:
        raise ValueError("nothing to plot: the result has no analysed failure (every case passed)")
    figure_class = _figure_class()
    order = [result.steps.index(s) for s in result.step_order]
    return {"bars": _bars, "failures": _failures, "scatter": _scatter}[kind](
        result, order, figure_class, figsize
    )


def _bars(result, order, Figure, figsize):
    iv = result.intervals
    n = len(order)
    figure = Figure(figsize=figsize or (11, 1.2 + 0.45 * n), layout="constrained")
    axes = figure.subplots(1, 4, sharey=True, gridspec_kw={"width_ratios": [2, 1, 1, 1]})
    y = np.arange(n)
    names = [result.steps[i] for i in order]
    take = lambda a: np.asarray(a, np.float64)[order]  # noqa: E731
    width = float(result.score_range[1] - result.score_range[0])
    mean = take(result.mean_shapley)
    ax = axes[0]
    ax.barh(y, mean, color="#3366cc", height=0.5)
    rule = result.interval
    reach = [0.0, *mean[np.isfinite(mean)]]  # the axis: the means and their fixed-sample intervals
    for name, offset, color, lw, label in (
        ("fixed", 0.0, "#111", 2.0, f"{100 * iv.level:.4g}% fixed-sample (Student t)"),
        (
            rule,
            0.3,
            "#888",
            1.2,
            f"{100 * (1 - result.delta):.4g}% anytime "
            + ("finite-sample" if rule == "bernstein" else "asymptotic")
            + " (stopping rule)",
        ),
    ):
        lo, hi = take(getattr(iv, f"{name}_lower")), take(getattr(iv, f"{name}_upper"))
        show = np.isfinite(lo) & np.isfinite(hi) & (hi - lo < 2 * width * (1 - 1e-9))
        if name == "fixed":
            reach += [*lo[show], *hi[show]]
        if show.any():
            ax.errorbar(
                mean[show],
                y[show] + offset,
                xerr=[mean[show] - lo[show], hi[show] - mean[show]],
                fmt="none",
                ecolor=color,
                elinewidth=lw,
                capsize=3,
                label=label,
            )
    ax.axvline(0, color="#999", lw=0.8)
    pad = 0.05 * max(max(reach) - min(reach), 0.02)
    ax.set_xlim(max(-width, min(reach) - pad), min(width, max(reach) + pad))  # anytime runs off
    ax.set_xlabel("mean Shapley value")
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    if ax.get_legend_handles_labels()[0]:
        figure.legend(loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    for ax, values, label, color in (
        (axes[1], take(result.share_of_repair), "share of repair", "#7fa6de"),
        (axes[2], take(result.resolve_rate), "fix-alone resolve rate", "#5aa469"),
        (axes[3], take(result.last_step_rate), "last-step blame", "#d9534f"),
    ):
        ax.barh(y, values, color=color, height=0.5)
        ax.set_xlabel(label)
        ax.axvline(0, color="#999", lw=0.8)
    lo, hi = take(iv.resolve_lower), take(iv.resolve_upper)
    rate = take(result.resolve_rate)
    axes[2].errorbar(rate, y, xerr=[rate - lo, hi - rate], fmt="none", ecolor="#111", capsize=3)
    figure.suptitle(
        f"Blame per step: {result.num_analysed} failures, {result.noise} noise", fontsize=11
    )
    return figure


def _failures(result, order, Figure, figsize):
    values = np.asarray(result.shapley, np.float64)[:, order]
    a, n = values.shape
    figure = Figure(
        figsize=figsize or (min(12, 2 + 0.08 * a), 1.4 + 0.35 * n), layout="constrained"
    )
    ax = figure.subplots()
    reach = float(np.nanmax(np.abs(values))) if values.size else 1.0
    reach = reach if reach > 0 else 1.0
    image = ax.imshow(
        values.T, aspect="auto", cmap="RdBu_r", vmin=-reach, vmax=reach, interpolation="nearest"
    )
    ax.set_yticks(np.arange(n), [result.steps[i] for i in order])
    ax.set_xlabel("failure, in the seeded visiting order")
    figure.colorbar(image, ax=ax, label="Shapley value")
    ax.set_title(f"Per-failure Shapley values ({result.noise} noise)", fontsize=11)
    return figure


def _scatter(result, order, Figure, figsize):
    figure = Figure(figsize=figsize or (5.5, 4.2), layout="constrained")
    ax = figure.subplots()
    mean = np.asarray(result.mean_shapley, np.float64)
    rate = np.asarray(result.resolve_rate, np.float64)
    ax.scatter(mean[order], rate[order], color="#3366cc", zorder=3)
    labels = [
        ax.annotate(
            result.steps[i],
            (mean[i], rate[i]),
            textcoords="offset points",
            xytext=(5, 4),
            fontsize=9,
        )
        for i in order
    ]
    top = max(float(np.nanmax(mean)), float(np.nanmax(rate)), 0.05) * 1.15
    low = min(0.0, float(np.nanmin(mean)))
    ax.plot([low, top], [low, top], color="#bbb", lw=0.8, ls="--", label="rate = Shapley")
    ax.set_xlabel("mean Shapley value")
    ax.set_ylabel("fix-alone resolve rate")
    ax.set_xlim(low, top)
    ax.set_ylim(0, max(top, float(np.nanmax(rate)) * 1.1))
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Fixing alone vs fair share", fontsize=11)
    figure.draw_without_rendering()  # the layout, so that the labels have their final extents
    _spread(labels, ax, figure.dpi / 72)
    return figure


def _spread(labels, ax, pixels_per_point: float, gap: float = 1.0) -> None:
    """Move labels apart so that no two overlap: in order (the reports' order), each label is
    moved away from the axes' middle (up in the lower half, down in the upper half) just past
    every earlier label it overlaps, until it overlaps none. Deterministic; display
    coordinates, offsets in points."""
    middle = ax.get_window_extent().y0 + ax.get_window_extent().height / 2
    placed = []
    for label in labels:
        up = ax.transData.transform(label.xy)[1] < middle
        for _ in range(len(placed) + 1):  # each move clears every label it hit
            box = label.get_window_extent()
            hits = [other for other in placed if box.overlaps(other)]
            if not hits:
                break
            if up:
                shift = max(other.y1 for other in hits) - box.y0
            else:
                shift = min(other.y0 for other in hits) - box.y1
            x, y = label.xyann
            label.xyann = (x, y + shift / pixels_per_point + (gap if up else -gap))
        placed.append(label.get_window_extent())
