"""Plain-text tables with one row per step, shared by the results' `table` methods."""

from __future__ import annotations

from collections.abc import Callable, Sequence

# A column: its title, its width, and the text of its cell in row i (right-aligned).
Column = tuple[str, int, Callable[[int], str]]


def step_rows(steps: Sequence[str], columns: Sequence[Column]) -> list[str]:
    """The header, a rule and one line per step: the step's name left-aligned (at least 8
    wide), then each column's cell right-aligned to its width, two spaces apart (no
    trailing spaces)."""
    width = max(8, *(len(s) for s in steps))
    head = (f"{'step':<{width}}" + "".join(f"  {title:>{w}}" for title, w, _ in columns)).rstrip()
    lines = [head, "-" * len(head)]
    for i, step in enumerate(steps):
        row = f"{step:<{width}}" + "".join(f"  {cell(i):>{w}}" for _, w, cell in columns)
        lines.append(row.rstrip())
    return lines


def number(values, digits: int, sign: bool = False) -> Callable[[int], str]:
    """The cell of row i: `values[i]` with `digits` decimals (and a `+` when `sign`)."""
    spec = f"{'+' if sign else ''}.{digits}f"
    return lambda i: format(float(values[i]), spec)
