"""The house rules of the package layout (docs/architecture.md), checked on the source.

- the front door (`blamejax/__init__.py`) stays small, and `import blamejax` loads the
  applications (`traces`, `scorers`, `benchmarks`, `demos`) only when they are first used;
- modules inside a subpackage are private: another subpackage imports only the names a
  subpackage's `__init__.py` exports (or a public namespace inside it, such as
  `benchmarks.scm`), never a module or a private name of it;
- the subpackages depend on each other without cycles, and so do the files and sub-folders
  inside every folder (a known exception, while there is one, named in `KNOWN_CIRCLES`);
- compiled functions are cached only in the one compile cache (`blamejax/_compile.py`).
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import types

import blamejax as bj

PACKAGE = pathlib.Path(bj.__file__).parent
SUBPACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text())


def _unit(path: pathlib.Path) -> str:
    """The subpackage a file belongs to, or its own name for a top-level module."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def _imports(path, tree):
    """`(unit imported, names, module path)` for each relative import of a blamejax file."""
    here = path.relative_to(PACKAGE).parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[: len(here) - (node.level - 1)]
            target = list(base) + (node.module.split(".") if node.module else [])
            names = [a.name for a in node.names]
            if not target:  # `from . import x` at the top: x is a unit itself
                for name in names:
                    yield name, [], [name]
                continue
            yield target[0], names, target


def test_front_door_is_small():
    public = [n for n in dir(bj) if not n.startswith("_")]
    names = [n for n in public if not isinstance(getattr(bj, n), types.ModuleType)]
    assert len(names) <= 35, sorted(names)
    namespaces = {n for n in public if isinstance(getattr(bj, n), types.ModuleType)}
    assert {"noise", "stats", "interventions", "benchmarks", "demos"} <= namespaces
    assert "scm" not in namespaces  # moved to `benchmarks.scm`: it still loads, unlisted


def test_applications_load_on_first_use():
    script = (
        "import sys, blamejax as bj\n"
        "apps = ('blamejax.benchmarks', 'blamejax.demos', 'blamejax.scm', 'blamejax.scorers',\n"
        "        'blamejax.traces')\n"
        "print(sorted(m for m in sys.modules if m.startswith(apps)))\n"
        "bj.traces.Run, bj.benchmarks.scm.make_scm, bj.scorers.Cache, bj.demos.refund_cases\n"
        "assert bj.scm.make_scm is bj.benchmarks.scm.make_scm\n"
        "assert bj.traces.evaluate is bj.benchmarks.whowhen.evaluate\n"
        "print(sorted(m for m in apps if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == [
        "[]",
        repr(
            sorted(
                [
                    "blamejax.benchmarks",
                    "blamejax.demos",
                    "blamejax.scm",
                    "blamejax.scorers",
                    "blamejax.traces",
                ]
            )
        ),
    ]


def test_no_private_import_across_subpackages():
    offences = []
    for path, tree in _modules():
        own = _unit(path)
        for unit, names, target in _imports(path, tree):
            if unit == own or unit not in SUBPACKAGES:
                continue
            namespace = all(not part.startswith("_") for part in target) and (
                PACKAGE.joinpath(*target, "__init__.py").exists()
            )
            if len(target) > 1 and not namespace:  # reaches into a module of another subpackage
                offences.append(f"{path.relative_to(PACKAGE)} imports {'.'.join(target)}")
            offences += [
                f"{path.relative_to(PACKAGE)} imports {unit}.{n}"
                for n in names
                if n.startswith("_")
            ]
    assert offences == []


def test_subpackages_form_no_cycle():
    graph: dict[str, set[str]] = {}
    for path, tree in _modules():
        own = _unit(path)
        for unit, _, _ in _imports(path, tree):
            if unit != own:
                graph.setdefault(own, set()).add(unit)
    graph.pop("__init__", None)  # the front door imports everything
    state: dict[str, int] = {}

    def visit(node, trail):
        if state.get(node) == 1:
            raise AssertionError("import cycle: " + " -> ".join(trail + [node]))
        if state.get(node) == 2:
            return
        state[node] = 1
        for other in sorted(graph.get(node, ())):
            visit(other, trail + [node])
        state[node] = 2

    for node in sorted(graph):
        visit(node, [])


# Circles inside a folder that are known and not yet untied: folder -> the files in it (none
# now: estimators/' `_batch` <-> `_checkpoint` circle was untied by `_resume.py` and
# `_batch_state.py`, issue 39 item 1). The test fails while an entry names a folder with no circle.
KNOWN_CIRCLES: dict[str, set[str]] = {}


def _targets(path, tree):
    """The module or package (path parts under blamejax/) each relative import of a file
    reads, lazy and `TYPE_CHECKING` imports included."""
    here = path.relative_to(PACKAGE).parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(here[: len(here) - (node.level - 1)])
            target = base + (node.module.split(".") if node.module else [])
            if node.module:
                yield tuple(target)
                continue
            for alias in node.names:  # `from . import x`: x is a module, or a name of base
                sub = PACKAGE.joinpath(*target, alias.name)
                is_module = sub.is_dir() or sub.with_suffix(".py").exists()
                yield tuple(target + [alias.name]) if is_module else tuple(target)


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                other = stack.pop()
                component.add(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_circle_inside_any_folder():
    """Inside every folder of the package, its files and sub-folders (each sub-folder one
    node, as the subpackages are at the top) import each other without a circle; the
    folder's own `__init__.py`, which only hands names on, is left out."""
    modules = list(_modules())
    folders = sorted(
        p.relative_to(PACKAGE).parts
        for p in [PACKAGE, *PACKAGE.rglob("*")]
        if (p / "__init__.py").exists()
    )
    offences, known = [], {}
    for folder in folders:
        graph: dict[str, set[str]] = {}
        for path, tree in modules:
            parts = path.relative_to(PACKAGE).parts
            if parts[: len(folder)] != folder or parts[len(folder) :] == ("__init__.py",):
                continue
            own = parts[len(folder)].removesuffix(".py")
            for target in _targets(path, tree):
                if target[: len(folder)] != folder or len(target) == len(folder):
                    continue  # outside the folder, or its `__init__.py`
                if target[len(folder)] != own:
                    graph.setdefault(own, set()).add(target[len(folder)])
        name = "/".join(folder) or "blamejax"
        for circle in _circles(graph):
            if circle <= KNOWN_CIRCLES.get(name, set()):
                known[name] = circle
            else:
                offences.append(f"{name}/: {sorted(circle)}")
    assert offences == [], "import circles inside a folder: " + "; ".join(offences)
    gone = sorted(set(KNOWN_CIRCLES) - set(known))
    assert not gone, f"KNOWN_CIRCLES names circles that are gone, remove them: {gone}"


def test_no_module_level_cache_outside_the_compile_cache():
    offences = []
    for path, tree in _modules():
        if path.name == "_compile.py":
            continue
        for node in tree.body:
            targets = (
                node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            )
            value = getattr(node, "value", None)
            empty = isinstance(value, ast.Dict) and not value.keys
            empty = empty or (
                isinstance(value, ast.Call)
                and getattr(value.func, "id", "") in ("dict", "OrderedDict")
                and not value.args
                and not value.keywords
            )
            for target in targets:
                if isinstance(target, ast.Name) and (empty or "CACHE" in target.id.upper()):
                    offences.append(f"{path.relative_to(PACKAGE)}: {target.id}")
    assert offences == []
