"""The documentation points at things that exist.

- Every API page (docs/api/NAME.md) lists each public name of its namespace, one
  `::: blamejax.NAME.name` line each under the heading of its family, and lists nothing else:
  a name added to a namespace fails here until its page lists it.
- Every backticked reference in README.md and docs/*.md (outside code blocks) to a file or
  folder of the repository (`estimators/_batch.py`, `blamejax/traces/`, `_plans.py`,
  `tests/test_layout.py:40`) or to a name of the package (`bj.traces.from_otel`,
  `blamejax.stats.checkpoints`, `report.step_rows`, `_checks.split_case_ids`,
  `BatchResult.plot`) exists. A name said to live in a file ("`StepPlan` in
  `pipeline/_plans.py`") is defined there, and a bare file name (`_plans.py`) lies in the
  folder its paragraph names before it, and a name after a file
  (`scorers/_lazy.py:fill_lazily`) is defined in that file. A failure names the file, the
  line and the target.

Read statically where it can (paths, API pages); names are looked up on the imported package.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import re

import pytest
from helpers import public_module, public_namespaces

import blamejax as bj

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "blamejax"
NAMESPACES = public_namespaces()
DIRECTIVE = re.compile(r"^::: (blamejax(?:\.\w+)*)\s*$", re.MULTILINE)

# A fenced code block (its code runs as a test, tests/test_docs.py), and one inline code span.
FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1", re.DOTALL | re.MULTILINE)
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
# What a path reference looks like: folders then a name, or a file name with a known suffix;
# a `:123`, `:12-34` or `:name` after it says where in the file and is not part of the path.
SUFFIXES = (".py", ".md", ".ipynb", ".json", ".jsonl", ".toml", ".yml", ".yaml", ".npz", ".sqlite")
TOP = ("blamejax/", "tests/", "docs/", "benchmarks/", "examples/", "notebooks/", ".ci/")
WHERE = re.compile(r"(?::[\w-]+|::\w+)$")
# Folders that a script makes when it runs, named in the docs but never in a clone.
MADE_WHEN_RUN = {"benchmarks/results/_distributed_tmp/"}
# A dotted name: `bj.x.y` or `blamejax.x.y` anywhere at the start of a span; the other forms
# (`report.step_rows`, `_checks.split_case_ids`, `BatchResult.plot`) only as the whole span.
PACKAGE_NAME = re.compile(r"^(?:bj|blamejax)(?:\.\w+)+")
DOTTED = re.compile(r"^(\w+(?:\.\w+)+)(?:\(\)|\(\.\.\.\))?$")


def _markdown_files() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _spans(path: pathlib.Path):
    """(line number, text) of every inline code span of `path` outside fenced blocks."""
    text = path.read_text(encoding="utf-8")
    blanked = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # keep line numbers
    for match in SPAN.finditer(blanked):
        yield blanked.count("\n", 0, match.start()) + 1, match.group(1).strip()


# ------------------------------------------------------------------------------ API pages


def _public_names(namespace: str) -> set[str]:
    module = bj if namespace == "blamejax" else public_module(namespace)
    return {
        name
        for name in dir(module)
        if not name.startswith("_") and not inspect.ismodule(getattr(module, name))
    }


@pytest.mark.parametrize("namespace", ["blamejax", *NAMESPACES])
def test_every_public_name_is_on_its_api_page(namespace):
    target = "blamejax" if namespace == "blamejax" else f"blamejax.{namespace}"
    page = ROOT / "docs" / "api" / f"{namespace}.md"
    listed = [name for name in DIRECTIVE.findall(page.read_text()) if name != target]
    prefix = f"{target}."
    where = page.relative_to(ROOT)
    wrong = [name for name in listed if not name.startswith(prefix) or "." in name[len(prefix) :]]
    assert not wrong, f"{where} renders names of another namespace: {wrong}"
    listed_names = [name[len(prefix) :] for name in listed]
    twice = sorted({name for name in listed_names if listed_names.count(name) > 1})
    assert not twice, f"{where} lists these names twice: {twice}"
    public = _public_names(namespace)
    missing = sorted(public - set(listed_names))
    assert not missing, (
        f"{where} does not list these public names of {target}; add a line "
        f"`::: {target}.NAME` for each under the heading of its family: {missing}"
    )
    gone = sorted(set(listed_names) - public)
    assert not gone, f"{where} lists names that {target} does not export: {gone}"


# ----------------------------------------------------------------------- path references


def _is_path(ref: str) -> bool:
    if " " in ref or "://" in ref or ref.startswith(("/", "~", "$", "-")):
        return False
    ref = WHERE.sub("", ref)
    if "/" in ref:  # a path of the repository or of the package (`estimators/_batch.py`)
        first = ref.split("/")[0]
        ours = ref.startswith(TOP) or (PACKAGE / first).is_dir() or (ROOT / first).exists()
        return ours and (ref.endswith("/") or ref.endswith(SUFFIXES) or ref.startswith(TOP))
    # A bare name only for code (`_plans.py`, `batch_blame.ipynb`): a bare `answers.json` in
    # prose is usually a name the reader picks.
    return ref.endswith((".py", ".ipynb")) and not ref.startswith(".")


def _path_exists(ref: str) -> bool:
    if "::" in ref:  # a test's node id: the file, and the test in it
        file, _, test = ref.partition("::")
        path = ROOT / file
        return path.is_file() and re.search(rf"def {test}\b", path.read_text()) is not None
    ref = WHERE.sub("", ref)
    if ref in MADE_WHEN_RUN or ref.startswith("../"):
        return True  # outside the repository: not ours to check
    if "/" in ref:
        # As written from the repository root, or inside the package (`estimators/_batch.py`).
        return any(
            any(base.glob(ref.rstrip("/"))) if "*" in ref else (base / ref).exists()
            for base in (ROOT, PACKAGE)
        )
    # A bare file name (`_plans.py`, `trace.schema.json`): somewhere in the repository.
    return (
        any(
            (ROOT / top).is_dir() and any((ROOT / top).rglob(ref))
            for top in ("blamejax", "tests", "docs", "benchmarks", "examples", "notebooks")
        )
        or (ROOT / ref).exists()
    )


# ----------------------------------------------------------------------- name references


def _private_modules(name: str) -> list[str]:
    """Dotted names of the package's modules called `name` (`_checks`, `_plans`, ...)."""
    found = [
        *PACKAGE.rglob(f"{name}.py"),
        *(p.parent for p in PACKAGE.rglob(f"{name}/__init__.py")),
    ]
    return [
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in found
        if "__pycache__" not in p.parts
    ]


def _has(obj, attr: str) -> bool:
    if hasattr(obj, attr):
        return True
    fields = getattr(obj, "__dataclass_fields__", None) or getattr(obj, "_fields", ())
    return attr in fields or attr in getattr(obj, "__annotations__", {})


def _lookup(obj, parts: list[str]) -> bool:
    for i, part in enumerate(parts):
        if _has(obj, part):
            obj = getattr(obj, part, None)
            if obj is None:
                return i == len(parts) - 1  # a field without a default: the last part only
            continue
        if inspect.ismodule(obj):  # a private submodule not yet imported
            try:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
                continue
            except ImportError:
                return False
        return False
    return True


def _field_of_a_class(attr: str):
    for namespace in ["", *NAMESPACES]:
        module = public_module(namespace) if namespace else bj
        for name in dir(module):
            value = getattr(module, name)
            if inspect.isclass(value) and not name.startswith("_"):
                yield _has(value, attr)


def _classes_named(name: str) -> list:
    found = [getattr(bj, name)] if inspect.isclass(getattr(bj, name, None)) else []
    for namespace in NAMESPACES:
        value = getattr(public_module(namespace), name, None)
        if inspect.isclass(value):
            found.append(value)
    return found


def _name_exists(ref: str) -> bool | None:
    """Whether the dotted name `ref` exists; None when it is not a name of this package."""
    if match := PACKAGE_NAME.match(ref):
        head, *rest = match.group(0).split(".")
        return _lookup(bj, rest)
    match = DOTTED.match(ref)
    if not match:
        return None
    head, *rest = match.group(1).split(".")
    if head in NAMESPACES:  # `report.step_rows`
        if _lookup(getattr(bj, head), rest):
            return True
        # `worlds.key` beside `World`'s fields reads as a variable of that class, not the module
        return False if not any(_field_of_a_class(rest[0])) else None
    if head.startswith("_") and head != "__init__":  # `_checks.split_case_ids`
        modules = _private_modules(head)
        if not modules:
            return False
        return any(_lookup(importlib.import_module(m), rest) for m in modules)
    if head[:1].isupper() and (classes := _classes_named(head)):  # `BatchResult.plot`
        return any(_lookup(cls, rest) for cls in classes)
    return None  # `jax.grad`, `lax.scan`, a variable of an example: not ours


# A name said to live in a file: "`StepPlan` in `pipeline/_plans.py`", "`a`, `b` and `c` in
# `x/_y.py`", "`exact_blame` (`_exact.py`)", "(`Scorer`, `_scorer.py`)".
NAMES_IN = re.compile(
    r"((?:`[\w.]+`(?:,\s*|\s+and\s+|\s+or\s+)?)+)\s+in\s+`([\w/.]+\.py)`"
    r"|`([\w.]+)`,?\s+\(?`([\w/.]+\.py)`"
)


def _files(ref: str) -> list[pathlib.Path]:
    if "/" in ref:
        return [base / ref for base in (ROOT, PACKAGE) if (base / ref).is_file()]
    return [p for p in PACKAGE.rglob(ref) if "__pycache__" not in p.parts]


def _defines(path: pathlib.Path, name: str) -> bool:
    """Whether `path` defines `name` (a `def`, `class` or assignment; in an `__init__.py`, an
    export `import ... as name` too). A dotted `Class.attr` is looked for by its last part."""
    name = name.split(".")[-1]
    text = path.read_text(encoding="utf-8")
    here = rf"^\s*(?:async\s+def|def|class)\s+{name}\b|^\s*{name}\s*(?::[^=\n]*)?="
    if path.name == "__init__.py":
        here += rf"|\bimport\s+\w+\s+as\s+{name}\b"
    return re.search(here, text, re.MULTILINE) is not None


def _misplaced_names(path: pathlib.Path) -> list[str]:
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text(encoding="utf-8"))
    where = path.relative_to(ROOT)
    misplaced = []
    for match in NAMES_IN.finditer(text):
        names = re.findall(r"`([\w.]+)`", match.group(1)) if match.group(1) else [match.group(3)]
        ref = match.group(2) or match.group(4)
        files = _files(ref)
        if not files:
            continue  # a missing file is reported as such
        line = text.count("\n", 0, match.end()) + 1
        for name in names:
            if name.endswith(".py") or not re.fullmatch(r"\w+(?:\.\w+)?", name):
                continue
            if not any(_defines(f, name) for f in files):
                misplaced.append(f"{where}:{line}: `{name}` is not defined in `{ref}`")
    return misplaced


# Where a paragraph, a list item at the margin or a table row starts: a bare file name in it
# (`_plans.py`) is looked for in the folders that the same block named before it.
BLOCK_START = re.compile(r"^(?:#|- |\* |\d+\. |\|)")


def _folders(ref: str) -> list[pathlib.Path]:
    """The package folders a path reference names: itself if a folder, else its parent."""
    ref = WHERE.sub("", ref).removeprefix("blamejax/")
    found = []
    for base in (PACKAGE,):
        target = base / ref.rstrip("/")
        if target.is_dir():
            found.append(target)
        elif target.is_file() and target.parent != PACKAGE:
            found.append(target.parent)
    return found


def _misfiled(path: pathlib.Path) -> list[str]:
    """Bare file names that are not in the folder their block is about: in "the interventions
    folder (`blamejax/interventions/`) ... `_plans.py` holds ...", `_plans.py` must be
    `blamejax/interventions/_plans.py` (or in the package's top folder)."""
    where = path.relative_to(ROOT)
    lines = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text()).split("\n")
    misfiled, folders, previous = [], [], ""
    for number, line in enumerate(lines, start=1):
        if line.strip() and (BLOCK_START.match(line) or not previous.strip()) and line[:1] != " ":
            folders = []
        previous = line
        for ref in (m.group(1).strip() for m in SPAN.finditer(line)):
            if not _is_path(ref):
                continue
            bare = "/" not in WHERE.sub("", ref)
            if bare and folders and ref.endswith(".py"):
                name = WHERE.sub("", ref)
                if not any((folder / name).is_file() for folder in [PACKAGE, *folders]):
                    named = ", ".join(str(f.relative_to(ROOT)) + "/" for f in folders)
                    actual = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob(name)]
                    misfiled.append(
                        f"{where}:{number}: `{ref}` is not in {named} (the folder its paragraph "
                        f"names); it is {', '.join(actual) or 'nowhere in blamejax/'}"
                    )
            elif not bare:
                folders += _folders(ref)
    return misfiled


# A name after a file (`scorers/_lazy.py:fill_lazily`, `_chart.py:Panel.x`): defined in it.
NAME_AFTER_FILE = re.compile(r"(.+\.py):([A-Za-z_]\w*(?:\.\w+)?)")


def _name_in_its_file(ref: str) -> bool:
    """False when `ref` is `file.py:name` and no file of that path defines `name`."""
    match = NAME_AFTER_FILE.fullmatch(ref)
    if not match:
        return True
    files = _files(match.group(1))
    return not files or any(_defines(f, match.group(2)) for f in files)


def _broken_references(path: pathlib.Path) -> list[str]:
    broken = []
    where = path.relative_to(ROOT)
    for line, ref in _spans(path):
        if _is_path(ref):
            if not _path_exists(ref):
                broken.append(f"{where}:{line}: `{ref}`: no such file or folder in the repository")
            elif not _name_in_its_file(ref):
                broken.append(f"{where}:{line}: `{ref}`: the file does not define that name")
        elif _name_exists(ref) is False:
            broken.append(f"{where}:{line}: `{ref}`: no such name in blamejax")
    return broken + _misplaced_names(path) + _misfiled(path)


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_backticked_reference_exists(path):
    broken = _broken_references(path)
    assert not broken, "references to things that do not exist:\n" + "\n".join(broken)


def test_the_reference_check_sees_what_it_should():
    """A guard against a check that passes by seeing nothing."""
    assert _is_path("estimators/_batch.py:236-324") and _path_exists("estimators/_batch.py")
    assert _is_path("blamejax/traces/") and _path_exists("blamejax/traces/")
    assert _is_path("_plans.py") and _path_exists("_plans.py")
    assert _is_path("tests/no_such_file.py") and not _path_exists("tests/no_such_file.py")
    assert not _is_path("answers.json") and _is_path("tests/data/whowhen/README.md")
    assert not _is_path("python -m blamejax whowhen PATH") and not _is_path("a/b")
    assert not _is_path("blamejax-out/rag/") and not _is_path("Who&When/")
    assert _path_exists("tests/test_docs_refs.py::test_the_reference_check_sees_what_it_should")
    assert not _path_exists("tests/test_docs_refs.py::test_no_such_test")
    assert _name_exists("bj.traces.from_otel") and _name_exists("blamejax.stats.checkpoints")
    assert _name_exists("report.step_rows") and _name_exists("bj.clear_caches()")
    assert _name_exists("_compile.clear_caches")
    assert _name_exists("BatchResult.plot") and _name_exists("World.case_id")
    assert _name_exists("bj.traces.no_such_name") is False
    assert _name_exists("report.no_such_name") is False
    assert _name_exists("worlds.key") is None  # a variable holding a `World`
    assert _name_exists("_no_such_module.name") is False
    assert _name_exists("jax.grad") is None and _name_exists("lax.scan") is None
    assert _name_in_its_file("scorers/_lazy.py:fill_lazily") and _name_in_its_file("_chart.py:42")
    assert not _name_in_its_file("scorers/_lazy.py:batch_chart")
    assert not _name_in_its_file("report/_chart.py:no_such_name")
    plans, context = PACKAGE / "pipeline" / "_plans.py", PACKAGE / "pipeline" / "_context.py"
    assert _defines(plans, "StepPlan") and not _defines(context, "StepPlan")
    assert _defines(PACKAGE / "pipeline" / "__init__.py", "StepPlan")  # an export counts there
    spans = dict((text, line) for line, text in _spans(ROOT / "docs" / "architecture.md"))
    assert "pipeline/_deferred.py" in spans and "```" not in "".join(spans)
