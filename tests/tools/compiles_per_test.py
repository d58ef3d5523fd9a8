"""How many programs XLA compiles for each test, and for how long: which tests pay for a cold
run, and which error rows compile something before their check fires.

    python tests/tools/compiles_per_test.py [--top N] [PYTEST ARGS ...]

runs `python -m pytest -q -p no:randomly PYTEST ARGS` with the test compile cache off
(`BLAMEJAX_TEST_COMPILE_CACHE=off`) and a plugin (this file) that counts, in every worker, the
compiles each test causes (its setup, call and teardown: a fixture built for it counts against
the first test that asks for it) and their seconds. It prints the seconds per file, the `N`
tests (default 30) that compiled longest, and how many tests compiled nothing. Compile counts
depend on order: a program built by an earlier test of the same process is not compiled again.
"""

import collections
import os
import sys

import pytest
from _logged_run import run_logged

_LOG_FOLDER = "BLAMEJAX_COMPILES_LOG_FOLDER"
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_spent = [0, 0.0]  # compiles and their seconds so far in this process


def _listen(event: str, duration: float, **_) -> None:
    if event == _COMPILE_EVENT:
        _spent[0] += 1
        _spent[1] += duration


def pytest_configure(config):
    """The plugin side: listen to JAX's compile events in this process."""
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_listen)


def _log_path() -> str | None:
    folder = os.environ.get(_LOG_FOLDER)
    return os.path.join(folder, f"{os.getpid()}.tsv") if folder else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Wraps a test's setup, call and teardown."""
    before = tuple(_spent)
    result = yield
    path = _log_path()
    if path:
        with open(path, "a") as file:
            file.write(f"{item.nodeid}\t{_spent[0] - before[0]}\t{_spent[1] - before[1]:.4f}\n")
    return result


def summarise(lines: list[str], top: int) -> list[str]:
    """The report: seconds and compiles per file, the `top` tests, tests that compile nothing."""
    per_file = collections.defaultdict(lambda: [0, 0.0, 0])
    tests = []
    for line in lines:
        nodeid, count, seconds = line.split("\t")
        count, seconds = int(count), float(seconds)
        tests.append((seconds, count, nodeid))
        entry = per_file[nodeid.split("::")[0]]
        entry[0] += count
        entry[1] += seconds
        entry[2] += 1
    total = sum(s for s, _, _ in tests)
    out = [f"{len(tests)} tests, {sum(c for _, c, _ in tests)} compiles, {total:.1f} s compiling"]
    out.append(f"{sum(c == 0 for _, c, _ in tests)} tests compiled nothing")
    out.append("\nper file (seconds compiling, compiles, tests):")
    for name, (count, seconds, num) in sorted(per_file.items(), key=lambda kv: -kv[1][1]):
        out.append(f"{seconds:8.1f} s {count:6d} {num:5d}  {name}")
    out.append(f"\nthe {top} tests that compiled longest:")
    for seconds, count, nodeid in sorted(tests, reverse=True)[:top]:
        out.append(f"{seconds:8.1f} s {count:6d}  {nodeid}")
    return out


def main(argv: list[str]) -> int:
    top = 30
    if argv[:1] == ["--top"]:
        top, argv = int(argv[1]), argv[2:]
    code, lines = run_logged("compiles_per_test", _LOG_FOLDER, argv, cold=True)
    print("\n".join(summarise(lines, top)))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
