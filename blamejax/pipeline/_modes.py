"""The sampling rule of a run: exact Gumbel-max (`Hard`) or Gumbel-softmax (`Relaxed`), both
on the same addressed noise."""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Float


class Hard(eqx.Module):
    """Exact Gumbel-max sampling: `argmax(l + g)`; choices are integers."""

    def __check_init__(self):
        pass


class Relaxed(eqx.Module):
    """Gumbel-softmax sampling `softmax((l + g) / tau)` with the same addressed noise.

    With `straight_through=True` the forward values are the hard one-hot choices and the
    gradients are those of the relaxed probabilities.
    """

    tau: Float[Array, ""] | float = 1.0
    straight_through: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if not isinstance(self.tau, jax.core.Tracer):
            tau = np.asarray(self.tau)
            if not np.issubdtype(tau.dtype, np.number):
                raise TypeError(f"`tau` must be a positive scalar temperature, got {self.tau!r}")
            if tau.shape != () or not bool(tau > 0):
                raise ValueError(f"`tau` must be a positive scalar temperature, got {self.tau!r}")
