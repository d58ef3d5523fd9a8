import jax
import pytest

# Strict dtype and rank promotion, as equinox tests do: implicit promotion hides bugs.
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def getkey():
    """A fresh, deterministic key per call within a test."""
    state = {"n": 0}

    def _getkey():
        state["n"] += 1
        return jax.random.key(state["n"])

    return _getkey
