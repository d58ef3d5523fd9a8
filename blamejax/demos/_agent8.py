"""An 8-step agent answering a finance question:
intake -> router -> planner -> search -> extractor -> calculator -> drafter -> guardrail.

The user asks "By what percentage did Acme's revenue grow from fiscal 2023 to fiscal 2024?".
Every step is a categorical draw whose logits depend on the choices before it (tables
`[V, K_parent, K]`, or `[V, K_parent1, K_parent2, K]` for two parents); variant 0 is what
ran, variant 1 is the step's fix. The score is 1 when the final answer is right.

- intake: {question understood, garbled}. The fix asks a clarifying question first.
- router (given intake): {finance database, web search, no tool}. The factual router skips
  tools 30% of the time. Its fix never skips tools but leans more on web search, so under
  some noise it sends a question the factual router had sent to the finance database to the
  web instead, where the search is worse: in those failures the router's Shapley value can
  be negative although its fix is better on average.
- planner (given router): {right fiscal periods, wrong periods}.
- search (given router, planner): {right filing, stale filing, nothing}; no tool finds nothing.
- extractor (given search): {right numbers, wrong numbers}; a stale filing or nothing gives
  wrong numbers whatever the extractor does.
- calculator (given extractor): {right result, wrong result}. Its fix runs the arithmetic
  in a code interpreter.
- drafter (given calculator): {faithful answer, made-up number, refusal}. The factual drafter
  makes up a number 45% of the time even when the calculation is right: the main culprit.
- guardrail (given calculator, drafter): the final answer {right, wrong}. The factual guardrail
  passes what it gets; its fix sometimes catches a made-up number and puts the calculator's
  result back.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

STEPS = ("intake", "router", "planner", "search", "extractor", "calculator", "drafter", "guardrail")
QUESTION = "By what percentage did Acme's revenue grow from fiscal 2023 to fiscal 2024?"


def _logits(probs) -> np.ndarray:
    """Log-probabilities, with -inf for impossible options (no warning for log 0)."""
    p = np.asarray(probs, np.float64)
    out = np.full(p.shape, -np.inf)
    np.log(p, out=out, where=p > 0)
    return out


def agent8_tables() -> dict:
    """The logits tables of one agent case (no failure axis), float32."""
    intake = [[0.9, 0.1], [0.97, 0.03]]
    router = [
        [[0.75, 0.13, 0.12], [0.3, 0.35, 0.35]],  # factual: understood / garbled
        [[0.7, 0.3, 0.0], [0.5, 0.5, 0.0]],  # fix: always a tool, more web search
    ]
    planner = [
        [[0.9, 0.1], [0.75, 0.25], [0.6, 0.4]],  # given finance db / web / no tool
        [[0.97, 0.03], [0.9, 0.1], [0.8, 0.2]],
    ]
    nothing = [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]
    search = [
        [  # factual, [route][plan right / wrong] -> {right filing, stale, nothing}
            [[0.9, 0.07, 0.03], [0.1, 0.85, 0.05]],
            [[0.25, 0.6, 0.15], [0.05, 0.75, 0.2]],
            nothing,
        ],
        [
            [[0.97, 0.03, 0.0], [0.15, 0.85, 0.0]],
            [[0.3, 0.65, 0.05], [0.05, 0.9, 0.05]],
            nothing,
        ],
    ]
    extractor = [
        [[0.92, 0.08], [0.0, 1.0], [0.0, 1.0]],
        [[0.98, 0.02], [0.0, 1.0], [0.0, 1.0]],
    ]
    calculator = [
        [[0.95, 0.05], [0.0, 1.0]],
        [[1.0, 0.0], [0.0, 1.0]],
    ]
    drafter = [
        [[0.35, 0.5, 0.15], [0.35, 0.5, 0.15]],
        [[0.95, 0.03, 0.02], [0.95, 0.03, 0.02]],
    ]
    wrong = [0.0, 1.0]
    guardrail = [
        [  # factual, [calculation right / wrong][faithful / made-up / refusal] -> {right, wrong}
            [[0.95, 0.05], wrong, wrong],
            [wrong, wrong, wrong],
        ],
        [
            [[0.99, 0.01], [0.5, 0.5], [0.3, 0.7]],
            [wrong, wrong, wrong],
        ],
    ]
    tables = dict(
        intake=intake,
        router=router,
        planner=planner,
        search=search,
        extractor=extractor,
        calculator=calculator,
        drafter=drafter,
        guardrail=guardrail,
    )
    out = {name: jnp.asarray(_logits(t), jnp.float32) for name, t in tables.items()}
    out["answer_right"] = jnp.asarray([1.0, 0.0], jnp.float32)
    return out


def agent8_cases(num_cases: int = 1) -> dict:
    """`num_cases` copies of the agent case, with a leading case axis; the cases differ only
    in their luck (their recorded noise)."""
    if not isinstance(num_cases, int) or num_cases < 1:
        raise ValueError(f"`num_cases` must be a positive int, got {num_cases!r}")
    tables = agent8_tables()
    return {k: jnp.broadcast_to(v, (num_cases,) + v.shape) for k, v in tables.items()}


def agent8_pipeline(ctx, case):
    """The agent for one case, one world, one plan. Score 1 = the final answer is right."""
    intake = ctx.choose("intake", case["intake"])
    route = ctx.choose("router", case["router"], given=intake)
    plan = ctx.choose("planner", case["planner"], given=route)
    filing = ctx.choose("search", case["search"], given=(route, plan))
    numbers = ctx.choose("extractor", case["extractor"], given=filing)
    result = ctx.choose("calculator", case["calculator"], given=numbers)
    draft = ctx.choose("drafter", case["drafter"], given=result)
    final = ctx.choose("guardrail", case["guardrail"], given=(result, draft))
    return final.take(case["answer_right"])


def agent8_report(num_cases: int = 200, seed: int = 0, max_evaluations: int = 30_000) -> str:
    """Run the agent demo and return its plain-text report: exact values (256 coalitions
    per failure), the Monte Carlo estimate with intervals, where the adaptive top-1 rule
    stopped, the largest error against exact, and whether antithetic sampling helps here
    and on the refund demo. This is what `python -m blamejax demo agent8` prints."""
    import jax

    import blamejax as bj

    lines = [
        "8-step agent answering a finance question:",
        f'  "{QUESTION}"',
        "  " + " -> ".join(STEPS),
    ]
    cases = agent8_cases(num_cases)
    scores = np.asarray(
        bj.replay(agent8_pipeline, cases, bj.recorded_worlds(seed, range(num_cases)))["score"][:, 0]
    )
    failed = np.flatnonzero(scores < 1)
    lines.append(
        f"{num_cases} runs, each with its own recorded noise (seed {seed}): {len(failed)} failed."
    )
    if len(failed) == 0:
        lines.append("No failure to blame; try another --seed or more --cases.")
        return "\n".join(lines)
    cases_f = jax.tree_util.tree_map(lambda x: x[failed], cases)
    worlds_f = bj.recorded_worlds(seed, failed)
    exact = bj.exact_blame(agent8_pipeline, cases_f, worlds_f)
    phi, total = np.asarray(exact.shapley), np.asarray(exact.total)
    lines += _exact_lines(phi, total, len(failed))
    mc = bj.mc_shapley(
        agent8_pipeline, cases_f, worlds_f, key=seed, max_evaluations=max_evaluations, stop="top1"
    )
    lines += _one_failure_lines(phi, total, failed, mc)
    margin = bj.mc_shapley(
        agent8_pipeline,
        cases_f,
        worlds_f,
        key=seed,
        max_evaluations=max_evaluations,
        stop="top1",
        epsilon=0.1,
    )
    lines += _all_failures_lines(phi, mc, margin, max_evaluations)
    lines += _antithetic_lines(seed, cases_f, worlds_f)
    lines.append(
        "\nBlame is relative to the fixes supplied, and replay under recorded noise assumes the\n"
        "Gumbel-max coupling, which data cannot identify."
    )
    return "\n".join(lines)


def _exact_lines(phi, total, num_failed: int) -> list[str]:
    """The exact Shapley values over the failures: their means, how often the drafter leads
    and how often the router's fix hurts."""
    lines = [f"{int((total > 0.5).sum())} of them succeed when every step runs its fix.\n"]
    lines.append(f"Exact Shapley values (all 256 coalitions), mean over the {num_failed} failures:")
    for i, step in enumerate(STEPS):
        lines.append(f"  {step:<11} {phi[:, i].mean():+.3f}")
    nontrivial = np.abs(phi).max(axis=1) > 1e-6
    top = np.bincount(phi[nontrivial].argmax(axis=1), minlength=len(STEPS))
    negative = np.flatnonzero(phi[:, 1] < -1e-6)
    lines.append(
        f"The drafter has the largest value in {top[6]} of the {int(nontrivial.sum())} failures "
        f"with any blame; the router's value is negative in {len(negative)} "
        "(its fix sends the question to web search)."
    )
    return lines


def _one_failure_lines(phi, total, failed, mc) -> list[str]:
    """One failure in detail (the first in which the drafter leads): exact beside the Monte
    Carlo estimate and its interval, where the top-1 rule stopped; and a failure where the
    router's fix hurts."""
    est, low, high = (np.asarray(x) for x in (mc.values, mc.lower, mc.upper))
    nontrivial = np.abs(phi).max(axis=1) > 1e-6
    drafter_top = np.flatnonzero(nontrivial & (phi.argmax(axis=1) == 6))
    f = (
        int(drafter_top[0])
        if len(drafter_top)
        else int(np.flatnonzero(nontrivial)[0])
        if nontrivial.any()
        else 0
    )
    lines = [
        f"\nOne failure (case {failed[f]}, the first in which the drafter has the largest exact value):",
        f"  {'step':<11} {'exact':>7}  {'MC estimate':>11}  {'interval':>17}  {'|error|':>7}",
    ]
    for i, step in enumerate(STEPS):
        lines.append(
            f"  {step:<11} {phi[f, i]:+7.3f}  {est[f, i]:+11.3f}  [{low[f, i]:+.3f}, {high[f, i]:+.3f}]"
            f"  {abs(est[f, i] - phi[f, i]):7.3f}"
        )
    lines.append(
        f"  Adaptive top-1 rule (empirical Bernstein, delta = {mc.delta} per failure): stopped after "
        f"{int(mc.num_permutations[f])} permutations ({int(mc.evaluations[f])} evaluations), "
        f"{'top step separated' if bool(mc.converged[f]) else 'budget spent'}: {STEPS[int(est[f].argmax())]}.\n"
        "  (At n = 8 the 256 exact coalitions are cheaper; sampling is for pipelines with many steps.)"
    )
    lines.append(f"  Largest |MC - exact| over the steps: {np.abs(est[f] - phi[f]).max():.3f}")
    negative = np.flatnonzero(phi[:, 1] < -1e-6)
    if len(negative):
        # The one with the most repair, then the most negative router.
        g = int(negative[np.lexsort((phi[negative, 1], -total[negative]))[0]])
        values = ", ".join(f"{s} {phi[g, i]:+.3f}" for i, s in enumerate(STEPS))
        lines.append(
            f"\nA failure where the router's fix hurts (case {failed[g]}), exact: {values}"
        )
    return lines


def _all_failures_lines(phi, mc, margin, max_evaluations: int) -> list[str]:
    """Over all failures: where the top-1 rule held (and with a margin), why it did not
    (exact ties, close top steps), and the Monte Carlo errors against exact."""
    est, low, high = (np.asarray(x) for x in (mc.values, mc.lower, mc.upper))
    num_failed = phi.shape[0]
    converged = np.asarray(mc.converged)
    orders = np.asarray(mc.num_permutations)
    ordered = np.sort(phi, axis=1)
    gap = ordered[:, -1] - ordered[:, -2]  # exact distance between the top two steps
    tied = ~converged & (gap < 1e-6)
    close = ~converged & (gap >= 1e-6)
    misses = int(((phi < low - 1e-6) | (phi > high + 1e-6)).any(axis=1).sum())
    median = int(np.median(orders[converged])) if converged.any() else 0
    held = np.asarray(margin.converged)
    return [
        f"\nAll {num_failed} failures: the top-1 rule held for {int(converged.sum())} (median {median} "
        f"permutations). {int((~converged).sum())} ran to the budget of {max_evaluations} evaluations: "
        f"{int(tied.sum())} have exactly tied top steps (often all zero: nothing helps)"
        + (
            f", {int(close.sum())} top steps closer than {gap[close].max():.3f}."
            if close.any()
            else "."
        ),
        f"With a margin epsilon = 0.1 (the top step is certified to be at most 0.1 below the best, so ties can stop), the rule "
        f"holds for {int(held.sum())} of {num_failed} (median "
        f"{int(np.median(np.asarray(margin.num_permutations)[held])) if held.any() else 0} permutations).",
        f"Largest |MC - exact| over all failures and steps: {np.abs(est - phi).max():.3f}; "
        f"failures with an interval missing its exact value: {misses} (delta = {mc.delta} allows about "
        f"{mc.delta * num_failed:.0f}).",
    ]


def _antithetic_lines(seed: int, cases_f, worlds_f) -> list[str]:
    """Antithetic pairs against plain orders, on the refund demo and on these failures."""
    import blamejax as bj

    from ._refund import refund_cases, refund_pipeline

    lines = [
        "\nAntithetic pairs (an order and its reverse) vs plain orders, exact variances",
        "per evaluation from the coalition tables (below 1: antithetic helps):",
    ]
    games = (
        (
            "refund (mechanism A)",
            refund_pipeline,
            refund_cases(1, "A"),
            bj.recorded_worlds(seed, range(1)),
        ),
        ("agent8", agent8_pipeline, cases_f, worlds_f),
    )
    for name, ratio, helps in _antithetic_ratios(games):
        verdict = "helps" if ratio < 1 else "hurts"
        lines.append(f"  {name:<21} {ratio:.2f}  ({verdict}; lower variance in {helps})")
    return lines


def _antithetic_ratios(games):
    """Per game: (name, sum of antithetic pair variances x 2 / sum of plain variances,
    over steps and failures, and in how many failures antithetic sampling is better)."""
    import jax

    import blamejax as bj

    for name, pipeline, cases, worlds in games:
        structure = bj.discover(pipeline, jax.tree_util.tree_map(lambda x: x[0], cases))
        n = structure.num_steps
        table = jax.jit(
            jax.vmap(
                lambda c, k: bj.coalitions.coalition_values(
                    pipeline, structure, c, bj.World(key=k[0]), tuple(range(n)), (1,) * n
                )
            )
        )(cases, worlds.key)
        plain, anti = [], []
        for v in np.asarray(table):
            s = bj.reduction.sampling_variance(v)
            plain.append(s.plain.sum())
            anti.append(2 * s.antithetic.sum())
        plain, anti = np.asarray(plain), np.asarray(anti)
        varies = plain > 0
        helps = f"{int((anti < plain)[varies].sum())} of {int(varies.sum())} failures"
        yield name, float(anti.sum() / plain.sum()), helps
