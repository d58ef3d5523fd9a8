"""Checks of plain arguments (numbers, flags, choices, functions, the checkpoint schedule):
each raises a `TypeError`/`ValueError` that names the argument as the user typed it, what was
expected and what was received, and returns the value in its plain Python type.

They import nothing from the package, so every floor (statistics included) can use them; the
checks that know pipelines, worlds and plans are in `blamejax._checks`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

MIN_GROWTH = 1 + 1e-4  # the smallest checkpoint growth factor (`check_growth`)


def _is_number(value) -> bool:
    """An int or float, Python or NumPy, not a bool."""
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, (int, float, np.integer, np.floating))


def _is_int(value) -> bool:
    """An int, Python or NumPy, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_delta(delta) -> float:
    """`delta`, an error level in (0, 1) (a Python or NumPy number), as a float: a
    `TypeError` for what is not a number, a `ValueError` outside (0, 1) (NaN included)."""
    message = f"`delta` must be an error level in (0, 1), got {delta!r}"
    if not _is_number(delta):
        raise TypeError(message)
    if not 0 < delta < 1:
        raise ValueError(message)
    return float(delta)


def check_probability(value, argument: str, what: str = "a probability") -> float:
    """`value`, a number strictly between 0 and 1 (`what` says what it is), as a float."""
    if not _is_number(value) or not 0 < value < 1:
        raise ValueError(f"`{argument}` must be {what} in (0, 1), got {value!r}")
    return float(value)


def check_first_checkpoint(value, unit: str) -> int:
    """`first_checkpoint`, the first look of a checkpoint schedule: an int >= 2 (the
    empirical Bernstein radius needs two samples), counted in `unit` ("samples",
    "failures")."""
    return check_int_at_least(value, "first_checkpoint", 2, unit)


def check_int_at_least(value, argument: str, low: int, unit: str | None = None) -> int:
    """`value`, an int >= `low` (counted in `unit`, where given), as a Python int."""
    if not _is_int(value) or value < low:
        counted = f" ({unit})" if unit else ""
        raise ValueError(f"`{argument}` must be an int >= {low}{counted}, got {value!r}")
    return int(value)


def check_growth(value) -> float:
    """`growth`, the growth factor of a checkpoint schedule: a finite number >= `MIN_GROWTH`
    (closer to 1, the schedule would look at nearly every sample)."""
    if not _is_number(value) or not MIN_GROWTH <= value < math.inf:
        raise ValueError(
            f"`growth` must be a finite number >= 1 + 1e-4 (the checkpoint growth factor), "
            f"got {value!r}"
        )
    return value


def check_finite_number(value, argument: str, at_least=None, none_for: str | None = None):
    """`value`, a finite number (Python or NumPy, not a bool), `>= at_least` where given; or
    `None` where `none_for` says what `None` stands for. Returned as given."""
    if value is None and none_for is not None:
        return None
    if (
        not _is_number(value)
        or not np.isfinite(value)
        or (at_least is not None and value < at_least)
    ):
        bound = "" if at_least is None else f" >= {at_least}"
        default = "" if none_for is None else f" (or None for {none_for})"
        raise ValueError(f"`{argument}` must be a finite number{bound}{default}, got {value!r}")
    return value


def check_positive_int(value, argument: str, allow_none: bool = False) -> int | None:
    """`value`, an int >= 1 (or `None`, where `allow_none`), as a Python int."""
    if allow_none and value is None:
        return None
    if not _is_int(value) or value < 1:
        expected = "None or a positive int" if allow_none else "a positive int"
        raise ValueError(f"`{argument}` must be {expected}, got {value!r}")
    return int(value)


def check_bool(value, argument: str) -> bool:
    """`value`, `True` or `False` (not 0/1, not a string), as a Python bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"`{argument}` must be a bool (True or False), got {value!r}")
    return bool(value)


def check_one_of(value, argument: str, options: tuple):
    """`value`, one of `options` (strings, usually)."""
    if not isinstance(value, Hashable) or value not in options:  # arrays are not hashable
        raise ValueError(f"`{argument}` must be one of {tuple(options)}, got {value!r}")
    return value


def check_function(value, argument: str, signature: str, allow_none: bool = True):
    """`value`, a callable `signature` (e.g. "(k, r, factual) -> Plan"), or `None`."""
    if (value is None and allow_none) or callable(value):
        return value
    expected = ("None or a function " if allow_none else "a function ") + signature
    raise TypeError(f"`{argument}` must be {expected}, got {value!r}")


def check_threshold(threshold) -> float:
    """`threshold`, a finite Python number, as a float."""
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not np.isfinite(threshold)
    ):
        raise ValueError(f"`threshold` must be a finite number, got {threshold!r}")
    return float(threshold)
