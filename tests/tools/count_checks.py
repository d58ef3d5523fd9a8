"""How many tests and how many checks the suite holds, to show that a change removed none.

    python tests/tools/count_checks.py [FOLDER]

prints, per test file and in all: the `assert` statements, the calls that check (any call whose
name starts with `assert` or `check_`, `np.testing.*`, `pytest.raises`, `pytest.warns`,
`pytest.approx`) and the rows of tests/test_errors.py's table (each row is one `pytest.raises`
when it runs), read from the source without running it. `pytest --collect-only -q` gives the
number of tests (the table's rows among them)."""

import ast
import pathlib
import sys


def _call_name(node: ast.Call) -> str:
    parts = []
    func = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _is_check(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return (
        last.startswith(("assert", "check_"))
        or name.startswith(("np.testing.", "numpy.testing."))
        or name in ("pytest.raises", "pytest.warns", "pytest.approx", "raises", "warns")
    )


def count(path: pathlib.Path) -> tuple[int, int, int]:
    """(assert statements, checking calls, error-table rows) in one file."""
    tree = ast.parse(path.read_text())
    asserts = sum(isinstance(node, ast.Assert) for node in ast.walk(tree))
    calls = sum(
        isinstance(node, ast.Call) and _is_check(_call_name(node)) for node in ast.walk(tree)
    )
    rows = 0
    if path.name.startswith("test_errors"):
        # a row: (id, input, trigger, error, parts[, open]), `error` an exception class
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple) and len(node.elts) in (5, 6):
                error = node.elts[3]
                name = error.attr if isinstance(error, ast.Attribute) else getattr(error, "id", "")
                rows += name.endswith(("Error", "Exit", "Exception", "Interrupt"))
    return asserts, calls, rows


def main(folder: str = "tests") -> None:
    total = [0, 0, 0]
    for path in sorted(pathlib.Path(folder).glob("test_*.py")):
        numbers = count(path)
        total = [a + b for a, b in zip(total, numbers)]
        print(
            f"{path.name:34s} {numbers[0]:5d} asserts {numbers[1]:5d} check calls {numbers[2]:4d} rows"
        )
    print(f"{'all':34s} {total[0]:5d} asserts {total[1]:5d} check calls {total[2]:4d} rows")


if __name__ == "__main__":
    main(*sys.argv[1:])
