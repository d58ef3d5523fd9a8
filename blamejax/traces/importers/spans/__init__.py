"""Spans to runs: which format a file holds (`_sniff.py`), OTLP JSON (`_otlp.py`), the SDK's
console output (`_console.py`), MLflow's traces (`_mlflow.py`), what a span's attributes say
(`_attributes.py`, with LangChain's reply shapes in `_langchain.py`), how a run went
(`_outcomes.py`), and the importers that put them together (`_spans.py`)."""
