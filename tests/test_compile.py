"""The one compile cache: bounded, emptied by `bj.clear_caches()`, and the way recompiles are guarded."""

import jax
import pytest
from helpers import (
    chain_pipeline,
    random_chain_cases,
    without_compile_cache,
)

import blamejax as bj
from blamejax import _compile
from blamejax._compile import cache_size, trace_count


def test_no_recompiles_across_batch_sizes(getkey):
    """Batches that fall in one bucket share one program: enumeration's buckets keep four
    significant bits (17 and 18 → 18; 19 and 20 → 20), the structured path's are also
    multiples of the four failures it runs at a time (13 to 16 → 16; 17 to 20 → 20)."""
    cases = random_chain_cases(getkey(), 3, num_cases=20, num_options=3)
    runs = (
        ("enumerate", "exact.chunk", (17, 18, 17, 18, 18), (19, 20, 19)),
        ("structured", "exact.structured", (13, 16, 14, 15, 16), (17, 20, 19)),
    )
    for method, kind, first_bucket, second_bucket in runs:
        before = trace_count(kind)
        for size in first_bucket:
            sub = jax.tree_util.tree_map(lambda x: x[:size], cases)
            bj.exact_blame(chain_pipeline, sub, bj.fresh_worlds(0, range(size), 2), method=method)
        assert trace_count(kind) - before == 1
        for size in second_bucket:  # the next bucket: one more trace
            sub = jax.tree_util.tree_map(lambda x: x[:size], cases)
            bj.exact_blame(chain_pipeline, sub, bj.fresh_worlds(0, range(size), 2), method=method)
        assert trace_count(kind) - before == 2


def test_clear_caches_forgets_compiled_functions(getkey):
    """`bj.clear_caches()` empties the one compile cache: the next call traces again. (20 cases
    of the shapes test_no_recompiles_across_batch_sizes uses, so that the first call here can
    reuse what that test compiled instead of compiling a program of its own.)"""
    cases = random_chain_cases(getkey(), 3, num_cases=20, num_options=3)
    bj.exact_blame(chain_pipeline, cases, bj.fresh_worlds(0, range(20), 2))
    assert cache_size() > 0
    bj.clear_caches()
    assert cache_size() == 0 and trace_count("exact.structured") == 0
    bj.exact_blame(chain_pipeline, cases, bj.fresh_worlds(0, range(20), 2))
    assert trace_count("exact.structured") == 1


def test_compile_cache_is_bounded(monkeypatch):
    """The cache keeps at most MAX_ENTRIES entries, dropping the least recently used."""
    monkeypatch.setattr(_compile, "MAX_ENTRIES", 3)
    bj.clear_caches()
    for i in range(5):
        _compile.cached("test", i, lambda i=i: i)
    assert cache_size() == 3
    assert _compile.cached("test", 4, lambda: "rebuilt") == 4  # kept: the most recent
    assert _compile.cached("test", 0, lambda: "rebuilt") == "rebuilt"  # dropped: the oldest


def test_visit_order_equals_jax_permutation():
    """The failures' visiting order, computed on the host, is `jax.random.permutation` bit
    for bit, for one and two shuffle rounds (above 1,625 items) and seeds above 2**31."""
    import jax.random as jr
    import numpy as np

    from blamejax.estimators._order import VISIT_TAG, visit_order

    for seed in (0, 2**31 + 5, 2**32 - 1):
        key = jr.key(seed)
        for size in (0, 1, 17, 1625, 1626):
            expected = np.asarray(jr.permutation(jr.fold_in(key, VISIT_TAG), size))
            got = visit_order(key, size)
            assert got.dtype == expected.dtype and np.array_equal(got, expected), (seed, size)


def test_visit_order_of_other_keys_uses_jax_random():
    import jax.random as jr
    import numpy as np

    from blamejax.estimators._order import VISIT_TAG, visit_order

    key = jr.key(3, impl="rbg")
    expected = np.asarray(jr.permutation(jr.fold_in(key, VISIT_TAG), 40))
    assert np.array_equal(visit_order(key, 40), expected)


def test_int_seed_key_equals_jax_random_key():
    """`as_key(int)` builds the key from its words (nothing to compile): the same key as
    `jax.random.key`, for seeds on both sides of 2**31."""
    import jax.random as jr
    import numpy as np

    for seed in (0, 5, 2**31 - 1, 2**31, 2**32 - 1):
        ours, theirs = bj.noise.as_key(seed), jr.key(seed)
        assert ours.dtype == theirs.dtype and str(jr.key_impl(ours)) == str(jr.key_impl(theirs))
        assert np.array_equal(jr.key_data(ours), jr.key_data(theirs))


FIRST_CALL = r"""
import logging, re
import numpy as np
import jax
import blamejax as bj

compiled = []
class Names(logging.Handler):
    def emit(self, record):
        found = re.match(r"Compiling (\S+)", record.getMessage())
        if found:
            compiled.append(found.group(1))
jax.config.update("jax_log_compiles", True)
for name in ("jax._src.interpreters.pxla", "jax._src.dispatch"):
    logger = logging.getLogger(name)
    logger.addHandler(Names()); logger.setLevel(logging.DEBUG); logger.propagate = False

def pipeline(ctx, case):
    query = ctx.choose("rewrite", case["rewrite"])
    answer = ctx.choose("answer", case["answer"], given=query)
    return answer.take(case["right"])

rng = np.random.default_rng(0)
cases = dict(rewrite=rng.normal(size=(40, 2, 3)).astype(np.float32),
             answer=rng.normal(size=(40, 2, 3, 3)).astype(np.float32),
             right=(rng.random((40, 3)) < 0.5).astype(np.float32))
result = bj.blame_batch(pipeline, cases, 0)
assert result.num_analysed > 0
print(" ".join(sorted(compiled)))
"""


@pytest.mark.slow  # multi-process: a child Python process compiles from nothing
def test_first_blame_batch_compiles_three_programs():
    """A first `blame_batch` in a fresh process (exact estimator, one block) compiles three
    programs: the factual runs, the failures' fully fixed runs, and the coalition tables;
    no eager operation compiles one of its own (each would be one more compile, and one more
    persistent-cache load, in every new process)."""
    import os
    import subprocess
    import sys

    env = without_compile_cache(dict(os.environ, BLAMEJAX_COMPILE_CACHE="off"))
    done = subprocess.run(
        [sys.executable, "-c", FIRST_CALL],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["jit(chunk)", "jit(front)", "jit(select)"], done.stdout


def test_the_test_runs_compile_folder_is_pruned_oldest_first(tmp_path):
    """tests/conftest.py bounds the folder of compiled programs it keeps between runs: past the
    bound, the oldest entries go until it holds half; under the bound nothing is touched."""
    import os

    from conftest import prune_compile_cache

    for i in range(6):
        path = tmp_path / f"entry{i}-cache"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    prune_compile_cache(str(tmp_path), max_bytes=600)
    assert len(list(tmp_path.iterdir())) == 6
    prune_compile_cache(str(tmp_path), max_bytes=450)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry4-cache", "entry5-cache"]
