"""The one compile cache: every compiled function of blamejax, keyed on what it was built for.

Compiled functions depend on the pipeline (a Python function), its structure and other static
choices, so they are built once per key and kept here. The cache is bounded (least recently
used first out) and `clear_caches()` empties it, as `equinox.clear_caches` does for equinox.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

MAX_ENTRIES = 256  # compiled functions kept; the least recently used goes first

_ENTRIES: OrderedDict = OrderedDict()


def cached(kind: str, key: Hashable, build: Callable[[], Callable]) -> Callable:
    """The compiled function of `kind` for `key`, built by `build()` on a miss."""
    full_key = (kind, key)
    try:
        function = _ENTRIES[full_key]
    except KeyError:
        function = build()
        _ENTRIES[full_key] = function
        while len(_ENTRIES) > MAX_ENTRIES:
            _ENTRIES.popitem(last=False)
    else:
        _ENTRIES.move_to_end(full_key)
    return function


def clear_caches() -> None:
    """Forget every compiled function and discovered structure blamejax holds (and JAX's own
    compilation caches), for example after redefining a pipeline in a notebook many times.

    ```python
    import blamejax as bj
    bj.clear_caches()
    ```
    """
    import jax

    _ENTRIES.clear()
    jax.clear_caches()


def cache_size() -> int:
    """How many compiled functions the cache holds now."""
    return len(_ENTRIES)
