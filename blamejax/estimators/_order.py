"""The seeded order in which `blame_batch` visits the failures, computed on the host.

The order is `jax.random.permutation(fold_in(key, 0x0BDE), num_failures)`. Its size is known
only once the factual runs are back, so on the device it is one more compiled program per
batch size (a sort, among the slowest small programs to compile on the CPU). For JAX's
default keys (Threefry-2x32, partitionable mode) the same permutation is computed here with
NumPy, bit for bit: `fold_in`, `split` and 32 random bits are Threefry-2x32 of the counter
`(0, i)`, and each round of the shuffle is a stable sort on those bits. Other keys use
`jax.random` itself. tests/test_compile.py checks both against `jax.random.permutation`.
"""

from __future__ import annotations

import functools

import jax
import jax.random as jr
import numpy as np

from ..noise import VISIT_TAG

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def _threefry(k1, k2, x2):
    """Threefry-2x32 (20 rounds) of key words `(k1, k2)` (uint32 scalars) on the counters
    `(0, x2)` (`x2` a uint32 array); returns the two output words. NumPy arrays wrap on
    overflow, as uint32 arithmetic must."""
    x2 = np.asarray(x2, np.uint32).reshape(-1)
    ks = np.array([k1, k2, k1 ^ k2 ^ np.uint32(_PARITY)], np.uint32)
    x1 = np.zeros_like(x2) + ks[0]
    x2 = x2 + ks[1]
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x1 = x1 + x2
            x2 = (x2 << np.uint32(r)) | (x2 >> np.uint32(32 - r))
            x2 = x1 ^ x2
        x1 = x1 + ks[(block + 1) % 3]
        x2 = x2 + ks[(block + 2) % 3] + np.uint32(block + 1)
    return x1, x2


def _host_ready(key) -> bool:
    """Whether `key` is a Threefry key in partitionable mode (what the NumPy copy reproduces)."""
    return str(jr.key_impl(key)) == "threefry2x32" and bool(jax.config.jax_threefry_partitionable)


def visit_order(key, num_failures: int) -> np.ndarray:
    """`np.asarray(jax.random.permutation(jr.fold_in(key, VISIT_TAG), num_failures))`: the
    order in which the failures are visited (`key` a typed key)."""
    if not _host_ready(key):
        return np.asarray(_device_order(key, num_failures))
    words = np.asarray(jr.key_data(key), np.uint32).reshape(2)
    k1, k2 = (w[0] for w in _threefry(words[0], words[1], [VISIT_TAG]))  # fold_in
    order = np.arange(num_failures, dtype=jax.dtypes.canonicalize_dtype(np.int64))
    # jax.random._shuffle: this many rounds of a stable sort on fresh 32-bit keys
    rounds = int(np.ceil(3 * np.log(max(1, num_failures)) / np.log(np.iinfo(np.uint32).max)))
    for _ in range(rounds):
        first, second = _threefry(k1, k2, np.arange(2, dtype=np.uint32))  # split: key, subkey
        k1, k2, s1, s2 = first[0], second[0], first[1], second[1]
        bits = np.bitwise_xor(*_threefry(s1, s2, np.arange(num_failures, dtype=np.uint32)))
        order = order[np.argsort(bits, kind="stable")]
    return order


@functools.partial(jax.jit, static_argnums=(1,))
def _device_order(key, num_failures: int):
    return jr.permutation(jr.fold_in(key, VISIT_TAG), num_failures)
