"""Every public name has a docstring, and every namespace has its page in the API reference.

The reference (`mkdocs build --strict`, pages under docs/api/) renders what each namespace
exports; a name without a docstring would render as a bare signature, so this test fails
first and names it. Checked:

- each namespace of the front door (`bj.stats`, `bj.traces`, ...) and the front door itself:
  a module docstring;
- every name it exports: a class's own docstring (not the one `NamedTuple` or `dataclass`
  writes, `Name(field, ...)`), a function's docstring, and for a constant the string
  literal under its assignment (what the reference shows for it, read from the source);
- the public methods and properties that an exported class defines;
- `docs/api/NAME.md` for each namespace, rendering it (`::: blamejax.NAME`), and listed in
  mkdocs.yml.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib

import pytest
from helpers import public_module, public_namespaces

import blamejax as bj

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = pathlib.Path(bj.__file__).parent
NAMESPACES = public_namespaces()


def _exports(module):
    for name in sorted(dir(module)):
        value = getattr(module, name)
        if not name.startswith("_") and not inspect.ismodule(value):
            yield name, value


def _has_text(doc) -> bool:
    return isinstance(doc, str) and bool(doc.strip())


def _class_doc(cls) -> str | None:
    doc = vars(cls).get("__doc__")
    if not _has_text(doc) or doc.startswith(f"{cls.__name__}("):  # written by NamedTuple/dataclass
        return None
    return doc


def _source_module(module, name: str) -> str:
    """The module a namespace's `from .x import NAME as NAME` takes NAME from (itself if none)."""
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(
            (a.asname or a.name) == name for a in node.names
        ):
            return importlib.util.resolve_name(
                "." * node.level + (node.module or ""), module.__name__
            )
    return module.__name__


def _constant_doc(module, name: str) -> str | None:
    """The string literal under `NAME = ...` in the module that defines NAME."""
    source = module
    while (origin := _source_module(source, name)) != source.__name__:  # follow re-exports
        source = importlib.import_module(origin)
    body = ast.parse(pathlib.Path(source.__file__).read_text()).body
    for node, after in zip(body, body[1:] + [None]):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                return after.value.value if isinstance(after.value.value, str) else None
            return None
    return None


def _undocumented(namespace: str) -> list[str]:
    module = bj if namespace == "blamejax" else public_module(namespace)
    prefix = "blamejax" if namespace == "blamejax" else f"blamejax.{namespace}"
    missing = [] if _has_text(module.__doc__) else [f"{prefix} (its module docstring)"]
    for name, value in _exports(module):
        if inspect.isclass(value):
            if _class_doc(value) is None:
                missing.append(f"{prefix}.{name}")
            for attr, member in vars(value).items():
                function = getattr(member, "__func__", getattr(member, "fget", member))
                if (
                    not attr.startswith("_")
                    and inspect.isfunction(function)
                    and not _has_text(function.__doc__)
                ):
                    missing.append(f"{prefix}.{name}.{attr}")
        elif inspect.isfunction(value) or inspect.isbuiltin(value):
            if not _has_text(value.__doc__):
                missing.append(f"{prefix}.{name}")
        elif (
            callable(value)
            and _has_text(getattr(value, "__doc__", None))
            and value.__doc__ != type(value).__doc__
        ):
            continue  # a callable object with a docstring of its own (a wrapped function)
        elif callable(value) and not isinstance(value, (int, float, str, tuple, dict, frozenset)):
            missing.append(f"{prefix}.{name}")
        elif not _has_text(_constant_doc(module, name)):
            missing.append(f"{prefix}.{name} (a string literal under its assignment)")
    return missing


@pytest.mark.parametrize("namespace", ["blamejax", *NAMESPACES])
def test_every_public_name_has_a_docstring(namespace):
    assert _undocumented(namespace) == []


@pytest.mark.parametrize("namespace", ["blamejax", *NAMESPACES])
def test_every_namespace_has_its_page(namespace):
    target = "blamejax" if namespace == "blamejax" else f"blamejax.{namespace}"
    page = ROOT / "docs" / "api" / f"{namespace}.md"
    assert page.exists(), f"no API page {page.relative_to(ROOT)} for {target}"
    assert f"::: {target}\n" in page.read_text(), (
        f"{page.relative_to(ROOT)} does not render ::: {target}"
    )
    assert f"api/{namespace}.md" in (ROOT / "mkdocs.yml").read_text(), (
        f"mkdocs.yml's nav lacks api/{namespace}.md"
    )


def test_the_check_sees_what_it_should():
    """A guard against a check that passes by seeing nothing."""
    assert {"stats", "traces", "benchmarks.scm", "scorers", "demos", "pipeline"} <= set(NAMESPACES)
    assert _constant_doc(bj.stats, "RULES") is None or isinstance(
        _constant_doc(bj.stats, "RULES"), str
    )
    assert _source_module(bj.stats, "RULES") == "blamejax.stats._anytime"
    assert _class_doc(bj.pipeline.Plan) and _class_doc(type("Bare", (), {})) is None
