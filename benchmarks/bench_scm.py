"""Attribution accuracy on synthetic SCMs whose culprit is known.

For each configuration, errors are injected into successful runs of a random pipeline
(`blamejax.benchmarks.scm.inject_errors`: the golden label is the earliest step whose fix alone repairs
the failure), and every attribution method names a step on the same failures and the same
recorded noise (`blamejax.benchmarks.scm.compare_methods`). Reported: Step@0, Step@1 and agent-level
accuracy with 95% Wilson intervals, the generator's rejection rate, the cost of each method
(pipeline runs and wall time per failure), and on multi-culprit cases (conjunctive and
disjunctive, analytic Shapley values 1/m) how often the named step is a culprit and how far
each credit vector is from the analytic split.

    python benchmarks/bench_scm.py            # n = 4, 8, 12, 16 and more, >= 1,000 failures each
    python benchmarks/bench_scm.py --quick    # small sizes, a smoke run (writes nothing unless --out)

Run from the repository root (the script puts it on `sys.path`). Results go to
`benchmarks/results/bench_scm.md` and `.json`. The accuracy tables depend only on the
seed; the wall times depend on the machine and its load. The script exits with status 1 when
a result is wrong: a golden label that is not the earliest repairing step, exact Shapley
values that differ from the analytic ones, or two computations of the same quantity that
disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.random as jr  # noqa: E402

from blamejax.benchmarks import scm  # noqa: E402

STEPS_PER_AGENT = 2

# (name, make_scm keyword arguments, number of failures)
FULL = [
    ("n=4 chain", dict(num_steps=4), 1000),
    ("n=8 chain", dict(num_steps=8), 1000),
    ("n=12 chain", dict(num_steps=12), 1000),
    ("n=16 chain", dict(num_steps=16), 1000),
    ("n=8 DAG", dict(num_steps=8, topology="dag"), 1000),
    ("n=16 DAG", dict(num_steps=16, topology="dag"), 1000),
    ("n=8 chain, recovery 0", dict(num_steps=8, recovery=0.0), 1000),
]
FULL_MULTI = [
    (dict(num_steps=8), "conjunctive", 2, 1000),
    (dict(num_steps=8), "disjunctive", 2, 1000),
    (dict(num_steps=8), "conjunctive", 3, 1000),
    (dict(num_steps=8), "disjunctive", 3, 1000),
]
QUICK = [
    ("n=4 chain", dict(num_steps=4), 200),
    ("n=6 chain", dict(num_steps=6), 200),
]
QUICK_MULTI = [
    (dict(num_steps=4), "conjunctive", 2, 200),
    (dict(num_steps=4), "disjunctive", 2, 200),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    parser.add_argument(
        "--mc-orders", type=int, default=16, help="Monte Carlo budget in permutations (default 16)"
    )
    parser.add_argument(
        "--rollouts",
        type=int,
        default=200,
        help="re-draws per step for the point of commitment (default 200)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="steady-state calls per method after the first (default 1)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="results file stem (default results/bench_scm; none for --quick)",
    )
    args = parser.parse_args(argv)

    configs, multis = (QUICK, QUICK_MULTI) if args.quick else (FULL, FULL_MULTI)
    out = args.out
    if out is None and not args.quick:
        out = os.path.join(HERE, "results", "bench_scm")
    root = jr.key(args.seed)
    settings = dict(mc_orders=args.mc_orders, num_rollouts=args.rollouts, repeat=args.repeat)
    started = time.perf_counter()
    single = []
    for i, (name, kwargs, count) in enumerate(configs):
        t0 = time.perf_counter()
        model = scm.make_scm(jr.fold_in(root, 1000 + i), steps_per_agent=STEPS_PER_AGENT, **kwargs)
        result = scm.single_culprit_benchmark(
            jr.fold_in(root, i), model, count, name=name, **settings
        )
        result["seconds"] = time.perf_counter() - t0
        result["load_average"] = os.getloadavg()[0]
        single.append(result)
        best = max(result["methods"], key=lambda r: r["step@0"]["rate"])
        print(
            f"{name}: {count} failures, rejection rate {result['generator']['rejection_rate']:.3f}, "
            f"best Step@0 {best['method']} {best['step@0']['rate']:.3f}, {result['seconds']:.0f} s",
            flush=True,
        )
    multi = []
    for i, (kwargs, kind, num_culprits, count) in enumerate(multis):
        t0 = time.perf_counter()
        model = scm.make_scm(jr.fold_in(root, 3000 + i), steps_per_agent=STEPS_PER_AGENT, **kwargs)
        result = scm.multi_culprit_benchmark(
            jr.fold_in(root, 2000 + i),
            model,
            count,
            num_culprits=num_culprits,
            kind=kind,
            **settings,
        )
        result["seconds"] = time.perf_counter() - t0
        result["load_average"] = os.getloadavg()[0]
        multi.append(result)
        print(f"{result['config']['name']}: {count} cases, {result['seconds']:.0f} s", flush=True)
    total = time.perf_counter() - started

    problems = [
        f"{r['config']['name']}: the earliest repairing step is the label in only "
        f"{r['check']['earliest_repair_is_label']:.4f} of the failures"
        for r in single
        if r["check"]["earliest_repair_is_label"] != 1.0
    ]
    problems += [
        f"{r['config']['name']}: exact Shapley differs from the analytic values by "
        f"{r['check']['exact_max_abs_error']:.2e}"
        for r in multi
        if r["check"]["exact_max_abs_error"] > 1e-6
    ]

    command = "python benchmarks/bench_scm.py" + (" --quick" if args.quick else "")
    if args.seed:
        command += f" --seed {args.seed}"
    loads = ", ".join(f"{r['config']['name']} {r['load_average']:.1f}" for r in single + multi)
    header = [
        "# Attribution accuracy on synthetic SCMs",
        "",
        f"Command: `{command}`. Settings: Monte Carlo budget {args.mc_orders} permutations, "
        f"{args.rollouts} re-draws per step for the point of commitment, {STEPS_PER_AGENT} steps per agent, "
        f"K = 4 options, noise 0.1, recovery 0.05 (unless named), fix noise 0.02, fix recovery 0.25, leak 0.1.",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {jax.devices()[0].platform}; "
        f"shared with other work, so wall times are noisy. Load average when each configuration "
        f"finished: {loads}. Total run time {total / 60:.1f} min.",
        "",
    ]
    markdown = "\n".join(header) + scm.results_markdown(single, multi, timings=True)
    print()
    print(markdown)
    if out is not None:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out + ".md", "w") as f:
            f.write(markdown)
        with open(out + ".json", "w") as f:
            json.dump(
                dict(
                    command=command,
                    seed=args.seed,
                    settings=settings,
                    total_seconds=total,
                    machine=dict(
                        machine=platform.machine(),
                        cores=os.cpu_count(),
                        platform=jax.devices()[0].platform,
                    ),
                    single=single,
                    multi=multi,
                    problems=problems,
                ),
                f,
                indent=1,
            )
        print(f"wrote {out}.md and {out}.json")
    if problems:
        print("WRONG RESULTS:\n" + "\n".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
