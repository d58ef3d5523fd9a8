"""Fit a fix with exact gradients in expectation over the noise against the relaxed recipe,
and compare held-out hard-mode repair.

Two problems, one protocol:

- `rag`: the stochastic-RAG demo (400 questions, seed 0), steps retrieve and answer; the
  hand-written shift is failure 0's fix minus its factual table.
- `scm`: an SCM family with injected culprits (`blamejax.benchmarks.scm`: a chain of
  `--scm-steps` steps, K = 4, defaults otherwise), `--scm-failures` failures whose injected
  culprit is step 3 (`inject_errors(..., steps=[3])`; each failure has its own tables, so
  one shared shift cannot undo every corruption); the starting shift is `--scm-start` (0.25)
  times failure 0's fix minus its factual table (its own corruption undone), and the ball's
  radius that whole shift's norm (failure 0's whole shift already repairs most held-out
  failures, which leaves the fits nothing to show).

The failures under their recorded noise are split in half (every other failure). For one
step, a shift of its fix logits (shared by every failure: fix = factual + shift) is fitted on
the training half from the starting shift with `optax.adam(0.05)`, `--updates` updates,
projected onto the l2 ball of the starting shift's norm, maximising the mean fix-alone repair
of:

- relaxed: the docs' recipe, `Relaxed(0.3)` under each failure's recorded noise;
- expected: `expected_worlds` with the observed choices (the counterfactual posterior given
  the observed run, integrated exactly: exact gradients, no temperature).

Each shift is evaluated on the held-out half in hard mode under each failure's recorded
noise (does the fix alone repair it: 0/1 per failure), with its Wilson interval, and by the
expected counterfactual repair. The two fitted shifts are compared pair by pair: the
failures one repairs and the other does not, the exact McNemar p-value (two-sided binomial
test on the discordant pairs) and Newcombe's paired interval for the difference.

Usage: python benchmarks/bench_expected_fit.py [--problems rag scm] [--updates 200]
[--scm-steps 8] [--scm-failures 300] [--scm-start 0.25]
"""

import argparse
import math
import time
from typing import NamedTuple

import jax
import numpy as np
import optax

import blamejax as bj
from blamejax.benchmarks import scm
from blamejax.demos._fit import paired_difference_interval


class Problem(NamedTuple):
    """Failures to fit a fix on: their cases `[F, ...]`, case ids `[F]`, recorded worlds
    `[F, 1]`, observed choices `[F, sites]`, and how to read and write a step's table."""

    name: str
    pipeline: object
    cases: object
    ids: np.ndarray
    recorded: bj.World
    observed: np.ndarray
    steps: tuple
    start: float  # the starting shift: this times failure 0's fix minus its factual table
    get: object  # get(cases, step) -> [F, 2, ...]
    put: object  # put(cases, step, table) -> cases


def observed_choices(pipeline, cases, worlds):
    out = bj.replay(pipeline, cases, worlds)
    return np.asarray(out["score"][:, 0]), np.asarray(out["choice"][:, 0])


def rag_problem() -> Problem:
    pipeline, cases, ids = bj.demos.rag_pipeline, bj.demos.rag_cases(400, seed=0), np.arange(400)
    score, choice = observed_choices(pipeline, cases, bj.recorded_worlds(0, ids))
    failed = np.flatnonzero(score < 1)
    return Problem(
        "RAG demo (400 questions, seed 0)",
        pipeline,
        jax.tree_util.tree_map(lambda x: x[failed], cases),
        failed,
        bj.recorded_worlds(0, failed),
        choice[failed],
        ("retrieve", "answer"),
        1.0,
        lambda c, step: c[step],
        lambda c, step, table: dict(c, **{step: table}),
    )


def scm_problem(num_steps: int, num_failures: int, start: float, culprit: int = 3) -> Problem:
    model = scm.make_scm(0, num_steps=num_steps, num_options=4)
    failures = scm.inject_errors(1, model, num_failures, steps=[culprit])
    score, choice = observed_choices(model.pipeline, failures.cases, failures.worlds)
    assert (score < 0.5).all()
    return Problem(
        f"SCM chain, n = {num_steps}, K = 4, culprit injected at step {culprit} "
        f"({failures.summary()})",
        model.pipeline,
        failures.cases,
        np.asarray(failures.candidate_ids),
        failures.worlds,
        choice,
        (model.steps[culprit],),
        start,
        lambda c, step: c.logits[int(step[4:])],
        lambda c, step, table: c._replace(
            logits=tuple(table if i == int(step[4:]) else t for i, t in enumerate(c.logits))
        ),
    )


def repair(problem: Problem, step, shift, rows, how):
    """Fix-alone repair of `step` with fix = factual + `shift`, per failure of `rows` `[R]`:
    `how` "hard" or "relaxed" under the recorded noise, "expected" over the posterior."""
    sub = jax.tree_util.tree_map(lambda x: x[rows], problem.cases)
    table = problem.get(sub, step)
    sub = problem.put(sub, step, table.at[:, 1].set(table[:, 0] + shift))
    names = bj.discover(problem.pipeline, jax.tree_util.tree_map(lambda x: x[0], sub)).steps
    j = list(names).index(step)
    if how == "expected":
        worlds, mode = bj.expected_worlds(problem.ids[rows], problem.observed[rows]), None
    else:
        worlds = jax.tree_util.tree_map(lambda x: x[rows], problem.recorded)
        mode = bj.Hard() if how == "hard" else bj.Relaxed(0.3)

    def one(c, w):
        return bj.shapley_values(problem.pipeline, c, w, mode=mode).fix_alone[j]

    # 16 failures at a time: one vmap over 75+ relaxed failures crashed XLA (signal 11)
    return jax.lax.map(lambda x: one(*x), (sub, worlds), batch_size=16)


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value: the binomial(b + c, 1/2) test of the discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def compare(problem: Problem, step, updates: int):
    num = problem.observed.shape[0]
    train, held = np.arange(num)[::2], np.arange(num)[1::2]
    table = problem.get(problem.cases, step)
    whole = table[0, 1] - table[0, 0]
    radius = float(np.linalg.norm(np.asarray(whole)))
    hand = problem.start * whole
    fitted = {}
    for how in ("relaxed", "expected"):
        start = time.perf_counter()
        fit = bj.fit_fixes(
            lambda s, how=how: -repair(problem, step, s, train, how).mean(),
            hand,
            optax.adam(0.05),
            updates,
            project=lambda s: optax.projections.projection_l2_ball(s, radius),
        )
        fitted[how] = (fit.params, time.perf_counter() - start)
    print(f"\n### {step} ({train.size} train, {held.size} held out)\n")
    print(
        "| shift | held-out hard repair (recorded noise) | 95% Wilson interval "
        "| held-out expected counterfactual repair | fit time (s) |"
    )
    print("|---|---:|---:|---:|---:|")
    hard = {}
    rows = [("starting (hand-written)", hand, 0.0)] + [
        (f"fitted ({h})", p, t) for h, (p, t) in fitted.items()
    ]
    for name, shift, seconds in rows:
        hard[name] = np.asarray(repair(problem, step, shift, held, "hard")) >= 0.5
        low, high = bj.stats.wilson_interval(int(hard[name].sum()), held.size)
        expected = float(repair(problem, step, shift, held, "expected").mean())
        print(
            f"| {name} | {hard[name].mean():.1%} ({int(hard[name].sum())}/{held.size}) "
            f"| {float(low):.1%} – {float(high):.1%} | {expected:.1%} | {seconds:.1f} |"
        )
    exp, rel = hard["fitted (expected)"], hard["fitted (relaxed)"]
    b, c = int((exp & ~rel).sum()), int((~exp & rel).sum())
    diff, low, high = paired_difference_interval(exp.astype(float), rel.astype(float))
    print(
        f"\nPaired (held out): the expected fit repairs {b} failures the relaxed fit does not, "
        f"the relaxed fit {c} the expected fit does not; exact McNemar p = {mcnemar_p(b, c):.3g}; "
        f"difference {diff:+.1%} (Newcombe 95% interval {low:+.1%} to {high:+.1%})."
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=["rag", "scm"], choices=["rag", "scm"])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--scm-steps", type=int, default=8)
    parser.add_argument("--scm-failures", type=int, default=300)
    parser.add_argument("--scm-start", type=float, default=0.25)
    args = parser.parse_args(argv)
    for name in args.problems:
        start = time.perf_counter()
        if name == "rag":
            problem = rag_problem()
        else:
            problem = scm_problem(args.scm_steps, args.scm_failures, args.scm_start)
        print(f"\n## {problem.name}: {problem.observed.shape[0]} failures")
        for step in problem.steps:
            compare(problem, step, args.updates)
        print(f"\n({name}: {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
