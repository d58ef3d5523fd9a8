"""Traces of real runs: a JSON Lines format for the runs of multi-agent and LLM pipelines,
its validator, reading and writing, and importers from Who&When, OpenTelemetry GenAI spans
and OpenInference spans.

One line of a `.jsonl` trace file is one run (`Run`) of steps (`Step`); the fields are
described in docs/traces.md and in the JSON Schema shipped beside this module
(`SCHEMA_PATH`). `validate` reports every problem with its file, line and field;
`read(..., errors="collect")` (or `read_report`) loads the good runs and counts the rest.
"""

from pathlib import Path as _Path

from ._blame import NO_LOGITS as NO_LOGITS
from ._blame import NO_OPTIONS as NO_OPTIONS
from ._blame import FailureOutsideDecisionsWarning as FailureOutsideDecisionsWarning
from ._blame import TraceBlame as TraceBlame
from ._blame import TraceCases as TraceCases
from ._blame import TracePipeline as TracePipeline
from ._blame import blame_runs as blame_runs
from ._blame import group_runs as group_runs
from ._blame import trace_cases as trace_cases
from ._check import FORMAT as FORMAT
from ._declare import declare_decisions as declare_decisions
from ._declare import prompt_of as prompt_of
from ._declare import score_decisions as score_decisions
from ._evaluate import Evaluation as Evaluation
from ._evaluate import Prediction as Prediction
from ._evaluate import Score as Score
from ._evaluate import baseline_predictions as baseline_predictions
from ._evaluate import baselines as baselines
from ._evaluate import check_predictions as check_predictions
from ._evaluate import constant_predictions as constant_predictions
from ._evaluate import evaluate as evaluate
from ._evaluate import evaluation_table as evaluation_table
from ._evaluate import load_predictions as load_predictions
from ._evaluate import load_runs as load_runs
from ._evaluate import random_baseline as random_baseline
from ._evaluate import whowhen_report as whowhen_report
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
from ._logprobs import choice_from_response as choice_from_response
from ._logprobs import decisions_from_logprobs as decisions_from_logprobs
from ._logprobs import logits_from_response as logits_from_response
from ._readout import Readout as Readout
from ._readout import blame_predictions as blame_predictions
from ._readout import readout as readout
from ._record import decision_attributes as decision_attributes
from ._record import record_decision as record_decision
from ._spans import NoAgentsWarning as NoAgentsWarning
from ._spans import from_mlflow as from_mlflow
from ._spans import from_openinference as from_openinference
from ._spans import from_otel as from_otel
from ._whowhen import from_whowhen as from_whowhen

SCHEMA_PATH = _Path(__file__).with_name("trace.schema.json")
"""The path of the trace format's JSON Schema (`trace.schema.json`)."""
