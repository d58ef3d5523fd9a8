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
        v = getattr(result, RENAMED.get(f, f))
        if v is not None:
            out[f"{name}.{f}"] = np.asarray(v)


# Fields renamed since the first captures, read under their new name and stored under the old
# one, so that a capture made before the rename compares key by key.
RENAMED = {"checkpoint": "look"}

rag = bj.demos.rag_cases(120)
failed = np.flatnonzero(
    np.asarray(
        bj.replay(bj.demos.rag_pipeline, rag, bj.recorded_worlds(0, np.arange(120)))["score"][:, 0]
    )
    < 1
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
            stop="top1" if est == "exact" and noise == "recorded" else (),
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

# The structured path (agent8, 8 steps; refund), the sampling variance, and the interventions.
for name in ("agent8", "refund"):
    cases = getattr(bj.demos, f"{name}_cases")(6)
    pipe = getattr(bj.demos, f"{name}_pipeline")
    for method in ("structured", "enumerate"):
        r = bj.exact_blame(pipe, cases, bj.recorded_worlds(0, np.arange(6)), method=method)
        put(f"{name}_{method}", r, ["shapley", "banzhaf", "fix_alone", "empty", "full"])
rng = np.random.default_rng(0)
# (it moved from `estimators` to `reduction`: either version)
sampling_variance = (
    getattr(bj.estimators, "sampling_variance", None) or bj.reduction.sampling_variance
)
v = sampling_variance(rng.uniform(size=256))
out["sampling_variance.plain"], out["sampling_variance.antithetic"] = v.plain, v.antithetic
c = bj.contrastive(
    bj.demos.refund_pipeline, bj.demos.refund_cases(4), bj.recorded_worlds(0, np.arange(4))
)
for f, v in vars(c).items():
    if isinstance(v, (np.ndarray, jax.Array)):
        out[f"contrastive.{f}"] = np.asarray(v)
refund4, worlds4 = bj.demos.refund_cases(4), bj.recorded_worlds(0, np.arange(4))
observed = bj.replay(bj.demos.refund_pipeline, refund4, worlds4)["choice"][:, 0]
fid = bj.worlds.replay_fidelity(bj.demos.refund_pipeline, refund4, worlds4, observed)
for f, v in fid._asdict().items() if hasattr(fid, "_asdict") else []:
    if isinstance(v, (np.ndarray, jax.Array)):
        out[f"fidelity.{f}"] = np.asarray(v)
np.savez(sys.argv[1], **out)
print(len(out), "arrays")
