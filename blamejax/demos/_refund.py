"""The refund-policy pipeline: planner -> retriever -> writer -> reviewer.

A customer asks whether a late return can be refunded. Every step is a categorical
draw whose logits the fix shifts:

- planner: picks the policy section to look up, {refund section, shipping section};
  the factual planner picks the wrong section 45% of the time; its fix always plans right.
- retriever (given the plan): {refund clause, shipping clause}; the factual retriever
  follows the plan (a little luck: 10% right clause despite a wrong plan); its fix
  searches by the question itself and finds the refund clause whatever the plan.
- writer (given the clause): {correct, wrong uncited, wrong cited}; on the right clause
  it answers correctly; on the wrong clause the factual writer states a wrong claim
  without a citation, its fix cites the clause it used.
- reviewer (given the answer): the final reply, {right, wrong}. The factual reviewer
  passes the writer's answer through unchecked. Its fix, mechanism A, re-checks *cited*
  claims and corrects them (so it needs the writer's citations); mechanism B checks and
  corrects every claim. The score is 1 when the final reply is right.

Under mechanism A a failure's game is v(S) = [planner or retriever or (writer and
reviewer) in S]: Shapley 5/12, 5/12, 1/12, 1/12; under B, v(S) = [planner or
retriever or reviewer]: 1/3, 1/3, 0, 1/3.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

NEG = -np.inf
STEPS = ("planner", "retriever", "writer", "reviewer")
ANSWERS = ("correct", "wrong, uncited", "wrong, cited")


def _log(p):
    return math.log(p)


def refund_tables(mechanism: str = "A") -> dict:
    """The logits tables of one refund case (no failure axis)."""
    if mechanism not in ("A", "B"):
        raise ValueError(f"`mechanism` must be 'A' or 'B', got {mechanism!r}")
    planner = np.array(
        [
            [_log(0.55), _log(0.45)],  # factual: wrong section 45% of the time
            [0.0, NEG],  # fix: always the refund section
        ]
    )
    retriever = np.array(
        [
            [[0.0, NEG], [_log(0.10), _log(0.90)]],  # factual: follows the plan
            [[0.0, NEG], [0.0, NEG]],  # fix: searches by the question
        ]
    )
    writer = np.array(
        [
            [[0.0, NEG, NEG], [NEG, 0.0, NEG]],  # factual: wrong clause -> uncited wrong claim
            [[0.0, NEG, NEG], [NEG, NEG, 0.0]],  # fix: cites the clause it used
        ]
    )
    right, wrong = [0.0, NEG], [NEG, 0.0]
    factual = [right, wrong, wrong]  # passes the answer through unchecked
    fix_a = [right, wrong, right]  # re-checks cited claims only
    fix_b = [right, right, right]  # checks every claim
    reviewer = np.array([factual, fix_a if mechanism == "A" else fix_b])
    return dict(
        planner=jnp.asarray(planner, jnp.float32),
        retriever=jnp.asarray(retriever, jnp.float32),
        writer=jnp.asarray(writer, jnp.float32),
        reviewer=jnp.asarray(reviewer, jnp.float32),
        reply_right=jnp.asarray([1.0, 0.0], jnp.float32),
    )


def refund_cases(num_cases: int = 1, mechanism: str = "A") -> dict:
    """`num_cases` copies of the refund case (one per customer), with a leading case axis.
    The customers differ only in their luck (their recorded noise)."""
    if not isinstance(num_cases, int) or num_cases < 1:
        raise ValueError(f"`num_cases` must be a positive int, got {num_cases!r}")
    tables = refund_tables(mechanism)
    return {k: jnp.broadcast_to(v, (num_cases,) + v.shape) for k, v in tables.items()}


def refund_pipeline(ctx, case):
    """The refund pipeline for one case, one world, one plan. Score 1 = right answer."""
    plan = ctx.choose("planner", case["planner"])
    clause = ctx.choose("retriever", case["retriever"], given=plan)
    answer = ctx.choose("writer", case["writer"], given=clause)
    reply = ctx.choose("reviewer", case["reviewer"], given=answer)
    return reply.take(case["reply_right"])
