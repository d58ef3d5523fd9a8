"""One process of a multi-process run (tests/test_distributed.py starts it; not collected).

    python tests/distributed_worker.py OUT.npz [--sections exact,mc_fixed,...]
        [--coordinator HOST:PORT --num-processes P --process-id I]

With `--coordinator` it joins a `jax.distributed` run with gloo CPU collectives (set
`XLA_FLAGS=--xla_force_host_platform_device_count=N` for N devices per process); without it,
it is a plain one-process run. Either way it runs `exact_blame`, `mc_shapley` and
`blame_batch` (exact and Monte Carlo) on fixed seeded inputs over every device it sees and
writes every output array to OUT.npz (`--sections` picks some of them), for the test to compare bit for bit.
"""

from __future__ import annotations

import argparse
import sys

SECTIONS = ("exact", "mc_fixed", "mc_adaptive", "batch_exact", "batch_mc")
MC_FIELDS = (
    "values",
    "lower",
    "upper",
    "variance",
    "empty",
    "full",
    "num_samples",
    "evaluations",
    "rule",
)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--coordinator")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--sections", default=",".join(SECTIONS))
    args = parser.parse_args(argv)

    import jax

    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=60,
        )
    import jax.random as jr
    import numpy as np

    import blamejax as bj

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from helpers import chain_pipeline, random_chain_cases

    out = dict(
        process_count=np.asarray(jax.process_count()),
        device_count=np.asarray(jax.device_count()),
    )
    sections = args.sections.split(",")

    if "exact" in sections:  # 7 failures (padded to whole rows per device), 3 worlds, `given`
        cases = random_chain_cases(jr.key(1), 4, num_cases=7)
        exact = bj.exact_blame(
            chain_pipeline, cases, bj.fresh_worlds(2, range(7), 3), interactions=True
        )
        for name in (
            "shapley",
            "banzhaf",
            "fix_alone",
            "leave_one_out",
            "interactions",
            "empty",
            "full",
            "last_step",
        ):
            out[f"exact.{name}"] = np.asarray(getattr(exact, name))

    # Monte Carlo: a fixed budget, and adaptive stopping (every failure stops on its own).
    cases = random_chain_cases(jr.key(3), 5, num_cases=8)
    worlds = bj.fresh_worlds(4, range(8), 2)
    for section, stop in (("mc_fixed", ()), ("mc_adaptive", "top1")):
        if section in sections:
            mc = bj.mc_shapley(
                chain_pipeline, cases, worlds, key=5, max_evaluations=8_000, stop=stop, epsilon=0.02
            )
            for name in MC_FIELDS:
                out[f"{section}.{name}"] = np.asarray(getattr(mc, name))

    cases = random_chain_cases(jr.key(6), 4, num_cases=40)
    for estimator in ("exact", "mc"):
        if f"batch_{estimator}" in sections:
            batch = bj.blame_batch(
                chain_pipeline,
                cases,
                7,
                noise="fresh",
                num_worlds=2,
                threshold=0.5,
                estimator=estimator,
                num_permutations=8,
            )
            for name in (
                "failure_ids",
                "shapley",
                "total",
                "resolve",
                "last_step",
                "mean_shapley",
                "lower",
                "upper",
            ):
                out[f"batch_{estimator}.{name}"] = np.asarray(getattr(batch, name))

    np.savez(args.out, **out)
    if args.coordinator:
        jax.distributed.shutdown()
    print("done", args.process_id, flush=True)


if __name__ == "__main__":
    main()
