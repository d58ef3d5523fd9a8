"""A mkdocs hook: the docs build warns (and so `mkdocs build --strict` fails) for every public
name of blamejax without a docstring, read statically by griffe as mkdocstrings reads it.

Checked: the front door and each public subpackage (its module docstring), every name each
exports (`from ._x import name as name`), and the public methods and properties of the classes
exported. Fields of a class are documented in the class's docstring and are not checked.
tests/test_docstrings.py makes the same check on the imported package.
"""

from __future__ import annotations

import logging
import pathlib

import griffe

log = logging.getLogger(f"mkdocs.plugins.{__name__}")


def _missing(package: griffe.Module) -> list[str]:
    missing = []
    namespaces = [package] + [
        member
        for name, member in package.members.items()
        if member.is_module and not name.startswith("_")
    ]
    for module in namespaces:
        if not module.docstring:
            missing.append(f"{module.path} (module)")
        for name, member in module.members.items():
            if name.startswith("_") or member.is_module or not member.is_public:
                continue
            target = member.final_target if member.is_alias else member
            if not target.docstring:
                missing.append(f"{module.path}.{name}")
            if target.is_class:
                for attr, sub in target.members.items():
                    if attr.startswith("_") or sub.is_alias:
                        continue
                    method = sub.is_function or (sub.is_attribute and "property" in sub.labels)
                    if method and not sub.docstring:
                        missing.append(f"{module.path}.{name}.{attr}")
    return missing


def on_pre_build(config, **kwargs) -> None:
    extensions = griffe.load_extensions("griffe_public_redundant_aliases")
    loader = griffe.GriffeLoader(
        extensions=extensions, search_paths=[str(pathlib.Path(config["docs_dir"]).parent)]
    )
    package = loader.load("blamejax")
    loader.resolve_aliases(external=False)
    for name in _missing(package):
        log.warning(
            "no docstring: %s (every public name is documented; see tests/test_docstrings.py)", name
        )
