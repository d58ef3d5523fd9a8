"""bj.scorers.fill_lazily: lazy filling scores exactly the rows that a brute-force
reachability check (every coalition, every inferred world, Gumbel-max by hand on the full
tables) reaches, never more than the naive count, and blames as the full tables do."""

import hashlib
import itertools
import math

import numpy as np
import pytest

import blamejax as bj
from blamejax.scorers import FunctionScorer, Request, fill_lazily

OPTIONS = {
    "plan": ("search", "answer", "ask"),
    "look": ("web", "docs"),
    "reply": ("cite", "guess", "refuse"),
}


def _runs(num_runs):
    plan = bj.traces.Step(
        "plan", agent="Planner", options=OPTIONS["plan"], accept=("search", "ask"), choice="answer"
    )
    look = bj.traces.Step(
        "look",
        agent="Searcher",
        parents=("plan",),
        given="plan",
        options=OPTIONS["look"],
        choice="web",
    )
    reply = bj.traces.Step(
        "reply",
        agent="Writer",
        parents=("look",),
        given="look",
        options=OPTIONS["reply"],
        accept=("cite",),
        choice="guess",
    )
    return [bj.traces.Run(f"r{i}", (plan, look, reply), passed=False) for i in range(num_runs)]


def _request(run, step, variant, parent):
    return Request(step.name, variant, {"run": run.run, "after": parent}, step.options)


def _logits(request):
    """Deterministic logits with some -inf, so some rows are never reached."""
    digest = hashlib.sha256(request.key.encode()).digest()
    row = np.asarray([(b % 16) / 4.0 for b in digest[: len(request.options)]], np.float64)
    if request.step == "plan" and request.variant == "factual":
        row[2] = -math.inf  # "ask" never happens in the factual plan
    if request.step == "plan" and request.variant == "fix":
        row[1] = -math.inf
    if request.step == "look":
        row[0] += 6.0  # "web" nearly always
    return row


def _full(runs):
    """Every row of every table scored (the naive fill), as Runs."""
    out = []
    for run in runs:
        steps = {s.name: s for s in run.steps}
        new = []
        for step in run.steps:
            logits = {}
            for variant in ("factual", "fix"):
                if step.given is None:
                    logits[variant] = tuple(_logits(_request(run, step, variant, None)).tolist())
                else:
                    logits[variant] = tuple(
                        tuple(_logits(_request(run, step, variant, p)).tolist())
                        for p in steps[step.given].options
                    )
            new.append(bj.traces.Step(**{**step.__dict__, "logits": logits}))
        out.append(bj.traces.Run(run.run, tuple(new), passed=False))
    return out


def _reached(tc, worlds):
    """Brute force: the rows (run, step, variant, parent option) some coalition reaches in
    some world, by Gumbel-max on the full tables; plus the observed path's factual rows."""
    rows = set()
    noise = [np.asarray(n) for n in worlds.overrides]  # one [F, W, K] per site, in step order
    logits = tc.cases["logits"]
    for f in range(len(tc.runs)):
        for j, name in enumerate(tc.steps):
            parent = tc.pipeline.given[j]
            rows.add((f, name, 0, 0 if parent is None else int(tc.observed[f, parent])))
        for bits in itertools.product((0, 1), repeat=len(tc.steps)):
            for w in range(noise[0].shape[1]):
                made = []
                for j, name in enumerate(tc.steps):
                    parent = tc.pipeline.given[j]
                    g = 0 if parent is None else made[parent]
                    table = logits[name][f, bits[j]]
                    row = table if parent is None else table[g]
                    rows.add((f, name, bits[j], g))
                    made.append(int(np.argmax(row + noise[j][f, w][: len(row)])))
    return rows


def test_lazy_filling_scores_exactly_the_reached_rows():
    num_runs, num_worlds = 3, 4
    runs = _runs(num_runs)
    scorer = FunctionScorer(_logits)
    fill = fill_lazily(runs, scorer, _request, key=5, num_worlds=num_worlds)
    full = bj.traces.trace_cases(_full(runs))
    worlds = bj.inferred_worlds(
        full.pipeline, full.cases, full.observed, bj.noise.as_key(5), num_worlds
    )
    reached = _reached(full, worlds)
    scored = {
        (int(f), name, int(v), int(g))
        for name, k in fill.known.items()
        for f, v, g in zip(*np.nonzero(k))
    }
    assert scored == reached
    assert (
        fill.calls == len(reached) == scorer.meter.calls <= fill.naive == num_runs * 2 * (1 + 3 + 2)
    )
    assert fill.calls < fill.naive
    for f, name, v, g in reached:  # the scored rows are the full tables' rows
        table = np.asarray(full.cases["logits"][name][f, v])
        got = np.asarray(fill.cases.cases["logits"][name][f, v])
        np.testing.assert_array_equal(
            got if table.ndim == 1 else got[g], table if table.ndim == 1 else table[g]
        )
    exact = fill.blame()
    truth = bj.traces.blame_runs(full, key=5, num_worlds=num_worlds)
    np.testing.assert_array_equal(
        np.asarray(exact.result.shapley), np.asarray(truth.result.shapley)
    )


@pytest.mark.slow
def test_monte_carlo_blame_of_a_lazy_fill_equals_that_of_the_full_tables():
    runs, num_worlds = _runs(3), 4
    fill = fill_lazily(runs, FunctionScorer(_logits), _request, key=5, num_worlds=num_worlds)
    full = bj.traces.trace_cases(_full(runs))
    budget = 10 * num_worlds  # 4 permutations: 2 W + 4 W (n - 1), n = 3
    mc = fill.blame(estimator="mc", max_evaluations=budget, stop=())
    mc_truth = bj.traces.blame_runs(
        full, key=5, num_worlds=num_worlds, estimator="mc", max_evaluations=budget, stop=()
    )
    np.testing.assert_array_equal(np.asarray(mc.result.values), np.asarray(mc_truth.result.values))


def test_lazy_filling_checks_its_arguments():
    runs = _runs(1)
    with pytest.raises(TypeError, match="`scorer` must be a bj.scorers.Scorer"):
        fill_lazily(runs, _logits, _request)
    with pytest.raises(ValueError, match=r"`players` \['nope'\] are not decision steps to score"):
        fill_lazily(runs, FunctionScorer(_logits), _request, players=["nope"])
    wrong = lambda run, step, variant, parent: Request(step.name, variant, None, ("x", "y"))
    with pytest.raises(ValueError, match="`request` returned options"):
        fill_lazily(runs, FunctionScorer(_logits), wrong)


def test_a_130_step_run_is_filled_and_blamed_exactly():
    """130 decision steps, each given the one before: the walk scores at most 2 x K_given rows
    per step (the old replay of every coalition stopped at 12 players), and exact blame by
    structure on the filled tables equals blame on every row scored."""
    n, options = 130, ("a", "b", "c")
    steps = []
    for i in range(n):
        given = None if i == 0 else f"d{i - 1}"
        steps.append(
            bj.traces.Step(
                f"d{i}",
                agent=f"agent{i % 3}",
                parents=() if given is None else (given,),
                given=given,
                options=options,
                accept=("a", "b"),
                choice="c" if i == 77 else "a",
            )
        )
    runs = [bj.traces.Run("long", tuple(steps), passed=False)]
    fill = fill_lazily(runs, FunctionScorer(_logits), _request, key=2, num_worlds=4)
    assert fill.calls <= fill.naive == n * 2 * 3 - 2 * 2  # the first step has no given step
    blamed = fill.blame()
    assert blamed.result.method == "structured" and len(blamed.result.steps) == n
    truth = bj.traces.blame_runs(bj.traces.trace_cases(_full(runs)), key=2, num_worlds=4)
    np.testing.assert_allclose(
        np.asarray(blamed.result.shapley), np.asarray(truth.result.shapley), atol=1e-6
    )
    assert np.abs(np.asarray(truth.result.shapley)).max() > 1e-3
