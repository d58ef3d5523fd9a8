"""A griffe extension for the docs build: a blank line before a Markdown list that starts
right under a line of text.

blamejax's docstrings write `**Arguments:**` and the list of arguments on the next line, as
one reads them in a terminal; Python-Markdown needs a blank line there, or the list renders
as one paragraph of dashes. Only the rendered docstrings change, never the source.
"""

from __future__ import annotations

import re

import griffe

ITEM = re.compile(r"^ {0,3}(?:[-*+]|\d+[.)]) ")


def separate_lists(text: str) -> str:
    """`text` with a blank line before each list that directly follows a line of text
    (outside fenced code)."""
    out: list[str] = []
    fenced = in_list = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            if ITEM.match(line):
                if not in_list and out and out[-1].strip():
                    out.append("")
                in_list = True
            elif line.strip() and not line[0].isspace() and out and not out[-1].strip():
                in_list = False  # an unindented paragraph after a blank line ends the list
        out.append(line)
    return "\n".join(out)


class SeparateLists(griffe.Extension):
    """Applies `separate_lists` to every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = separate_lists(obj.docstring.value)
