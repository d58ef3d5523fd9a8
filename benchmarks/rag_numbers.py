"""The numbers of the stochastic-RAG demo (rewrite -> retrieve -> answer -> verify).

Runs `num_cases` questions once each under their recorded noise, keeps the failures and
prints, under recorded, inferred (abducted from the observed choices) and fresh noise:
the mean Shapley value of each step over the failures (with a normal-approximation 95%
interval across failures: asymptotic, no guarantee), the fix-alone resolve rate (the
share of failures x worlds that succeed with that one fix, counted from `mask_values`
over the singleton coalitions), and last-step blame counts. It also shows why last-step
blame names the verifier: how often the verifier's output flips between the failed and
the fully fixed run.

    python benchmarks/rag_numbers.py                       # 200 cases, seed 0, 8 worlds
    python benchmarks/rag_numbers.py --cases 400 --seed 3

Run from the repository root (the script puts it on `sys.path`). Counterfactuals under
recorded or inferred noise assume the Gumbel-max coupling, which data cannot identify;
blame is relative to the fixes the demo supplies.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import blamejax as bj  # noqa: E402
from blamejax.demos import _rag  # noqa: E402


def resolve_rates(structure, cases_f, worlds) -> np.ndarray:
    """`[n]`: mean over failures and worlds of 1[v({i}) >= 1], from the singleton masks."""
    n = structure.num_steps
    masks = jnp.eye(n, dtype=bool)
    players, fixes = tuple(range(n)), (1,) * n

    def one(case, world):
        return bj.coalitions.mask_values(
            _rag.rag_pipeline, structure, case, world, players, fixes, masks
        )

    values = jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0))))(cases_f, worlds)  # [F, W, n]
    return np.mean(np.asarray(values) >= 1.0, axis=(0, 1))


def fully_fixed_plan(structure) -> bj.Plan:
    none = np.int32(-1)
    steps = tuple(bj.pipeline.StepPlan(np.int32(1), none, none) for _ in structure.steps)
    return bj.Plan(steps=steps, values=tuple(None for _ in structure.values))


def summarize(name, result, rates, num_worlds):
    shapley = np.asarray(result.shapley, np.float64)
    mean = shapley.mean(0)
    half = 1.96 * shapley.std(0, ddof=1) / np.sqrt(shapley.shape[0])
    last = np.asarray(result.last_step).reshape(-1)
    print(
        f"\n{name} noise ({num_worlds} world{'s' if num_worlds > 1 else ''} per failure): "
        f"mean v(empty) = {float(np.mean(result.empty)):.3f}, mean v(all) = {float(np.mean(result.full)):.3f}"
    )
    print(
        f"  {'step':<9} {'mean Shapley':>12}  {'95% interval (normal approx.)':>29}  "
        f"{'fixing alone resolves':>21}  {'last-step blame':>15}"
    )
    for i, step in enumerate(result.steps):
        print(
            f"  {step:<9} {mean[i]:>+12.3f}  {f'[{mean[i] - half[i]:+.3f}, {mean[i] + half[i]:+.3f}]':>29}  "
            f"{100 * rates[i]:>20.1f}%  {int(np.sum(last == i)):>8} of {last.size}"
        )
    print(
        f"  {'(none)':<9} {'':>12}  {'':>29}  {'':>21}  {int(np.sum(last == -1)):>8} of {last.size}"
    )
    print(f"  sum of mean Shapley = {mean.sum():.3f} = mean v(all) - v(empty)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds the questions and the recorded noise"
    )
    parser.add_argument(
        "--worlds", type=int, default=8, help="inferred and fresh worlds per failure"
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()

    pipeline = _rag.rag_pipeline
    cases = _rag.rag_cases(args.cases, seed=args.seed)
    structure = bj.discover(pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
    out = bj.replay(pipeline, cases, bj.recorded_worlds(args.seed, range(args.cases)))
    scores = np.asarray(out["score"][:, 0])
    failed = np.flatnonzero(scores < 1)
    print(
        f"Stochastic RAG: {args.cases} questions (seed {args.seed}), {len(failed)} failures "
        f"({100 * len(failed) / args.cases:.1f}%)."
    )
    if len(failed) == 0:
        return 0
    cases_f = jax.tree_util.tree_map(lambda x: x[failed], cases)
    observed_f = np.asarray(out["choice"][failed, 0])

    # Why the naive rule names the verifier: its output in the failed and the fixed run.
    recorded_f = bj.recorded_worlds(args.seed, failed)
    fixed = bj.replay(pipeline, cases_f, recorded_f, plan=fully_fixed_plan(structure))
    fixed_choice = np.asarray(fixed["choice"][:, 0])
    verify = structure.step_index("verify")
    answer = structure.step_index("answer")
    print(
        "\nIn the failed runs: answer "
        + ", ".join(
            f"{o} {int(np.sum(observed_f[:, answer] == k))}"
            for k, o in enumerate(_rag.ANSWER_OPTIONS)
        )
        + "; verdict "
        + ", ".join(
            f"{o} {int(np.sum(observed_f[:, verify] == k))}"
            for k, o in enumerate(_rag.VERIFY_OPTIONS)
        )
        + "."
    )
    flips = observed_f[:, verify] != fixed_choice[:, verify]
    print(
        f"The verdict differs between the failed and the fully fixed run in {int(flips.sum())} "
        f"of {len(failed)} failures; the fully fixed run succeeds in "
        f"{int(np.sum(np.asarray(fixed['score'][:, 0]) >= 1))}."
    )

    modes = [
        ("Recorded", recorded_f, 1),
        (
            "Inferred",
            bj.inferred_worlds(pipeline, cases_f, observed_f, args.seed, args.worlds),
            args.worlds,
        ),
        ("Fresh", bj.fresh_worlds(args.seed, failed, args.worlds), args.worlds),
    ]
    for name, worlds, num_worlds in modes:
        result = bj.exact_blame(pipeline, cases_f, worlds)
        rates = resolve_rates(structure, cases_f, worlds)
        # For a 0/1 score the mean over worlds of v({i}) is the resolve rate: a cross-check.
        check = np.mean(np.asarray(result.fix_alone) + np.asarray(result.empty)[:, None], axis=0)
        if not np.allclose(rates, check, atol=1e-5):
            raise AssertionError(f"resolve rates {rates} disagree with fix_alone + empty {check}")
        summarize(name, result, rates, num_worlds)
    print(
        "\nUnder fresh noise the resolve rate counts every world that succeeds with the fix, "
        "including worlds that succeed without it (v(empty) > 0 there)."
    )
    print(
        "Counterfactuals under recorded or inferred noise assume the Gumbel-max coupling; "
        "blame is relative to the fixes supplied."
    )
    print(f"\n({time.perf_counter() - start:.1f} s, compile included; {jax.default_backend()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
