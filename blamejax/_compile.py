"""The one compile cache: every compiled function blamejax builds, and every structure it
discovers, keyed on what it was built for.

A compiled function depends on the pipeline (a Python function), its structure and other
static choices, so it is built once per key and kept here. The cache is bounded (the least
recently used entry goes first) and `blamejax.clear_caches()` empties it, as
`equinox.clear_caches` does for equinox. `trace_count` tells how often the functions of one
kind were traced, which is how the tests guard against recompiles.
"""

from __future__ import annotations

import functools
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable

MAX_ENTRIES = 512  # entries kept; the least recently used goes first

_ENTRIES: OrderedDict = OrderedDict()
_TRACES: Counter = Counter()


def cached(kind: str, key: Hashable, build: Callable[[], object]):
    """The entry of `kind` for `key`, built by `build()` on a miss. An unhashable key (a
    pipeline that is an unhashable callable, say) is built every time, never stored."""
    full_key = (kind, key)
    try:
        entry = _ENTRIES[full_key]
    except KeyError:
        entry = build()
        _ENTRIES[full_key] = entry
        while len(_ENTRIES) > MAX_ENTRIES:
            _ENTRIES.popitem(last=False)
    except TypeError:
        return build()
    else:
        _ENTRIES.move_to_end(full_key)
    return entry


def compiled(kind: str):
    """Decorate a builder `build(*key) -> function` so that it runs once per key; the
    function it builds is kept in the one cache under `kind`."""

    def decorate(build):
        @functools.wraps(build)
        def get(*key):
            return cached(kind, key, lambda: build(*key))

        return get

    return decorate


def note_trace(kind: str) -> None:
    """Count one trace of a compiled function of `kind` (call it inside the traced body)."""
    _TRACES[kind] += 1


def trace_count(kind: str) -> int:
    """How many times the compiled functions of `kind` have been traced since the last
    `clear_caches()`."""
    return _TRACES[kind]


def cache_size() -> int:
    """How many entries the cache holds now."""
    return len(_ENTRIES)


def clear_caches() -> None:
    """Forget every compiled function and discovered structure blamejax holds (their compiled
    code is freed with them), for example after redefining a pipeline in a notebook many
    times. JAX's own caches are left alone: `jax.clear_caches()` empties those.

    ```python
    import blamejax as bj
    bj.clear_caches()
    ```
    """
    _ENTRIES.clear()
    _TRACES.clear()
