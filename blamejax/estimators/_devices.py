"""Where the failures live: the failure axis split over devices, and results read back.

Every estimator splits its failures over a 1-D `Mesh` named `"failures"` (default: every
device of every process, `jax.devices()`), and this module is the one place that knows how.

- **One process** (one or several local devices): inputs go to the mesh with
  `jax.device_put`, and results stay where they were computed.
- **Several processes** (`jax.distributed.initialize()`, one process per host): every process
  runs the same program on the same inputs (SPMD). Each builds the global arrays from its
  own copy with `jax.make_array_from_callback`, handing its devices only their rows, and
  reads results back with `multihost_utils.process_allgather`, so every process ends with
  the whole answer. `np.asarray` on an array that spans another process's devices raises;
  nothing here calls it on one.

The failure axis of a call is padded to a multiple of the device count (`padded_size`) with
copies of a real failure; the callers drop the copies from every output before any
statistic reads it. (Inside a call, the lowest and highest score and the any-NaN flag of a
chunk may see a copy, which scores exactly what the failure it copies scores in the same
call, so it cannot change them.)
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from .._compile import compiled

AXIS = "failures"


def failure_sharding(devices: Sequence | jax.Device | None = None):
    """`NamedSharding` that splits a leading failure axis over `devices` (None: every device
    of every process), or None when there is only one device.

    **Raises:** `TypeError` when `devices` is not a device or a non-empty sequence of them.
    """
    given = devices
    if devices is None:
        devices = jax.devices()
    elif isinstance(devices, jax.Device):
        devices = [devices]
    if isinstance(devices, str) or not isinstance(devices, (list, tuple)):
        raise TypeError(
            f"`devices` must be a jax device or a non-empty sequence of them, got {given!r}"
        )
    devices = list(devices)
    if not devices or not all(isinstance(d, jax.Device) for d in devices):
        raise TypeError(
            f"`devices` must be a jax device or a non-empty sequence of them, got {given!r}"
        )
    if len(devices) == 1:
        return None
    mesh = jax.sharding.Mesh(np.asarray(devices), (AXIS,))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))


def num_shards(sharding) -> int:
    """How many devices the failure axis is split over (1 without a sharding)."""
    return 1 if sharding is None else int(sharding.mesh.size)


def padded_size(count: int, sharding) -> int:
    """`count` rounded up to whole rows per device."""
    width = num_shards(sharding)
    return -(-count // width) * width


def place(tree, sharding):
    """Every leaf of `tree` (leading failure axis, a multiple of the device count) split over
    `sharding`'s devices; `tree` as it is when `sharding` is None.

    Within one process this is `jax.device_put`. Across processes every process holds the
    whole `tree` and hands each of its own devices that device's rows."""
    if sharding is None:
        return tree
    if sharding.is_fully_addressable:
        return jax.device_put(tree, sharding)
    return jax.tree_util.tree_map(lambda x: _global(x, sharding), tree)


def _global(x, sharding):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return x  # placed across the processes already (`exact_run` places each block once)
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        data = _global(jax.random.key_data(x), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def spans_processes(tree) -> bool:
    """Whether some array of `tree` lives partly on another process's devices."""
    return any(
        isinstance(x, jax.Array) and not x.is_fully_addressable
        for x in jax.tree_util.tree_leaves(tree)
    )


def gather(tree):
    """`tree` with every array that spans several processes gathered whole into each
    process (host NumPy arrays, `process_allgather`); other leaves unchanged."""
    if not spans_processes(tree):
        return tree

    def one(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            data = multihost_utils.process_allgather(jax.random.key_data(x), tiled=True)
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
        return multihost_utils.process_allgather(x, tiled=True)

    return jax.tree_util.tree_map(one, tree)


def to_local(tree):
    """`gather(tree)`, with the gathered arrays put back on this process's default device
    (`jax.Array`s, as a one-process run returns them)."""
    if not spans_processes(tree):
        return tree
    return jax.tree_util.tree_map(
        lambda x: jnp.asarray(x) if isinstance(x, np.ndarray) else x, gather(tree)
    )


def _replicated(sharding):
    return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())


@compiled("devices.split")
def _split_function(function, sharding, in_axes: tuple, out_axes: tuple):
    """`function` under `shard_map`: each device runs it on its own rows (compiled once per
    function, sharding and axes)."""
    spec = {0: jax.sharding.PartitionSpec(AXIS), "device": jax.sharding.PartitionSpec(AXIS)}
    replicated = jax.sharding.PartitionSpec()

    def local(*args):
        args = [x[0] if axis == "device" else x for x, axis in zip(args, in_axes)]
        outs = function(*args)
        return tuple(x[None] if axis == "device" else x for x, axis in zip(outs, out_axes))

    return jax.jit(
        jax.shard_map(
            local,
            mesh=sharding.mesh,
            in_specs=tuple(spec.get(axis, replicated) for axis in in_axes),
            out_specs=tuple(spec.get(axis, replicated) for axis in out_axes),
            check_vma=False,
        )
    )


def split_over_devices(function, sharding, in_axes: tuple, out_axes: tuple):
    """`function(*args) -> tuple`, run on every device of `sharding` at once, each device on
    its own rows, with no communication between them (`jax.shard_map`).

    `in_axes` says for each argument: `0`, a leading failure axis split over the devices
    (its length a multiple of the device count); `"device"`, one value per device (shape
    `[D]`; each device's call gets its own scalar); `None`, the same value on every device.
    `out_axes` says the same of each output: `0`, the devices' rows joined; `"device"`,
    each device's scalar, stacked (`[D]`). The inputs are placed on the devices as `place`
    does, and the outputs gathered whole into every process (`gather`).
    """
    if sharding is None:
        raise ValueError("split_over_devices needs a sharding over several devices")
    compiled_function = _split_function(function, sharding, tuple(in_axes), tuple(out_axes))
    same = _replicated(sharding)

    def call(*args):
        placed = [place(x, same if axis is None else sharding) for x, axis in zip(args, in_axes)]
        return gather(compiled_function(*placed))

    return call


def slot_layout(part, num_slots: int, num_devices: int):
    """Where a group of active failures `part` goes in `num_slots` slots split over
    `num_devices` devices: each device gets a contiguous share of `part` (as even as can be),
    packed into the first of its own `num_slots / num_devices` slots, the rest filled with
    copies of a failure of the group (a device with no share computes one copy; its outputs
    are never read).

    **Returns:** `(index, num_active, positions)`: `index` `[S]`, the failure in each slot;
    `num_active` `[D]` int32, the active slots of each device (at least 1); `positions`
    `[A]`, the slot of each failure of `part`, so that `output[positions]` is in `part`'s
    order.
    """
    part = np.asarray(part)
    per_device = num_slots // num_devices
    counts, rest = divmod(len(part), num_devices)
    index = np.full(num_slots, part[0])
    positions = np.zeros(len(part), np.int64)
    num_active = np.ones(num_devices, np.int32)
    start = 0
    for d in range(num_devices):
        size = counts + (d < rest)
        share = part[start : start + size]
        slots = d * per_device + np.arange(size)
        index[slots] = share
        if size:
            index[d * per_device + size : (d + 1) * per_device] = share[0]
        positions[start : start + size] = slots
        num_active[d] = max(size, 1)
        start += size
    return index, num_active, positions


@jax.jit
def _take(tree, index):
    return jax.tree_util.tree_map(lambda x: x[index], tree)


def over_failures(function, *args, rows: int = 2, devices=None):
    """`function(*args)` with its failure axis split over `devices` (default every device
    of every process); the same as calling it directly, bit for bit, when every output is
    computed failure by failure (a `vmap` over failures).

    The first `rows` arguments carry a leading failure axis F; every output must have one
    too. The rows are padded to whole rows per device with copies of the first failure,
    placed, and the outputs gathered whole into every process with the padding dropped, so
    no statistic ever reads it. With one device this is `function(*args)`.
    """
    sharding = failure_sharding(devices)
    if sharding is None:
        return function(*args)
    size = jax.tree_util.tree_leaves(args[0])[0].shape[0]
    padded = padded_size(size, sharding)
    head = tuple(args[:rows])
    if padded != size:
        index = np.where(np.arange(padded) < size, np.arange(padded), 0)
        head = _take(head, jnp.asarray(index, jnp.int32))
    same = _replicated(sharding)  # the other arrays: the same on every device
    rest = jax.tree_util.tree_map(
        lambda x: place(x, same) if isinstance(x, jax.Array) else x, args[rows:]
    )
    outputs = to_local(function(*place(head, sharding), *rest))
    if padded == size:
        return outputs
    return jax.tree_util.tree_map(lambda x: x[:size], outputs)


def on_device(x):
    """`jnp.asarray(x)` for one leaf of the cases, without compiling anything: a NumPy array is
    transferred with `jax.device_put` (the same dtype and values; `jnp.asarray` compiles a small
    program per shape to do it), a `jax.Array` is left as it is."""
    if isinstance(x, jax.Array):
        return x
    return jax.device_put(x) if isinstance(x, np.ndarray) else jnp.asarray(x)


@jax.jit
def take_rows(tree, index):
    """Rows `index` of every leaf (on the device): one chunk of failures, padded."""
    return jax.tree_util.tree_map(lambda x: x[index], tree)
