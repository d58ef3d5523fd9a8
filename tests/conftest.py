import os
import signal

import jax
import pytest

# The command line switches on JAX's persistent compilation cache in the user's folder; the
# tests keep that default off, so that they never read or fill the user's cache.
os.environ["BLAMEJAX_COMPILE_CACHE"] = "off"


def _test_compile_cache() -> str | None:
    """The folder where the test run keeps the programs XLA compiled, so that a second run of
    the suite loads them instead of compiling them again (about three quarters of a cold run is
    XLA compiling). `$BLAMEJAX_TEST_COMPILE_CACHE` names it (`off` switches it off); the default
    is `.pytest_cache/blamejax-compiled` in the repository, next to pytest's own cache.

    JAX keys each program by its whole lowered module, the compile options and the jax and
    jaxlib versions, so a changed program is compiled afresh, never loaded stale."""
    folder = os.environ.get("BLAMEJAX_TEST_COMPILE_CACHE")
    if folder is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        folder = os.path.join(root, ".pytest_cache", "blamejax-compiled")
    if folder.lower() == "off" or not folder:
        return None
    return folder


def _compile_cache_settings(folder: str) -> dict:
    """JAX's settings for the cache: every program is kept however quickly it compiled, and
    past 2 GiB the least recently used are dropped (JAX needs the `filelock` package of the dev
    extra for that bound)."""
    settings = {
        "jax_compilation_cache_dir": folder,
        "jax_persistent_cache_min_compile_time_secs": 0.0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }
    try:
        import filelock  # noqa: F401
    except ImportError:
        pass
    else:
        settings["jax_compilation_cache_max_size"] = 2 * 1024**3
    return settings


_CACHE = _test_compile_cache()
if _CACHE is not None:
    os.makedirs(_CACHE, exist_ok=True)
    for _name, _value in _compile_cache_settings(_CACHE).items():
        jax.config.update(_name, _value)
        # and in the environment, from which JAX reads them at import: the processes a test
        # starts (the CLI, Ctrl-C and distributed tests) share the cache too
        os.environ[_name.upper()] = str(_value)


# Strict dtype and rank promotion, as equinox tests do: implicit promotion hides bugs.
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def sigint_is_ctrl_c():
    """SIGINT handled as Python's default (KeyboardInterrupt) during a test: a process
    started in the background by a shell inherits SIGINT ignored, and the library leaves an
    ignored SIGINT alone, so Ctrl-C tests would see no Ctrl-C there."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def getkey():
    """A fresh, deterministic key per call within a test."""
    state = {"n": 0}

    def _getkey():
        state["n"] += 1
        return jax.random.key(state["n"])

    return _getkey


def pytest_collection_modifyitems(config, items):
    """Under `JAX_ENABLE_X64=1` every test runs except those marked `x32_only(reason)`: their
    fixed-seed numbers were drawn with 32-bit noise (the Gumbels differ in float64)."""
    if not jax.config.jax_enable_x64:
        return
    for item in items:
        marker = item.get_closest_marker("x32_only")
        if marker is not None:
            item.add_marker(
                pytest.mark.skip(reason="x32_only: " + (marker.args[0] if marker.args else ""))
            )
