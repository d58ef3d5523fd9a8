"""The draws themselves: a hard draw (the Gumbel-max argmax, with a gradient that says why it
has none), a tabulated draw (one argmax per row of the table, then a gather of the chosen
row), and the relaxed (Gumbel-softmax) probabilities. Pure functions of the logits, the noise
and the step's variant; `Context.choose` calls them.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from ._modes import Relaxed

_NEG_LARGE = -1e30  # stands in for -inf inside softmax so no row becomes NaN


def _step_eval(fn, **kwargs):
    """Mark one step evaluation in the jaxpr (a named `pjit`), so that
    `count_step_evaluations` can count how many times each step runs after `vmap`."""
    return jax.jit(fn, **kwargs)


@_step_eval
def _gather_choice(table, flat_index):
    # The flat index is in bounds by construction (variant < V, parent < K_parent).
    return table.reshape(-1).at[flat_index].get(mode="promise_in_bounds")


_HARD_GRADIENT_MESSAGE = (
    "a gradient was requested through the hard (Gumbel-max) choice of step {step!r}. argmax "
    "has zero gradient almost everywhere, so this gradient would silently be zero. To "
    "differentiate blame with respect to logits, evaluate in relaxed mode: "
    "mode=blamejax.Relaxed(tau) (Gumbel-softmax) or blamejax.Relaxed(tau, straight_through=True) "
    "(hard values forward, relaxed gradients backward)."
)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def hard_argmax(logits, noise, step: str = "?"):
    """`argmax(logits + noise)` over the last axis, as int32, or -1 for a row with no valid
    option (every logit `-inf`, or a NaN or `+inf` anywhere: `jnp.argmax` would pick an option
    from it silently). Differentiating it with respect to the logits raises a `ValueError`
    that explains how to get a useful gradient."""
    # `lax` primitives, not jnp functions (each a small jitted function of its own, which every
    # coalition `vmap` above traces again): the same integers, at a fraction of the trace time.
    noise = noise if noise.ndim == logits.ndim else _lift(noise, logits)
    perturbed = jax.lax.add(logits, noise.astype(logits.dtype))
    best = jax.lax.argmax(perturbed, perturbed.ndim - 1, np.int32)
    return jax.lax.select(_invalid_rows(logits, perturbed), jax.lax.full_like(best, -1), best)


def _invalid_rows(logits, perturbed):
    """Rows (last axis) from which no option can be drawn: all `-inf`, or NaN or `+inf`."""
    lax, last = jax.lax, (logits.ndim - 1,)
    bad = lax.bitwise_or(
        lax.ne(perturbed, perturbed), lax.eq(logits, lax.full_like(logits, np.inf))
    )
    impossible = lax.eq(logits, lax.full_like(logits, -np.inf))
    return lax.bitwise_or(lax.reduce_or(bad, last), lax.reduce_and(impossible, last))


@hard_argmax.defjvp
def _hard_argmax_jvp(step, primals, tangents):
    raise ValueError(_HARD_GRADIENT_MESSAGE.format(step=step))


def _tabulated_hard(logits, noise, variant, parents, step="?", rows_per_world=False):
    """The choice and whether it had no valid option (-1 rows of `hard_argmax`). The argmax
    over every [variant, parent] row depends only on the world, so under the coalition vmaps
    it is computed once per world; the run itself is a 1-D gather. With `rows_per_world`,
    so is the check: any row without a valid option invalidates the run."""
    best = hard_argmax(logits, noise, step)  # [V, *K_parents]
    if rows_per_world:
        invalid, best = jnp.any(best < 0), jnp.maximum(best, 0)
    flat = jnp.asarray(variant, jnp.int32)
    for axis, parent in enumerate(parents):
        flat = flat * logits.shape[1 + axis] + parent.index
    index = _gather_choice(best, flat)
    if rows_per_world:
        return index, invalid
    return jnp.maximum(index, 0), index < 0


def _lift(noise, logits):
    """Give the [K] noise the leading unit axes of `logits` (explicit broadcasting)."""
    return noise.astype(logits.dtype).reshape((1,) * (logits.ndim - 1) + noise.shape)


def _free_hard(logits, noise, variant, step="?"):
    row = jnp.take(logits, variant, axis=0)
    return hard_argmax(row, noise, step)


_free_hard_step = _step_eval(_free_hard, static_argnums=(3,))


def _relaxed_probs(logits, noise, variant, parents, mode: Relaxed):
    safe = jnp.where(jnp.isneginf(logits), _NEG_LARGE, logits)
    noise = _lift(noise, logits)
    soft = jax.nn.softmax((safe + noise) / mode.tau, axis=-1)  # [V, *K_parents, K]
    if mode.straight_through:
        hard = jax.nn.one_hot(
            jnp.argmax(logits + noise, axis=-1), logits.shape[-1], dtype=soft.dtype
        )
        soft = hard + soft - jax.lax.stop_gradient(soft)
    table = jnp.take(soft, variant, axis=0)  # [*K_parents, K]
    for parent in parents:
        if parent.probs is None:
            table = jnp.take(table, parent.index, axis=0)
        else:
            table = jnp.tensordot(parent.probs.astype(table.dtype), table, axes=1)
    return table


def _seen_logits(logits, variant, parents):
    """The logits row the draw actually saw (for traces and abduction)."""
    row = jnp.take(logits, variant, axis=0)
    for parent in parents:
        row = jnp.take(row, parent.index, axis=0)
    return row
