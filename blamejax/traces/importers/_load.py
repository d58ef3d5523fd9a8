"""Labelled runs from a path, whatever it holds: a blamejax trace or Who&When's own logs."""

from __future__ import annotations

import os

from ..format._format import read
from ._whowhen import from_whowhen
from .spans._sniff import holds_spans


def load_runs(path) -> list:
    """Runs from `path`: a `.jsonl` trace file or a folder of them (`bj.traces.read`), or a
    Who&When `.json` file or folder of them (`bj.traces.from_whowhen`)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path!r}: no such file or folder")
    if holds_spans(path):
        raise ValueError(
            f"{path} holds OpenTelemetry or OpenInference spans, not labelled runs (Who&When "
            f"logs or a blamejax trace): blame them with `python -m blamejax blame {path} "
            "--decisions DECISIONS.json --scorer MODEL`, or import them with "
            "bj.traces.from_otel / bj.traces.from_openinference"
        )
    if os.path.isdir(path):
        jsonl = any(name.endswith(".jsonl") for name in os.listdir(path))
    else:
        jsonl = path.endswith(".jsonl")
    return read(path) if jsonl else from_whowhen(path)
