"""Addressed noise: every random number is a pure function of where it is used.

The address of one Gumbel is (world key, step, draw slot, option). The world key is
itself ``fold_in(fold_in(root, failure), world)``. Nothing is ever taken from a running
stream, so switching one step to its fix never shifts another step's noise (common
random numbers), and a draw can be recomputed anywhere from its address alone.
"""

from __future__ import annotations

import functools
import zlib

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._tags import ABDUCT_TAG, FRESH_TAG, GUMBEL_TAG, TEXT_TAG, UNIFORM_TAG


def stable_hash(name: str) -> int:
    """A hash of a step name that is the same in every Python process.

    Python's built-in ``hash`` of a string is salted per process, so it cannot address
    noise. This is CRC-32 of the UTF-8 bytes, kept below ``2**31``.

    **Arguments:**
    - `name`: the step's name.

    **Returns:** a Python ``int`` in ``[0, 2**31)``.

    ```python
    import blamejax as bj
    assert bj.noise.stable_hash("planner") == bj.noise.stable_hash("planner")  # in every process
    ```
    """
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a str, got {type(name).__name__}: {name!r}")
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF


# -- Threefry-2x32, unrolled -----------------------------------------------------------------
# jax.random's keys are Threefry-2x32 keys. On CPU, JAX lowers the Threefry hash as a rolled
# loop, which XLA compiles slowly (about 0.3 s per call site) and runs as several passes over
# memory. The same hash written out round by round is one elementwise expression that XLA
# fuses into a single loop: it compiles in a fraction of the time and runs about three times
# faster. The functions below reproduce `jax.random.fold_in`, `split`, `uniform` and `gumbel`
# (in float32) bit for bit (tests/test_noise.py checks it); keys of another implementation, or
# JAX's non-partitionable Threefry mode, fall back to `jax.random` itself. The public draws are
# jitted, as jax.random's are, so that an eager call rounds exactly like a compiled one.
#
# Every draw is made in float32 whatever the precision mode, then cast to the default float
# dtype: `jax.random` in float64 would read 64 random bits instead of 32 and give unrelated
# numbers, so the same seed would give other worlds with `jax_enable_x64` on.

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA  # the Threefry key-schedule constant


def threefry2x32(k1, k2, x1, x2):
    """The Threefry-2x32 block function (20 rounds) on broadcastable uint32 arrays:
    key words `(k1, k2)`, counter words `(x1, x2)`; returns the two output words.
    Bit-exact with `jax.extend.random.threefry_2x32`."""
    k1, k2, x1, x2 = jnp.broadcast_arrays(*(jnp.asarray(a, jnp.uint32) for a in (k1, k2, x1, x2)))
    # `lax` primitives, not jnp operators: each jnp operator is a small jitted function of its
    # own, and tracing the ~120 of them per hash was most of the trace time of a first call.
    add, xor, lax = jax.lax.add, jax.lax.bitwise_xor, jax.lax
    schedule = (k1, k2, xor(xor(k1, k2), np.uint32(_PARITY)))
    x1, x2 = add(x1, k1), add(x2, k2)
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x1 = add(x1, x2)
            x2 = lax.bitwise_or(
                lax.shift_left(x2, np.uint32(r)), lax.shift_right_logical(x2, np.uint32(32 - r))
            )
            x2 = xor(x1, x2)
        x1 = add(x1, schedule[(block + 1) % 3])
        x2 = add(add(x2, schedule[(block + 2) % 3]), np.uint32(block + 1))
    return x1, x2


def _unrolled(key) -> bool:
    """Can `key` use the unrolled hash (a Threefry key, JAX's partitionable mode)?"""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        impl = str(jr.key_impl(key))
    else:
        impl = str(jax.config.jax_default_prng_impl)
    return impl == "threefry2x32" and bool(jax.config.jax_threefry_partitionable)


def _words(key):
    data = jr.key_data(key)
    return data[..., 0], data[..., 1]


def _wrap(like, words):
    data = jnp.stack(jnp.broadcast_arrays(*words), axis=-1)
    if jnp.issubdtype(like.dtype, jax.dtypes.prng_key):
        return jr.wrap_key_data(data, impl=jr.key_impl(like))
    return data


def _fold_words(words, data):
    """`fold_in` on key words: Threefry of the counter ``(0, data)``."""
    data = jnp.asarray(data, jnp.uint32)
    return threefry2x32(words[0], words[1], jnp.zeros_like(data), data)


def _bits_words(words, index):
    """32 random bits of element `index` of a 1-D draw (`jax.random.bits` layout)."""
    y1, y2 = _fold_words(words, index)
    return y1 ^ y2


_TINY = float(np.finfo(np.float32).tiny)  # the least uniform a Gumbel is drawn from


def _unit_interval(words, index, minval):
    """`jax.random.uniform(key, dtype=jnp.float32, minval=minval)`, element `index`."""
    bits = _bits_words(words, index)
    one = np.array(1.0, np.float32).view(np.uint32)
    floats = jax.lax.bitcast_convert_type((bits >> np.uint32(9)) | one, jnp.float32) - 1.0
    return jnp.maximum(jnp.asarray(minval, jnp.float32), floats)


def _gumbel_words(words, index, dtype):
    """`jax.random.gumbel(key, dtype=jnp.float32)` (mode "low"), element `index`, cast to
    `dtype`."""
    return (-jnp.log(-jnp.log(_unit_interval(words, index, _TINY)))).astype(dtype)


def _gumbel32(key, shape=()):
    """`jax.random.gumbel(key, shape, jnp.float32)`, the draw every Gumbel is cast from."""
    return jr.gumbel(key, shape, jnp.float32)


def fold_in(key: PRNGKeyArray, data) -> PRNGKeyArray:
    """`jax.random.fold_in(key, data)`, bit for bit, through the unrolled hash. `key` and
    `data` broadcast against each other: the result is one key per element. Compiled, as
    jax.random's is, so that an eager call costs one dispatch."""
    return _fold_in(key, jnp.asarray(data, jnp.uint32))


@jax.jit
def _fold_in(key, data):
    if _unrolled(key):
        return _wrap(key, _fold_words(_words(key), data))
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    keys = key if typed else jr.wrap_key_data(key)
    shape = jnp.broadcast_shapes(keys.shape, data.shape)
    flat = jax.vmap(jr.fold_in)(
        jnp.broadcast_to(keys, shape).reshape(-1), jnp.broadcast_to(data, shape).reshape(-1)
    )
    out = flat.reshape(shape)
    return out if typed else jr.key_data(out)


def _split2(key):
    """`jax.random.split(key)` (two keys), bit for bit."""
    if not _unrolled(key):
        return tuple(jr.split(key))
    words = _words(key)
    return tuple(_wrap(key, _fold_words(words, i)) for i in range(2))


def _gumbels(key, num: int | None = None):
    """`jax.random.gumbel(key, dtype=jnp.float32)` (``num=None``) or
    `jax.random.gumbel(key, (num,), jnp.float32)`, cast to the default float dtype."""
    dtype = jnp.result_type(float)
    if not _unrolled(key):
        return _gumbel32(key, () if num is None else (num,)).astype(dtype)
    index = 0 if num is None else jnp.arange(num, dtype=jnp.uint32)
    return _gumbel_words(_words(key), index, dtype)


@jax.jit
def world_key(key: PRNGKeyArray, failure: int | Int[Array, ""], world: int | Int[Array, ""]):
    """The key of one world of one failure: ``fold_in(fold_in(key, failure), world)``."""
    return fold_in(fold_in(key, failure), world)


@jax.jit
def fresh_key(key: PRNGKeyArray, stream: Int[Array, ""]) -> PRNGKeyArray:
    """The key of fresh noise stream ``stream`` inside a world (used by resampling)."""
    return fold_in(fold_in(key, FRESH_TAG), stream)


def _site_key(key: PRNGKeyArray, tag: int, step: str | Int[Array, ""], slot: int | Int[Array, ""]):
    """The key of draw `slot` of `step` in the family `tag`; `step` is a name or its
    `stable_hash` (an array, under `vmap`)."""
    step_hash = stable_hash(step) if isinstance(step, str) else step
    return fold_in(fold_in(fold_in(key, tag), step_hash), slot)


def abduction_key(key: PRNGKeyArray, step: str | Int[Array, ""], slot: int | Int[Array, ""]):
    """The key of the posterior (abducted) noise of draw `slot` of `step` in a world:
    ``fold_in(fold_in(fold_in(key, ABDUCT), stable_hash(step)), slot)``. `step` is a name
    or its `stable_hash`."""
    return _site_key(key, ABDUCT_TAG, step, slot)


def text_key(key: PRNGKeyArray, step: str, slot: int | Int[Array, ""] = 0) -> PRNGKeyArray:
    """The key of the text `step` writes in draw `slot` of a world:
    ``fold_in(fold_in(fold_in(key, TEXT_TAG), stable_hash(step)), slot)``, a family of its own
    (`bj.scorers.text_seed` takes its seed from it).

    **Arguments:** `key` (the world's key, see `world_key`), `step` (its name), `slot` (which
    text of the step; 0 for a step that writes once).

    **Returns:** a key of `key`'s kind.

    ```python
    import blamejax as bj
    import jax.random as jr
    world = bj.noise.world_key(bj.noise.as_key(0), 2, 0)  # the recorded world of case 2
    first, second = bj.noise.text_key(world, "note"), bj.noise.text_key(world, "note", 1)
    assert (jr.key_data(first) != jr.key_data(second)).any()
    ```
    """
    return _site_key(key, TEXT_TAG, step, slot)


@functools.partial(jax.jit, static_argnames=("step", "num_options"))
def gumbel_at(
    key: PRNGKeyArray, step: str, slot: int | Int[Array, ""], num_options: int
) -> Float[Array, " options"]:
    """The standard Gumbel noise of every option of one draw, from its address.

    Option ``j`` is ``jax.random.gumbel(fold_in(site, j))`` with ``site`` the key
    ``fold_in(fold_in(fold_in(key, GUMBEL), stable_hash(step)), slot)``: it depends only on
    ``(key, step, slot, j)``, not on ``num_options``, so padding a step with extra
    options leaves the others unchanged. Nor does it depend on the precision mode: each
    Gumbel is drawn in float32 (``jax.random.gumbel(..., dtype=jnp.float32)``) and cast to
    the default float dtype, so with `jax_enable_x64` the values are the same numbers.

    **Arguments:**
    - `key`: the world's key (see `world_key`).
    - `step`: the step's name (hashed with `stable_hash`).
    - `slot`: which draw of the step (0 for a step that draws once).
    - `num_options`: K.

    **Returns:** `Float[Array, "K"]`, independent standard Gumbel draws.
    """
    return _gumbel_options(_site_key(key, GUMBEL_TAG, step, slot), num_options)


def _gumbel_options(site: PRNGKeyArray, num_options: int) -> Float[Array, "*sites options"]:
    """Option j of each site key: ``gumbel(fold_in(site, j))``."""
    options = jnp.arange(num_options, dtype=jnp.uint32)
    if not _unrolled(site):
        keys = fold_in(site[..., None], options)  # [*sites, K] keys
        draws = jax.vmap(_gumbel32)(keys.reshape(-1)).reshape(keys.shape)
        return draws.astype(jnp.result_type(float))
    words = _words(site)
    words = (words[0][..., None], words[1][..., None])
    return _gumbel_words(_fold_words(words, options), 0, jnp.result_type(float))


@functools.partial(jax.jit, static_argnames=("steps", "slots", "num_options"))
def gumbel_sites(
    key: PRNGKeyArray, steps: tuple[str, ...], slots: tuple[int, ...], num_options: int
) -> Float[Array, "sites options"]:
    """`gumbel_at` for many sites at once: one batched computation instead of one per
    site, which keeps compile time flat in the number of steps.

    Row `i` equals `gumbel_at(key, steps[i], slots[i], K)[:num_options]` for any K.
    """
    hashes = jnp.asarray([stable_hash(s) for s in steps], dtype=jnp.uint32)
    slots_ = jnp.asarray(slots, dtype=jnp.uint32)
    site = fold_in(fold_in(fold_in(key, GUMBEL_TAG), hashes), slots_)
    return _gumbel_options(site, num_options)


def uniform_at(
    key: PRNGKeyArray, step: str, slot: int | Int[Array, ""] = 0, index: int | Int[Array, ""] = 0
) -> Float[Array, ""]:
    """One uniform draw on [0, 1) at the address (key, step, slot, index):
    ``jax.random.uniform(fold_in(site, index), dtype=jnp.float32)``, cast to the default float
    dtype (the same number with and without `jax_enable_x64`)."""
    return _uniform_at(key, step, jnp.asarray(slot, jnp.uint32), jnp.asarray(index, jnp.uint32))


@functools.partial(jax.jit, static_argnames=("step",))
def _uniform_at(key, step, slot, index):
    site = fold_in(_site_key(key, UNIFORM_TAG, step, slot), index)
    if not _unrolled(site):
        return jr.uniform(site, (), jnp.float32).astype(jnp.result_type(float))
    return _unit_interval(_words(site), 0, 0.0).astype(jnp.result_type(float))


def gumbel_max(logits: Float[Array, "*batch K"], gumbels: Float[Array, "*batch K"]):
    """``argmax(logits + gumbels)`` over the last axis; ``-inf`` logits are never chosen
    unless every option is impossible."""
    return jnp.argmax(logits + gumbels, axis=-1).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("check",))
def abduct_gumbels(
    key: PRNGKeyArray, logits: Float[Array, " K"], observed: Int[Array, ""], *, check: bool = True
) -> Float[Array, " K"]:
    """Sample Gumbel noise from its posterior given that ``observed`` won the Gumbel-max.

    The winner's perturbed value is ``M = l_k + g_k ~ Gumbel(logsumexp l)``; every other
    possible option has ``l_j + g_j ~ Gumbel(l_j)`` truncated to ``(-inf, M)``, computed
    stably as ``M - softplus(M - (l_j + G))`` (equal to ``-logaddexp(-(l_j + G), -M)``)
    with ``G ~ Gumbel(0)``. An impossible option (``l_j = -inf``) keeps a prior
    ``Gumbel(0)`` draw, so no ``-inf - (-inf)`` appears. Losers are kept a hair below
    ``M`` (relative margin 1e-6) so that float rounding can never produce a tie that
    ``argmax`` would break the wrong way.

    The prior Gumbels are drawn in float32 (as every Gumbel, see `gumbel_at`) and the rest
    is computed in the default float dtype, so the same key gives the same posterior noise,
    up to rounding, with and without `jax_enable_x64`.

    Vectorise with `jax.vmap` over steps, worlds and failures. The observed option's
    logit must be finite. With `check` on, an impossible observation raises, inside `jit`
    too, through `equinox.error_if`. That check is a host callback, and JAX's persistent
    compile cache keeps no program that holds one, so `inferred_worlds` and the `mdp`
    functions check the observations eagerly and call this with `check=False`.

    **Arguments:**
    - `key`: a key for this draw (one per world and site).
    - `logits`: `Float[Array, "K"]`, the logits the draw saw in the factual run.
    - `observed`: the option that was chosen.
    - `check`: raise if the observed option has logit -inf (default). Pass false only for
      observations already checked: unchecked, such an option gets noise +inf.

    **Returns:** `Float[Array, "K"]` Gumbel noise ``g`` with ``argmax(logits + g) == observed``.
    """
    import equinox as eqx

    logits = jnp.asarray(logits, dtype=jnp.result_type(float))  # the dtype of the noise
    num_options = logits.shape[-1]
    key_max, key_rest = _split2(key)
    finite = jnp.isfinite(logits)
    observed = jnp.asarray(observed, jnp.int32)
    logit_k = logits[observed]
    if check:
        logit_k = eqx.error_if(
            logit_k,
            ~jnp.isfinite(logit_k),
            "abduct_gumbels: the observed option has logit -inf (probability 0), so it "
            "cannot have been chosen; check the observed choices and the factual logits",
        )
    safe = jnp.where(finite, logits, 0.0)
    top = jax.nn.logsumexp(jnp.where(finite, logits, -jnp.inf)) + _gumbels(key_max)
    prior = _gumbels(key_rest, num_options)
    perturbed = safe + prior
    truncated = top - jax.nn.softplus(top - perturbed)
    margin = 1e-6 * (1.0 + jnp.abs(top))
    truncated = jnp.minimum(truncated, top - margin)
    losers = jnp.where(finite, truncated - safe, prior)
    winner = top - logit_k
    is_observed = jnp.arange(num_options, dtype=jnp.int32) == observed
    return jnp.where(is_observed, winner, losers)


def as_key(key) -> PRNGKeyArray:
    """Accept an int seed or a typed key at the outermost API and return a typed key.

    ```python
    import blamejax as bj
    key = bj.noise.as_key(0)  # the same as jax.random.key(0)
    ```
    """
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if not 0 <= int(key) < 2**32:  # wider seeds would alias others (or overflow) silently
            raise ValueError(f"`key`, an int seed, must be in [0, 2**32), got {int(key)}")
        if (
            str(jax.config.jax_default_prng_impl) == "threefry2x32"
        ):  # jr.key's words, nothing to compile
            return jr.wrap_key_data(np.array([0, int(key)], np.uint32), impl="threefry2x32")
        return jr.key(int(key))
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"`key` must be a single key, got a key array of shape {key.shape}")
        return key
    if isinstance(key, jax.Array) and key.dtype == jnp.uint32 and key.shape == (2,):
        return jr.wrap_key_data(key)
    what = type(key).__name__
    if hasattr(key, "dtype") and hasattr(key, "shape"):
        what = f"a {key.dtype} array of shape {tuple(key.shape)}"
    raise TypeError(f"`key` must be an int seed or a `jax.random.key(...)`, got {what}")
