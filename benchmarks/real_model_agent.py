"""Blame on a real model's injected failures (Who&When Pro's protocol at small scale).

A four-step support-desk agent (benchmarks/_desk.py) decides every step by the likelihood of
its options under SmolLM2-135M-Instruct (`bj.scorers.LlamaScorer`), drawn with addressed
Gumbel noise. Successful runs are recorded; then, in each, an adversarial note is patched
into one step's prompt (the golden step), the prefix replays exactly (same noise, same
tables), the rest continues on-policy with the real model, and only failed continuations are
kept. Every step has a fix, so blame is not trivial; two kinds, reported separately:

- `oracle`: the action a perfect agent takes with the same information;
- `prompt`: the same model with a stronger system prompt and no injected note.

Methods on the same failures: blamejax exact Shapley (top step), the earliest step whose fix
alone repairs the run (Who&When's definition), Causal Agent Replay's contrastive estimator
(each step re-drawn from its own policy, `do_resample`, later steps fresh: its point of
commitment, and its largest effect), an all-at-once judge (SmolLM2 reads the whole
transcript and the step whose option it finds most likely is its answer), first step, last
step and random (an exact expectation). Step@0, Step@1 (within one step) and agent accuracy
with 95 % Wilson intervals; model calls and seconds per failure.

    python benchmarks/real_model_agent.py                 # 60+ failures (about 15-30 min)
    python benchmarks/real_model_agent.py --tasks 6 --quick   # a smoke run

Needs `pip install "blamejax[llm]"`. Writes results/real_model_agent.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import _desk as desk  # noqa: E402
import numpy as np  # noqa: E402

import blamejax as bj  # noqa: E402
from blamejax.scorers import LlamaScorer, Request  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def score_tables(scorer, task, variant, inject_step, temperature):
    """The four steps' policy tables `[rows, K]` (logits / temperature), the note patched
    into step `inject_step` (or none)."""
    tables = []
    for step in range(len(desk.STEPS)):
        rows = scorer.score(desk.requests(task, step, variant, step == inject_step))
        tables.append(np.stack(rows) / temperature)
    return tables


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=96, help="tickets run (default 96)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--worlds", type=int, default=16, help="posterior worlds per failure")
    parser.add_argument("--rollouts", type=int, default=32, help="CAR rollouts per step and world")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a smoke run: results not written")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    scorer = LlamaScorer(system=desk.SYSTEM, **desk.SCORER)
    strong = scorer.with_prompt(system=desk.STRONG_SYSTEM)
    judge = scorer.with_prompt(
        system="The log of a failed support run, and the step that caused the failure.",
        template="{inputs}\nThe step that caused the failure:",
    )
    load = time.perf_counter() - started

    runs, golden, tasks_of, natural = [], [], [], []
    seconds = {"factual": 0.0, "prompt": 0.0}
    calls = {"factual": 0, "prompt": 0}
    for index in range(args.tasks):
        task = desk.Task(index)
        t0 = time.perf_counter()
        before = scorer.meter.calls
        clean = score_tables(scorer, task, "factual", None, args.temperature)
        choices = desk.run(clean, task, args.seed)
        natural.append(desk.passed(task, choices))
        if not natural[-1]:
            seconds["factual"] += time.perf_counter() - t0
            calls["factual"] += scorer.meter.calls - before
            print(f"task {index}: the clean run failed ({choices})", flush=True)
            continue
        injected = []
        for k in range(len(desk.STEPS)):
            rows = scorer.score(desk.requests(task, k, "factual", True))
            tables = list(clean)
            tables[k] = np.stack(rows) / args.temperature
            injected.append((k, tables))
        seconds["factual"] += time.perf_counter() - t0
        calls["factual"] += scorer.meter.calls - before
        kept = []
        for k, tables in injected:
            after = desk.run(tables, task, args.seed)
            assert after[:k] == choices[:k], "the prefix did not replay"
            if not desk.passed(task, after):
                kept.append((k, tables, after))
        if kept:
            t0 = time.perf_counter()
            before = strong.meter.calls
            fixed = score_tables(strong, task, "prompt", None, args.temperature)
            seconds["prompt"] += time.perf_counter() - t0
            calls["prompt"] += strong.meter.calls - before
            oracle = [desk.oracle(task, s) for s in range(len(desk.STEPS))]
            for k, tables, after in kept:
                name = f"t{index}-k{k}"
                runs.append(
                    desk.to_run(task, name, tables, {"oracle": oracle, "prompt": fixed}, after)
                )
                golden.append(k)
                tasks_of.append((task, after, k))
        print(
            f"task {index}: passed; injections that fail it at steps {[k for k, _, _ in kept]}"
            f" ({len(runs)} failures so far, {time.perf_counter() - started:.0f} s)",
            flush=True,
        )

    n = len(runs)
    if n == 0:
        print(f"{args.tasks} tickets: no injection made a successful run fail; nothing to blame")
        return
    golden = np.asarray(golden)
    agent_of = np.asarray([desk.AGENTS.index(a) for a in desk.AGENTS])  # step -> agent id
    agent_id = {a: i for i, a in enumerate(dict.fromkeys(desk.AGENTS))}
    step_agent = np.asarray([agent_id[a] for a in desk.AGENTS])
    del agent_of
    predictions: dict[str, np.ndarray] = {}
    cost: dict[str, tuple[float, float]] = {}  # method -> (model calls, seconds) per failure
    notes = {}

    for fix in ("oracle", "prompt"):
        t0 = time.perf_counter()
        out = bj.traces.blame_runs(runs, fix=fix, num_worlds=args.worlds, key=args.seed)
        blame_seconds = time.perf_counter() - t0
        agents = out.cases.agent_map
        tops, earliest, none = [], [], 0
        for i in range(n):
            read = bj.traces.readout(out.result, agents, failure=i)
            tops.append(desk.STEPS.index(read.ranking[0][0]))
            if read.earliest_repair is None:
                none += 1
                earliest.append(-1)
            else:
                earliest.append(desk.STEPS.index(read.earliest_repair))
        fix_calls = calls["prompt"] if fix == "prompt" else 0
        fix_seconds = seconds["prompt"] if fix == "prompt" else 0.0
        per = (
            (calls["factual"] + fix_calls) / n,
            (seconds["factual"] + fix_seconds + blame_seconds) / n,
        )
        predictions[f"blamejax exact Shapley, {fix} fix"] = np.asarray(tops)
        cost[f"blamejax exact Shapley, {fix} fix"] = per
        predictions[f"earliest repairing step, {fix} fix"] = np.asarray(earliest)
        cost[f"earliest repairing step, {fix} fix"] = per
        notes[f"earliest repairing step, {fix} fix"] = (
            f"{none} of {n} failures: no single fix repairs (counted wrong)"
        )

        if fix == "oracle":
            t0 = time.perf_counter()
            car = bj.interventions.contrastive(
                out.cases.pipeline,
                out.cases.cases,
                out.worlds,
                num_rollouts=args.rollouts,
                downstream="fresh",
            )
            car_seconds = time.perf_counter() - t0
            commitment = np.asarray(car.commitment)
            effect = np.asarray(car.effect)
            order = [desk.STEPS.index(s) for s in car.steps]
            predictions["CAR point of commitment (do_resample)"] = np.asarray(
                [order[c] if c >= 0 else -1 for c in commitment]
            )
            predictions["CAR largest contrastive effect"] = np.asarray(
                [order[int(np.argmax(e))] for e in effect]
            )
            per_car = (calls["factual"] / n, (seconds["factual"] + car_seconds) / n)
            cost["CAR point of commitment (do_resample)"] = per_car
            cost["CAR largest contrastive effect"] = per_car
            notes["CAR point of commitment (do_resample)"] = (
                f"{int(np.sum(commitment < 0))} of {n} failures: no step's interval excludes 0 (counted wrong)"
            )

    t0 = time.perf_counter()
    before = judge.meter.calls
    labels = tuple(f"Step {s + 1}" for s in range(len(desk.STEPS)))
    asked = [
        Request("judge", "factual", desk.transcript(task, after, k), labels)
        for task, after, k in tasks_of
    ]
    verdicts = judge.score(asked)
    predictions["all-at-once judge (SmolLM2-135M)"] = np.asarray(
        [int(np.argmax(v)) for v in verdicts]
    )
    cost["all-at-once judge (SmolLM2-135M)"] = (
        (judge.meter.calls - before) / n,
        (time.perf_counter() - t0) / n,
    )
    predictions["first step"] = np.zeros(n, int)
    predictions["last step"] = np.full(n, len(desk.STEPS) - 1)
    for name in ("first step", "last step"):
        cost[name] = (0.0, 0.0)

    rows = []
    for name, predicted in predictions.items():
        right0 = int(np.sum(predicted == golden))
        right1 = int(np.sum((predicted >= 0) & (np.abs(predicted - golden) <= 1)))
        agent = int(
            np.sum(
                (predicted >= 0) & (step_agent[np.clip(predicted, 0, None)] == step_agent[golden])
            )
        )
        rows.append((name, right0, right1, agent, *cost[name]))
    steps = len(desk.STEPS)
    within = np.asarray([sum(abs(s - g) <= 1 for s in range(steps)) / steps for g in golden])
    same_agent = np.asarray([np.mean(step_agent == step_agent[g]) for g in golden])
    random_row = (
        "random (expectation)",
        n / steps,
        float(within.sum()),
        float(same_agent.sum()),
        0.0,
        0.0,
    )

    def cell(right):
        if isinstance(right, float):
            return f"{100 * right / n:5.1f}"
        low, high = bj.stats.wilson_interval(right, n)
        return f"{100 * right / n:5.1f} [{100 * low:4.1f}, {100 * high:4.1f}]"

    lines = [
        "| method | Step@0 | Step@1 | agent | model calls / failure | s / failure |",
        "|---|---|---|---|---|---|",
    ]
    for name, r0, r1, ag, c, s in [*rows, random_row]:
        lines.append(f"| {name} | {cell(r0)} | {cell(r1)} | {cell(ag)} | {c:.1f} | {s:.2f} |")
    success = int(np.sum(natural))
    by_step = {desk.STEPS[k]: int(np.sum(golden == k)) for k in range(steps)}
    summary = (
        f"{args.tasks} tickets; the agent's clean runs passed {success} of {args.tasks} "
        f"({100 * success / args.tasks:.0f} %); {n} injected failures kept out of "
        f"{4 * success} injections (golden step: {by_step}); temperature {args.temperature}, "
        f"{args.worlds} posterior worlds, {args.rollouts} CAR rollouts per step and world; "
        f"model load {load:.1f} s, total {time.perf_counter() - started:.0f} s, load average "
        f"{os.getloadavg()[0]:.1f}."
    )
    table = "\n".join(lines)
    print(summary)
    print(table)
    for name, note in notes.items():
        print(f"- {name}: {note}")
    if args.quick:
        return
    RESULTS.mkdir(exist_ok=True)
    command = "python benchmarks/real_model_agent.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    (RESULTS / "real_model_agent.md").write_text(
        f"# Injected-culprit benchmark with a real model\n\n`{command.strip()}` on "
        f"{time.strftime('%Y-%m-%d %H:%M')} (2-core machine shared with other work; "
        f"{bj.scorers.LlamaScorer.__name__} over SmolLM2-135M-Instruct Q4_1, "
        f"{scorer.identity and json.loads(scorer.identity)['build']}).\n\n{summary}\n\n{table}\n\n"
        + "\n".join(f"- {name}: {note}" for name, note in notes.items())
        + "\n"
    )
    (RESULTS / "real_model_agent.json").write_text(
        json.dumps(
            {
                "summary": summary,
                "golden": golden.tolist(),
                "predictions": {k: v.tolist() for k, v in predictions.items()},
                "cost": cost,
                "notes": notes,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
