"""The command line: `python -m blamejax demo NAME`, `python -m blamejax whowhen PATH` and
`python -m blamejax blame TRACES --decisions FILE --scorer MODEL`."""

from __future__ import annotations

import argparse

import jax
import numpy as np

from ._checks import available_memory


def _refund(args) -> int:
    from . import demos
    from .estimators import exact_blame
    from .worlds import recorded_worlds, replay

    print("Refund-policy pipeline: planner -> retriever -> writer -> reviewer")
    print(
        f"{args.cases} customers, each run once with its own recorded noise (seed {args.seed}).\n"
    )
    for mechanism, what in (
        ("A", "the reviewer's fix re-checks cited claims, so it needs the writer's citations"),
        ("B", "the reviewer's fix checks every claim"),
    ):
        cases = demos.refund_cases(args.cases, mechanism)
        worlds = recorded_worlds(args.seed, range(args.cases))
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
        print("  " + result.table(failed[0]).replace("\n", "\n  "))
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


DEMOS = {
    "refund": _refund,
    "car": _car,
    "agent8": _agent8,
    "rag": _rag,
    "fit": _fit,
    "stopping": _stopping,
}
DEFAULT_CASES = {"refund": 20, "car": 200, "agent8": 200, "rag": 200, "fit": 400, "stopping": 3000}
# The memory each demo holds per case (its tables, the runs, worlds and reports built from
# them), measured by `python benchmarks/demo_memory.py --demos NAME` on this project's machine:
# the growth of the peak resident memory between two sizes, per case (rag: with 8 worlds; it
# grows with --worlds). A run's need is taken as twice that per case, plus PROCESS_BYTES for
# the process itself (JAX and the compiled programs), and must fit the memory available.
# Measured here: refund 1.3 KB, car 290 KB (a case's 1,000 rollouts), agent8 3.5 KB, rag 16 KB,
# fit 18 KB, stopping 3 KB per case.
BYTES_PER_CASE = {
    "refund": 1_300,
    "car": 290_000,
    "agent8": 3_500,
    "rag": 16_000,
    "fit": 18_000,
    "stopping": 3_000,
}
PROCESS_BYTES = 600 * 2**20
MEMORY_MARGIN = 2
# The optional flags, their defaults, and which demo uses which.
OPTIONAL_FLAGS = {
    "out": None,
    "noise": "all",
    "worlds": 8,
    "estimator": "auto",
    "permutations": 64,
    "skip_noise_sharing": False,
    "no_progress": False,
}
_RAG_FLAGS = {
    "out",
    "noise",
    "worlds",
    "estimator",
    "permutations",
    "skip_noise_sharing",
    "no_progress",
}
DEMO_FLAGS = {
    "refund": set(),
    "car": set(),
    "agent8": set(),
    "rag": _RAG_FLAGS,
    "fit": {"out"},
    "stopping": {"no_progress"},
}


def build_parser() -> argparse.ArgumentParser:
    """The parser of `python -m blamejax`: one sub-command each for `demo`, `whowhen` and
    `blame`."""
    parser = argparse.ArgumentParser(
        prog="python -m blamejax",
        description="blamejax: which step of a failed stochastic pipeline is to blame.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _demo_arguments(sub.add_parser("demo", help="run a built-in demo and print its blame table"))
    _whowhen_arguments(
        sub.add_parser(
            "whowhen",
            help="score who-and-when predictions on labelled runs, beside offline baselines",
        )
    )
    _blame_arguments(
        sub.add_parser(
            "blame",
            help="blame the decisions of traced runs: import spans, score the decisions, write a report",
            description=(
                "Import a tracer's span file or folder (OpenTelemetry GenAI or OpenInference, OTLP "
                "JSON or the console exporter's output) or a blamejax trace file, declare the "
                "decisions, score them with an OpenAI-compatible model, blame exactly and print "
                "who and when, writing an HTML report."
            ),
        )
    )
    return parser


def _demo_arguments(demo) -> None:
    """`demo NAME`: which demo, its seed and size, and the `rag` demo's settings."""
    demo.add_argument("name", choices=sorted(DEMOS), help="which demo to run")
    demo.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="root seed of the recorded noise, in [0, 2**32) (default 0)",
    )
    demo.add_argument(
        "--cases",
        type=int,
        default=None,
        help="number of cases to run (default: refund 20, rag 200, agent8 200, car 200, fit 400, stopping 3000)",
    )
    demo.add_argument(
        "--out",
        default=None,
        help="folder for the reports of `rag` and `fit` (default blamejax-out/NAME)",
    )
    demo.add_argument(
        "--noise",
        default=None,
        choices=["all", "recorded", "inferred", "fresh"],
        help="noise mode(s) for `rag` (default all three)",
    )
    demo.add_argument(
        "--worlds",
        type=int,
        default=None,
        help="worlds per failure for inferred and fresh noise in `rag` (default 8)",
    )
    demo.add_argument(
        "--estimator",
        default=None,
        choices=["auto", "exact", "mc"],
        help="per-failure estimator for `rag` (default auto: exact up to 14 steps)",
    )
    demo.add_argument(
        "--permutations",
        type=int,
        default=None,
        help="`rag`: permutations per failure for Monte Carlo and the noise-sharing measurement (default 64)",
    )
    demo.add_argument(
        "--skip-noise-sharing",
        action="store_true",
        help="`rag`: skip the common-random-numbers variance measurement",
    )
    demo.add_argument(
        "--no-progress", action="store_true", help="hide progress bars (`rag`, `stopping`)"
    )
    demo.add_argument(
        "--compile-cache",
        default=None,
        metavar="DIR",
        help="folder of JAX's persistent compilation cache, so a later run loads what this one compiled (default: $BLAMEJAX_COMPILE_CACHE, else $XDG_CACHE_HOME/blamejax/jax, else ~/.cache/blamejax/jax)",
    )
    demo.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="compile everything afresh and keep nothing on disk",
    )


def _whowhen_arguments(whowhen) -> None:
    """`whowhen PATH`: the labelled runs, a method's predictions to score, the scoring rules."""
    whowhen.add_argument(
        "path",
        help="labelled runs: a Who&When .json file or folder, or a .jsonl trace file or folder",
    )
    whowhen.add_argument(
        "--predictions",
        default=None,
        help='JSON file {run id: {"agent": str, "step": int}} of a method to score',
    )
    whowhen.add_argument(
        "--substring",
        action="store_true",
        help="also show the original benchmark's substring step scoring (inflated; for comparison only)",
    )
    whowhen.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="seed of the inferred noise when blamejax blames runs that carry logits (default 0)",
    )


def _blame_arguments(blame) -> None:
    """`blame TRACES`: the spans, the decisions and outcomes, the scorer, the blame settings
    and the report."""
    blame.add_argument("traces", help="a span file or folder, or a blamejax .jsonl trace file")
    blame.add_argument(
        "--decisions",
        required=True,
        metavar="FILE",
        help='JSON {agent: {"options": [...], "accept": [...], "fix": {"system": "..."}}} '
        '("fix": {"append": "..."} adds to the recorded system message)',
    )
    blame.add_argument(
        "--outcomes",
        default=None,
        metavar="FILE",
        help="JSON {trace id: true/false or a score}; default: the root spans say it "
        "(outcome.passed, status ERROR)",
    )
    blame.add_argument(
        "--scorer",
        required=True,
        metavar="MODEL",
        help="the model that scores the decisions, behind an OpenAI-compatible server",
    )
    blame.add_argument("--base-url", default=None, help="the scorer's server (default: OpenAI's)")
    blame.add_argument(
        "--api-key", default=None, help="the server's key (default: $OPENAI_API_KEY, else 'none')"
    )
    blame.add_argument("--mode", default="logprobs", choices=["logprobs", "json"])
    blame.add_argument(
        "--cache", default="blamejax-scores.sqlite", help="the scorer's cache file (SQLite)"
    )
    blame.add_argument("--by", default="agent", choices=["agent", "span"])
    blame.add_argument(
        "--factual",
        default="scorer",
        choices=["scorer", "logprobs"],
        help="the factual logits: scored from the recorded prompt (default), or read from "
        "the log-probabilities the calls kept (OpenInference)",
    )
    blame.add_argument(
        "--convention", default="auto", choices=["auto", "otel", "openinference", "mlflow"]
    )
    blame.add_argument("--worlds", type=int, default=8, help="inferred worlds per run (default 8)")
    blame.add_argument("--seed", type=_seed, default=0, help="seed of the inferred noise")
    blame.add_argument(
        "--out", default="blamejax-blame.html", help="the HTML report (default blamejax-blame.html)"
    )
    blame.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def _blame(parser, args) -> int:
    import os

    from . import _trace_command as command
    from .scorers import Cache, OpenAIScorer

    if args.worlds < 1:
        parser.error(f"--worlds must be at least 1, got {args.worlds}")
    try:
        decisions = command.check_decisions(
            command.read_json_file(args.decisions, "--decisions"), args.decisions
        )
        outcomes = None
        if args.outcomes is not None:
            outcomes = command.read_json_file(args.outcomes, "--outcomes")
            if not isinstance(outcomes, dict):
                raise command.CommandError(
                    f"--outcomes {args.outcomes}: expected a JSON object {{trace id: true/false "
                    "or a score}}"
                )
        scorer = OpenAIScorer(
            args.scorer,
            base_url=args.base_url,
            api_key=args.api_key or os.environ.get("OPENAI_API_KEY") or "none",
            mode=args.mode,
            cache=Cache(args.cache),
        )
        rows, _ = command.blame_traces(
            args.traces,
            decisions=decisions,
            scorer=scorer,
            outcomes=outcomes,
            by=args.by,
            factual=args.factual,
            convention=args.convention,
            num_worlds=args.worlds,
            seed=args.seed,
            progress=not args.no_progress,
        )
    except (OSError, ValueError, TypeError) as error:
        parser.error(str(error))
    print(command.table(rows))
    print(f"\nreport: {command.write_page(rows, args.traces, args.out)}")
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        used = DEMO_FLAGS[args.name]
        given = [
            flag
            for flag in OPTIONAL_FLAGS
            if getattr(args, flag) is not None and getattr(args, flag) is not False
        ]
        unused = [flag for flag in given if flag not in used]
        if unused:
            names = ", ".join("--" + flag.replace("_", "-") for flag in unused)
            users = sorted(name for name, flags in DEMO_FLAGS.items() if set(unused) <= flags)
            parser.error(
                f"{names}: not used by demo {args.name!r}"
                + (f" (used by: {', '.join(users)})" if users else "")
            )
        for flag, default in OPTIONAL_FLAGS.items():
            if getattr(args, flag) is None:
                setattr(args, flag, default)
        if args.cases is None:
            args.cases = DEFAULT_CASES[args.name]
        if args.cases < 1:
            parser.error(f"--cases must be at least 1 for demo {args.name!r}, got {args.cases:,}")
        need, available, source = (
            memory_need(args.name, args.cases, args.worlds),
            *available_memory(),
        )
        if need > available:
            parser.error(
                f"--cases {args.cases:,}: demo {args.name!r} would need about {need / 2**30:.1f} GiB "
                f"({MEMORY_MARGIN} x {_bytes_per_case(args.name, args.worlds):,} bytes per case, "
                f"measured, plus {PROCESS_BYTES // 2**20} MiB for the process), more than the "
                f"{available / 2**30:.1f} GiB available ({source}); use fewer cases"
            )
        if args.worlds < 1:
            parser.error(f"--worlds must be at least 1, got {args.worlds}")
        if args.permutations < 2:
            parser.error(f"--permutations must be at least 2, got {args.permutations}")
        if args.compile_cache is not None and args.no_compile_cache:
            parser.error("--compile-cache and --no-compile-cache: give one of them, not both")
        if not args.no_compile_cache:
            from ._compile import enable_compile_cache

            try:
                enable_compile_cache(args.compile_cache)
            except (OSError, TypeError) as error:
                parser.error(f"--compile-cache: cannot use the folder: {error}")
        return DEMOS[args.name](args)
    if args.command == "blame":
        return _blame(parser, args)
    if args.command == "whowhen":
        from .benchmarks.whowhen import whowhen_report

        try:
            print(
                whowhen_report(
                    args.path,
                    predictions=args.predictions,
                    substring=args.substring,
                    seed=args.seed,
                )
            )
        except (OSError, ValueError) as error:
            parser.error(str(error))
        return 0
    return 2


def _bytes_per_case(name: str, worlds: int) -> int:
    per_case = BYTES_PER_CASE[name]
    return per_case * max(worlds, 8) // 8 if name == "rag" else per_case


def memory_need(name: str, cases: int, worlds: int = 8) -> int:
    """Bytes a demo run of `cases` cases is taken to need (see `BYTES_PER_CASE`)."""
    return PROCESS_BYTES + MEMORY_MARGIN * cases * _bytes_per_case(name, worlds)


def _seed(text: str) -> int:
    """`--seed`: an int in [0, 2**32) (wider seeds would alias others)."""
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an int, got {text!r}") from None
    if not 0 <= seed < 2**32:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**32), got {seed}")
    return seed
