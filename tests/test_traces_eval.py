"""The Who&When evaluation (`bj.benchmarks.whowhen`: evaluate, baselines, `python -m blamejax whowhen`).

Ground truth: hand-counted runs, every possible guess enumerated for the random baseline,
and on the shipped half of Who&When (126 traces) the published random baseline.
"""

import fractions
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import blamejax as bj
from blamejax._cli import main
from blamejax.benchmarks import whowhen
from blamejax.benchmarks.whowhen import Prediction
from blamejax.traces import Run, Step

ROOT = pathlib.Path(__file__).resolve().parent.parent
WHOWHEN = ROOT / "tests" / "data" / "whowhen" / "algorithm-generated"  # MIT licence beside it
NEG = float("-inf")


def _run(name, agents, label_agent, label_step):
    steps = tuple(Step(f"{i}", agent=a) for i, a in enumerate(agents))
    return Run(name, steps, passed=False, decisive_agent=label_agent, decisive_step=label_step)


RUNS = [
    _run("r0", ["A", "B", "A", "C", "A"], "B", 1),  # 5 steps, 3 agents
    _run("r1", ["A", "B"], "A", 0),  # 2 steps, 2 agents
    _run("r2", ["C", "C", "D"], "D", 2),  # 3 steps, 2 agents
]


def test_scores_by_hand():
    guesses = {"r0": Prediction("B", 3), "r1": Prediction("B", 0), "r2": Prediction(None, 2)}
    ev = whowhen.evaluate(RUNS, guesses, method="m")
    # agent: r0 right, r1 wrong, r2 none (wrong); step: r0 off by 2, r1 right, r2 right.
    assert [ev.score(n).correct for n in ("agent", "step", "step ±1", "step ±3", "step ±5")] == [
        1,
        2,
        2,
        3,
        3,
    ]
    assert ev.missing_agent == ("r2",) and ev.missing_step == () and ev.num_runs == 3
    low, high = bj.stats.wilson_interval(2, 3, delta=0.05)
    assert (ev.score("step").low, ev.score("step").high) == (float(low), float(high))
    assert ev.score("agent").rate == pytest.approx(1 / 3, abs=1e-15)
    assert all(s.name != "step (substring)" for s in ev.scores)


def test_substring_rule_is_labelled_and_inflates():
    runs = [_run(f"r{t}", ["A"] * 12, "A", t) for t in range(11)]
    ev = whowhen.evaluate(runs, whowhen.constant_predictions(runs, 105), substring=True)
    # "105" holds the labels 0, 1, 5 and 10 as substrings, and matches none exactly.
    assert ev.score("step (substring)").correct == 4 and ev.score("step").correct == 0
    table = whowhen.evaluation_table([ev])
    assert "step (substring)" in table and "for comparison only" in table


def test_random_baseline_equals_every_guess_enumerated():
    expected = {}
    for run in RUNS:
        agents, num = run.agents, len(run.steps)
        hits = {
            "agent": fractions.Fraction(sum(a == run.decisive_agent for a in agents), len(agents))
        }
        for name, k in (("step", 0), ("step ±1", 1), ("step ±3", 3), ("step ±5", 5)):
            hits[name] = fractions.Fraction(
                sum(abs(j - run.decisive_step) <= k for j in range(num)), num
            )
        for name, value in hits.items():
            expected[name] = expected.get(name, 0) + value
    ev = whowhen.random_baseline(RUNS)
    assert ev.expectation and all(s.low is None for s in ev.scores)
    for name, value in expected.items():
        assert ev.score(name).correct == pytest.approx(float(value), abs=1e-12)
    # By hand: agent 1/3 + 1/2 + 1/2; step 1/5 + 1/2 + 1/3; step ±1: 3/5 + 1 + 2/3.
    assert ev.score("agent").correct == pytest.approx(4 / 3, abs=1e-12)
    assert ev.score("step ±1").correct == pytest.approx(3 / 5 + 1 + 2 / 3, abs=1e-12)


def test_first_last_and_most_frequent_baselines_by_hand():
    named = {ev.method: ev for ev in whowhen.baselines(RUNS)}
    assert list(named) == ["random (expectation)", "first step", "last step", "most frequent agent"]
    first, last, frequent = named["first step"], named["last step"], named["most frequent agent"]
    # first: (A, 0) (A, 0) (C, 0): agent right in r1, step right in r1.
    assert (first.score("agent").correct, first.score("step").correct) == (1, 1)
    # last: (A, 4) (B, 1) (D, 2): agent right in r2, step right in r2; ±3: r0 (|4-1| = 3), r1, r2.
    assert (
        last.score("agent").correct,
        last.score("step").correct,
        last.score("step ±3").correct,
    ) == (1, 1, 3)
    # most frequent: A (3 of 5), A (tie A/B: the first to act), C: right in r1 only; no step.
    assert frequent.score("agent").correct == 1 and len(frequent.missing_step) == 3


def test_shipped_half_gives_the_published_random_baseline():
    runs = bj.traces.from_whowhen(WHOWHEN)
    assert len(runs) == 126
    ev = whowhen.random_baseline(runs)
    # 1 / (distinct agents of the run's history), 1 / (its steps), averaged over the runs.
    agent = sum(fractions.Fraction(1, len(r.agents)) for r in runs) / len(runs)
    step = sum(fractions.Fraction(1, len(r.steps)) for r in runs) / len(runs)
    assert ev.score("agent").rate == pytest.approx(float(agent), abs=1e-12)
    assert ev.score("step").rate == pytest.approx(float(step), abs=1e-12)
    assert f"{100 * ev.score('agent').rate:.2f}" == "29.10"  # the paper: 29.10 %
    assert f"{100 * ev.score('step').rate:.2f}" == "12.00"  # the paper: 12.00 %


def test_shipped_half_constant_answer_under_substring_scoring():
    runs = bj.traces.from_whowhen(WHOWHEN)
    ev = whowhen.evaluate(runs, whowhen.constant_predictions(runs, 105), substring=True)
    labels = [r.decisive_step for r in runs]
    assert ev.score("step (substring)").correct == sum(t in (0, 1, 5, 10, 105) for t in labels)
    assert ev.score("step").correct == sum(t == 105 for t in labels)
    assert 0.5 < ev.score("step (substring)").rate < 0.6  # the data's README: about 54 %


def test_predictions_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"predictions file '.*nope.json': no such file"):
        whowhen.load_predictions(tmp_path / "nope.json", RUNS)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad.json': not valid JSON"):
        whowhen.load_predictions(bad, RUNS)
    bad.write_text(
        json.dumps(
            {"r0": {"step": 1.0}, "zz": {"agent": "A"}, "r1": {"agent": 3}, "r2": {"who": "A"}}
        )
    )
    with pytest.raises(ValueError) as error:
        whowhen.load_predictions(bad, RUNS)
    message = str(error.value)
    assert "['r0'].step: expected an integer step index or null, got 1.0" in message
    assert "['zz']: unknown run id" in message
    assert "['r1'].agent: expected a string or null, got 3" in message
    assert "['r2']: unknown fields ['who']" in message
    bad.write_text(json.dumps({"r0": {"step": True}}))
    with pytest.raises(
        ValueError, match=r"\['r0'\].step: expected an integer step index or null, got True"
    ):
        whowhen.load_predictions(bad, RUNS)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"r0": {"agent": "B", "step": 1}}))
    assert whowhen.load_predictions(good, RUNS) == {"r0": Prediction("B", 1)}


def test_runs_without_labels_are_refused_by_name():
    unlabelled = Run("u1", (Step("0", agent="A"),), passed=False, decisive_agent="A")
    with pytest.raises(ValueError, match=r"run 'u1': missing label `decisive_step`"):
        whowhen.evaluate(RUNS + [unlabelled], {})
    with pytest.raises(ValueError, match=r"run 'u1': missing label `decisive_step`"):
        whowhen.random_baseline([unlabelled])


def _logit_run(name):
    """Two decision steps: either fix alone repairs the run (Shapley 1/2 each), so blamejax
    names the earliest repairing step, s0 (agent A)."""
    s0 = Step(
        "s0",
        agent="A",
        options=("good", "bad"),
        logits={"factual": (0.0, 0.0), "fix": (0.0, NEG)},
        choice="bad",
    )
    talk = Step("talk", agent="B", output="free text")
    s1 = Step(
        "s1",
        agent="B",
        parents=("s0",),
        given="s0",
        options=("ok", "bad"),
        logits={"factual": ((0.0, NEG), (NEG, 0.0)), "fix": ((0.0, NEG), (0.0, NEG))},
        accept=("ok",),
        choice="bad",
    )
    return Run(name, (s0, talk, s1), passed=False, decisive_agent="A", decisive_step=0)


def test_command_scores_a_trace_file_with_blamejax_beside_the_baselines(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    bj.traces.write(path, [_logit_run("a"), _logit_run("b"), *RUNS])
    predictions, left = whowhen.blame_predictions(
        bj.traces.read(path), key=0, num_worlds=8
    )  # the command's W: compiled once
    assert predictions == {"a": Prediction("A", 0), "b": Prediction("A", 0)}
    assert left == ("r0", "r1", "r2")
    guesses = tmp_path / "guesses.json"
    guesses.write_text(json.dumps({"a": {"agent": "A", "step": 2}}))
    assert main(["whowhen", str(path), "--predictions", str(guesses), "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "Who&When evaluation of 5 runs" in out
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert rows["guesses.json"].endswith("4 / 4")  # four runs without a prediction, counted
    assert rows["blamejax (seed 3)"].split()[3:5] == ["40.00", "[11.8,"]  # 2 of 5 agents right
    assert "blamejax names no agent or step for 3 of 5 runs" in out
    assert "random (expectation)" in out and "most frequent agent" in out
    assert "substring" not in out


def test_command_errors_name_the_file_and_field(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["whowhen", str(tmp_path / "missing")])
    assert exit_.value.code == 2 and "missing': no such file or folder" in capsys.readouterr().err
    path = tmp_path / "runs.jsonl"
    bj.traces.write(path, RUNS)
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"r9": {"step": 1}}))
    with pytest.raises(SystemExit):
        main(["whowhen", str(path), "--predictions", str(bad)])
    assert "p.json: ['r9']: unknown run id" in capsys.readouterr().err
    bj.traces.write(path, [Run("nolabel", (Step("0", agent="A"),), passed=False)])
    with pytest.raises(SystemExit):
        main(["whowhen", str(path)])
    assert "run 'nolabel': missing label `decisive_agent`" in capsys.readouterr().err


def test_module_command_on_the_shipped_half():
    out = subprocess.run(
        [sys.executable, "-m", "blamejax", "whowhen", str(WHOWHEN), "--substring"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "Who&When evaluation of 126 runs" in out.stdout
    random_row = next(line for line in out.stdout.splitlines() if line.startswith("random"))
    assert random_row.split()[2:4] == ["29.10", "12.00"]
    assert "blamejax names no agent or step for 126 of 126 runs" in out.stdout
    assert np.isfinite(float(random_row.split()[4]))
