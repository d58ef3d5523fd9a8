"""The documentation runs: every ```python block in the docstrings of the public API, and the
blocks of README.md and docs/*.md (in README.md and docs/index.md, with the output they show).

Each docstring block is one test (id: the dotted name it documents), run in a fresh namespace.
The blocks of one Markdown file build on each other, so each file is one test that runs its
blocks in order in one shared namespace. Every test runs in a temporary directory, so blocks
that write files leave nothing behind.

A block says so on a line of its own when it is deliberately partial (it is not run) or slow
(it runs only with the slow tests, `pytest -m slow`):

    # doctest: skip (the reason)
    # doctest: slow (the reason)
"""

import inspect
import pathlib
import re

import pytest
from helpers import public_module, public_namespaces

import blamejax as bj

ROOT = pathlib.Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
OUTPUT = re.compile(r"^```text\n(.*?)^```", re.DOTALL | re.MULTILINE)
SKIP = re.compile(r"^\s*# doctest: skip\b *\(?([^)\n]*)", re.MULTILINE)
SLOW = re.compile(r"^\s*# doctest: slow\b", re.MULTILINE)


def _blocks(doc: str | None) -> list[str]:
    return BLOCK.findall(inspect.cleandoc(doc)) if isinstance(doc, str) else []


def _public_objects():
    """(dotted name, object) for the package, its public subpackages, every name they export
    and the public methods of exported classes. An object exported twice keeps its first name:
    subpackage names come before the front door's re-exports."""
    subpackages = public_namespaces()
    modules = [(f"blamejax.{sub}", public_module(sub)) for sub in sorted(subpackages)]
    modules += [("blamejax", bj)]
    names = [
        (f"{prefix}.{name}", getattr(module, name))
        for prefix, module in modules
        for name in sorted(dir(module))
        if not name.startswith("_") and not inspect.ismodule(getattr(module, name))
    ]
    exported = [("blamejax", bj), *modules[:-1], *names]
    seen: set[int] = set()
    for name, obj in exported:
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield name, obj
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if attr.startswith("_"):
                    continue
                value = getattr(value, "__func__", getattr(value, "fget", value))
                if inspect.isfunction(value) and id(value) not in seen:
                    seen.add(id(value))
                    yield f"{name}.{attr}", value


def _marks(name: str, code: str) -> list:
    marks = []
    if skip := SKIP.search(code):
        marks.append(pytest.mark.skip(reason=skip.group(1).strip() or "# doctest: skip"))
    if SLOW.search(code):
        marks.append(pytest.mark.slow)
    return marks


def _docstring_examples():
    examples = []
    for name, obj in _public_objects():
        if not (inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # constants: a tuple's or a str's docstring is not ours
        blocks = _blocks(obj.__doc__)
        for i, code in enumerate(blocks):
            test_id = name if len(blocks) == 1 else f"{name}[{i}]"
            examples.append(pytest.param(test_id, code, id=test_id, marks=_marks(name, code)))
    return examples


@pytest.mark.parametrize("name, code", _docstring_examples())
def test_docstring_example(name, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"<example of {name}>", "exec"), {"__name__": "__docs__"})


def _markdown_files():
    """README.md and docs/*.md that hold a python block; a file is slow if one block is (a
    skipped block is left out of its file's run, not the whole file)."""
    files = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks = BLOCK.findall(path.read_text())
        marks = [pytest.mark.slow] if any(SLOW.search(code) for code in blocks) else []
        if blocks:
            files.append(pytest.param(path, id=str(path.relative_to(ROOT)), marks=marks))
    return files


@pytest.mark.parametrize("path", _markdown_files())
def test_markdown_blocks(path, tmp_path, monkeypatch, capsys):
    """The blocks run; in README.md and docs/index.md (the two front pages), each ```text block
    is output its code really prints."""
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    text = path.read_text()
    for i, code in enumerate(BLOCK.findall(text)):
        if not SKIP.search(code):
            exec(compile(code, f"<{path.relative_to(ROOT)}, python block {i}>", "exec"), namespace)
    if path in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        where = path.relative_to(ROOT)
        printed = capsys.readouterr().out
        shown = OUTPUT.findall(text)
        assert shown, f"{where} shows no ```text output block"
        for block in shown:
            assert block in printed, f"{where} shows output its code does not print:\n{block}"


def test_examples_are_collected():
    """The collector finds the examples it should: a guard against a silent regex change."""
    names = {param.values[0] for param in _docstring_examples()}
    assert {
        "blamejax.estimators.exact_blame",
        "blamejax.benchmarks.scm",
        "blamejax.clear_caches",
    } <= names
