"""Traces of real runs: a JSON Lines format for the runs of multi-agent and LLM pipelines,
its validator, reading and writing, and importers from Who&When, OpenTelemetry GenAI spans
and OpenInference spans.

One line of a `.jsonl` trace file is one run (`Run`) of steps (`Step`); the fields are
described in docs/traces.md and in the JSON Schema shipped beside this module
(`SCHEMA_PATH`). `validate` reports every problem with its file, line and field;
`read(..., errors="collect")` (or `read_report`) loads the good runs and counts the rest.
"""

from pathlib import Path as _Path

from ._check import FORMAT as FORMAT
from ._format import Loaded as Loaded
from ._format import Problem as Problem
from ._format import Run as Run
from ._format import Step as Step
from ._format import TraceError as TraceError
from ._format import from_record as from_record
from ._format import read as read
from ._format import read_report as read_report
from ._format import to_record as to_record
from ._format import validate as validate
from ._format import write as write
from ._spans import from_openinference as from_openinference
from ._spans import from_otel as from_otel
from ._whowhen import from_whowhen as from_whowhen

SCHEMA_PATH = _Path(__file__).with_name("trace.schema.json")
