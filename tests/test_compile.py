"""The one compile cache: bounded, emptied by `bj.clear_caches()`, and the way recompiles are guarded.
"""

import jax
from helpers import (
    chain_pipeline,
    random_chain_cases,
)

import blamejax as bj
from blamejax import _compile
from blamejax._compile import cache_size, trace_count


def test_no_recompiles_across_batch_sizes(getkey):
    cases = random_chain_cases(getkey(), 3, num_cases=20, num_options=3)
    before = trace_count("exact.chunk")
    for size in (17, 18, 17, 18, 18):
        sub = jax.tree_util.tree_map(lambda x: x[:size], cases)
        bj.exact_blame(chain_pipeline, sub, bj.fresh_worlds(0, size, 2))
    assert trace_count("exact.chunk") - before == 1  # 17 and 18 share the bucket of 18
    for size in (19, 20, 19):  # bucket 20: one more trace
        sub = jax.tree_util.tree_map(lambda x: x[:size], cases)
        bj.exact_blame(chain_pipeline, sub, bj.fresh_worlds(0, size, 2))
    assert trace_count("exact.chunk") - before == 2


def test_clear_caches_forgets_compiled_functions(getkey):
    """`bj.clear_caches()` empties the one compile cache: the next call traces again."""
    cases = random_chain_cases(getkey(), 3, num_cases=4, num_options=3)
    bj.exact_blame(chain_pipeline, cases, bj.fresh_worlds(0, 4, 2))
    assert cache_size() > 0
    bj.clear_caches()
    assert cache_size() == 0 and trace_count("exact.chunk") == 0
    bj.exact_blame(chain_pipeline, cases, bj.fresh_worlds(0, 4, 2))
    assert trace_count("exact.chunk") == 1


def test_compile_cache_is_bounded(monkeypatch):
    """The cache keeps at most MAX_ENTRIES entries, dropping the least recently used."""
    monkeypatch.setattr(_compile, "MAX_ENTRIES", 3)
    bj.clear_caches()
    for i in range(5):
        _compile.cached("test", i, lambda i=i: i)
    assert cache_size() == 3
    assert _compile.cached("test", 4, lambda: "rebuilt") == 4  # kept: the most recent
    assert _compile.cached("test", 0, lambda: "rebuilt") == "rebuilt"  # dropped: the oldest
