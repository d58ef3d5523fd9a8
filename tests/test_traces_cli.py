"""`python -m blamejax blame`: from a tracer's span file to the table and the HTML report,
the decisions scored by an OpenAI-compatible scorer on a loopback server
(tests/scorer_server.py). The span file is the one Traceloop's OpenAI instrumentation
0.47.5 wrote (tests/data/traces/traceloop/make_traceloop_0_47.py): a plain trace, no
log-probabilities, its outcome on the root span."""

import json
import pathlib
import re

import pytest
from scorer_server import FakeAPI
from test_traces_frameworks import ACCEPT, OPTIONS, model_of

from blamejax._cli import main

SPANS = pathlib.Path(__file__).parent / "data" / "traces" / "traceloop" / "traceloop-0.47.5.jsonl"


@pytest.fixture
def api():
    server = FakeAPI(model_of())
    try:
        yield server
    finally:
        server.close()


def decisions_file(tmp_path, **changes):
    spec = {
        agent: {
            "options": list(OPTIONS[agent]),
            "accept": list(ACCEPT[agent]),
            "fix": {"append": "Check first."},
        }
        for agent in OPTIONS
    }
    spec.update(changes)
    path = tmp_path / "decisions.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return str(path)


def command(api, tmp_path, decisions, *more):
    return [
        "blame",
        str(SPANS),
        "--decisions",
        decisions,
        "--scorer",
        "test-model",
        "--base-url",
        f"{api.url}/v1",
        "--api-key",
        "test",
        "--cache",
        str(tmp_path / "scores.sqlite"),
        "--out",
        str(tmp_path / "report.html"),
        *more,
    ]


def test_blame_command_table_report_and_progress(api, tmp_path, capsys):
    """The table names the planner (who) and its call (when, earliest repair); the report
    holds the same; the progress bars go to stderr; a second run is answered from the cache."""
    assert main(command(api, tmp_path, decisions_file(tmp_path))) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["run", "outcome", "who", "when", "earliest", "repair", "note"]
    row = lines[2].split()
    assert row[1:5] == ["failed", "planner", "openai.chat", "openai.chat"]
    assert "scoring decisions" in err and "scoring fixes" in err
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<td>planner</td>" in page and "Gumbel-max" in page
    asked = len(api.received)
    assert asked == 6  # 3 factual + 3 fixes
    assert main(command(api, tmp_path, decisions_file(tmp_path), "--no-progress")) == 0
    assert len(api.received) == asked  # all from the cache
    assert "scoring" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"planner": {"options": ["search", "answer"], "fix": "better"}},
            r'--decisions .*: \'planner\': "fix" must be \{"system": "the corrected system message"\}',
        ),
        (
            {"planner": {"options": ["search", "answer"], "acept": ["search"]}},
            r"--decisions .*: 'planner': unknown fields \['acept'\]",
        ),
        (
            {"Planner": {"options": ["search", "answer"]}},
            r"options are declared for agents \['Planner'\] that match no step of runs .*; "
            r"the agents with model calls in these runs are \['planner', 'researcher', 'writer'\]",
        ),
    ],
)
def test_blame_command_bad_decisions(api, tmp_path, capsys, changes, message):
    with pytest.raises(SystemExit) as exit:
        main(command(api, tmp_path, decisions_file(tmp_path, **changes), "--no-progress"))
    assert exit.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_blame_command_without_a_fix(api, tmp_path, capsys):
    spec = {"planner": {"options": ["search", "answer"], "accept": ["search"]}}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(SystemExit):
        main(command(api, tmp_path, str(path), "--no-progress"))
    assert "--decisions: 'planner' has no \"fix\"" in capsys.readouterr().err


def test_whowhen_on_a_span_file_points_to_blame(capsys):
    with pytest.raises(SystemExit):
        main(["whowhen", str(SPANS)])
    err = capsys.readouterr().err
    assert "holds OpenTelemetry or OpenInference spans, not labelled runs" in err
    assert f"python -m blamejax blame {SPANS} --decisions DECISIONS.json --scorer MODEL" in err


def test_blame_command_on_mlflow_traces(api, tmp_path, capsys):
    """MLflow's trace JSON lines are recognised; the run whose writer's call raised is named
    as failing outside the declared decisions, with no culprit."""
    spans = SPANS.parent.parent / "mlflow" / "mlflow-3.17.2.jsonl"
    first = json.loads(spans.read_text(encoding="utf-8").splitlines()[0])["info"]["trace_id"]
    outcomes = tmp_path / "outcomes.json"
    outcomes.write_text(json.dumps({first: False}), encoding="utf-8")
    decisions = decisions_file(tmp_path)
    spec = json.loads(pathlib.Path(decisions).read_text(encoding="utf-8"))
    del spec["writer"]  # the writer's call raised in the second run: no reply to declare
    pathlib.Path(decisions).write_text(json.dumps(spec), encoding="utf-8")
    argv = command(api, tmp_path, decisions, "--no-progress", "--outcomes", str(outcomes))
    argv[1] = str(spans)
    assert main(argv) == 0
    rows = capsys.readouterr().out.splitlines()[2:4]
    assert rows[0].split()[1:5] == ["failed", "planner", "Completions", "Completions"]
    assert rows[1].split()[1:] == [
        "failed",
        "-",
        "-",
        "-",
        "failed",
        "outside",
        "the",
        "declared",
        "decisions",
    ]
