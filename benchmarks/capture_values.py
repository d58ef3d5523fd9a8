"""Capture the blame values of the public entry points into an .npz file, to compare two versions
of blamejax bit for bit: run it under each version (PYTHONPATH=CHECKOUT) and compare the files
with `numpy.array_equal(..., equal_nan=True)`. Usage: python benchmarks/capture_values.py OUT.npz
"""

import sys

import jax
import numpy as np

import blamejax as bj

out = {}


def put(name, result, fields):
    for f in fields:
        v = getattr(result, f)
        if v is not None:
            out[f"{name}.{f}"] = np.asarray(v)


rag = bj.demos.rag_cases(120)
failed = np.flatnonzero(
    np.asarray(bj.replay(bj.demos.rag_pipeline, rag, bj.recorded_worlds(0, 120))["score"][:, 0]) < 1
)
sub = jax.tree_util.tree_map(lambda x: x[failed], rag)
r = bj.exact_blame(bj.demos.rag_pipeline, sub, bj.fresh_worlds(0, failed, 3), interactions=True)
put(
    "exact",
    r,
    [
        "shapley",
        "banzhaf",
        "fix_alone",
        "leave_one_out",
        "interactions",
        "empty",
        "full",
        "last_step",
    ],
)
r = bj.mc_shapley(
    bj.demos.rag_pipeline,
    sub,
    bj.recorded_worlds(0, failed),
    key=3,
    max_evaluations=20000,
    stop="top1",
    epsilon=0.02,
)
put(
    "mc",
    r,
    ["values", "lower", "upper", "variance", "num_samples", "evaluations", "rule", "checkpoint"],
)
r = bj.mc_shapley(
    bj.demos.rag_pipeline,
    sub,
    bj.fresh_worlds(1, failed, 2),
    key=4,
    max_evaluations=5000,
    stop=(),
    antithetic=True,
)
put("mc_fixed_budget", r, ["values", "lower", "upper", "variance"])
for noise in ("recorded", "inferred", "fresh"):
    for est in ("exact", "mc"):
        r = bj.blame_batch(
            bj.demos.rag_pipeline,
            rag,
            0,
            noise=noise,
            num_worlds=3,
            estimator=est,
            num_permutations=16,
            stop_early=(est == "exact" and noise == "recorded"),
        )
        put(
            f"batch_{noise}_{est}",
            r,
            [
                "failure_ids",
                "shapley",
                "total",
                "resolve",
                "last_step",
                "mean_shapley",
                "lower",
                "upper",
                "share_of_repair",
                "fixed_choice",
            ],
        )
        out[f"batch_{noise}_{est}.evaluations"] = np.asarray(r.evaluations)
np.savez(sys.argv[1], **out)
print(len(out), "arrays")
