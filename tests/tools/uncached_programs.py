"""Which programs a test run compiles instead of loading from the test compile cache, and for how
long. JAX's persistent cache keeps no program that holds a host callback (`jax.debug.callback`,
`equinox.error_if`, ...), so such a program is compiled again in every process, every run.

    python tests/tools/uncached_programs.py [PYTEST ARGS ...]

runs `python -m pytest -q -p no:randomly PYTEST ARGS` with a plugin (this file) that logs JAX's
compiler messages in every worker, then prints, per program, how many times it was compiled
after a cache miss, the seconds spent, and why it was not written to the cache. Run it on a warm
cache folder (after one plain test run): then every compile it lists is one a later run repeats.
"""

import collections
import logging
import os
import re
import sys

from _logged_run import run_logged

_LOG_FOLDER = "BLAMEJAX_UNCACHED_LOG_FOLDER"


class _Handler(logging.Handler):
    def __init__(self, path: str):
        super().__init__(logging.DEBUG)
        self.file = open(path, "a", buffering=1)

    def emit(self, record):
        message = record.getMessage()
        if "MISS" in message or "Not writing" in message or "Finished XLA compilation" in message:
            self.file.write(message.replace("\n", " ") + "\n")


def pytest_configure(config):
    """The plugin side: log JAX's compiler messages of this process to the log folder."""
    folder = os.environ.get(_LOG_FOLDER)
    if folder:
        handler = _Handler(os.path.join(folder, f"{os.getpid()}.log"))
        for name in ("jax._src.compiler", "jax._src.dispatch"):
            logger = logging.getLogger(name)
            logger.setLevel(logging.DEBUG)
            logger.addHandler(handler)


def summarise(lines: list[str]) -> tuple[collections.Counter, collections.Counter, dict]:
    """Seconds and count of the compiles that followed a cache miss, per program, and why each
    program was not written to the cache."""
    seconds, count, why = collections.Counter(), collections.Counter(), {}
    for previous, line in zip([""] + lines, lines):
        missed = "MISS" in previous or "Not writing" in previous
        found = re.match(r"Finished XLA compilation of (.*) in ([0-9.]+) sec", line)
        if found and missed:
            seconds[found.group(1)] += float(found.group(2))
            count[found.group(1)] += 1
        reason = re.match(r"Not writing persistent cache entry for '([^']+)' because (.*)", line)
        if reason:
            why[reason.group(1)] = reason.group(2)
    return seconds, count, why


def main(argv: list[str]) -> int:
    code, lines = run_logged("uncached_programs", _LOG_FOLDER, argv, cold=False)
    seconds, count, why = summarise(lines)
    total = sum(seconds.values())
    print(f"\n{sum(count.values())} compiles after a cache miss, {total:.1f} s in all")
    for program, spent in seconds.most_common():
        reason = why.get("jit_" + program.removeprefix("jit(").removesuffix(")"), "")
        print(f"{spent:7.1f} s {count[program]:4d}x  {program}  {reason}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
