"""Importers: runs from other formats. Who&When failure logs (`_whowhen.py`); the span
formats, OpenTelemetry GenAI, OpenInference and MLflow, in `spans/`."""
