"""Addressed noise: every random number is a pure function of where it is used.

The address of one Gumbel is (world key, step, draw slot, option). The world key is
itself ``fold_in(fold_in(root, failure), world)``. Nothing is ever taken from a running
stream, so switching one step to its fix never shifts another step's noise (common
random numbers), and a draw can be recomputed anywhere from its address alone.
"""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int, PRNGKeyArray

# Address tags that keep the families of draws apart.
_GUMBEL_TAG = 0x47554D42  # "GUMB"
_UNIFORM_TAG = 0x554E4946  # "UNIF"
_FRESH_TAG = 0x46524553  # "FRES"
_ABDUCT_TAG = 0x41424455  # "ABDU"


def stable_hash(name: str) -> int:
    """A hash of a step name that is the same in every Python process.

    Python's built-in ``hash`` of a string is salted per process, so it cannot address
    noise. This is CRC-32 of the UTF-8 bytes, kept below ``2**31``.

    **Arguments:**
    - `name`: the step's name.

    **Returns:** a Python ``int`` in ``[0, 2**31)``.

    ```python
    >>> stable_hash("planner") == stable_hash("planner")
    True
    ```
    """
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a str, got {type(name).__name__}: {name!r}")
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


def world_key(key: PRNGKeyArray, failure: int | Int[Array, ""], world: int | Int[Array, ""]):
    """The key of one world of one failure: ``fold_in(fold_in(key, failure), world)``."""
    return jr.fold_in(jr.fold_in(key, failure), world)


def fresh_key(key: PRNGKeyArray, stream: Int[Array, ""]) -> PRNGKeyArray:
    """The key of fresh noise stream ``stream`` inside a world (used by resampling)."""
    return jr.fold_in(jr.fold_in(key, _FRESH_TAG), stream)


def _site_key(key: PRNGKeyArray, tag: int, step: str, slot: int | Int[Array, ""]):
    return jr.fold_in(jr.fold_in(jr.fold_in(key, tag), stable_hash(step)), slot)


def gumbel_at(
    key: PRNGKeyArray, step: str, slot: int | Int[Array, ""], num_options: int
) -> Float[Array, " options"]:
    """The standard Gumbel noise of every option of one draw, from its address.

    Option ``j``'s value depends only on ``(key, step, slot, j)``, not on
    ``num_options``: padding a step with extra options leaves the others unchanged.

    **Arguments:**
    - `key`: the world's key (see `world_key`).
    - `step`: the step's name (hashed with `stable_hash`).
    - `slot`: which draw of the step (0 for a step that draws once).
    - `num_options`: K.

    **Returns:** `Float[Array, "K"]`, independent standard Gumbel draws.
    """
    site = _site_key(key, _GUMBEL_TAG, step, slot)
    options = jnp.arange(num_options, dtype=jnp.uint32)
    return jax.vmap(lambda j: jr.gumbel(jr.fold_in(site, j)))(options)


def gumbel_sites(
    key: PRNGKeyArray, steps: tuple[str, ...], slots: tuple[int, ...], num_options: int
) -> Float[Array, "sites options"]:
    """`gumbel_at` for many sites at once (one batched computation instead of one per
    site, which keeps compile time flat in the number of steps).

    Row `i` equals `gumbel_at(key, steps[i], slots[i], K)[:num_options]` for any K.
    """
    hashes = jnp.asarray([stable_hash(s) for s in steps], dtype=jnp.uint32)
    slots_ = jnp.asarray(slots, dtype=jnp.uint32)
    options = jnp.arange(num_options, dtype=jnp.uint32)

    def site(h, slot):
        base = jr.fold_in(jr.fold_in(jr.fold_in(key, _GUMBEL_TAG), h), slot)
        return jax.vmap(lambda j: jr.gumbel(jr.fold_in(base, j)))(options)

    return jax.vmap(site)(hashes, slots_)


def uniform_at(
    key: PRNGKeyArray, step: str, slot: int | Int[Array, ""] = 0, index: int = 0
) -> Float[Array, ""]:
    """One uniform draw on [0, 1) at the address (key, step, slot, index)."""
    site = _site_key(key, _UNIFORM_TAG, step, slot)
    return jr.uniform(jr.fold_in(site, index))


def gumbel_max(logits: Float[Array, "*batch K"], gumbels: Float[Array, "*batch K"]):
    """``argmax(logits + gumbels)`` over the last axis; ``-inf`` logits are never chosen
    unless every option is impossible."""
    return jnp.argmax(logits + gumbels, axis=-1).astype(jnp.int32)


def abduct_gumbels(
    key: PRNGKeyArray, logits: Float[Array, " K"], observed: Int[Array, ""]
) -> Float[Array, " K"]:
    """Sample Gumbel noise from its posterior given that ``observed`` won the Gumbel-max.

    The winner's perturbed value is ``M = l_k + g_k ~ Gumbel(logsumexp l)``; every other
    possible option has ``l_j + g_j ~ Gumbel(l_j)`` truncated to ``(-inf, M)``, computed
    stably as ``M - softplus(M - (l_j + G))`` (equal to ``-logaddexp(-(l_j + G), -M)``)
    with ``G ~ Gumbel(0)``. An impossible option (``l_j = -inf``) keeps a prior
    ``Gumbel(0)`` draw, so no ``-inf - (-inf)`` appears. Losers are kept a hair below
    ``M`` (relative margin 1e-6) so that float rounding can never produce a tie that
    ``argmax`` would break the wrong way.

    Vectorise with `jax.vmap` over steps, worlds and failures. The observed option's
    logit must be finite: `inferred_worlds` checks this eagerly; here, inside `jit`, an
    impossible observation raises through `equinox.error_if`.

    **Arguments:**
    - `key`: a key for this draw (one per world and site).
    - `logits`: `Float[Array, "K"]`, the logits the draw saw in the factual run.
    - `observed`: the option that was chosen.

    **Returns:** `Float[Array, "K"]` Gumbel noise ``g`` with ``argmax(logits + g) == observed``.
    """
    import equinox as eqx

    logits = jnp.asarray(logits, dtype=jnp.result_type(float))  # the dtype of the noise
    num_options = logits.shape[-1]
    key_max, key_rest = jr.split(key)
    finite = jnp.isfinite(logits)
    observed = jnp.asarray(observed, jnp.int32)
    logit_k = logits[observed]
    logit_k = eqx.error_if(
        logit_k,
        ~jnp.isfinite(logit_k),
        "abduct_gumbels: the observed option has logit -inf (probability 0), so it "
        "cannot have been chosen; check the observed choices and the factual logits",
    )
    safe = jnp.where(finite, logits, 0.0)
    top = jax.nn.logsumexp(jnp.where(finite, logits, -jnp.inf)) + jr.gumbel(key_max)
    prior = jr.gumbel(key_rest, (num_options,))
    perturbed = safe + prior
    truncated = top - jax.nn.softplus(top - perturbed)
    margin = 1e-6 * (1.0 + jnp.abs(top))
    truncated = jnp.minimum(truncated, top - margin)
    losers = jnp.where(finite, truncated - safe, prior)
    winner = top - logit_k
    is_observed = jnp.arange(num_options, dtype=jnp.int32) == observed
    return jnp.where(is_observed, winner, losers)
