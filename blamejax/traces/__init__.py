"""Traces of real runs: a JSON Lines format for the runs of multi-agent and LLM pipelines,
its validator, reading and writing, and importers from Who&When, OpenTelemetry GenAI spans
and OpenInference spans.

One line of a `.jsonl` trace file is one run (`Run`) of steps (`Step`); the fields are
described in docs/traces.md and in the JSON Schema shipped beside this module
(`SCHEMA_PATH`). `validate` reports every problem with its file, line and field;
`read(..., errors="collect")` (or `read_report`) loads the good runs and counts the rest.

The Who&When evaluation that lived here moved to `bj.benchmarks.whowhen`, beside the SCM
benchmark; its names (`bj.traces.evaluate`, `whowhen_report`, ...) still work from here.
"""

from pathlib import Path as _Path

from .blame._blame import NO_LOGITS as NO_LOGITS
from .blame._blame import NO_OPTIONS as NO_OPTIONS
from .blame._blame import FailureOutsideDecisionsWarning as FailureOutsideDecisionsWarning
from .blame._blame import TraceBlame as TraceBlame
from .blame._blame import TraceCases as TraceCases
from .blame._blame import TracePipeline as TracePipeline
from .blame._blame import blame_runs as blame_runs
from .blame._blame import group_runs as group_runs
from .blame._blame import trace_cases as trace_cases
from .blame._readout import Readout as Readout
from .blame._readout import readout as readout
from .decisions._declare import declare_decisions as declare_decisions
from .decisions._declare import prompt_of as prompt_of
from .decisions._declare import score_decisions as score_decisions
from .decisions._logprobs import choice_from_response as choice_from_response
from .decisions._logprobs import decisions_from_logprobs as decisions_from_logprobs
from .decisions._logprobs import logits_from_response as logits_from_response
from .decisions._record import decision_attributes as decision_attributes
from .decisions._record import record_decision as record_decision
from .format._check import FORMAT as FORMAT
from .format._format import Loaded as Loaded
from .format._format import Problem as Problem
from .format._format import Run as Run
from .format._format import Step as Step
from .format._format import TraceError as TraceError
from .format._format import from_record as from_record
from .format._format import read as read
from .format._format import read_report as read_report
from .format._format import to_record as to_record
from .format._format import validate as validate
from .format._format import write as write
from .importers._load import load_runs as load_runs
from .importers._whowhen import from_whowhen as from_whowhen
from .importers.spans._spans import NoAgentsWarning as NoAgentsWarning
from .importers.spans._spans import from_mlflow as from_mlflow
from .importers.spans._spans import from_openinference as from_openinference
from .importers.spans._spans import from_otel as from_otel

SCHEMA_PATH = _Path(__file__).with_name("trace.schema.json")
"""The path of the trace format's JSON Schema (`trace.schema.json`)."""


# The Who&When evaluation moved to `blamejax.benchmarks.whowhen` (issue 39). Its names still
# answer here, loaded on first use: the benchmark is built on this package, so importing it
# at the top would run back up the house (the front door loads the applications the same way).
_MOVED_TO_BENCHMARKS = (
    "Evaluation",
    "Prediction",
    "Score",
    "baseline_predictions",
    "baselines",
    "blame_predictions",
    "check_predictions",
    "constant_predictions",
    "evaluate",
    "evaluation_table",
    "load_predictions",
    "random_baseline",
    "whowhen_report",
)


def __getattr__(name: str):
    if name in _MOVED_TO_BENCHMARKS:
        import importlib

        return getattr(importlib.import_module("blamejax.benchmarks.whowhen"), name)
    raise AttributeError(f"module 'blamejax.traces' has no attribute {name!r}")
