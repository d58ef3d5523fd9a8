"""Nothing silently wrong: one table of bad inputs and faults, each with the error a user gets.

Every row of `ROWS` is one bad input: an id, its category, the input as a user would type it, a
callable that triggers it, the exception type expected and the fragments of the message a user
reads (the argument as typed, what was expected, what was received), which must appear in that
order (`Row.match` is the regex). `test_error` runs every row with `pytest.raises(match=...)`.

A row marked *open* is a bad input that does not get a clear error yet (a silent wrong result, a
crash inside JAX, a message about an internal name): its `open` field says what happens now, the
row states the error it should raise, and it runs as `xfail(strict=True)`. Once the library is
fixed the row passes, strict xfail fails, and the `open=` note is removed.

docs/errors.md holds the same table in markdown, generated from `ROWS`; `test_docs_table_is_current`
checks it. Regenerate it with `python tests/test_errors.py` (it rewrites the part of
docs/errors.md between the two `errors-table` markers).

Inputs are tiny and reuse a few compiled pipelines: the refund demo with 2 cases, and `two_step`,
a hand-written 2-step pipeline whose every case fails (so each estimator analyses it).
"""

from __future__ import annotations

import pathlib
import re
import sys
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import blamejax as bj
from blamejax import _cli

NEG = -np.inf
ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "errors.md"
START, END = "<!-- errors-table:start -->", "<!-- errors-table:end -->"


class Row(NamedTuple):
    id: str
    category: str
    input: str  # the bad input, as a user would write it (shown in docs/errors.md)
    trigger: Callable[[], object]
    error: type[BaseException]
    parts: tuple[str, ...]  # literal fragments of the message, in order
    open: str | None = None  # what happens now, for a bad input without a clear error yet

    @property
    def match(self) -> str:
        return "(?s)" + ".*".join(re.escape(part) for part in self.parts)


# -- the inputs ------------------------------------------------------------------------------
refund = bj.demos.refund_pipeline
CASES = bj.demos.refund_cases(2)
WORLDS = bj.recorded_worlds(0, 2)
CASE = jax.tree_util.tree_map(lambda x: x[0], CASES)
STRUCTURE = bj.discover(refund, CASE)
do = bj.interventions


def two_step(ctx, case):
    """draft -> review. The review's logits are computed (free-form) from the draft's choice,
    so a bad `confidence` gives it NaN or all -inf logits; a negative `weight` makes the score
    NaN. Every case fails (v(empty) = 0) and either fix repairs it (v = 1)."""
    draft = ctx.choose("draft", case["draft"])  # [V=2, K=2]
    logits = case["review"][:, draft.index] + jnp.log(case["confidence"])[None, :]  # [V=2, K=2]
    review = ctx.choose("review", logits)
    return review.take(case["win"]) * jnp.sqrt(case["weight"])


def two_cases(**changes):
    """Two cases of `two_step`. A keyword replaces a table: an array of one case's shape is
    used for both cases; an array with a leading axis of 2 gives each case its own."""
    case = dict(
        draft=np.array([[0.0, NEG], [NEG, 0.0]]),  # factual: option 0; fix: option 1
        review=np.array(  # [V, K_draft, K]: factual right only after draft 1; fix always right
            [[[NEG, 0.0], [0.0, NEG]], [[0.0, NEG], [0.0, NEG]]]
        ),
        confidence=np.ones(2),
        win=np.array([1.0, 0.0]),
        weight=np.ones(()),
    )
    out = {}
    for name, value in case.items():
        value = np.asarray(changes.get(name, value))
        if value.shape != case[name].shape:
            out[name] = jnp.asarray(value)
        else:
            out[name] = jnp.broadcast_to(jnp.asarray(value), (2,) + value.shape)
    return out


TWO = two_cases()
TWO_WORLDS = bj.recorded_worlds(0, 2)
TWO_ALL_NEG = two_cases(draft=np.array([[0.0, NEG], [NEG, NEG]]))  # the draft's fix row: all -inf
TWO_INNER_NEG = two_cases(  # the review's fix row after draft 0: all -inf (only coalition {review})
    review=np.array([[[NEG, 0.0], [0.0, NEG]], [[NEG, NEG], [0.0, NEG]]])
)
TWO_NAN_LOGITS = two_cases(confidence=np.array([-1.0, 1.0]))  # log(-1): NaN logits at the review
TWO_NAN_SCORE = two_cases(weight=-np.ones(()))  # sqrt(-1): the pipeline's own score is NaN
TWO_ONE_PASSES = two_cases(  # case 1's draft picks option 1, so its factual run passes
    draft=np.array([[[0.0, NEG], [NEG, 0.0]], [[NEG, 0.0], [NEG, 0.0]]])
)
X = dict(x=jnp.zeros((2, 2, 3)))  # cases of a one-table pipeline: F = 2, V = 2, K = 3


def bad_pipeline(body):
    """exact_blame of a pipeline `body(ctx, x)` on the table `X["x"]` (raises at discovery)."""
    return lambda: bj.exact_blame(lambda ctx, case: body(ctx, case["x"]), X, WORLDS)


def with_table(name, index, value):
    return dict(CASES, **{name: CASES[name].at[index].set(value)})


def worlds_with(overrides=None, valid=None):
    return bj.World(key=WORLDS.key, overrides=overrides, valid=valid)


def overrides(num_options=None):
    return tuple(jnp.zeros((2, 1, num_options or s.num_options)) for s in STRUCTURE.sites)


def mc(**kwargs):
    kwargs = dict(max_evaluations=10_000) | kwargs
    return lambda: bj.mc_shapley(refund, CASES, WORLDS, 0, **kwargs)


def batch(**kwargs):
    return lambda: bj.blame_batch(refund, CASES, 0, **kwargs)


def cli(*argv):
    return lambda: _cli.main(list(argv))


def cond_pipeline(ctx, case):
    x = case["x"]
    return jax.lax.cond(
        x[0, 0] > 0, lambda: ctx.choose("a", x).take(jnp.zeros(3)), lambda: jnp.zeros(())
    )


def scan_pipeline(ctx, x):
    def body(total, _):
        return total + ctx.choose("a", x).take(jnp.zeros(3)), None

    return jax.lax.scan(body, jnp.zeros(()), None, length=2)[0]


def branching_pipeline(ctx, x):
    choice = ctx.choose("a", x)
    return 1.0 if choice.index == 0 else 0.0


CASE_WORLDS = jax.tree_util.tree_map(lambda x: x[0], bj.fresh_worlds(0, 1, 2))  # [W = 2]
OBSERVED_BAD_ROW1 = np.array([[0, 0, 0, 0], [0, 1, 0, 0]])  # case 1: retriever 1 after plan 0


def hard_gradient():
    value = lambda case: bj.shapley_values(two_step, case, CASE_WORLDS, mode=bj.Hard()).shapley[0]
    return jax.grad(value)(jax.tree_util.tree_map(lambda x: x[0], TWO))


def exact_table(failure):
    return bj.exact_blame(two_step, TWO, TWO_WORLDS).table(failure)


STEPS = "['planner', 'retriever', 'writer', 'reviewer']"
NO_VALID = "drew from logits with no valid option (every logit -inf, or NaN/+inf)"
MODE = "`mode` must be blamejax.Hard() or blamejax.Relaxed(tau)"
KEY = "`key` must be an int seed or a `jax.random.key(...)`"


def rows(category, *items):
    return [Row(item[0], category, *item[1:]) for item in items]


# -- the table -------------------------------------------------------------------------------
ROWS: list[Row] = [
    *rows(
        "Pipeline definition",
        ("logits-without-variant-axis", 'ctx.choose("a", x[0]): logits of shape [K]',
         bad_pipeline(lambda ctx, x: ctx.choose("a", x[0]).take(jnp.zeros(3))), ValueError,
         ("logits of step 'a' must have shape [V, K] (2 axes: variants, options), got shape (3,)",)),
        ("table-parent-axis-mismatch", 'ctx.choose("b", zeros((2, 3, 2)), given=a), a with 2 options',
         bad_pipeline(lambda ctx, x: ctx.choose("b", jnp.zeros((2, 3, 2)), given=ctx.choose("a", x[:, :2])).take(jnp.zeros(2))),
         ValueError, ("logits of step 'b' have 3 rows on parent axis 0 but the parent choice has 2 options",)),
        ("table-missing-parent-axis", 'ctx.choose("b", x, given=a): [V, K] logits with a parent',
         bad_pipeline(lambda ctx, x: ctx.choose("b", x, given=ctx.choose("a", x)).take(jnp.zeros(3))), ValueError,
         ("logits of step 'b' must have shape [V, K_parent0, K]", "got shape (2, 3)")),
        ("int-logits", 'ctx.choose("a", zeros((2, 3), int32))',
         bad_pipeline(lambda ctx, x: ctx.choose("a", jnp.zeros((2, 3), jnp.int32)).take(jnp.zeros(3))), TypeError,
         ("logits of step 'a' must be floating point, got int32",)),
        ("list-logits", 'ctx.choose("a", [[0.0, 1.0]])',
         bad_pipeline(lambda ctx, x: ctx.choose("a", [[0.0, 1.0]]).take(jnp.zeros(2))), TypeError,
         ("logits of step 'a' must be an array, got list",)),
        ("zero-variants", 'ctx.choose("a", x[:0]): logits of shape [0, K]',
         bad_pipeline(lambda ctx, x: ctx.choose("a", x[:0]).take(jnp.zeros(3))), ValueError,
         ("logits of step 'a' need >= 1 variant and >= 1 option, got (0, 3)",)),
        ("step-name-not-str", "ctx.choose(3, x)",
         bad_pipeline(lambda ctx, x: ctx.choose(3, x).take(jnp.zeros(3))), TypeError,
         ("`step` must be a str name, got int: 3",)),
        ("negative-slot", 'ctx.choose("a", x, slot=-1)',
         bad_pipeline(lambda ctx, x: ctx.choose("a", x, slot=-1).take(jnp.zeros(3))), TypeError,
         ("`slot` of step 'a' must be a non-negative Python int, got -1",)),
        ("given-not-a-choice", 'ctx.choose("a", x, given=1)',
         bad_pipeline(lambda ctx, x: ctx.choose("a", x, given=1).take(jnp.zeros(3))), TypeError,
         ("`given` of step 'a' must be a Choice or a tuple of Choices, got int",)),
        ("step-draws-twice-in-one-slot", 'two ctx.choose("a", x) calls, both slot 0',
         bad_pipeline(lambda ctx, x: ctx.choose("a", x).take(jnp.zeros(3)) + ctx.choose("a", x).take(jnp.zeros(3))),
         ValueError, ("step 'a' draws twice in slot 0; give each draw of a step its own `slot=`",)),
        ("slots-with-different-shapes", 'ctx.choose("a", x) and ctx.choose("a", x[:, :2], slot=1)',
         bad_pipeline(lambda ctx, x: ctx.choose("a", x).take(jnp.zeros(3)) + ctx.choose("a", x[:, :2], slot=1).take(jnp.zeros(2))),
         ValueError, ("step 'a' has 2 variants x 3 options in slot 0 but 2 x 2 in slot 1",)),
        ("pipeline-returns-vector", "a pipeline returning a score of shape [3]",
         bad_pipeline(lambda ctx, x: jnp.zeros(3) + ctx.choose("a", x).take(jnp.zeros(3))), ValueError,
         ("`pipeline` must return a scalar score, got an output of shape (3,)",)),
        ("pipeline-returns-choice", "a pipeline returning the Choice instead of a score",
         bad_pipeline(lambda ctx, x: ctx.choose("a", x)), ValueError,
         ("`pipeline` must return a scalar score, got an output of shape Choice",)),
        ("pipeline-makes-no-draw", "a pipeline that never calls ctx.choose",
         bad_pipeline(lambda ctx, x: jnp.sum(x)), ValueError,
         ("`pipeline` made no `ctx.choose` draw; there is nothing to blame",)),
        ("pipeline-not-callable", 'exact_blame("refund", cases, worlds)',
         lambda: bj.exact_blame("refund", CASES, WORLDS), TypeError,
         ("`pipeline` must be callable, got str",)),
        ("take-table-wrong-length", "choice.take(zeros(4)) on a 3-option choice",
         bad_pipeline(lambda ctx, x: ctx.choose("a", x).take(jnp.zeros(4))), ValueError,
         ("`choice.take(table)` needs a table with the 3 options on its first axis, got shape (4,)",)),
        ("deterministic-site-twice", 'ctx.deterministic("t", 1.0) twice',
         bad_pipeline(lambda ctx, x: ctx.deterministic("t", 1.0) + ctx.deterministic("t", 1.0) + ctx.choose("a", x).take(jnp.zeros(3))),
         ValueError, ("deterministic site 't' is used twice; names must be unique",)),
        ("python-branch-on-a-choice", "if choice.index == 0: ... (a Python branch on a drawn value)",
         bad_pipeline(branching_pipeline), TypeError, ("`pipeline`", "jnp.where")),
        ("ctx-choose-inside-lax-cond", "ctx.choose inside jax.lax.cond",
         lambda: bj.exact_blame(cond_pipeline, X, WORLDS), ValueError,
         ("step 'a': `ctx.choose` was called inside a JAX control-flow", "jax.lax.cond", "jnp.where")),
        ("ctx-choose-inside-lax-scan", "ctx.choose inside jax.lax.scan",
         bad_pipeline(scan_pipeline), ValueError, ("step 'a'", "lax.scan", "top level")),
    ),
    *rows(
        "Cases",
        ("cases-empty", "exact_blame(refund, {}, worlds)", lambda: bj.exact_blame(refund, {}, WORLDS), ValueError,
         ("`cases` is empty: it must be a pytree of arrays with a leading failure axis",)),
        ("cases-none", "exact_blame(refund, None, worlds)", lambda: bj.exact_blame(refund, None, WORLDS), ValueError,
         ("`cases` is empty",)),
        ("cases-ragged-leading-axis", 'cases with cases["planner"][:1] (1 row, the others 2)',
         lambda: bj.exact_blame(refund, dict(CASES, planner=CASES["planner"][:1]), WORLDS), ValueError,
         ("every leaf of `cases` must share one leading failure axis, got shapes [(1, 2, 2),",)),
        ("cases-scalar-leaf", "cases with an extra leaf 1.0 (no case axis)",
         lambda: bj.exact_blame(refund, dict(CASES, extra=1.0), WORLDS), ValueError,
         ("every leaf of `cases` must share one leading failure axis, got shapes [(),",)),
        ("cases-list-of-dicts", "[case_0, case_1]: a list of per-case dicts",
         lambda: bj.exact_blame(refund, [CASE, CASE], WORLDS), TypeError,
         ("`cases` must be one pytree whose arrays have a leading case axis, got a list of 2 per-case dicts; stack them first",)),
        ("cases-zero-failures", "cases with a leading axis of 0",
         lambda: bj.exact_blame(refund, jax.tree_util.tree_map(lambda x: x[:0], CASES), WORLDS), ValueError,
         ("`cases` holds zero failures; there is nothing to blame",)),
        ("cases-without-case-axis", "exact_blame(refund, refund_tables(), worlds): one case, no leading axis",
         lambda: bj.exact_blame(refund, bj.demos.refund_tables(), WORLDS), ValueError,
         ("logits of step 'planner' must have shape [V, K] (2 axes: variants, options), got shape (2,)",)),
    ),
    *rows(
        "Worlds",
        ("worlds-key-array", "exact_blame(refund, cases, jr.split(key, 2))",
         lambda: bj.exact_blame(refund, CASES, jr.split(jr.key(0), 2)), TypeError,
         ("`worlds` must be a blamejax.World (see recorded_worlds, fresh_worlds, inferred_worlds), got PRNGKeyArray",)),
        ("worlds-seed", "exact_blame(refund, cases, 0): a seed instead of worlds",
         lambda: bj.exact_blame(refund, CASES, 0), TypeError, ("`worlds` must be a blamejax.World", "got int")),
        ("worlds-wrong-failure-count", "recorded_worlds(0, 3) for 2 cases",
         lambda: bj.exact_blame(refund, CASES, bj.recorded_worlds(0, 3)), ValueError,
         ("`worlds.key` must have shape [F, W] = [2, W], got (3, 1)",)),
        ("worlds-key-1d", "World(key=jr.split(key, 2)): keys [F], no world axis",
         lambda: bj.exact_blame(refund, CASES, bj.World(key=jr.split(jr.key(0), 2))), ValueError,
         ("`worlds.key` must have shape [F, W] = [2, W], got (2,)",)),
        ("worlds-zero-per-failure", "World(key=worlds.key[:, :0]): W = 0",
         lambda: bj.exact_blame(refund, CASES, bj.World(key=WORLDS.key[:, :0])), ValueError,
         ("`worlds` holds W = 0 worlds per failure; need at least one",)),
        ("overrides-wrong-count", "World(key, overrides=(one array,), valid=...) for 4 draw sites",
         lambda: bj.exact_blame(refund, CASES, worlds_with(overrides()[:1], (jnp.ones((2, 1), bool),))), ValueError,
         ("`worlds.overrides` must hold one array per draw site (4), got 1",)),
        ("overrides-wrong-shape", "overrides of shape [F, W, 3] for 2-option steps",
         lambda: bj.exact_blame(refund, CASES, worlds_with(overrides(3), tuple(jnp.ones((2, 1), bool) for _ in range(4)))), ValueError,
         ("`worlds.overrides` for step 'planner' must have shape (2, 1, 2), got (2, 1, 3)",)),
        ("overrides-without-valid", "World(key, overrides=...) with valid=None",
         lambda: bj.exact_blame(refund, CASES, worlds_with(overrides())), ValueError, ("`worlds.valid`",)),
        ("valid-wrong-shape", "valid arrays of shape [3] instead of [F, W]",
         lambda: bj.exact_blame(refund, CASES, worlds_with(overrides(), tuple(jnp.ones(3, bool) for _ in range(4)))),
         ValueError, ("`worlds.valid`", "(2, 1)")),
        ("fresh-worlds-zero", "fresh_worlds(0, 2, 0)", lambda: bj.fresh_worlds(0, 2, 0), ValueError,
         ("`num_worlds` must be a positive int, got 0",)),
        ("recorded-worlds-zero-cases", "recorded_worlds(0, 0)", lambda: bj.recorded_worlds(0, 0), ValueError,
         ("`case_ids` must be a positive count (at most 2**32) or an array of ids, got 0",)),
        ("case-ids-2d", "recorded_worlds(0, [[0, 1]])", lambda: bj.recorded_worlds(0, [[0, 1]]), ValueError,
         ("`case_ids` must be a non-empty 1-D int array, got shape (1, 2)",)),
        ("case-ids-float", "recorded_worlds(0, [0.5, 1.0])", lambda: bj.recorded_worlds(0, [0.5, 1.0]), ValueError,
         ("`case_ids` must be a non-empty 1-D int array, got shape (2,), dtype float64",)),
    ),
    *rows(
        "Keys and seeds",
        ("seed-float", "recorded_worlds(0.5, 2)", lambda: bj.recorded_worlds(0.5, 2), TypeError, (KEY, "got float")),
        ("seed-bool", "recorded_worlds(True, 2)", lambda: bj.recorded_worlds(True, 2), TypeError, (KEY, "got bool")),
        ("seed-str", 'recorded_worlds("0", 2)', lambda: bj.recorded_worlds("0", 2), TypeError, (KEY, "got str")),
        ("key-array", "recorded_worlds(jr.split(jr.key(0), 2), 2)",
         lambda: bj.recorded_worlds(jr.split(jr.key(0), 2), 2), ValueError,
         ("`key` must be a single key, got a key array of shape (2,)",)),
        ("key-float-array", "recorded_worlds(jnp.zeros(2), 2)", lambda: bj.recorded_worlds(jnp.zeros(2), 2), TypeError,
         (KEY, "shape (2,)")),
        ("seed-2**32", "recorded_worlds(2**32, 2)", lambda: bj.recorded_worlds(2**32, 2), ValueError,
         ("`key`, an int seed, must be in [0, 2**32), got 4294967296",)),
        ("seed-negative", "recorded_worlds(-1, 2)", lambda: bj.recorded_worlds(-1, 2), ValueError,
         ("`key`, an int seed, must be in [0, 2**32), got -1",)),
        ("seed-numpy-int64", "recorded_worlds(np.int64(2**40), 2)", lambda: bj.recorded_worlds(np.int64(2**40), 2),
         ValueError, ("`key`, an int seed, must be in [0, 2**32), got 1099511627776",)),
        ("case-ids-negative", "recorded_worlds(0, [-1, 2])", lambda: bj.recorded_worlds(0, [-1, 2]), ValueError,
         ("`case_ids` must lie in [0, 2**32), got ids from -1 to 2",)),
        ("case-ids-above-2**32", "recorded_worlds(0, np.array([2**33]))", lambda: bj.recorded_worlds(0, np.array([2**33])),
         ValueError, ("`case_ids` must lie in [0, 2**32), got ids from 8589934592 to 8589934592",)),
        ("mc-key-float", "mc_shapley(refund, cases, worlds, 0.5, ...)",
         lambda: bj.mc_shapley(refund, CASES, WORLDS, 0.5, max_evaluations=10_000), TypeError, (KEY, "got float")),
        ("batch-seed-2**32", "blame_batch(refund, cases, 2**32)", lambda: bj.blame_batch(refund, CASES, 2**32),
         ValueError, ("`key`, an int seed, must be in [0, 2**32), got 4294967296",)),
        ("inferred-case-ids-negative", "inferred_worlds(..., case_ids=[-1, 0])",
         lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 4), int), 0, 2, case_ids=[-1, 0]), ValueError,
         ("`case_ids` must lie in [0, 2**32), got ids from -1 to 0",)),
    ),
    *rows(
        "Steps and fixes",
        ("steps-empty", "steps=[]", lambda: bj.exact_blame(refund, CASES, WORLDS, steps=[]), ValueError,
         (f"`steps` is empty; name at least one of this pipeline's steps {STEPS}, or pass None",)),
        ("steps-unknown", 'steps=["planer"]', lambda: bj.exact_blame(refund, CASES, WORLDS, steps=["planer"]), ValueError,
         (f"unknown step 'planer'; this pipeline's steps are {STEPS}",)),
        ("steps-duplicated", 'steps=["planner", "planner"]',
         lambda: bj.exact_blame(refund, CASES, WORLDS, steps=["planner", "planner"]), ValueError,
         ("`steps` lists a step twice: ['planner', 'planner']",)),
        ("steps-a-string", 'steps="planner"', lambda: bj.exact_blame(refund, CASES, WORLDS, steps="planner"), TypeError,
         ("`steps` must be a sequence of step names, got 'planner'",)),
        ("steps-indices", "steps=[0, 1]", lambda: bj.exact_blame(refund, CASES, WORLDS, steps=[0, 1]), TypeError,
         ("`steps` must be a sequence of step names, got [0, 1]",)),
        ("step-without-fix", "two_step with draft logits of shape [V=1, K]",
         lambda: bj.exact_blame(two_step, dict(TWO, draft=TWO["draft"][:, :1]), TWO_WORLDS), ValueError,
         ("step 'draft' has no fix: its logits have 1 variant on axis 0", "leave the step out of `steps`")),
        ("fix-variant-out-of-range", 'fixes={"planner": 2} (V = 2)',
         lambda: bj.exact_blame(refund, CASES, WORLDS, fixes={"planner": 2}), ValueError,
         ("`fixes['planner']` must be a variant in [1, 2), got 2",)),
        ("fix-variant-0", 'fixes={"planner": 0} (the factual variant)',
         lambda: bj.exact_blame(refund, CASES, WORLDS, fixes={"planner": 0}), ValueError,
         ("`fixes['planner']` must be a variant in [1, 2), got 0",)),
        ("fix-variant-float", 'fixes={"planner": 1.0}',
         lambda: bj.exact_blame(refund, CASES, WORLDS, fixes={"planner": 1.0}), ValueError,
         ("`fixes['planner']` must be a variant in [1, 2), got 1.0",)),
        ("fix-unknown-step", 'fixes={"planer": 1}', lambda: bj.exact_blame(refund, CASES, WORLDS, fixes={"planer": 1}),
         ValueError, (f"unknown step 'planer'; this pipeline's steps are {STEPS}",)),
        ("fix-not-among-steps", 'steps=["writer"], fixes={"planner": 1}',
         lambda: bj.exact_blame(refund, CASES, WORLDS, steps=["writer"], fixes={"planner": 1}), ValueError,
         ("`fixes` names step 'planner', which is not among `steps` ['writer']",)),
        ("fixes-a-list", 'fixes=["planner"]', lambda: bj.exact_blame(refund, CASES, WORLDS, fixes=["planner"]), TypeError,
         ("`fixes` must be a dict", "['planner']")),
    ),
    *rows(
        "Score range",
        ("score-range-reversed", "score_range=(1, 0)", lambda: bj.exact_blame(refund, CASES, WORLDS, score_range=(1, 0)),
         ValueError, ("`score_range` must be finite with low < high, got (1, 0)",)),
        ("score-range-infinite", "score_range=(0, inf)",
         lambda: bj.exact_blame(refund, CASES, WORLDS, score_range=(0, np.inf)), ValueError,
         ("`score_range` must be finite with low < high, got (0, inf)",)),
        ("score-range-scalar", "score_range=1.0", lambda: bj.exact_blame(refund, CASES, WORLDS, score_range=1.0),
         TypeError, ("`score_range` must be a pair (low, high), got 1.0",)),
        ("score-range-triple", "score_range=(0, 1, 2)",
         lambda: bj.exact_blame(refund, CASES, WORLDS, score_range=(0, 1, 2)), TypeError,
         ("`score_range` must be a pair (low, high), got (0, 1, 2)",)),
        ("scores-outside-range-exact", "exact_blame(two_step, ...) with weight 4: scores 0 or 2, default score_range=(0, 1)",
         lambda: bj.exact_blame(two_step, two_cases(weight=4 * np.ones(())), TWO_WORLDS), ValueError,
         ("the pipeline returned scores in [0.0, 2.0], outside the declared `score_range` (0.0, 1.0)",
          "declare the true range")),
        ("scores-outside-range-batch", "blame_batch(two_step, ..., score_range=(-1, 0.5))",
         lambda: bj.blame_batch(two_step, TWO_ONE_PASSES, 0, score_range=(-1, 0.5)), ValueError,
         ("the pipeline returned scores in [0.0, 1.0], outside the declared `score_range` (-1.0, 0.5)",)),
        ("nan-score-exact", "exact_blame(two_step, ...): score * sqrt(-1)",
         lambda: bj.exact_blame(two_step, TWO_NAN_SCORE, TWO_WORLDS), ValueError,
         ("the pipeline returned a NaN score: failure 0, world 0: the pipeline's own score is NaN in coalition the empty coalition (the failed run)",)),
        ("nan-score-mc", "mc_shapley(two_step, ...): score * sqrt(-1)",
         lambda: bj.mc_shapley(two_step, TWO_NAN_SCORE, TWO_WORLDS, 0, max_evaluations=2000, stop=()), ValueError,
         ("the pipeline returned a NaN score: failure 0, world 0: the pipeline's own score is NaN",)),
        ("nan-score-batch", "blame_batch(two_step, ...): score * sqrt(-1)",
         lambda: bj.blame_batch(two_step, TWO_NAN_SCORE, 0), ValueError,
         ("the pipeline returned a NaN score: case 0, world 0: the pipeline's own score is NaN",)),
    ),
    *rows(
        "Non-finite logits",
        ("nan-in-table-exact", 'exact_blame(two_step, cases, ...) with cases["draft"][0, 0, 0] = nan',
         lambda: bj.exact_blame(two_step, dict(TWO, draft=TWO["draft"].at[0, 0, 0].set(jnp.nan)), TWO_WORLDS), ValueError,
         ("`cases['draft']` contains NaN (first at index [0, 0, 0]); logits must be real numbers or -inf",)),
        ("inf-in-table-exact", 'the same with cases["review"][1, 0, 1, 1] = +inf',
         lambda: bj.exact_blame(two_step, dict(TWO, review=TWO["review"].at[1, 0, 1, 1].set(jnp.inf)), TWO_WORLDS), ValueError,
         ("`cases['review']` contains +inf (first at index [1, 0, 1, 1]); use large finite logits, or -inf",)),
        ("nan-in-table-mc", 'mc_shapley with cases["planner"][0, 0, 0] = nan',
         lambda: bj.mc_shapley(refund, with_table("planner", (0, 0, 0), jnp.nan), WORLDS, 0, max_evaluations=10_000),
         ValueError, ("`cases['planner']` contains NaN (first at index [0, 0, 0])",)),
        ("nan-in-table-batch", 'blame_batch with cases["planner"][0, 0, 0] = nan',
         lambda: bj.blame_batch(refund, with_table("planner", (0, 0, 0), jnp.nan), 0), ValueError,
         ("`cases['planner']` contains NaN (first at index [0, 0, 0])",)),
        ("nan-in-table-replay", 'replay with cases["planner"][0, 0, 0] = nan',
         lambda: bj.replay(refund, with_table("planner", (0, 0, 0), jnp.nan), WORLDS), ValueError,
         ("`cases['planner']` contains NaN (first at index [0, 0, 0])",)),
        ("free-form-nan-logits-exact", "two_step computing log(-1) in the review's logits",
         lambda: bj.exact_blame(two_step, TWO_NAN_LOGITS, TWO_WORLDS), ValueError,
         ("the pipeline returned a NaN score: failure 0, world 0: step 'review' " + NO_VALID,
          "in coalition the empty coalition (the failed run)")),
        ("free-form-nan-logits-mc", "mc_shapley of the same",
         lambda: bj.mc_shapley(two_step, TWO_NAN_LOGITS, TWO_WORLDS, 0, max_evaluations=2000, stop=()), ValueError,
         ("the pipeline returned a NaN score: failure 0, world 0: step 'review' " + NO_VALID,)),
        ("free-form-nan-logits-batch", "blame_batch of the same",
         lambda: bj.blame_batch(two_step, TWO_NAN_LOGITS, 0), ValueError,
         ("the pipeline returned a NaN score: case 0, world 0: step 'review' " + NO_VALID,)),
        ("all-neginf-row-exact", "two_step whose draft fix row is all -inf",
         lambda: bj.exact_blame(two_step, TWO_ALL_NEG, TWO_WORLDS), ValueError,
         ("the pipeline returned a NaN score: failure 0, world 0: step 'draft' " + NO_VALID,
          "in coalition {draft, review}")),
        ("all-neginf-row-batch", "blame_batch of the same",
         lambda: bj.blame_batch(two_step, TWO_ALL_NEG, 0), ValueError,
         ("the pipeline returned a NaN score: case 0, world 0: step 'draft' " + NO_VALID, "in coalition {draft, review}")),
        ("all-neginf-inner-coalition-exact", "the review's fix row after draft 0 all -inf (only {review} draws from it)",
         lambda: bj.exact_blame(two_step, TWO_INNER_NEG, TWO_WORLDS), ValueError,
         ("the pipeline returned a NaN score: failure 0, world 0: step 'review' " + NO_VALID, "in coalition {review}")),
        ("all-neginf-inner-coalition-batch-mc", 'blame_batch(..., estimator="mc") of the same',
         lambda: bj.blame_batch(two_step, TWO_INNER_NEG, 0, estimator="mc"), ValueError,
         ("the pipeline returned a NaN score: case 0, world 0: step 'review' " + NO_VALID, "in coalition {review}")),
        ("all-neginf-inner-coalition-mc", "mc_shapley of the same",
         lambda: bj.mc_shapley(two_step, TWO_INNER_NEG, TWO_WORLDS, 0, max_evaluations=2000, stop=()), ValueError,
         ("the pipeline returned a NaN score: failure 0, world 0: step 'review' " + NO_VALID, "in coalition {review}")),
        ("nan-logits-replay", "replay(two_step, ...) with the review's logits NaN",
         lambda: bj.replay(two_step, TWO_NAN_LOGITS, TWO_WORLDS), ValueError,
         ("NaN score", "step 'review'")),
    ),
    *rows(
        "Mode",
        ("mode-string", 'exact_blame(..., mode="hard")', lambda: bj.exact_blame(refund, CASES, WORLDS, mode="hard"),
         TypeError, (MODE + ", got 'hard'",)),
        ("mode-class", "exact_blame(..., mode=bj.Hard) (the class)", lambda: bj.exact_blame(refund, CASES, WORLDS, mode=bj.Hard),
         TypeError, (MODE + ", got <class",)),
        ("mode-string-mc", 'mc_shapley(..., mode="relaxed")', mc(mode="relaxed"), TypeError, (MODE + ", got 'relaxed'",)),
        ("mode-string-batch", 'blame_batch(..., mode="hard")', batch(mode="hard"), TypeError, (MODE + ", got 'hard'",)),
        ("tau-negative", "Relaxed(tau=-1)", lambda: bj.Relaxed(tau=-1), ValueError,
         ("`tau` must be a positive scalar temperature, got -1",)),
        ("tau-zero", "Relaxed(tau=0.0)", lambda: bj.Relaxed(tau=0.0), ValueError,
         ("`tau` must be a positive scalar temperature, got 0.0",)),
        ("tau-nan", "Relaxed(tau=nan)", lambda: bj.Relaxed(tau=float("nan")), ValueError,
         ("`tau` must be a positive scalar temperature, got nan",)),
        ("tau-vector", "Relaxed(tau=jnp.array([1.0, 2.0]))", lambda: bj.Relaxed(tau=jnp.array([1.0, 2.0])), ValueError,
         ("`tau` must be a positive scalar temperature, got Array([1., 2.]",)),
        ("tau-string", 'Relaxed(tau="1")', lambda: bj.Relaxed(tau="1"), TypeError,
         ("`tau` must be a positive scalar temperature, got '1'",)),
        ("mode-string-replay", 'replay(refund, cases, worlds, mode="hard")',
         lambda: bj.replay(refund, CASES, WORLDS, mode="hard"), TypeError, (MODE + ", got 'hard'",)),
        ("contrastive-relaxed", "contrastive(..., mode=Relaxed(1.0))",
         lambda: bj.contrastive(refund, CASES, WORLDS, mode=bj.Relaxed(1.0)), ValueError,
         ("the contrastive estimator counts bad runs, which needs `mode=Hard()`",)),
    ),
    *rows(
        "exact_blame",
        ("max-steps-zero", "max_steps=0", lambda: bj.exact_blame(refund, CASES, WORLDS, max_steps=0), ValueError,
         ("`max_steps` must be a positive int, got 0",)),
        ("max-steps-float", "max_steps=20.0", lambda: bj.exact_blame(refund, CASES, WORLDS, max_steps=20.0), ValueError,
         ("`max_steps` must be a positive int, got 20.0",)),
        ("max-steps-below-n", "max_steps=2 for 4 steps", lambda: bj.exact_blame(refund, CASES, WORLDS, max_steps=2),
         ValueError, ("exact Shapley over n = 4 steps needs 2^4 coalitions", "above `max_steps` = 2",
                      "use Monte Carlo sampling (blamejax.mc_shapley) or raise `max_steps` deliberately")),
        ("chunk-size-not-power-of-two", "chunk_size=3", lambda: bj.exact_blame(refund, CASES, WORLDS, chunk_size=3),
         ValueError, ("`chunk_size` must be a positive power of two, got 3",)),
        ("chunk-size-zero", "chunk_size=0", lambda: bj.exact_blame(refund, CASES, WORLDS, chunk_size=0), ValueError,
         ("`chunk_size` must be a positive power of two, got 0",)),
        ("devices-empty", "devices=[]", lambda: bj.exact_blame(refund, CASES, WORLDS, devices=[]), TypeError,
         ("`devices` must be a jax device or a non-empty sequence of them, got []",)),
        ("devices-names", 'devices=["cpu"]', lambda: bj.exact_blame(refund, CASES, WORLDS, devices=["cpu"]), TypeError,
         ("`devices` must be a jax device or a non-empty sequence of them, got ['cpu']",)),
        ("devices-string", 'devices="cpu"', lambda: bj.exact_blame(refund, CASES, WORLDS, devices="cpu"), TypeError,
         ("`devices` must be a jax device or a non-empty sequence of them, got 'cpu'",)),
    ),
    *rows(
        "mc_shapley",
        ("max-evaluations-below-first-checkpoint", "max_evaluations=10", mc(max_evaluations=10), ValueError,
         ("`max_evaluations` = 10 does not reach the first checkpoint: t1 = 16 samples cost 50 evaluations here",)),
        ("max-evaluations-float", "max_evaluations=1e4", mc(max_evaluations=1e4), TypeError,
         ("`max_evaluations` must be an int, got 10000.0",)),
        ("max-evaluations-none", "max_evaluations=None", mc(max_evaluations=None), TypeError,
         ("`max_evaluations` must be an int, got None",)),
        ("mc-delta-zero", "delta=0", mc(delta=0), ValueError, ("`delta` must be in (0, 1), got 0",)),
        ("mc-delta-above-one", "delta=1.5", mc(delta=1.5), ValueError, ("`delta` must be in (0, 1), got 1.5",)),
        ("mc-delta-nan", "delta=nan", mc(delta=float("nan")), ValueError, ("`delta` must be in (0, 1), got nan",)),
        ("radius-unknown", 'radius="wide"', mc(radius="wide"), ValueError,
         ("`radius` must be one of ['bernstein', 'hoeffding', 'normal'], got 'wide'",)),
        ("stop-unknown-rule", 'stop="first"', mc(stop="first"), ValueError,
         ("`stop` names an unknown rule 'first'; the rules are ['top1', 'ranking', 'width']",)),
        ("stop-not-a-rule", "stop=5", mc(stop=5), TypeError, ("`stop` must be a rule name or a sequence of them, got 5",)),
        ("epsilon-negative", "epsilon=-1.0", mc(epsilon=-1.0), ValueError, ("`epsilon` must be a finite number >= 0, got -1.0",)),
        ("epsilon-nan", "epsilon=nan", mc(epsilon=float("nan")), ValueError, ("`epsilon` must be a finite number >= 0, got nan",)),
        ("width-rule-without-epsilon", 'stop="width", epsilon=0', mc(stop="width"), ValueError,
         ("the 'width' rule needs `epsilon` > 0",)),
        ("t1-one", "t1=1", mc(t1=1), ValueError, ("`t1` must be an int >= 2 (the first checkpoint), got 1",)),
        ("gamma-one", "gamma=1.0", mc(gamma=1.0), ValueError,
         ("`gamma` must be a finite number > 1 (the checkpoint growth factor), got 1.0",)),
        ("gamma-barely-above-one", "gamma=1 + 1e-12", mc(gamma=1 + 1e-12), ValueError,
         ("`gamma` = 1.000000000001 is so close to 1 that the schedule", "use a growth factor of at least 1 + 1e-4")),
        ("gamma-string", 'gamma="1.5"', mc(gamma="1.5"), ValueError, ("`gamma` must be a finite number > 1", "got '1.5'")),
        ("gamma-infinite", "gamma=inf", mc(gamma=float("inf")), ValueError, ("`gamma` must be", "got inf")),
        ("antithetic-not-bool", 'antithetic="yes"', mc(antithetic="yes"), TypeError, ("`antithetic` must be a bool, got 'yes'",)),
        ("mc-chunk-size", "chunk_size=3", mc(chunk_size=3), ValueError, ("`chunk_size` must be a positive power of two, got 3",)),
        ("lanes-zero", "lanes=0", mc(lanes=0), ValueError, ("`lanes` must be None or a positive int, got 0",)),
        ("mc-one-step", 'steps=["planner"]', mc(steps=["planner"]), ValueError,
         ("Monte Carlo Shapley needs at least 2 steps, got 1", "use exact_blame")),
    ),
    *rows(
        "blame_batch",
        ("noise-unknown", 'noise="posterior"', batch(noise="posterior"), ValueError,
         ("`noise` must be one of ['fresh', 'inferred', 'recorded'], got 'posterior'",)),
        ("num-worlds-zero", 'noise="fresh", num_worlds=0', batch(noise="fresh", num_worlds=0), ValueError,
         ("`num_worlds` must be a positive int (W >= 1), got 0",)),
        ("num-worlds-float", 'noise="fresh", num_worlds=2.0', batch(noise="fresh", num_worlds=2.0), ValueError,
         ("`num_worlds` must be a positive int (W >= 1), got 2.0",)),
        ("observed-without-inferred", "observed=... with noise='recorded'", batch(observed=np.zeros((2, 4), int)), ValueError,
         ("`observed` is used only with noise='inferred', got noise='recorded'",)),
        ("observed-wrong-shape", 'noise="inferred", observed of shape [2, 3] (4 sites)',
         batch(noise="inferred", observed=np.zeros((2, 3), int)), ValueError,
         ("`observed` must hold every case's observed option per draw site, shape [cases, sites] = [2, 4], got shape [2, 3]",)),
        ("observed-out-of-range", 'noise="inferred", observed = 5 everywhere (K = 2)',
         lambda: bj.blame_batch(two_step, TWO, 0, noise="inferred", observed=np.full((2, 2), 5)), ValueError,
         ("`observed` for step 'draft' (slot 0) must lie in [0, 2), got values in [5, 5]",)),
        ("observed-float", 'noise="inferred", observed=np.zeros((2, 2)) (float), 1 of 2 cases failing',
         lambda: bj.blame_batch(two_step, TWO_ONE_PASSES, 0, noise="inferred", observed=np.zeros((2, 2))),
         ValueError, ("`observed` must be an int array", "[2, 2]", "float64")),
        ("observed-impossible-option-names-case", 'noise="inferred", key=2: case 1 observed at a -inf option',
         lambda: bj.blame_batch(two_step, TWO, 2, noise="inferred", observed=np.array([[0, 0], [1, 0]])), ValueError,
         ("case 1: the observed option 1 of step 'draft' (slot 0) has logit -inf in the factual run",)),
        ("threshold-above-range", "threshold=2.0", batch(threshold=2.0), ValueError,
         ("`threshold` must lie in (0.0, 1.0], got 2.0",)),
        ("threshold-at-low", "threshold=0.0", batch(threshold=0.0), ValueError, ("`threshold` must lie in (0.0, 1.0], got 0.0",)),
        ("threshold-nan", "threshold=nan", batch(threshold=float("nan")), ValueError,
         ("`threshold` must be a finite number (or None for the top of the range), got nan",)),
        ("threshold-string", 'threshold="high"', batch(threshold="high"), ValueError, ("`threshold`", "'high'")),
        ("estimator-unknown", 'estimator="bayes"', batch(estimator="bayes"), ValueError,
         ("`estimator` must be 'auto', 'exact' or 'mc', got 'bayes'",)),
        ("num-permutations-one", 'estimator="mc", num_permutations=1', batch(estimator="mc", num_permutations=1), ValueError,
         ("`num_permutations` must be an int >= 2, got 1",)),
        ("interval-unknown", 'interval="hoeffding"', batch(interval="hoeffding"), ValueError,
         ("`interval` must be one of ('bernstein', 'normal'), got 'hoeffding'",)),
        ("batch-delta-zero", "delta=0", batch(delta=0), ValueError, ("`delta` must be in (0, 1), got 0",)),
        ("batch-delta-nan", "delta=nan", batch(delta=float("nan")), ValueError, ("`delta` must be in (0, 1), got nan",)),
        ("batch-delta-string", 'delta="0.1"', batch(delta="0.1"), TypeError, ("`delta`", "'0.1'")),
        ("first-checkpoint-one", "first_checkpoint=1", batch(first_checkpoint=1), ValueError,
         ("`first_checkpoint` must be an int >= 2 (failures), got 1",)),
        ("growth-one", "growth=1.0", batch(growth=1.0), ValueError,
         ("`growth` must be a finite number >= 1 + 1e-4 (the checkpoint growth factor), got 1.0",)),
        ("growth-barely-above-one", "growth=1 + 1e-12", batch(growth=1 + 1e-12), ValueError,
         ("`growth` must be a finite number >= 1 + 1e-4", "got 1.000000000001")),
        ("max-failures-zero", "max_failures=0", batch(max_failures=0), ValueError, ("`max_failures` must be a positive int, got 0",)),
        ("stop-early-not-bool", 'stop_early="yes"', batch(stop_early="yes"), TypeError, ("`stop_early` must be a bool, got 'yes'",)),
        ("option-names-too-few", 'option_names={"draft": ("first",)} (K = 2)',
         lambda: bj.blame_batch(two_step, TWO, 0, option_names={"draft": ("first",)}), ValueError,
         ("`option_names['draft']` must name all 2 options, got 1",)),
        ("option-names-unknown-step", 'option_names={"drafter": ("a", "b")}',
         lambda: bj.blame_batch(two_step, TWO, 0, option_names={"drafter": ("a", "b")}), ValueError,
         ("unknown step 'drafter'; this pipeline's steps are ['draft', 'review']",)),
        ("option-names-a-list", 'option_names=["first", "second"]',
         lambda: bj.blame_batch(two_step, TWO, 0, option_names=["first", "second"]), TypeError,
         ("`option_names` must be a dict",)),
    ),
    *rows(
        "Interventions",
        ("do-action-unknown-step", 'do_action(structure, "planer", 0)', lambda: do.do_action(STRUCTURE, "planer", 0), ValueError,
         (f"`step` = 'planer' is not a step of this pipeline; its steps are {STEPS}",)),
        ("do-action-step-index-out-of-range", "do_action(structure, 7, 0)", lambda: do.do_action(STRUCTURE, 7, 0), ValueError,
         ("`step` = 7 is out of range: this pipeline has 4 steps, indices 0..3",)),
        ("do-action-option-out-of-range", 'do_action(structure, "planner", 2) (K = 2)',
         lambda: do.do_action(STRUCTURE, "planner", 2), ValueError, ("`option` of step 'planner' must be in [0, 2), got 2",)),
        ("do-action-option-negative", 'do_action(structure, "planner", -1)', lambda: do.do_action(STRUCTURE, "planner", -1),
         ValueError, ("`option` of step 'planner' must be in [0, 2), got -1",)),
        ("do-action-option-float", 'do_action(structure, "planner", 1.0)', lambda: do.do_action(STRUCTURE, "planner", 1.0),
         TypeError, ("`option` of step 'planner' must be an integer scalar, got 1.0",)),
        ("downstream-unknown", 'do_action(..., downstream="later")',
         lambda: do.do_action(STRUCTURE, "planner", 0, downstream="later"), ValueError,
         ("`downstream` must be one of ('held', 'fresh', 'direct'), got 'later'",)),
        ("downstream-fresh-without-stream", 'do_action(..., downstream="fresh")',
         lambda: do.do_action(STRUCTURE, "planner", 0, downstream="fresh"), ValueError,
         ("downstream='fresh' needs `stream`",)),
        ("downstream-direct-without-factual", 'do_action(..., downstream="direct")',
         lambda: do.do_action(STRUCTURE, "planner", 0, downstream="direct"), ValueError,
         ("downstream='direct' needs `factual`",)),
        ("downstream-direct-bad-factual", 'do_action(..., downstream="direct", factual=zeros(3, int32)) (4 sites)',
         lambda: do.do_action(STRUCTURE, "planner", 0, downstream="direct", factual=jnp.zeros(3, jnp.int32)), ValueError,
         ("`factual` must be the factual run's choice at every draw site, an int array of shape [4]", "got int32[3]")),
        ("stream-without-fresh", 'do_action(..., stream=1) with downstream="held"',
         lambda: do.do_action(STRUCTURE, "planner", 0, stream=1), ValueError,
         ("`stream` is only used with downstream='fresh', got downstream='held'",)),
        ("do-resample-negative-stream", 'do_resample(structure, "writer", -1)',
         lambda: do.do_resample(STRUCTURE, "writer", -1), ValueError, ("`stream` must be a non-negative integer, got -1",)),
        ("do-context-wrong-shape", 'do_context(structure, "writer", zeros(2)) (K = 3)',
         lambda: do.do_context(STRUCTURE, "writer", jnp.zeros(2, jnp.float32)), ValueError,
         ("`shift` of step 'writer' must be a float array of shape [3] (one entry per option), got float32[2]",)),
        ("do-context-nan", 'do_context(structure, "writer", [0, nan, 0])',
         lambda: do.do_context(STRUCTURE, "writer", jnp.array([0.0, jnp.nan, 0.0])), ValueError,
         ("`shift` of step 'writer' must be real or -inf (an impossible option)",)),
        ("do-policy-missing-variant", 'do_policy(structure, "writer", 2)', lambda: do.do_policy(STRUCTURE, "writer", 2),
         ValueError, ("`variant` = 2 does not exist at step 'writer', which has 2 variant(s) (0..1)",)),
        ("do-observation-unknown-site", 'do_observation(structure, "search", zeros(3))',
         lambda: do.do_observation(STRUCTURE, "search", jnp.zeros(3)), ValueError,
         ("`name` = 'search' is not a deterministic site of this pipeline; its sites are []",)),
        ("do-observation-on-a-step", 'do_observation(structure, "writer", zeros(3))',
         lambda: do.do_observation(STRUCTURE, "writer", jnp.zeros(3)), ValueError,
         ("`name` = 'writer' is a step that samples (ctx.choose), not a deterministic site", "use do_action")),
        ("plan-not-a-plan", 'do_action(..., plan="factual")', lambda: do.do_action(STRUCTURE, "planner", 0, plan="factual"),
         TypeError, ("`plan` must be a blamejax.Plan (or None), got str",)),
        ("replay-plan-not-a-plan", 'replay(refund, cases, worlds, plan="factual")',
         lambda: bj.replay(refund, CASES, WORLDS, plan="factual"), TypeError,
         ("`plan` must be a blamejax.Plan (or None for the factual run), got str",)),
        ("replay-plan-of-another-pipeline", "replay(refund, ..., plan=factual_plan(two_step's structure))",
         lambda: bj.replay(refund, CASES, WORLDS, plan=bj.pipeline.factual_plan(bj.discover(two_step, jax.tree_util.tree_map(lambda x: x[0], TWO)))),
         ValueError, ("`plan` has 2 step plans", "this pipeline has 4 steps")),
        ("contrastive-rollouts-zero", "contrastive(..., num_rollouts=0)",
         lambda: bj.contrastive(refund, CASES, WORLDS, num_rollouts=0), ValueError, ("`num_rollouts` must be a positive int, got 0",)),
        ("contrastive-baseline-unknown", 'contrastive(..., baseline="fixed")',
         lambda: bj.contrastive(refund, CASES, WORLDS, baseline="fixed"), ValueError,
         ("`baseline` must be one of ('factual', 'rollouts'), got 'fixed'",)),
        ("contrastive-unknown-step", 'contrastive(..., steps=["planer"])',
         lambda: bj.contrastive(refund, CASES, WORLDS, steps=["planer"]), ValueError,
         ("`steps` = 'planer' is not a step of this pipeline",)),
        ("contrastive-threshold-string", 'contrastive(..., threshold="x")',
         lambda: bj.contrastive(refund, CASES, WORLDS, threshold="x"), ValueError, ("`threshold` must be a finite number, got 'x'",)),
        ("contrastive-intervention-not-callable", "contrastive(..., intervention=3)",
         lambda: bj.contrastive(refund, CASES, WORLDS, intervention=3), TypeError,
         ("`intervention` must be None or a function (k, r, factual) -> Plan, got 3",)),
    ),
    *rows(
        "Statistics",
        ("checkpoints-t1-one", "stats.checkpoints(1, 2.0, 10)", lambda: bj.stats.checkpoints(1, 2.0, 10), ValueError,
         ("`t1` must be an int >= 2 (the first checkpoint), got 1",)),
        ("checkpoints-gamma-one", "stats.checkpoints(2, 1.0, 10)", lambda: bj.stats.checkpoints(2, 1.0, 10), ValueError,
         ("`gamma` must be a finite number > 1 (the checkpoint growth factor), got 1.0",)),
        ("checkpoints-gamma-nan", "stats.checkpoints(2, nan, 10)", lambda: bj.stats.checkpoints(2, float("nan"), 10), ValueError,
         ("`gamma` must be a finite number > 1 (the checkpoint growth factor), got nan",)),
        ("checkpoints-gamma-barely-above-one", "stats.checkpoints(2, 1 + 1e-12, 10**6)",
         lambda: bj.stats.checkpoints(2, 1 + 1e-12, 10**6), ValueError,
         ("`gamma` = 1.000000000001 is so close to 1", "use a growth factor of at least 1 + 1e-4")),
        ("checkpoints-gamma-infinite", "stats.checkpoints(2, inf, 10)", lambda: bj.stats.checkpoints(2, float("inf"), 10),
         ValueError, ("`gamma` must be", "got inf")),
        ("checkpoints-budget-below-t1", "stats.checkpoints(4, 2.0, 3)", lambda: bj.stats.checkpoints(4, 2.0, 3), ValueError,
         ("`budget` must be an int >= t1 = 4, got 3",)),
        ("hoeffding-t-zero", "stats.hoeffding_radius(0, 2.0, 0.1)", lambda: bj.stats.hoeffding_radius(0, 2.0, 0.1), ValueError,
         ("`t` (the number of samples) must be at least 1, got 0",)),
        ("hoeffding-delta-above-one", "stats.hoeffding_radius(10, 2.0, 1.5)", lambda: bj.stats.hoeffding_radius(10, 2.0, 1.5),
         ValueError, ("`delta` must be in (0, 1), got 1.5",)),
        ("hoeffding-delta-array", "stats.hoeffding_radius(10, 2.0, np.array([0.1, 3.0]))",
         lambda: bj.stats.hoeffding_radius(10, 2.0, np.array([0.1, 3.0])), ValueError, ("`delta` must be in (0, 1)",)),
        ("bernstein-t-one", "stats.bernstein_radius(1, 0.25, 2.0, 0.1)", lambda: bj.stats.bernstein_radius(1, 0.25, 2.0, 0.1),
         ValueError, ("`t` (the number of samples) must be at least 2, got 1",)),
        ("normal-delta-zero", "stats.normal_radius(10, 0.25, 0)", lambda: bj.stats.normal_radius(10, 0.25, 0), ValueError,
         ("`delta` must be in (0, 1), got 0",)),
        ("confidence-radius-unknown-kind", 'stats.confidence_radius("hoefding", 10, 0.25, 2.0, 0.1)',
         lambda: bj.stats.confidence_radius("hoefding", 10, 0.25, 2.0, 0.1), ValueError, ("`kind`", "'hoefding'")),
        ("checkpoint-interval-unknown-rule", 'stats.checkpoint_interval(values, 1, "hoefding", 0.1, 2.0)',
         lambda: bj.stats.checkpoint_interval(np.zeros((5, 2)), 1, "hoefding", 0.1, 2.0), ValueError, ("`rule`", "'hoefding'")),
        ("checkpoint-delta-n-zero", "stats.checkpoint_delta(0.1, 0, 1)", lambda: bj.stats.checkpoint_delta(0.1, 0, 1), ValueError,
         ("`n` (the number of steps) must be at least 1, got 0",)),
        ("checkpoint-delta-k-zero", "stats.checkpoint_delta(0.1, 4, 0)", lambda: bj.stats.checkpoint_delta(0.1, 4, 0), ValueError,
         ("`k` (the checkpoint number) is 1-based, got 0",)),
        ("wilson-successes-above-trials", "stats.wilson_interval(5, 3)", lambda: bj.stats.wilson_interval(5, 3), ValueError,
         ("need 0 <= successes <= trials and trials >= 1, got 5 of 3",)),
        ("wilson-delta", "stats.wilson_interval(1, 3, delta=2)", lambda: bj.stats.wilson_interval(1, 3, delta=2), ValueError,
         ("`delta` must be an error level in (0, 1), got 2",)),
    ),
    *rows(
        "inferred_worlds",
        ("observed-shape", "inferred_worlds(refund, cases, zeros((2, 3), int), 0, 2) (4 sites)",
         lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 3), int), 0, 2), ValueError,
         ("`observed` must be an int array of shape [F, sites] = [2, 4], got shape (2, 3)",)),
        ("observed-dtype", "inferred_worlds(refund, cases, zeros((2, 4)), 0, 2) (float)",
         lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 4)), 0, 2), ValueError,
         ("`observed` must be an int array of shape [F, sites] = [2, 4], got shape (2, 4), dtype float64",)),
        ("observed-option-out-of-range", "observed writer option 3 (K = 3)",
         lambda: bj.inferred_worlds(refund, CASES, np.array([[0, 0, 3, 0]] * 2), 0, 2), ValueError,
         ("`observed` for step 'writer' (slot 0) must lie in [0, 3), got values in [3, 3]",)),
        ("observed-option-with-logit-neginf", "observed retriever option 1 after plan 0 (logit -inf)",
         lambda: bj.inferred_worlds(refund, CASES, OBSERVED_BAD_ROW1, 0, 2), ValueError,
         ("case 1: the observed option 1 of step 'retriever' (slot 0) has logit -inf in the factual run, so it could not have been chosen",)),
        ("observed-neginf-with-case-ids", "the same with case_ids=[7, 8]",
         lambda: bj.inferred_worlds(refund, CASES, OBSERVED_BAD_ROW1, 0, 2, case_ids=[7, 8]), ValueError,
         ("case 8: the observed option 1 of step 'retriever'",)),
        ("inferred-num-worlds-zero", "inferred_worlds(..., num_worlds=0)",
         lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 4), int), 0, 0), ValueError,
         ("`num_worlds` must be a positive int, got 0",)),
        ("inferred-case-ids-length", "inferred_worlds(..., case_ids=[0, 1, 2]) for 2 cases",
         lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 4), int), 0, 2, case_ids=[0, 1, 2]), ValueError,
         ("`case_ids` must hold one id per case (2), got shape (3,)",)),
        ("inferred-key-float", "inferred_worlds(..., key=1.5)",
         lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 4), int), 1.5, 2), TypeError, (KEY, "got float")),
    ),
    *rows(
        "Differentiable",
        ("gradient-through-hard-mode", "jax.grad of shapley_values(..., mode=Hard())", hard_gradient, ValueError,
         ("a gradient was requested through the hard (Gumbel-max) choice of step 'draft'", "mode=blamejax.Relaxed(tau)")),
        ("shapley-values-batched-case", "shapley_values(refund, cases, worlds_of_case): cases, not one case",
         lambda: bj.shapley_values(refund, CASES, CASE_WORLDS), ValueError,
         ("logits of step 'planner' must have shape [V, K] (2 axes: variants, options), got shape (2, 2, 2)",)),
        ("shapley-values-unknown-step", 'shapley_values(..., steps=["planer"])',
         lambda: bj.shapley_values(refund, CASE, CASE_WORLDS, steps=["planer"]), ValueError, ("unknown step 'planer'",)),
        ("shapley-values-worlds-f-w", "shapley_values(refund, case, fresh_worlds(0, 1, 2)): keys [F, W], not [W]",
         lambda: bj.shapley_values(refund, CASE, bj.fresh_worlds(0, 1, 2)), ValueError, ("`worlds", "[W]")),
        ("shapley-values-worlds-key-array", "shapley_values(refund, case, jr.split(key, 2))",
         lambda: bj.shapley_values(refund, CASE, jr.split(jr.key(0), 2)), TypeError, ("`worlds` must be a blamejax.World",)),
        ("shapley-values-mode-string", 'shapley_values(..., mode="relaxed")',
         lambda: bj.shapley_values(refund, CASE, CASE_WORLDS, mode="relaxed"), TypeError, (MODE + ", got 'relaxed'",)),
        ("batch-mean-shapley-worlds-w", "batch_mean_shapley(refund, cases, worlds_of_case): keys [W], not [F, W]",
         lambda: bj.differentiable.batch_mean_shapley(refund, CASES, CASE_WORLDS), ValueError,
         ("`worlds.key` must have shape [F, W] = [2, W], got (2,)",)),
        ("fit-num-steps-zero", "fit_fixes(objective, zeros(2), num_steps=0)",
         lambda: bj.fit_fixes(jnp.sum, jnp.zeros(2), num_steps=0), ValueError, ("`num_steps` must be a positive int, got 0",)),
        ("fit-int-params", "fit_fixes(objective, zeros(2, int32))",
         lambda: bj.fit_fixes(jnp.sum, jnp.zeros(2, jnp.int32)), TypeError,
         ("`params` must hold floating-point arrays, got a leaf of dtype int32",)),
        ("fit-objective-not-scalar", "fit_fixes(lambda p: p, zeros(2)): a vector objective",
         lambda: bj.fit_fixes(lambda p: p, jnp.zeros(2), num_steps=2), TypeError, ("`objective`", "scalar", "(2,)")),
        ("fit-optimizer-string", 'fit_fixes(objective, zeros(2), optimizer="adam")',
         lambda: bj.fit_fixes(jnp.sum, jnp.zeros(2), optimizer="adam", num_steps=2), TypeError,
         ("`optimizer` must be an optax GradientTransformation", "'adam'")),
    ),
    *rows(
        "Command line",
        ("cli-unknown-demo", "python -m blamejax demo nope", cli("demo", "nope"), SystemExit,
         ("argument name: invalid choice: 'nope'",)),
        ("cli-no-command", "python -m blamejax", cli(), SystemExit, ("the following arguments are required: command",)),
        ("cli-seed-2**70", "python -m blamejax demo refund --seed 2**70", cli("demo", "refund", "--seed", str(2**70)),
         SystemExit, (f"argument --seed: must be in [0, 2**32), got {2**70}",)),
        ("cli-seed-negative", "python -m blamejax demo refund --seed -1", cli("demo", "refund", "--seed", "-1"), SystemExit,
         ("argument --seed: must be in [0, 2**32), got -1",)),
        ("cli-seed-float", "python -m blamejax demo refund --seed 1.5", cli("demo", "refund", "--seed", "1.5"), SystemExit,
         ("argument --seed: must be an int, got '1.5'",)),
        ("cli-cases-zero", "python -m blamejax demo refund --cases 0", cli("demo", "refund", "--cases", "0"), SystemExit,
         ("--cases must be at least 1 for demo 'refund', got 0",)),
        ("cli-cases-too-many", "python -m blamejax demo refund --cases 100000000", cli("demo", "refund", "--cases", "100000000"),
         SystemExit, ("--cases 100,000,000: demo 'refund' would need about", "GiB available", "use fewer cases")),
        ("cli-cases-not-int", "python -m blamejax demo refund --cases abc", cli("demo", "refund", "--cases", "abc"), SystemExit,
         ("argument --cases: invalid int value: 'abc'",)),
        ("cli-out-on-refund", "python -m blamejax demo refund --out x", cli("demo", "refund", "--out", "x"), SystemExit,
         ("--out: not used by demo 'refund' (used by: fit, rag)",)),
        ("cli-noise-on-fit", "python -m blamejax demo fit --noise fresh", cli("demo", "fit", "--noise", "fresh"), SystemExit,
         ("--noise: not used by demo 'fit' (used by: rag)",)),
        ("cli-noise-unknown", "python -m blamejax demo rag --noise bogus", cli("demo", "rag", "--noise", "bogus"), SystemExit,
         ("argument --noise: invalid choice: 'bogus'",)),
        ("cli-worlds-zero", "python -m blamejax demo rag --worlds 0", cli("demo", "rag", "--worlds", "0"), SystemExit,
         ("--worlds must be at least 1", "got 0")),
        ("cli-worlds-zero-on-refund", "python -m blamejax demo refund --worlds 0", cli("demo", "refund", "--worlds", "0"),
         SystemExit, ("--worlds: not used by demo 'refund' (used by: rag)",)),
        ("cli-permutations-one", "python -m blamejax demo rag --permutations 1", cli("demo", "rag", "--permutations", "1"),
         SystemExit, ("--permutations must be at least 2", "got 1")),
    ),
    *rows(
        "Results and demos",
        ("result-table-failure-out-of-range", "exact_blame(two_step, ...).table(5) (2 failures)",
         lambda: exact_table(5), ValueError, ("`failure` must be in [0, 2), got 5",)),
        ("attribute-not-a-power-of-two", "attribute(jnp.zeros(3))", lambda: bj.attribute(jnp.zeros(3)), ValueError,
         ("`values` must have length 2**n with n >= 1, got 3",)),
        ("refund-cases-zero", "demos.refund_cases(0)", lambda: bj.demos.refund_cases(0), ValueError,
         ("`num_cases` must be a positive int, got 0",)),
        ("refund-mechanism-unknown", 'demos.refund_cases(2, "C")', lambda: bj.demos.refund_cases(2, "C"), ValueError,
         ("`mechanism` must be 'A' or 'B', got 'C'",)),
    ),
]

CATEGORIES = tuple(dict.fromkeys(row.category for row in ROWS))


def _param(row: Row):
    marks = [pytest.mark.xfail(strict=True, reason=f"open: {row.open}")] if row.open else []
    return pytest.param(row, id=row.id, marks=marks)


@pytest.mark.parametrize("row", [_param(row) for row in ROWS])
def test_error(row: Row, capsys):
    """The bad input raises `row.error` with a message that matches `row.match`. The command
    line exits with status 2 and the message on stderr (argparse's `parser.error`)."""
    if row.error is SystemExit:
        with pytest.raises(SystemExit) as info:
            row.trigger()
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert re.search(row.match, err), f"stderr {err!r} does not match {row.match!r}"
    else:
        with pytest.raises(row.error, match=row.match):
            row.trigger()


def test_table_is_well_formed():
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert all(re.fullmatch(r"[a-z0-9*-]+", i) for i in ids), ids
    assert len(ROWS) >= 60
    for row in ROWS:
        assert row.parts and all(isinstance(p, str) and p for p in row.parts), row.id
        assert issubclass(row.error, BaseException), row.id


# -- docs/errors.md ----------------------------------------------------------------------------
def _cell(text: str) -> str:
    """A markdown table cell holding `text` verbatim, as code (backticks inside are kept)."""
    return "`` " + " ".join(text.split()).replace("|", "\\|") + " ``"


def render_markdown() -> str:
    """The tables of docs/errors.md: one per category, a row per bad input."""
    lines = [
        f"{len(ROWS)} rows in {len(CATEGORIES)} categories, "
        f"{sum(1 for r in ROWS if r.open)} of them open (marked **open**: no clear error yet).",
        "",
    ]
    for category in CATEGORIES:
        rows_ = [row for row in ROWS if row.category == category]
        lines += [f"### {category}", "", "| id | input | raises | the message a user reads |", "|---|---|---|---|"]
        for row in rows_:
            message = _cell(" … ".join(row.parts))
            error = row.error.__name__ + (" (exit 2, stderr)" if row.error is SystemExit else "")
            if row.open:
                message = f"**open**, wanted: {message}; now: {_cell(row.open)}"
            lines.append(f"| `{row.id}` | {_cell(row.input)} | {error} | {message} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _doc_table(text: str) -> str:
    start, end = text.index(START) + len(START), text.index(END)
    return text[start:end].strip("\n") + "\n"


def test_docs_table_is_current():
    """docs/errors.md shows exactly this table: regenerate it with `python tests/test_errors.py`."""
    assert _doc_table(DOC.read_text()) == render_markdown(), (
        "docs/errors.md is out of date with tests/test_errors.py; run `python tests/test_errors.py`"
    )


def _write_doc() -> None:
    text = DOC.read_text()
    start, end = text.index(START) + len(START), text.index(END)
    DOC.write_text(text[:start] + "\n" + render_markdown() + text[end:])


if __name__ == "__main__":
    _write_doc()
    print(f"wrote {DOC.relative_to(ROOT)}: {len(ROWS)} rows", file=sys.stderr)
