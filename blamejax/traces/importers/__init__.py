"""Importers: runs from other formats. Who&When failure logs (`_whowhen.py`); the span
formats, OpenTelemetry GenAI, OpenInference and MLflow, in `spans/`; labelled runs from
whichever a path holds (`_load.py`)."""

from ._load import load_runs as load_runs
