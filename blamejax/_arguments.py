"""Checks of plain arguments (numbers, flags, choices, functions): each raises a
`TypeError`/`ValueError` that names the argument as the user typed it, what was expected and
what was received, and returns the value in its plain Python type; and `renamed_keywords`,
the one way an entry point keeps an old keyword working for a while.

They import nothing from the package, so every floor (statistics included) can use them; the
checks that know pipelines, worlds and plans are in `blamejax._checks`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import warnings
from collections.abc import Callable, Hashable, Sequence

import numpy as np

MIN_GROWTH = 1 + 1e-4  # the smallest growth factor of a schedule of looks (`check_growth`)


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


def check_int_at_least(value, argument: str, low: int, unit: str | None = None) -> int:
    """`value`, an int >= `low` (counted in `unit`, where given), as a Python int."""
    if not _is_int(value) or value < low:
        counted = f" ({unit})" if unit else ""
        raise ValueError(f"`{argument}` must be an int >= {low}{counted}, got {value!r}")
    return int(value)


def check_growth(value) -> float:
    """`growth`, the growth factor of a schedule of looks: a finite number >= `MIN_GROWTH`
    (closer to 1, the schedule would look at nearly every sample)."""
    if not _is_number(value) or not MIN_GROWTH <= value < math.inf:
        raise ValueError(
            f"`growth` must be a finite number >= 1 + 1e-4 (the schedule's growth factor), "
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


def check_power_of_two(value, argument: str, allow_none: bool = False) -> int | None:
    """`value`, a positive power of two (an int; or `None`, where `allow_none`), as a
    Python int: a compiled shape, such as the failures per call."""
    if allow_none and value is None:
        return None
    if not _is_int(value) or value < 1 or value & (value - 1):
        raise ValueError(f"`{argument}` must be a positive power of two, got {value!r}")
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


def check_option_names(value, argument: str) -> tuple[str, ...]:
    """`value`, the options of a decision: a non-empty list of distinct non-empty strings
    (not one string), as a tuple."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"`{argument}` must be a list of strings, got {value!r}")
    options = tuple(value)
    if not options or not all(isinstance(o, str) and o for o in options):
        raise ValueError(
            f"`{argument}` must be a non-empty list of non-empty strings, got {list(options)!r}"
        )
    if len(set(options)) != len(options):
        raise ValueError(f"`{argument}` must be distinct, got {list(options)!r}")
    return options


def check_function(value, argument: str, signature: str, allow_none: bool = True):
    """`value`, a callable `signature` (e.g. "(k, r, factual) -> Plan"), or `None`."""
    if (value is None and allow_none) or callable(value):
        return value
    expected = ("None or a function " if allow_none else "a function ") + signature
    raise TypeError(f"`{argument}` must be {expected}, got {value!r}")


def check_option(value, argument: str, cls: type):
    """`value`, an instance of the options class `cls` (which checked its own fields)."""
    if not isinstance(value, cls):
        home = ".".join(part for part in cls.__module__.split(".") if not part.startswith("_"))
        raise TypeError(f"`{argument}` must be a {home}.{cls.__name__}, got {value!r}")
    return value


def check_threshold(threshold, none_for: str | None = None) -> float | None:
    """`threshold`, a finite number (Python or NumPy, not a bool), as a float; or `None`
    where `none_for` says what `None` stands for."""
    value = check_finite_number(threshold, "threshold", none_for=none_for)
    return None if value is None else float(value)


def renamed_keywords(**groups: dict[str, str | Callable]):
    """Keep old keywords of an entry point working for a deprecation period.

    Each group maps a new keyword to its old ones: `new={old: field}` sets `field` of the
    new keyword's value (an options object, replaced with `dataclasses.replace` from the
    default in the signature, so its own checks run), and `new={old: function}` makes the
    new value from the old one. An old keyword warns (`DeprecationWarning`) with the new
    spelling; old and new together are a `TypeError`. A keyword that keeps its name but
    takes an options object now (`interval="normal"` for `interval=Interval("normal")`) is
    old when its value is not of the default's type.

    ```python
    @renamed_keywords(schedule={"first_checkpoint": "first", "growth": "growth"})
    def run(*, schedule=Schedule(10, 1.5)): ...
    ```
    """

    def decorate(function):
        defaults = {
            name: parameter.default
            for name, parameter in inspect.signature(function).parameters.items()
        }

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            for new, olds in groups.items():
                default = defaults[new]
                given = {
                    old: kwargs.pop(old)
                    for old in olds
                    if old in kwargs and not (old == new and isinstance(kwargs[old], type(default)))
                }
                if not given:
                    continue
                if new in kwargs:
                    names = ", ".join(f"`{old}`" for old in given)
                    raise TypeError(
                        f"`{function.__name__}` got `{new}` and the old {names} together; "
                        f"pass only `{new}`"
                    )
                value = default
                for old, old_value in given.items():
                    how = olds[old]
                    if callable(how):
                        value = how(old_value)
                    else:
                        value = dataclasses.replace(value, **{how: old_value})
                names = ", ".join(f"`{old}=`" for old in given)
                warnings.warn(
                    f"{names} of `{function.__name__}` is deprecated and will be removed; "
                    f"pass `{new}={value!r}`",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = value
            return function(*args, **kwargs)

        return wrapper

    return decorate
