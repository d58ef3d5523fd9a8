"""Fit a fix with exact gradients in expectation over the noise against the relaxed recipe,
and compare held-out hard-mode repair.

On the stochastic-RAG demo (400 questions, seed 0), the failures under their recorded noise
are split in half (every other failure). For one step, a shift of its fix logits is fitted on
the training half, starting from the hand-written shift, with `optax.adam(0.05)`, 200
updates, projected onto the l2 ball of the hand-written shift's norm, maximising the mean
fix-alone repair of:

- relaxed: the docs' recipe, `Relaxed(0.3)` under each failure's recorded noise;
- expected: `expected_worlds` with the observed choices (the counterfactual posterior given
  the observed run, integrated exactly: exact gradients, no temperature).

Both fitted shifts (and the hand-written one) are evaluated in hard mode under the held-out
failures' recorded noise (the share the fix alone repairs), and, as a second measure, by
the expected counterfactual repair. Usage: python benchmarks/bench_expected_fit.py [STEP ...]
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import blamejax as bj

PIPELINE = bj.demos.rag_pipeline
STEPS = sys.argv[1:] or ["retrieve", "answer"]
cases = bj.demos.rag_cases(400, seed=0)
ids = np.arange(400)
out = bj.replay(PIPELINE, cases, bj.recorded_worlds(0, ids))
failed = np.flatnonzero(np.asarray(out["score"][:, 0]) < 1)
choices = (
    np.stack([np.asarray(c[:, 0]) for c in out["choice"]], 1)
    if isinstance(out["choice"], (list, tuple))
    else np.asarray(out["choice"][:, 0])
)
failures = jax.tree_util.tree_map(lambda x: x[failed], cases)
observed = choices[failed]
train, held = np.arange(failed.size)[::2], np.arange(failed.size)[1::2]
print(f"{failed.size} failures: {train.size} train, {held.size} held out")


def shifted(step, shift, rows):
    sub = jax.tree_util.tree_map(lambda x: x[rows], failures)
    factual = sub[step][:, 0]
    return dict(sub, **{step: sub[step].at[:, 1].set(factual + shift)})


def fix_alone(step, shift, rows, how):
    sub = shifted(step, shift, rows)
    names = bj.discover(PIPELINE, jax.tree_util.tree_map(lambda x: x[0], sub)).steps
    j = list(names).index(step)
    if how == "expected":
        worlds = bj.expected_worlds(failed[rows], observed[rows])
    else:
        worlds = bj.recorded_worlds(0, failed[rows])
        worlds = jax.tree_util.tree_map(lambda x: x, worlds)
    mode = None if how == "expected" else (bj.Hard() if how == "hard" else bj.Relaxed(0.3))

    def one(c, w):
        return bj.shapley_values(PIPELINE, c, w, mode=mode).fix_alone[j]

    return jax.vmap(one)(sub, worlds).mean()


for step in STEPS:
    hand = failures[step][0, 1] - failures[step][0, 0]
    radius = jnp.linalg.norm(hand)
    rows = {}
    for how in ("relaxed", "expected"):
        start = time.perf_counter()
        fit = bj.fit_fixes(
            lambda s, how=how: -fix_alone(step, s, train, how),
            hand,
            optax.adam(0.05),
            200,
            project=lambda s: optax.projections.projection_l2_ball(s, radius),
        )
        rows[how] = (fit.params, time.perf_counter() - start)
    print(f"\n## {step}\n")
    print(
        "| shift | held-out hard repair (recorded noise) | held-out expected counterfactual repair | fit time (s) |"
    )
    print("|---|---:|---:|---:|")
    for name, shift, seconds in [("hand-written", hand, 0.0)] + [
        (f"fitted ({how})", p, t) for how, (p, t) in rows.items()
    ]:
        hard = float(fix_alone(step, shift, held, "hard"))
        exp = float(fix_alone(step, shift, held, "expected"))
        print(f"| {name} | {hard:.1%} | {exp:.1%} | {seconds:.1f} |")
