"""The stochastic-RAG demo: rewrite -> retrieve -> answer -> verify, over a test set of questions.

Each case is one question. Every step is a mocked LLM call that samples one of a few
outcomes by Gumbel-max from a logits table:

- rewrite: turns the question into a search query, `REWRITE_OPTIONS`
  ("faithful", "vague", "off-topic"); table `[V, 3]`.
- retrieve (given the query): the passage found, `RETRIEVE_OPTIONS`
  ("relevant", "partial", "irrelevant"); table `[V, 3, 3]`. A faithful query usually
  finds the relevant passage, an off-topic one rarely does.
- answer (given the passage): `ANSWER_OPTIONS` ("correct", "incomplete", "hallucinated");
  table `[V, 3, 3]`. A correct answer needs the relevant passage (or luck on a partial one).
- verify (given the answer): `VERIFY_OPTIONS` ("accept", "reject"); table `[V, 3, 2]`.
  The verifier mostly accepts correct answers and rejects wrong ones.

The score is 1 when the answer is correct and the verifier accepts it, else 0.

Variant 0 of every table is what ran; variant 1 is the fix (a better prompt or model):
the same logits plus a fixed shift toward the good options (`FIX_SHIFTS`; for the
verifier, toward accepting a correct answer and rejecting a wrong one), so a fix makes
good outcomes more likely without forcing them. The questions differ: each has its own
difficulty (a hard question pushes the rewrite, the retrieval and the answer away from
their good options) and its own small jitter on every logit, drawn from a seeded numpy
generator, so the 200 cases are a test set, not 200 copies.

**Why last-step blame misleads here.** Most failures start upstream: a vague or off-topic
query, or an unlucky retrieval, leaves the answerer without the relevant passage, it
answers wrongly, and the verifier, doing its job, rejects the answer. In the fully fixed
run the query is faithful, the passage relevant, the answer correct, and the verifier
accepts it. So the verifier's output flips (reject -> accept) in almost every failure, and
since it is the last step, the rule "blame the last step whose output differs between the
failed and the fixed run" names the verifier. But the verifier's fix only matters when the
answer was already correct and the factual verifier wrongly rejected it, which is rare:
fixing the verifier alone saves few runs, and Shapley gives most of the blame to the
query rewrite and the retrieval, whose fixes (alone or together) repair the passage. The
answerer's fix helps only when the passage holds the answer, so it ranks between them.

Blame is relative to these fixes, and replay under recorded or inferred noise assumes the
Gumbel-max coupling, which data cannot identify.

```python
import blamejax as bj
cases = bj.demos.rag_cases(200, seed=0)
scores = bj.replay(bj.demos.rag_pipeline, cases, bj.recorded_worlds(0, range(200)))["score"]
```
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

STEPS = ("rewrite", "retrieve", "answer", "verify")
REWRITE_OPTIONS = ("faithful", "vague", "off-topic")
"""The options of the `rewrite` step, in the order of its logit tables' last axis."""
RETRIEVE_OPTIONS = ("relevant", "partial", "irrelevant")
"""The options of the `retrieve` step, in the order of its logit tables' last axis."""
ANSWER_OPTIONS = ("correct", "incomplete", "hallucinated")
"""The options of the `answer` step, in the order of its logit tables' last axis."""
VERIFY_OPTIONS = ("accept", "reject")
"""The options of the `verify` step, in the order of its logit tables' last axis."""

# Factual probabilities of an average question (rows: the parent's option; columns: this
# step's options, in the order of the option tuples above).
_REWRITE_PROBS = np.array([0.30, 0.45, 0.25])
_RETRIEVE_PROBS = np.array(
    [
        [0.65, 0.23, 0.12],  # faithful query
        [0.20, 0.45, 0.35],  # vague query
        [0.05, 0.20, 0.75],  # off-topic query
    ]
)
_ANSWER_PROBS = np.array(
    [
        [0.80, 0.13, 0.07],  # relevant passage
        [0.10, 0.55, 0.35],  # partial passage
        [0.03, 0.17, 0.80],  # irrelevant passage
    ]
)
_VERIFY_PROBS = np.array(
    [
        [0.90, 0.10],  # correct answer: a false reject 10% of the time
        [0.015, 0.985],  # incomplete answer: nearly always rejected
        [0.015, 0.985],  # hallucinated answer: nearly always rejected
    ]
)

# The fix of each step: variant 1 = variant 0 + this shift (same shape as one factual
# table, broadcast over rows for `rewrite`). The shifts favour the good options; where a
# fix can only do so much, its row gets a smaller shift: a better retriever helps little
# with an off-topic query, and a better answerer cannot supply facts its passage lacks.
FIX_SHIFTS = dict(
    rewrite=np.array([4.0, 0.0, -1.0]),
    retrieve=np.array([[3.5, 0.5, 0.0], [2.5, 0.5, 0.0], [1.0, 0.0, 0.0]]),
    answer=np.array([[3.0, 0.0, -0.5], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]]),
    verify=np.array([[3.0, 0.0], [0.0, 1.0], [0.0, 1.0]]),
)
# A question's difficulty is a standard normal; it lowers the logit of the good option
# (column 0) of rewrite, retrieve and answer by DIFFICULTY * difficulty. Every logit also
# gets its own N(0, JITTER^2) jitter.
DIFFICULTY = 0.6
JITTER = 0.3


def _factual(rng, probs, difficulty, harder: bool):
    """`[F, *probs.shape]` factual logits: the average question's log-probabilities plus
    per-case jitter, with the good option made less likely for hard questions."""
    num_cases = difficulty.shape[0]
    logits = np.log(probs)[None] + JITTER * rng.standard_normal((num_cases,) + probs.shape)
    if harder:
        good = np.zeros(probs.shape)
        good[..., 0] = 1.0
        logits = logits - DIFFICULTY * difficulty.reshape((-1,) + (1,) * probs.ndim) * good[None]
    return logits


def _with_fix(logits, shift):
    """Stack the factual logits `[F, ...]` and their fix into `[F, V=2, ...]`."""
    fixed = logits + np.broadcast_to(shift, logits.shape[1:])[None]
    return np.stack([logits, fixed], axis=1)


def rag_cases(num_cases: int = 200, seed: int = 0) -> dict:
    """The logits tables of `num_cases` questions, each with its own difficulty.

    **Arguments:**
    - `num_cases`: the number of questions F.
    - `seed`: seeds the numpy generator that draws each question's difficulty and jitter
      (the sampling noise of the runs is separate: it comes from the world keys).

    **Returns:** a dict of float32 arrays with a leading case axis F:
    `"rewrite"` `[F, 2, 3]`, `"retrieve"` `[F, 2, 3, 3]`, `"answer"` `[F, 2, 3, 3]`,
    `"verify"` `[F, 2, 3, 2]` (axis 1 is the variant: 0 = what ran, 1 = the fix),
    `"answer_correct"` `[F, 3]` and `"verify_accept"` `[F, 2]` (the 0/1 score tables), and
    `"difficulty"` `[F]` (standard normal; higher is harder; the pipeline does not read it).

    **Raises:** `ValueError` if `num_cases` is not a positive int or `seed` not an int.

    ```python
    import blamejax as bj
    cases = bj.demos.rag_cases(20, seed=0)
    assert cases["retrieve"].shape == (20, 2, 3, 3)  # [cases, variants, K_rewrite, K_retrieve]
    ```
    """
    if isinstance(num_cases, bool) or not isinstance(num_cases, (int, np.integer)) or num_cases < 1:
        raise ValueError(f"`num_cases` must be a positive int, got {num_cases!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"`seed` must be an int, got {seed!r}")
    num_cases = int(num_cases)
    rng = np.random.default_rng(int(seed))
    difficulty = rng.standard_normal(num_cases)
    tables = dict(
        rewrite=_with_fix(_factual(rng, _REWRITE_PROBS, difficulty, True), FIX_SHIFTS["rewrite"]),
        retrieve=_with_fix(
            _factual(rng, _RETRIEVE_PROBS, difficulty, True), FIX_SHIFTS["retrieve"]
        ),
        answer=_with_fix(_factual(rng, _ANSWER_PROBS, difficulty, True), FIX_SHIFTS["answer"]),
        verify=_with_fix(_factual(rng, _VERIFY_PROBS, difficulty, False), FIX_SHIFTS["verify"]),
        answer_correct=np.tile(np.array([1.0, 0.0, 0.0]), (num_cases, 1)),
        verify_accept=np.tile(np.array([1.0, 0.0]), (num_cases, 1)),
        difficulty=difficulty,
    )
    return {name: jnp.asarray(value, jnp.float32) for name, value in tables.items()}


def rag_pipeline(ctx, case):
    """The RAG pipeline for one question, one world, one plan.

    **Arguments:**
    - `ctx`: the blamejax context.
    - `case`: one question's tables (one element of `rag_cases`, no case axis).

    **Returns:** the score, 1.0 when the answer is correct and the verifier accepts it,
    else 0.0 (a float scalar; in relaxed mode the expected value under the soft choices).
    """
    query = ctx.choose("rewrite", case["rewrite"])
    passage = ctx.choose("retrieve", case["retrieve"], given=query)
    answer = ctx.choose("answer", case["answer"], given=passage)
    verdict = ctx.choose("verify", case["verify"], given=answer)
    return answer.take(case["answer_correct"]) * verdict.take(case["verify_accept"])
