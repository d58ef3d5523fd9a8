"""Scoring an order's prefixes: the blocks in which Monte Carlo scores the coalitions of one
random order.

An order of the n steps has n + 1 prefixes (prefix k fixes the steps of rank < k). The empty
and the full coalition are the same for every order, so they are scored once per failure; the
n - 1 interior prefixes are scored block by block in a loop (`scored_prefixes`): the compiled
program holds one batched pipeline, one block of coalitions for every lane, whatever n is,
and what it keeps alive is one block's work, so compile time and memory grow with the
pipeline (linearly in n), not with the number of prefixes times n. When an order takes more
than one block (n > 9), the empty and the full coalition are scored by the same loop, in a
first iteration of one block (`ends_in_loop`), so the pipeline is traced once, not twice:
half the program to compile.

Every function here is pure: `score` is a function `masks [M, n] -> (values [M], min, max)`
(`blamejax.estimators._permutation.scorer`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

PREFIX_BLOCK = 8  # prefixes of an order scored together, one block per scan iteration


def prefix_blocks(n: int) -> tuple[int, int]:
    """`(number of blocks, prefixes per block)` of an order's n - 1 interior prefixes: one
    block when n - 1 <= 8 (padded to 8 when that adds at most one prefix for every 7),
    otherwise ceil((n - 1) / 8) blocks of at most 8, as even as can be (padding: less than
    one prefix per block)."""
    interior = n - 1
    if interior <= PREFIX_BLOCK:
        padded = 7 * (PREFIX_BLOCK - interior) <= interior
        return 1, PREFIX_BLOCK if padded else interior
    num_blocks = -(-interior // PREFIX_BLOCK)
    return num_blocks, -(-interior // num_blocks)


def scored_prefixes(n: int) -> int:
    """How many prefixes of each order are scored: the n - 1 interior ones (the empty and
    full coalition are scored once per failure), padded with copies of the full coalition
    to fill blocks of at most 8 (at most one padding prefix for every 7 interior ones:
    n = 4, 8, 12, 16, 20, 32, 256 score 3, 8, 12, 16, 21, 32, 256).

    An order's prefixes are scored block by block in a `lax.scan`, so the compiled program
    and the memory it needs do not grow with the number of prefixes, only with the
    pipeline; within a block the coalitions are batched, and with 8 of them the compiled
    pipeline vectorises over them (`python benchmarks/bench_mc.py --breakdown` times the
    same call with all n - 1 prefixes in one unpadded block). The padding's scores are not
    used: it counts in `MCResult.evaluations_computed`, never in a failure's budget."""
    num_blocks, block = prefix_blocks(n)
    return num_blocks * block


def block_sizes(n: int) -> np.ndarray:
    """`[blocks, block]`: the prefix sizes scored in each block (`prefix_blocks`); the
    padding is the full coalition (size n)."""
    num_blocks, block = prefix_blocks(n)
    sizes = np.minimum(np.arange(1, num_blocks * block + 1, dtype=np.int32), n)
    return sizes.reshape(num_blocks, block)


def ends_sizes(n: int) -> np.ndarray:
    """`block_sizes(n)` for the iteration that scores the empty and the full coalition: the
    first block's first two prefixes have sizes 0 and n (the rest is padding, size n)."""
    sizes = np.full_like(block_sizes(n), n)
    sizes[0, 0] = 0
    return sizes


def prefix_values(score, ranks):
    """`[U, n - 1]`: the mean score over worlds of the interior prefixes of U orders
    (prefix k fixes the steps of rank < k), scored block by block (`prefix_blocks`), and
    the min and max score seen (padding included)."""
    units, n = ranks.shape
    sizes = jnp.asarray(block_sizes(n))
    num_blocks, block = sizes.shape

    def one_block(sizes_b):
        masks = ranks[:, None, :] < sizes_b[None, :, None]  # [U, block, n]
        values, low, high = score(masks.reshape(-1, n))
        return values.reshape(units, block), low, high

    if num_blocks == 1:
        values, low, high = one_block(sizes[0])
        return values[:, : n - 1], low, high

    def body(carry, sizes_b):
        values, low, high = one_block(sizes_b)
        return (jnp.minimum(carry[0], low), jnp.maximum(carry[1], high)), values

    dtype = jnp.result_type(float)
    init = (jnp.asarray(jnp.inf, dtype), jnp.asarray(-jnp.inf, dtype))
    (low, high), values = jax.lax.scan(body, init, sizes)  # values [blocks, U, block]
    values = jnp.moveaxis(values, 0, 1).reshape(units, num_blocks * block)
    return values[:, : n - 1], low, high


def counted_prefix_values(score, ranks, sizes, count):
    """`prefix_values` with the block sizes given (`[blocks, block]`, traced) and only the
    first `count` blocks scored (a traced count; the others' values are left at 0): a loop
    whose length is data, so that the same traced pipeline also scores the empty and the
    full coalition (`ends_sizes`, one block). Returns the values of every scored prefix,
    padding included (`[U, blocks * block]`), and the min and max score seen."""
    units, n = ranks.shape
    num_blocks, block = sizes.shape
    dtype = jnp.result_type(float)

    def body(b, carry):
        values, low, high = carry
        masks = ranks[:, None, :] < sizes[b][None, :, None]  # [U, block, n]
        scored, lo, hi = score(masks.reshape(-1, n))
        values = jax.lax.dynamic_update_index_in_dim(
            values, scored.reshape(units, block).astype(dtype), b, axis=0
        )
        return values, jnp.minimum(low, lo), jnp.maximum(high, hi)

    init = (
        jnp.zeros((num_blocks, units, block), dtype),
        jnp.asarray(jnp.inf, dtype),
        jnp.asarray(-jnp.inf, dtype),
    )
    values, low, high = jax.lax.fori_loop(0, count, body, init)
    return jnp.moveaxis(values, 0, 1).reshape(units, num_blocks * block), low, high


def ends_in_loop(n: int) -> bool:
    """Whether `mc_shapley` scores the empty and the full coalition inside its loop, as the
    first iteration of each run (one block of prefixes per lane, `scored_prefixes(n) //
    blocks` evaluations per lane and world), rather than in a separate batch of two per
    failure slot: when an order's prefixes take more than one block (n > 9)."""
    return prefix_blocks(n)[0] > 1
