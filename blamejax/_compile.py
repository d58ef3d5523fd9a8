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
    from .reduction import attribute  # compiled once per table length, by `jax.jit`

    _ENTRIES.clear()
    _TRACES.clear()
    attribute.clear_cache()


def default_compile_cache_dir() -> str | None:
    """Where `enable_compile_cache` keeps compiled programs by default:
    `$BLAMEJAX_COMPILE_CACHE`, else `$XDG_CACHE_HOME/blamejax/jax`, else `~/.cache/blamejax/jax`;
    None when `$BLAMEJAX_COMPILE_CACHE` is `off` (the test suite sets that)."""
    import os

    if os.environ.get("BLAMEJAX_COMPILE_CACHE", "").lower() == "off":
        return None
    if os.environ.get("BLAMEJAX_COMPILE_CACHE"):
        return os.environ["BLAMEJAX_COMPILE_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "blamejax", "jax")


def enable_compile_cache(path=None) -> str | None:
    """Switch on JAX's persistent compilation cache, so that a new process (a notebook kernel,
    a second command) loads the programs an earlier one compiled instead of compiling them
    again. One line in a notebook: `bj.enable_compile_cache()`.

    **Arguments:**
    - `path`: the folder (created if missing); default `default_compile_cache_dir()`.

    **Returns:** the folder, as a string (None, and nothing switched on, when `path` is None
    and `$BLAMEJAX_COMPILE_CACHE` is `off`).

    Every program is kept, however quickly it compiled (blamejax compiles many small ones).
    The folder may be deleted at any time; it only costs the compiles again.
    """
    import os

    import jax

    if path is None:
        folder = default_compile_cache_dir()
        if folder is None:
            return None
    else:
        try:
            folder = os.fspath(path)
        except TypeError:
            raise TypeError(
                f"`path` must be a folder path (str or os.PathLike), got {path!r}"
            ) from None
        if not isinstance(folder, str) or not folder:
            raise TypeError(f"`path` must be a non-empty folder path, got {path!r}")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise NotADirectoryError(f"`path` {folder!r} is a file; the compile cache needs a folder")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as error:
        raise type(error)(
            f"`path` {folder!r}: cannot make the folder ({error.strerror or error})"
        ) from None
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
