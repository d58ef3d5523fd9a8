"""The command line: `python -m blamejax demo NAME`."""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np


def _refund(args) -> int:
    from . import demos
    from ._exact import exact_blame
    from ._replay import replay
    from ._worlds import recorded_worlds

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


DEMOS = {"refund": _refund}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m blamejax",
        description="blamejax: which step of a failed stochastic pipeline is to blame.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a built-in demo and print its blame table")
    demo.add_argument("name", choices=sorted(DEMOS), help="which demo to run")
    demo.add_argument("--seed", type=int, default=0, help="root seed of the recorded noise (default 0)")
    demo.add_argument("--cases", type=int, default=20, help="number of cases to run (default 20)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        if args.cases < 1:
            print("error: --cases must be at least 1", file=sys.stderr)
            return 2
        return DEMOS[args.name](args)
    return 2
