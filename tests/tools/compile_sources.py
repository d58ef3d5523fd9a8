"""Where in the code the programs XLA compiles come from: for a test run from cold, each compile
is put down to the program's name and to the innermost line of `blamejax/` and of `tests/` on
the stack when it was compiled (a single eager operation is named after its primitive, such as
`broadcast_in_dim`; a jitted function after the function).

    python tests/tools/compile_sources.py [--top N] [PYTEST ARGS ...]

runs `python -m pytest -q -p no:randomly PYTEST ARGS` with the test compile cache off and a
plugin (this file) listening to JAX's compile events in every worker, then prints the `N`
(default 25) programs, library lines and test lines that cost the most compiling seconds,
with their counts. Many compiles of one eager operation from one line are host-side glue run
at many shapes: the line to change.
"""

import collections
import os
import sys
import traceback

from _logged_run import run_logged

_LOG_FOLDER = "BLAMEJAX_COMPILE_SOURCES_FOLDER"
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _innermost(frames, folder: str) -> str:
    """The innermost frame under `folder` of the repository (not this folder), as
    `path:line`, or `-`."""
    prefix = os.path.join(_ROOT, folder) + os.sep
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    for frame in reversed(frames):
        if frame.filename.startswith(prefix) and not frame.filename.startswith(here):
            return f"{os.path.relpath(frame.filename, _ROOT)}:{frame.lineno}"
    return "-"


def _listen(event: str, duration: float, **kwargs) -> None:
    if event != _COMPILE_EVENT:
        return
    folder = os.environ.get(_LOG_FOLDER)
    if not folder:
        return
    frames = traceback.extract_stack()
    row = (
        str(kwargs.get("fun_name", "?")),
        f"{duration:.4f}",
        _innermost(frames, "blamejax"),
        _innermost(frames, "tests"),
    )
    with open(os.path.join(folder, f"{os.getpid()}.tsv"), "a") as file:
        file.write("\t".join(row) + "\n")


def pytest_configure(config):
    """The plugin side: listen to JAX's compile events in this process."""
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_listen)


def summarise(rows: list[list[str]], top: int) -> list[str]:
    """The report: the costliest programs, library lines and test lines."""
    total = sum(float(r[1]) for r in rows)
    out = [f"{len(rows)} compiles, {total:.1f} s compiling"]
    for title, column in (("programs", 0), ("library lines", 2), ("test lines", 3)):
        cost = collections.defaultdict(lambda: [0, 0.0])
        for row in rows:
            key = row[column] if column != 2 else f"{row[2]}  ({row[0]})"
            cost[key][0] += 1
            cost[key][1] += float(row[1])
        out.append(f"\nthe {top} {title} that cost the most (seconds, compiles):")
        for key, (count, seconds) in sorted(cost.items(), key=lambda kv: -kv[1][1])[:top]:
            out.append(f"{seconds:8.1f} s {count:6d}  {key}")
    return out


def main(argv: list[str]) -> int:
    top = 25
    if argv[:1] == ["--top"]:
        top, argv = int(argv[1]), argv[2:]
    code, lines = run_logged("compile_sources", _LOG_FOLDER, argv, cold=True)
    rows = [line.split("\t") for line in lines]
    print("\n".join(summarise(rows, top)))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
