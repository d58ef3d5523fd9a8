"""Two small structural causal models with known answers, the kind Causal Agent Replay
(CAR) validates on, and their analytic values.

**Pivotal SCM** (`pivotal_pipeline`): read -> decide -> notify. A refund request is read
(routine or urgent, 50/50), a decision is taken (deny, or issue a refund that should not
be issued: probability `p = 0.3`, whatever the reading), and the customer is notified
(email or letter, 50/50). The run is bad iff the refund was issued. The middle step is
the locus: re-deciding there can save a failed run; nothing after it can.

**Interaction SCM** (`interaction_pipeline`): id_check, fraud_check, logger. A bad
application is approved only if both independent checks miss it (each with probability
`p = 0.3`); the logger's draw changes nothing. Neither check alone is to blame.

Variants of every step: 0 = factual; 1 = a better model (a mistake with probability 0.1
instead of 0.3); 2 = an oracle (never a mistake; `decide`, `id_check` and `fraud_check`
only). The read, notify and logger steps have a "fix" too (variant 1), which changes
their output but never the outcome.

The analytic values of a failed run (see `pivotal_analytic`, `interaction_analytic`):

- contrastive effect of step k, `1 - P(bad | do_resample(k))`, with downstream noise held
  (later steps keep their noise), fresh (later steps re-draw) and direct (later steps
  forced to their factual outputs);
- CAR's game, `v(S) = P(good | the steps in S re-drawn with fresh noise, factual noise
  elsewhere)`, averaged over the fresh draws of a failed run, and its Shapley values;
- blamejax's game, `v(S) = P(good | the steps in S run their fix under the same noise)`,
  averaged over the noise of failed runs (the posterior given the failure), with the
  better-model fix and with the oracle fix.

Under the Gumbel-max coupling, a binary step that went bad under logits with good-probability
`a` and is switched to a variant with good-probability `b > a` turns good with probability
`(b - a) / (1 - a)` (for a = 0.7, b = 0.9: 2/3).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

NEG = -np.inf
P_BAD = 0.3  # the factual probability of a mistake at the pivotal / interacting steps
P_BAD_BETTER = 0.1  # the same step's mistake probability under the better model (variant 1)
PIVOTAL_STEPS = ("read", "decide", "notify")
INTERACTION_STEPS = ("id_check", "fraud_check", "logger")


def _binary(p_bad: float) -> list[float]:
    """Logits of [good, bad] with P(bad) = p_bad."""
    good = math.log(1 - p_bad) if p_bad < 1 else -math.inf
    bad = math.log(p_bad) if p_bad > 0 else -math.inf
    return [good, bad]


def _check_p(p_bad: float) -> float:
    if not isinstance(p_bad, (int, float)) or not 0 < p_bad < 1:
        raise ValueError(f"`p_bad` must be a probability in (0, 1), got {p_bad!r}")
    if not p_bad > P_BAD_BETTER:
        raise ValueError(
            f"`p_bad` must exceed the better model's {P_BAD_BETTER} so that variant 1 is a fix, got {p_bad!r}"
        )
    return float(p_bad)


def _broadcast(tables: dict, num_cases: int) -> dict:
    if not isinstance(num_cases, int) or num_cases < 1:
        raise ValueError(f"`num_cases` must be a positive int, got {num_cases!r}")
    return {k: jnp.broadcast_to(v, (num_cases,) + v.shape) for k, v in tables.items()}


# -- the pivotal SCM --------------------------------------------------------------------------
def pivotal_tables(p_bad: float = P_BAD) -> dict:
    """Logits tables of one pivotal case (no case axis). Options: read {routine, urgent};
    decide {deny, refund} (refund is the mistake); notify {email, letter}."""
    p_bad = _check_p(p_bad)
    half = [math.log(0.5), math.log(0.5)]
    read = np.array([half, _binary(0.1)])  # [V=2, K=2]; the "fix" reads differently, to no effect
    decide_rows = [_binary(p_bad), _binary(P_BAD_BETTER), _binary(0.0)]
    # [V=3, K_read=2, K=2]: the same row whatever the reading
    decide = np.array([[row, row] for row in decide_rows])
    notify = np.array([[half, half], [_binary(0.1), _binary(0.1)]])  # [V=2, K_decide=2, K=2]
    return dict(
        read=jnp.asarray(read, jnp.float32),
        decide=jnp.asarray(decide, jnp.float32),
        notify=jnp.asarray(notify, jnp.float32),
        good_decision=jnp.asarray([1.0, 0.0], jnp.float32),
    )


def pivotal_cases(num_cases: int = 1, p_bad: float = P_BAD) -> dict:
    """`num_cases` copies of the pivotal case, with a leading case axis."""
    return _broadcast(pivotal_tables(p_bad), num_cases)


def pivotal_pipeline(ctx, case):
    """read -> decide -> notify. Score 1 when no wrong refund was issued, else 0."""
    reading = ctx.choose("read", case["read"])
    decision = ctx.choose("decide", case["decide"], given=reading)
    ctx.choose("notify", case["notify"], given=decision)
    return decision.take(case["good_decision"])


def pivotal_analytic(p_bad: float = P_BAD) -> dict:
    """The pivotal SCM's values for a failed run (a wrong refund), per step in
    `PIVOTAL_STEPS` order. Derivation: `decide` ignores the reading, so re-reading with
    `decide`'s noise held changes nothing (0); re-drawing `decide` saves the run with
    probability 1 - p; nothing after `decide` can undo it (0). With fresh downstream noise,
    re-reading also re-draws `decide`: 1 - p, the luck of `decide` credited to `read`."""
    p_bad = _check_p(p_bad)
    save = 1 - p_bad
    better = (p_bad - P_BAD_BETTER) / p_bad  # (b - a) / (1 - a) with a = 1 - p, b = 0.9
    return dict(
        steps=PIVOTAL_STEPS,
        held=(0.0, save, 0.0),
        fresh=(save, save, 0.0),
        direct=(0.0, save, 0.0),
        commitment="decide",
        resample_shapley=(0.0, save, 0.0),  # CAR's game: v(S) = (1 - p) [decide in S]
        better_shapley=(0.0, better, 0.0),  # blamejax, better model, same noise
        oracle_shapley=(0.0, 1.0, 0.0),  # blamejax, oracle fix of decide
    )


# -- the interaction SCM ----------------------------------------------------------------------
def interaction_tables(p_bad: float = P_BAD) -> dict:
    """Logits tables of one interaction case. Options: id_check and fraud_check {caught,
    missed} (missed is the mistake); logger {short, long}."""
    p_bad = _check_p(p_bad)
    check = np.array([_binary(p_bad), _binary(P_BAD_BETTER), _binary(0.0)])  # [V=3, K=2]
    logger = np.array([[math.log(0.5), math.log(0.5)], _binary(0.1)])  # [V=2, K=2]
    return dict(
        id_check=jnp.asarray(check, jnp.float32),
        fraud_check=jnp.asarray(check, jnp.float32),
        logger=jnp.asarray(logger, jnp.float32),
        missed=jnp.asarray([0.0, 1.0], jnp.float32),
    )


def interaction_cases(num_cases: int = 1, p_bad: float = P_BAD) -> dict:
    """`num_cases` copies of the interaction case, with a leading case axis."""
    return _broadcast(interaction_tables(p_bad), num_cases)


def interaction_pipeline(ctx, case):
    """Two independent checks and a logger. Score 0 when both checks missed, else 1."""
    first = ctx.choose("id_check", case["id_check"])
    second = ctx.choose("fraud_check", case["fraud_check"])
    ctx.choose("logger", case["logger"])
    return 1.0 - first.take(case["missed"]) * second.take(case["missed"])


def interaction_analytic(p_bad: float = P_BAD) -> dict:
    """The interaction SCM's values for a failed run (both checks missed), per step in
    `INTERACTION_STEPS` order.

    - Contrastive, held: re-drawing one check saves the run iff it now catches: 1 - p
      (0.7, 0.7, 0; they sum to 1.4). Fresh: re-drawing id_check also re-draws fraud_check,
      so the run is saved unless both miss again: 1 - p^2 = 0.91 (0.91, 0.7, 0; sum 1.61).
    - CAR's game: v(∅) = 0, v({id}) = v({fraud}) = 1 - p, v({id, fraud}) = 1 - p^2, the
      logger adds nothing. Shapley: (1 - p^2) / 2 = 0.455 each, 0 for the logger; they add
      up to v(all) - v(∅) = 1 - p^2 = 0.91 (the per-failure expectation over fresh re-draws,
      with v(∅) = 0 because the run failed).
    - blamejax's game, better model: a check that missed turns good under the same noise
      with probability c = (0.9 - 0.7) / 0.3 = 2/3; v({i}) = c, v({id, fraud}) = 1 - (1-c)^2
      = 8/9; Shapley c (1 - c/2) = 4/9 each, total 8/9. Oracle fix: 1/2, 1/2, 0, total 1.
    """
    p_bad = _check_p(p_bad)
    save = 1 - p_bad
    both = 1 - p_bad**2
    c = (p_bad - P_BAD_BETTER) / p_bad
    return dict(
        steps=INTERACTION_STEPS,
        held=(save, save, 0.0),
        fresh=(both, save, 0.0),
        direct=(save, save, 0.0),
        commitment="fraud_check",
        resample_values={"": 0.0, "id": save, "fraud": save, "id+fraud": both},
        resample_shapley=(both / 2, both / 2, 0.0),
        resample_total=both,
        better_shapley=(c * (1 - c / 2), c * (1 - c / 2), 0.0),
        better_total=1 - (1 - c) ** 2,
        oracle_shapley=(0.5, 0.5, 0.0),
    )


# -- the command-line demo --------------------------------------------------------------------
def find_failures(pipeline, make_cases, seed: int, count: int):
    """The first `count` failed runs (score < 0.5) among customers 0, 1, 2, ... run with
    their recorded noise under root `seed`. Returns (cases, worlds, ids)."""
    import jax

    import blamejax as bj

    ids: list[int] = []
    start, block = 0, max(64, 16 * count)
    while len(ids) < count:
        batch = np.arange(start, start + block)
        cases = make_cases(block)
        scores = np.asarray(
            bj.replay(pipeline, cases, bj.recorded_worlds(seed, batch))["score"][:, 0]
        )
        ids += [int(i) for i in batch[scores < 0.5]]
        start += block
    ids = ids[:count]
    cases = jax.tree_util.tree_map(lambda x: x[: len(ids)], make_cases(len(ids)))
    return cases, bj.recorded_worlds(seed, np.asarray(ids)), ids


def _row(name, width, cells):
    return f"   {name:<{width}}" + "".join(f"  {c:>15}" for c in cells)


def run_car_demo(args) -> int:
    """`python -m blamejax demo car`: the two SCMs, analysed as CAR would and as blamejax would."""
    import blamejax as bj

    seed, count, rollouts = args.seed, args.cases, 1000
    print("Causal Agent Replay (CAR) questions on two SCMs with known answers.")
    print(
        f"{count} failed runs of each SCM (recorded noise, seed {seed}); {rollouts} rollouts per "
        "step and failure.\nValues are means over the failures; analytic values in brackets.\n"
    )

    # 1. The pivotal SCM.
    truth = pivotal_analytic()
    cases, worlds, ids = find_failures(pivotal_pipeline, pivotal_cases, seed, count)
    print("1. Pivotal SCM: read -> decide -> notify. `decide` issues a wrong refund with")
    print("   probability 0.3, whatever the reading; the run is bad iff it does.")
    print("   Contrastive effect 1[factual bad] - P(bad | do_resample(k)), by downstream noise:")
    width = max(len(s) for s in PIVOTAL_STEPS)
    print(_row("step", width, ["held", "fresh", "direct"]))
    results = {
        mode: bj.contrastive(
            pivotal_pipeline, cases, worlds, num_rollouts=rollouts, downstream=mode
        )
        for mode in ("held", "fresh", "direct")
    }
    for i, step in enumerate(PIVOTAL_STEPS):
        cells = [
            f"{float(results[m].effect[:, i].mean()):.3f} ({truth[m][i]:.3f})"
            for m in ("held", "fresh", "direct")
        ]
        print(_row(step, width, cells))
    for mode, result in results.items():
        hits = int(np.sum(np.asarray(result.commitment) == PIVOTAL_STEPS.index("decide")))
        print(f"   point of commitment ({mode}): decide in {hits} of {count} failures")
    print(
        "   Held and fresh differ at `read`: with fresh downstream noise, re-reading also\n"
        "   re-draws `decide`, so `read` is credited with `decide`'s luck (0.7); with `decide`'s\n"
        "   noise held, a new reading cannot change the decision (0), which is the truth here."
    )
    print(f"   One failure (customer {ids[0]}) in full, downstream noise held:")
    print("   " + results["held"].table(0).replace("\n", "\n   ") + "\n")

    # 2. The interaction SCM.
    truth = interaction_analytic()
    cases, worlds, ids = find_failures(interaction_pipeline, interaction_cases, seed, count)
    width = max(len(s) for s in INTERACTION_STEPS)
    print("2. Interaction SCM: id_check, fraud_check, logger. The run is bad iff both checks")
    print("   miss (each with probability 0.3); the logger changes nothing.")
    held = bj.contrastive(
        interaction_pipeline, cases, worlds, num_rollouts=rollouts, downstream="held"
    )
    fresh = bj.contrastive(
        interaction_pipeline, cases, worlds, num_rollouts=rollouts, downstream="fresh"
    )
    game = bj.interventions.resample_shapley(
        interaction_pipeline, cases, worlds, num_rollouts=rollouts
    )
    oracle = bj.exact_blame(
        interaction_pipeline, cases, worlds, fixes={"id_check": 2, "fraud_check": 2}
    )
    observed = bj.replay(interaction_pipeline, cases, worlds)["choice"][:, 0]
    inferred = bj.inferred_worlds(interaction_pipeline, cases, observed, seed, 256)
    better = bj.exact_blame(interaction_pipeline, cases, inferred)
    print(
        _row(
            "step",
            width,
            ["effect, held", "effect, fresh", "CAR's Shapley", "bj, oracle fix", "bj, better fix"],
        )
    )
    columns = [
        (np.asarray(held.effect).mean(0), truth["held"]),
        (np.asarray(fresh.effect).mean(0), truth["fresh"]),
        (np.asarray(game.shapley).mean(0), truth["resample_shapley"]),
        (np.asarray(oracle.shapley).mean(0), truth["oracle_shapley"]),
        (np.asarray(better.shapley).mean(0), truth["better_shapley"]),
    ]
    for i, step in enumerate(INTERACTION_STEPS):
        print(_row(step, width, [f"{got[i]:.3f} ({want[i]:.3f})" for got, want in columns]))
    sums = [f"{got.sum():.3f} ({sum(want):.3f})" for got, want in columns]
    print(_row("sum", width, sums))
    print(
        "   CAR's game re-draws the steps in S with fresh noise (factual noise elsewhere):\n"
        "   v(S) = P(good | S re-drawn) of a failed run, so v(∅) = 0 and the Shapley values add\n"
        "   up to v(all) = 1 - 0.3^2 = 0.91; each check gets half, 0.455. The single-step effects\n"
        "   over-count: 0.7 + 0.7 = 1.4 (held), 0.91 + 0.7 = 1.61 (fresh), because saving the run\n"
        "   needs only one of the two checks. blamejax's game asks another question: the step's\n"
        "   better variant under the same noise. The oracle splits 1/2, 1/2; the better model\n"
        "   (0.1 mistakes) rescues a missed check under the same luck with probability 2/3, giving\n"
        f"   4/9 each (mean over 256 abducted worlds per failure; Monte Carlo s.e. "
        f"{0.3685 / np.sqrt(256 * count):.3f})."
    )
    print(
        f"   Points of commitment (held): {_counts(held, count)}; (fresh): {_counts(fresh, count)}.\n"
    )

    # 3. Replay fidelity.
    fidelity_recorded = bj.worlds.replay_fidelity(interaction_pipeline, cases, worlds, observed)
    fidelity_inferred = bj.worlds.replay_fidelity(interaction_pipeline, cases, inferred, observed)
    fresh_worlds = bj.fresh_worlds(seed, range(len(ids)), 8)
    fidelity_fresh = bj.worlds.replay_fidelity(interaction_pipeline, cases, fresh_worlds, observed)
    print("3. Replay fidelity (share of draws whose replayed choice equals the record):")
    print(
        f"   recorded noise {fidelity_recorded.rate:.3f}, abducted noise {fidelity_inferred.rate:.3f}, "
        f"fresh noise {fidelity_fresh.rate:.3f} (the negative control).\n"
    )
    print(
        "Counterfactuals under recorded or abducted noise assume the Gumbel-max coupling, which\n"
        "data cannot identify; blame is always relative to the fixes (or re-draws) supplied."
    )
    return 0


def _counts(result, count: int) -> str:
    commitment = np.asarray(result.commitment)
    parts = []
    for i, step in enumerate(result.steps):
        hits = int(np.sum(commitment == i))
        if hits:
            parts.append(f"{step} {hits}/{count}")
    none = int(np.sum(commitment < 0))
    if none:
        parts.append(f"none {none}/{count}")
    return ", ".join(parts)
