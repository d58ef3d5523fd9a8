import os
import signal

import jax
import pytest

# The command line switches on JAX's persistent compilation cache; the tests keep it off so
# that they neither read nor fill a folder on this machine.
os.environ["BLAMEJAX_COMPILE_CACHE"] = "off"

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
