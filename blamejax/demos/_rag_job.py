"""`python -m blamejax demo rag`: batch blame of the stochastic-RAG test set in the three noise
modes, the noise-sharing measurement, and the reports written to an output folder."""

from __future__ import annotations

import time
from pathlib import Path

import jax
import numpy as np

from ..estimators import blame_batch
from ..report import write_json
from ..stats import Schedule
from ..worlds import recorded_worlds, replay
from ._agent8 import agent8_cases, agent8_pipeline
from ._noise_sharing import noise_sharing_gain
from ._rag import (
    ANSWER_OPTIONS,
    RETRIEVE_OPTIONS,
    REWRITE_OPTIONS,
    VERIFY_OPTIONS,
    rag_cases,
    rag_pipeline,
)

OPTION_NAMES = {
    "rewrite": REWRITE_OPTIONS,
    "retrieve": RETRIEVE_OPTIONS,
    "answer": ANSWER_OPTIONS,
    "verify": VERIFY_OPTIONS,
}


def run_rag_demo(args) -> int:
    """`python -m blamejax demo rag`: batch blame of the stochastic-RAG test set in each
    noise mode, its tables printed and its reports (HTML, interactive HTML, JSON) written.

    **Arguments:** `args`, the parsed flags of the command line (`cases`, `seed`, `noise`,
    `worlds`, `estimator`, `permutations`, `out`, `no_progress`).

    **Returns:** the exit status, 0.
    """
    num_cases = args.cases or 200
    out = Path(args.out or "blamejax-out/rag")
    out.mkdir(parents=True, exist_ok=True)
    modes = ("recorded", "inferred", "fresh") if args.noise == "all" else (args.noise,)
    cases = rag_cases(num_cases, seed=args.seed)
    print("Stochastic RAG: rewrite -> retrieve -> answer -> verify")
    print(
        f"{num_cases} questions (seed {args.seed}); every step samples by Gumbel-max, fixes shift logits.\n"
    )
    summary = {}
    for noise in modes:
        start = time.perf_counter()
        result = blame_batch(
            rag_pipeline,
            cases,
            args.seed,
            noise=noise,
            num_worlds=args.worlds,
            estimator=args.estimator,
            num_permutations=args.permutations,
            option_names=OPTION_NAMES,
            progress=not args.no_progress,
            keep_coalitions=args.estimator != "mc",  # for the interactive page
        )
        seconds = time.perf_counter() - start
        print(result.table())
        verify = result.steps.index("verify")
        named = int(round(float(result.last_step_rate[verify]) * result.last_step.size))
        print(
            f"last-step blame names verify in {named} of {result.last_step.size} (failure, world) pairs; {seconds:.1f} s\n"
        )
        result.save_html(out / f"report_{noise}.html")
        if result.coalition_scores is not None:
            page = out / f"report_{noise}_interactive.html"
            result.save_html(page, interactive=True)
            print(f"interactive page: {page} ({page.stat().st_size / 1e6:.2f} MB)")
        result.to_json(out / f"result_{noise}.json")
        summary[noise] = dict(
            mean_shapley=dict(
                zip(
                    result.steps,
                    np.asarray(result.mean_shapley, np.float64).round(4).tolist(),
                    strict=True,
                )
            ),
            seconds=round(seconds, 2),
        )
    if "fresh" in modes and not args.skip_noise_sharing:
        run = replay(rag_pipeline, cases, recorded_worlds(args.seed, range(num_cases)))
        ids = np.flatnonzero(np.asarray(run["score"][:, 0]) < 1)
        failures = jax.tree_util.tree_map(lambda x: x[ids], cases)
        gain = noise_sharing_gain(
            rag_pipeline, failures, args.seed, case_ids=ids, num_permutations=args.permutations
        )
        print("Fresh noise, Monte Carlo at equal budget: variance of one permutation's marginal")
        print(f"{'step':<10} {'shared noise':>13} {'independent':>12} {'ratio':>7}")
        for i, step in enumerate(gain.steps):
            print(
                f"{step:<10} {float(gain.shared[i]):>13.4f} {float(gain.independent[i]):>12.4f} {float(gain.ratio[i]):>6.2f}x"
            )
        print(
            "Sharing one fresh world across all prefixes of an order (common random numbers) cuts the variance by the ratio.\n"
        )
        summary["noise_sharing_ratio"] = dict(
            zip(gain.steps, np.asarray(gain.ratio, np.float64).round(3).tolist(), strict=True)
        )
    write_json(out / "summary.json", summary)
    pages = ", report_<mode>_interactive.html" if args.estimator != "mc" else ""
    print(
        f"Reports written to {out}/ (report_<mode>.html{pages}, result_<mode>.json, summary.json)"
    )
    return 0


def run_stopping_demo(args) -> int:
    """`python -m blamejax demo stopping`: on the 8-step agent, where one step dominates, how many
    failures the finite-sample (empirical Bernstein) and the asymptotic (normal) rules need to
    separate the top step, on the same stream of failures."""
    num_cases = args.cases or 3000
    cases = agent8_cases(num_cases)
    print(
        "8-step agent: intake -> router -> planner -> search -> extractor -> calculator -> drafter -> guardrail"
    )
    print(
        f"{num_cases} runs (seed {args.seed}); exact Shapley per failure (256 coalitions), failures visited in a seeded order."
    )
    print(
        "Looks every 20% more failures; each rule is checked at the same looks of the same stream.\n"
    )
    start = time.perf_counter()
    result = blame_batch(
        agent8_pipeline,
        cases,
        args.seed,
        schedule=Schedule(first=10, growth=1.2),
        progress=not args.no_progress,
    )
    print(result.table())
    print(f"\n{time.perf_counter() - start:.1f} s")
    return 0
