"""What scoring a real trace costs: model calls per failure for exact and Monte Carlo blame of
the Who&When run that notebooks/whowhen_blame.ipynb blames, lazy filling against the naive
count, counted by a `bj.scorers.Meter`.

    python benchmarks/scorer_costs.py                  # the table (about 30 s on a CPU)
    python benchmarks/scorer_costs.py --write-fixture  # rewrite notebooks/data/whowhen_scores.sqlite

The scorer here is a stand-in: hand-set probabilities (STAND_IN below) returned as letter
log-probabilities would be, through `FunctionScorer` with a fresh cache, so every call it
makes is one a model would have been asked. No model is called; there is no network here. With
a real `OpenAIScorer` the calls are the same in number (they depend on the logits only through
which rows the coalitions reach), and its meter adds the tokens the server reports.

`--write-fixture` stores every row of every table (the naive fill) in the notebook's cache
fixture under the identity of the notebook's `OpenAIScorer` (model name "hand-set-scores"), so
the notebook replays it offline whatever worlds it asks for; the table run checks that the
fixture holds exactly the stand-in's logits.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shutil
import sqlite3
import sys
import tempfile
import time

import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import blamejax as bj  # noqa: E402
from blamejax.scorers import Cache, FunctionScorer, Meter, OpenAIScorer, Request, fill_lazily  # noqa: E402

DATA = ROOT / "notebooks" / "data"
FIXTURE = DATA / "whowhen_scores.sqlite"
MODEL = "hand-set-scores"  # the notebook's OpenAIScorer model name: no model made these scores

# The stand-in's probabilities of each option: {step: {variant: row}} or, for a step given
# another, {step: {variant: [row per option of the given step]}}. Set by hand to say: the
# factual translator mostly gets the cases wrong, its fix mostly right; the factual verifier
# approves what it is shown, its fix catches wrong cases; the grammar expert's fix rechecks.
STAND_IN = {
    "1 Tizin_Translation_Expert": {"factual": [0.70, 0.15, 0.15], "fix": [0.05, 0.85, 0.10]},
    "2 Verification_Expert": {
        "factual": [[0.90, 0.10], [0.95, 0.05], [0.70, 0.30]],
        "fix": [[0.20, 0.80], [0.90, 0.10], [0.15, 0.85]],
    },
    "4 TizinGrammar_Expert": {"factual": [0.90, 0.10], "fix": [0.40, 0.60]},
}


def load():
    """The run with its three decision points as steps with options, and the decisions."""
    decisions = json.loads((DATA / "whowhen_41_decisions.json").read_text())
    [run] = bj.traces.from_whowhen(DATA / decisions["trace"])
    by_step = {d["step"]: d for d in decisions["decisions"]}
    steps = []
    for step in run.steps:
        d = by_step.get(step.name)
        if d is not None:
            step = dataclasses.replace(
                step, options=tuple(d["options"]), choice=d["options"][0], given=d["given"]
            )
        steps.append(step)
    return dataclasses.replace(run, steps=tuple(steps)), by_step


def make_request(by_step):
    """`request(run, step, variant, parent)`: what each row of a table asks (as the notebook)."""

    def request(run, step, variant, parent):
        inputs = {"task": run.extra["question"], "agent": step.agent}
        if parent is not None:
            inputs["translation"] = parent
        if variant == "fix":
            inputs["guidance"] = by_step[step.name]["fix"]
        return Request(step.name, variant, inputs, step.options)

    return request


def make_score(by_step):
    """The run passes iff its final answer is right: the translator translates right, or the
    verifier or the grammar expert corrects it."""
    repairs = {}
    for name, d in by_step.items():
        row = np.zeros(len(d["options"]))
        row[d["repairs"]] = 1.0
        repairs[name] = row

    def score(choices):
        wrong = 1.0
        for name, row in repairs.items():
            wrong = wrong * (1.0 - choices[name].take(jnp.asarray(row, jnp.result_type(float))))
        return 1.0 - wrong

    return score


def stand_in(request):
    """The stand-in's logits of one request: log of its hand-set probabilities."""
    row = STAND_IN[request.step][request.variant]
    if "translation" in request.inputs:
        translations = json.loads((DATA / "whowhen_41_decisions.json").read_text())["decisions"][0][
            "options"
        ]
        row = row[translations.index(request.inputs["translation"])]
    return np.log(np.asarray(row, np.float64))


def notebook_scorer(cache):
    """The notebook's scorer: a local OpenAI-compatible server's address, offline cache."""
    return OpenAIScorer(MODEL, base_url="http://127.0.0.1:8000/v1", api_key="none", cache=cache)


def every_request(run, request):
    """Every row of every table: the naive fill."""
    steps = {s.name: s for s in run.steps}
    out = []
    for step in run.decisions:
        parents = [None] if step.given is None else list(steps[step.given].options)
        out += [request(run, step, v, p) for v in ("factual", "fix") for p in parents]
    return out


def write_fixture():
    run, by_step = load()
    request = make_request(by_step)
    FIXTURE.unlink(missing_ok=True)
    cache = Cache(FIXTURE)
    identity = notebook_scorer(cache).identity
    requests = every_request(run, request)
    for r in requests:
        cache.put(identity, r, stand_in(r))
    cache.close()
    db = sqlite3.connect(FIXTURE)  # a plain file in the repository: no journal beside it
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("VACUUM")
    db.close()
    print(f"wrote {len(requests)} rows to {FIXTURE.relative_to(ROOT)} under {identity}")


def costs(worlds=(1, 4, 16, 64), samples=64):
    run, by_step = load()
    request, score = make_request(by_step), make_score(by_step)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        fixture = pathlib.Path(folder) / "fixture.sqlite"
        shutil.copy(FIXTURE, fixture)
        replay = notebook_scorer(Cache(fixture, offline=True))
        for num_worlds in worlds:
            for estimator in ("exact", "mc"):
                meter = Meter()
                cache = Cache(pathlib.Path(folder) / f"{estimator}-{num_worlds}.sqlite")
                scorer = FunctionScorer(stand_in, name="stand-in", cache=cache, meter=meter)
                start = time.perf_counter()
                fill = fill_lazily(
                    [run], scorer, request, key=0, num_worlds=num_worlds, score=score
                )
                # Monte Carlo: `samples` permutations of the 3 players in every world.
                options = (
                    {}
                    if estimator == "exact"
                    else {"max_evaluations": num_worlds * (2 + samples * 2)}
                )
                out = fill.blame(estimator=estimator, **options)
                seconds = time.perf_counter() - start
                calls = meter.calls
                again = fill_lazily(
                    [run], scorer, request, key=0, num_worlds=num_worlds, score=score
                )
                offline = fill_lazily(
                    [run], replay, request, key=0, num_worlds=num_worlds, score=score
                )
                for name, table in fill.cases.cases[
                    "logits"
                ].items():  # the fixture holds the stand-in's logits
                    if not np.array_equal(table, offline.cases.cases["logits"][name]):
                        raise AssertionError(
                            f"the fixture's logits of {name} differ from the stand-in's; rerun --write-fixture"
                        )
                read = bj.traces.readout(out.result, out.cases.agent_map)
                rows.append(
                    (
                        estimator,
                        num_worlds,
                        calls,
                        fill.naive,
                        fill.rounds,
                        meter.calls - calls,
                        meter.hits,
                        read.when[0],
                        seconds,
                    )
                )
                assert (
                    again.calls == fill.calls and meter.calls == calls
                )  # the second fill: cache hits only
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--write-fixture", action="store_true", help="rewrite the notebook's cache fixture"
    )
    args = parser.parse_args()
    if args.write_fixture:
        write_fixture()
        return
    rows = costs()
    print("Who&When run 41, 3 decision steps (3, 2 given 3, 2 options), 1 failure; stand-in scorer")
    print(
        f"{'estimator':<10}{'worlds':>7}{'calls':>7}{'naive':>7}{'rounds':>8}{'calls again':>13}"
        f"{'hits again':>12}  {'most blamed':<28}{'seconds':>8}"
    )
    for estimator, w, calls, naive, rounds, more, hits, when, seconds in rows:
        print(
            f"{estimator:<10}{w:>7}{calls:>7}{naive:>7}{rounds:>8}{more:>13}{hits:>12}  {when:<28}{seconds:>8.2f}"
        )
    print(
        "calls: model answers for one failure (the meter); naive: every step x variant x parent option;"
    )
    print("calls again: a second fill from the same cache; mc: 64 permutations per world")


if __name__ == "__main__":
    main()
