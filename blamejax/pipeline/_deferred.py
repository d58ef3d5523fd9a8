"""Deferred draws: a context with `defer=True` does not make a tabulated hard draw when the
pipeline asks for it, but collects it (`_Pending`) until an index is read or the run ends,
then makes every collected draw together (`_resolve_chain`): one argmax over all their
tables and one scan over the chain of gathers, so the compiled program stays about the same
size whatever the length of the pipeline.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._draws import hard_argmax


def _current_trace():
    """JAX's current trace (`jax._src.core.trace_ctx.trace`), or None where this JAX has no
    such context (deferred draws are then off)."""
    try:
        from jax._src import core

        return core.trace_ctx.trace
    except (ImportError, AttributeError):
        return None


def _at_trace(trace):
    """A context manager that makes `trace` JAX's current trace."""
    from jax._src import core

    return core.set_current_trace(trace)


class _Deferred:
    """The index of a deferred draw: worked out by its context the first time it is read."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.resolved = None

    def value(self):
        if self.resolved is None:
            self.ctx._resolve()
        return self.resolved


class _Pending(NamedTuple):
    """A tabulated hard draw waiting to be made (`Context(defer=True)`)."""

    logits: Any  # [V, *K_parents, K], shift applied
    noise: Any  # [K], or None for the world's addressed noise of the site (`Context.noise`)
    variant: Any  # Int[Array, ""]
    parents: tuple  # Choices, deferred or not
    step: str
    step_index: int
    site_index: int
    deferred: _Deferred

    def noise_row(self, world_noise):
        """The `[K]` Gumbels this draw adds to its logits."""
        if self.noise is None:
            return world_noise[self.site_index, : self.logits.shape[-1]]
        return self.noise


def _resolve_chain(pending: list[_Pending], world_noise, plan_variants=None, seen=False):
    """Make several tabulated hard draws at once: `(indices [m], invalid)`; with `seen`,
    `(indices [m], invalid [m], seen logits [m, K], noise [m, K])` instead: what each draw
    saw and whether it had a valid option, for a trace (`trace_run`), from one gather.

    Every table's rows are padded to the same `[R, K]` with `-inf` options (never chosen,
    and a row of only `-inf` has no valid option either way), stacked, and given one
    `hard_argmax`; then a scan over the draws gathers each chosen row's option, reading the
    parents' options from the indices already made. The same integers as `_tabulated_hard`
    draw by draw, with a compiled program that does not grow with the number of draws: it
    compiles several times faster for long chains, and each evaluation costs more (a loop
    step per draw instead of one fused gather; see benchmarks/results/bench_mc_chain_compare.md)."""
    m = len(pending)
    rows = [int(np.prod(p.logits.shape[:-1])) for p in pending]
    num_rows = max(rows)
    num_options = max(p.logits.shape[-1] for p in pending)
    dtype = pending[0].logits.dtype  # one dtype per batch (`Context.choose`)

    def padded(p, r):
        table = p.logits.reshape(r, p.logits.shape[-1])
        pad = ((0, num_rows - r), (0, num_options - p.logits.shape[-1]))
        if pad != ((0, 0), (0, 0)):
            table = jnp.pad(table, pad, constant_values=-np.inf)
        return table.reshape(-1)

    # Laid end to end along one axis (not stacked on a new one): tables that are
    # consecutive parts of one array (a batch's cases, `_take_slots`) are then that array
    # again, and XLA copies nothing.
    flat = jnp.concatenate([padded(p, r) for p, r in zip(pending, rows)])
    tables = flat.reshape(m, num_rows, num_options)  # [m, R, K]
    if all(p.noise is None for p in pending):  # one gather of the world's noise
        sites = np.asarray([p.site_index for p in pending], np.int32)
        noise = world_noise[sites, :num_options].astype(dtype)  # [m, K]
    else:
        own = [p.noise_row(world_noise) for p in pending]
        noise = jnp.stack(
            [jnp.pad(r.astype(dtype), (0, num_options - r.shape[0])) for r in own]
        )  # [m, K]
    steps = ", ".join(dict.fromkeys(p.step for p in pending))
    best = hard_argmax(tables, noise[:, None, :], steps)  # [m, R]

    # The flat row of draw k: variant * stride + sum over parents of option * stride. A
    # parent is an earlier draw of this batch or an index made before it (`outside`).
    position = {id(p.deferred): k for k, p in enumerate(pending)}
    outside = []  # indices of parents made before this batch
    num_parents = max(1, max(len(p.parents) for p in pending))
    parent_of = np.full((m, num_parents), -1, np.int64)  # see `_registers`
    stride = np.zeros((m, num_parents), np.int32)
    variant_stride = np.zeros((m,), np.int32)
    for k, p in enumerate(pending):
        shape = p.logits.shape[1:-1]
        variant_stride[k] = int(np.prod(shape))
        for i, parent in enumerate(p.parents):
            stride[k, i] = int(np.prod(shape[i + 1 :]))
            d = parent._deferred
            if d is not None and id(d) in position:
                parent_of[k, i] = position[id(d)]
            else:
                parent_of[k, i] = m + len(outside)
                outside.append(jnp.asarray(parent.index, jnp.int32))
    source, target, num_registers = _registers(parent_of)
    if plan_variants is None:
        variants = jnp.stack([jnp.asarray(p.variant, jnp.int32) for p in pending])
    else:  # one gather, not m scalars stacked (`Plan.variants`)
        steps_k = np.asarray([p.step_index for p in pending], np.int32)
        variants = jnp.asarray(plan_variants, jnp.int32)[steps_k]
    registers = jnp.zeros((num_registers,), jnp.int32)
    if outside:
        registers = registers.at[: len(outside)].set(jnp.stack(outside))
    body = _chain_step(num_parents, seen)
    xs = (best, variants, *map(jnp.asarray, (source, stride, variant_stride, target)))
    _, out = jax.lax.scan(body, registers, xs)
    if not seen:
        return jnp.maximum(out, 0), jnp.any(out < 0)
    chosen, rows = out
    # The row each draw read (`_seen_logits`) and the Gumbels added to it, uncast (the
    # noise's own dtype, as a draw made on its own records it): one gather each.
    seen_logits = tables[jnp.arange(m), rows]  # [m, K]
    if all(p.noise is None for p in pending):
        noise = world_noise[sites, :num_options]
    else:
        own = [p.noise_row(world_noise) for p in pending]
        noise = jnp.stack([jnp.pad(r, (0, num_options - r.shape[0])) for r in own])
    return jnp.maximum(chosen, 0), chosen < 0, seen_logits, noise


@functools.cache
def _chain_step(num_parents: int, seen: bool):
    """The body of `_resolve_chain`'s scan, one function per (parents, seen): a scan run
    outside `jit` (a run traced op by op) then finds its program already compiled when the
    shapes repeat, where a fresh closure per run compiled it again every time."""
    lax = jax.lax

    def body(carry, x):
        # A `lax.scan` over the draws: a draw's row of `best` and its constants are the
        # scanned inputs, and the options made are its outputs, laid out draw by draw (under
        # `vmap` too), so each step reads and writes contiguous memory. The carry holds only
        # the options some later draw still reads (`_registers`): for a chain, one. (Unrolling
        # the scan made the call slower in `bench_mc.py --chain-one 32`.)
        best_k, variant, source_k, stride_k, variant_stride_k, target_k = x
        flat = variant * variant_stride_k
        for i in range(num_parents):
            parent = lax.dynamic_index_in_dim(carry, source_k[i], keepdims=False)
            flat = flat + parent * stride_k[i]
        chosen = best_k.at[flat].get(mode="promise_in_bounds")  # -1: no valid option
        carry = lax.dynamic_update_index_in_dim(carry, jnp.maximum(chosen, 0), target_k, 0)
        return carry, ((chosen, flat) if seen else chosen)

    return body


def _registers(parent_of):
    """Where the scan of `_resolve_chain` keeps the options that later draws read: `(source
    [m, P], target [m], number of registers)`. `parent_of[k, i]` is the parent's draw
    (k' < k), `m + j` for the j-th index made before the batch, or -1 for none.

    Draw k reads parent i from register `source[k, i]` (0 where it has none; its stride is
    0) and writes its option to register `target[k]`. The indices made before the batch take
    the first registers; a register is reused once the last draw that reads it has read it,
    and options nobody reads go to one scratch register, so a chain needs two registers,
    not one per draw."""
    m, num_parents = parent_of.shape
    last_read = {}  # owner (a draw, or m + j) -> the last draw that reads it
    for k in range(m):
        for owner in parent_of[k]:
            if owner >= 0:
                last_read[int(owner)] = k
    register_of = {}  # owner -> register
    for owner in sorted(o for o in last_read if o >= m):
        register_of[owner] = len(register_of)
    num_registers = len(register_of)
    free: list[int] = []
    source = np.zeros((m, num_parents), np.int32)
    target = np.zeros((m,), np.int32)
    for k in range(m):
        for i, owner in enumerate(parent_of[k]):
            if owner >= 0:
                source[k, i] = register_of[int(owner)]
        for owner in [o for o in register_of if last_read[o] == k]:  # read for the last time
            free.append(register_of.pop(owner))
        if k in last_read:  # a later draw reads this option: keep it
            if free:
                register_of[k] = free.pop()
            else:
                register_of[k] = num_registers
                num_registers += 1
            target[k] = register_of[k]
        else:
            target[k] = -1
    target[target == -1] = num_registers  # the scratch register
    return source, target, num_registers + 1
