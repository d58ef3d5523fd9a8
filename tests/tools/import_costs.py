"""What importing each test file costs: every pytest-xdist worker collects, and so imports, every
test file, so a file's module-level work (building cases, discovering structures, compiling) is
paid once per worker, not once per run.

    python tests/tools/import_costs.py [tests/test_x.py ...]

imports the test files one after another in one process (the order given, default all), with the
test compile cache off, and prints per file the process CPU seconds and the XLA compiles its
import caused. Files imported earlier have warmed JAX and blamejax for later ones, so the first
file also carries the cost of importing the library."""

import glob
import importlib
import os
import resource
import sys

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(paths: list[str]) -> None:
    os.environ["BLAMEJAX_TEST_COMPILE_CACHE"] = "off"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path[:0] = [root, os.path.join(root, "tests")]
    import jax.monitoring

    compiles = [0, 0.0]

    def listen(event, duration, **_):
        if event == _COMPILE_EVENT:
            compiles[0] += 1
            compiles[1] += duration

    jax.monitoring.register_event_duration_secs_listener(listen)
    importlib.import_module("conftest")
    rows = []
    for path in paths or sorted(glob.glob(os.path.join(root, "tests", "test_*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        before, count, seconds = _cpu(), compiles[0], compiles[1]
        importlib.import_module(name)
        rows.append((_cpu() - before, compiles[0] - count, compiles[1] - seconds, name))
        print(
            f"{rows[-1][0]:7.2f} s CPU {rows[-1][1]:5d} compiles {rows[-1][2]:6.2f} s  {name}",
            flush=True,
        )
    print(f"\n{sum(r[0] for r in rows):.1f} s CPU importing {len(rows)} files; the costliest:")
    for cpu, count, seconds, name in sorted(rows, reverse=True)[:12]:
        print(f"{cpu:7.2f} s CPU {count:5d} compiles {seconds:6.2f} s  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
