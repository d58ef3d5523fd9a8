import os
import signal
import zlib

import jax
import pytest

# The command line switches on JAX's persistent compilation cache in the user's folder; the
# tests keep that default off, so that they never read or fill the user's cache.
os.environ["BLAMEJAX_COMPILE_CACHE"] = "off"


def _test_compile_cache() -> str | None:
    """The folder where the test run keeps the programs XLA compiled, so that a second run of
    the suite loads them instead of compiling them again (about three quarters of a cold run is
    XLA compiling). `$BLAMEJAX_TEST_COMPILE_CACHE` names it (`off` switches it off); the default
    is `.pytest_cache/blamejax-compiled` in the repository, next to pytest's own cache.

    JAX keys each program by its whole lowered module, the compile options and the jax and
    jaxlib versions, so a changed program is compiled afresh, never loaded stale."""
    folder = os.environ.get("BLAMEJAX_TEST_COMPILE_CACHE")
    if folder is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        folder = os.path.join(root, ".pytest_cache", "blamejax-compiled")
    if folder.lower() == "off" or not folder:
        return None
    return folder


def _compile_cache_settings(folder: str) -> dict:
    """JAX's settings for the cache: every program is kept however quickly it compiled.

    JAX's own bound on the folder's size (`jax_compilation_cache_max_size`) is left off: it
    locks the folder for every read, and every write reads a time stamp file for each entry, so
    an entry written by a process without the bound (a notebook's kernel, say) makes every later
    write fail. `prune_compile_cache` bounds the folder instead, when a test run starts."""
    return {
        "jax_compilation_cache_dir": folder,
        "jax_persistent_cache_min_compile_time_secs": 0.0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }


def prune_compile_cache(folder: str, max_bytes: int = 2 * 1024**3) -> None:
    """Past `max_bytes`, delete the oldest entries (by modification time) until the folder
    holds half of that. Run by the process that starts the test run, before any test."""
    entries = []
    with os.scandir(folder) as listing:
        for entry in listing:
            if entry.is_file():
                info = entry.stat()
                entries.append((info.st_mtime, info.st_size, entry.path))
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return
    for _, size, path in sorted(entries):
        if total <= max_bytes // 2:
            break
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        total -= size


_CACHE = _test_compile_cache()
if _CACHE is not None:
    os.makedirs(_CACHE, exist_ok=True)
    if "PYTEST_XDIST_WORKER" not in os.environ:  # the process that starts the run
        prune_compile_cache(_CACHE)
    for _name, _value in _compile_cache_settings(_CACHE).items():
        jax.config.update(_name, _value)
        # and in the environment, from which JAX reads them at import: the processes a test
        # starts (the CLI, Ctrl-C and distributed tests) share the cache too
        os.environ[_name.upper()] = str(_value)


def _test_xla_flags() -> str:
    """`$XLA_FLAGS` for the test run: XLA's CPU backend compiles without LLVM's costlier
    optimisations, which takes about 40 % less CPU time per program (the estimators' programs
    are most of a cold run); the code runs slower, which the tests' small shapes barely feel,
    and a sum may be added in another order (values move by rounding, about 1e-8 in 32-bit
    mode: every comparison of two programs in the tests has both compiled alike). `BLAMEJAX_TEST_XLA_OPT=full` compiles as a user's
    programs are compiled (CI runs the 64-bit stage so). Flags already in `$XLA_FLAGS` are kept
    and come last, so they win."""
    flags = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("BLAMEJAX_TEST_XLA_OPT", "fast-compile").lower() == "full":
        return flags
    fast = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    return f"{fast} {flags}".strip()


# Read by XLA when JAX first starts its backend (no test has run yet), and inherited by the
# processes a test starts.
os.environ["XLA_FLAGS"] = _test_xla_flags()

# Strict dtype and rank promotion, as equinox tests do: implicit promotion hides bugs.
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def sigint_is_ctrl_c():
    """SIGINT handled as Python's default (KeyboardInterrupt) during a test: a process
    started in the background by a shell inherits SIGINT ignored, and the library leaves an
    ignored SIGINT alone, so Ctrl-C tests would see no Ctrl-C there."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def getkey():
    """A fresh, deterministic key per call within a test."""
    state = {"n": 0}

    def _getkey():
        state["n"] += 1
        return jax.random.key(state["n"])

    return _getkey


# The error table (tests/test_errors.py, one test per row) is the largest file of the suite by
# far. Under `--dist loadfile` a file is one unit of work, given whole to one worker; the table
# is handed out in `ERROR_TABLE_PARTS` units instead, rows of one family (the first word of
# their id: `trace-`, `whowhen-`, `cli-`, ...) together, since they share compiled programs.
ERROR_TABLE_PARTS = 4


def error_table_part(nodeid: str) -> int | None:
    """The part of the error table that the test `nodeid` falls in, or None for any other test."""
    file, _, name = nodeid.partition("::")
    if not (file.endswith("test_errors.py") and name.startswith("test_error[")):
        return None
    family = name.removeprefix("test_error[").split("-")[0]
    return zlib.crc32(family.encode()) % ERROR_TABLE_PARTS


# The files that take longest from cold (`python tests/tools/compiles_per_test.py`), longest
# first. They run first, so that no worker is left with one of them at the end while the others
# wait; the error table's many short rows come last and fill the gaps.
LONGEST_FIRST = (
    "test_structured.py",
    "test_batch.py",
    "test_mc.py",
    "test_expected.py",
    "test_differentiable.py",
    "test_first_user.py",
    "test_real_model.py",
    "test_exact.py",
    "test_worlds.py",
    "test_pipeline.py",
    "test_interventions.py",
    "test_docs.py",
    "test_traces_frameworks.py",
    "test_scm.py",
    "test_scorers_lazy.py",
)


def _run_order(item) -> int:
    file = os.path.basename(item.nodeid.partition("::")[0])
    if error_table_part(item.nodeid) is not None:
        return len(LONGEST_FIRST) + 1
    return LONGEST_FIRST.index(file) if file in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    """The longest files first, the error table last (a stable sort: the order within a file
    stays). pytest-xdist hands out files in this order (see the scheduler below)."""
    items.sort(key=_run_order)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown without the plugin
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the error table in several units of work, handed out in the
    order of collection (`pytest_collection_modifyitems`) rather than by number of tests
    (pytest-xdist's hook)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False

    class _LoadFileSplittingTheErrorTable(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            part = error_table_part(nodeid)
            file = super()._split_scope(nodeid)
            return file if part is None else f"{file}#{part}"

    return _LoadFileSplittingTheErrorTable(config, log)
