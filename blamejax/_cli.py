"""The command line: `python -m blamejax demo NAME`."""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np


def _refund(args) -> int:
    from . import demos
    from .estimators import exact_blame
    from .worlds import recorded_worlds, replay

    print("Refund-policy pipeline: planner -> retriever -> writer -> reviewer")
    print(f"{args.cases} customers, each run once with its own recorded noise (seed {args.seed}).\n")
    for mechanism, what in (
        ("A", "the reviewer's fix re-checks cited claims, so it needs the writer's citations"),
        ("B", "the reviewer's fix checks every claim"),
    ):
        cases = demos.refund_cases(args.cases, mechanism)
        worlds = recorded_worlds(args.seed, args.cases)
        scores = replay(demos.refund_pipeline, cases, worlds)["score"][:, 0]
        failed = np.flatnonzero(np.asarray(scores) < 1)
        print(f"Mechanism {mechanism}: {what}.")
        print(f"  {len(failed)} of {args.cases} customers got a wrong reply.")
        if len(failed) == 0:
            print("  No failure to blame; try another --seed or more --cases.\n")
            continue
        cases_f = jax.tree_util.tree_map(lambda x: x[failed], cases)
        worlds_f = recorded_worlds(args.seed, failed)
        result = exact_blame(demos.refund_pipeline, cases_f, worlds_f, interactions=True)
        same = np.allclose(np.asarray(result.shapley), np.asarray(result.shapley[0]), atol=1e-6)
        note = "every failure has the same game" if same else "failures differ"
        print(f"  Failure of customer {failed[0]} ({note}); all rules side by side:")
        print("  " + result.table(0).replace("\n", "\n  "))
        print()
    print(
        "Blame is relative to the fixes supplied, and replay under recorded noise assumes the\n"
        "Gumbel-max coupling, which data cannot identify."
    )
    return 0


def _car(args) -> int:
    from .demos import run_car_demo

    return run_car_demo(args)


def _agent8(args) -> int:
    from .demos import agent8_report

    print(agent8_report(num_cases=args.cases, seed=args.seed))
    return 0


def _stopping(args) -> int:
    from .demos import run_stopping_demo

    return run_stopping_demo(args)


def _rag(args) -> int:
    from .demos import run_rag_demo

    return run_rag_demo(args)


def _fit(args) -> int:
    from .demos import run_fit_demo

    return run_fit_demo(args)


DEMOS = {"refund": _refund, "car": _car, "agent8": _agent8, "rag": _rag, "fit": _fit, "stopping": _stopping}
DEFAULT_CASES = {"refund": 20, "car": 200, "agent8": 200, "rag": 200, "fit": 400, "stopping": 3000}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m blamejax",
        description="blamejax: which step of a failed stochastic pipeline is to blame.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a built-in demo and print its blame table")
    demo.add_argument("name", choices=sorted(DEMOS), help="which demo to run")
    demo.add_argument("--seed", type=int, default=0, help="root seed of the recorded noise (default 0)")
    demo.add_argument("--cases", type=int, default=None, help="number of cases to run (default: refund 20, rag 200, agent8 200, car 200, fit 400, stopping 3000)")
    demo.add_argument("--out", default=None, help="folder for the reports of `rag` and `fit` (default blamejax-out/NAME)")
    demo.add_argument("--noise", default="all", choices=["all", "recorded", "inferred", "fresh"], help="noise mode(s) for `rag` (default all three)")
    demo.add_argument("--worlds", type=int, default=8, help="worlds per failure for inferred and fresh noise (default 8)")
    demo.add_argument("--estimator", default="auto", choices=["auto", "exact", "mc"], help="per-failure estimator for `rag` (default auto: exact up to 14 steps)")
    demo.add_argument("--permutations", type=int, default=64, help="permutations per failure for Monte Carlo and the noise-sharing measurement (default 64)")
    demo.add_argument("--skip-noise-sharing", action="store_true", help="`rag`: skip the common-random-numbers variance measurement")
    demo.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        if args.cases is None:
            args.cases = DEFAULT_CASES[args.name]
        if args.cases < 1:
            print("error: --cases must be at least 1", file=sys.stderr)
            return 2
        if args.worlds < 1 or args.permutations < 2:
            print("error: --worlds must be at least 1 and --permutations at least 2", file=sys.stderr)
            return 2
        return DEMOS[args.name](args)
    return 2
