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

import json
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
WORLDS = bj.recorded_worlds(0, range(2))


def _free_form(ctx, case):
    """A pipeline whose second step computes its logits from the first draw (free-form)."""
    a = ctx.choose("a", case["a"])
    b = ctx.choose("b", case["b"][:, a.index])
    return b.take(case["score"])


_FREE_CASES = dict(
    a=np.zeros((2, 2, 3), np.float32),
    b=np.zeros((2, 2, 3, 3), np.float32),
    score=np.ones((2, 3), np.float32) / 2,
)
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
TWO_WORLDS = bj.recorded_worlds(0, range(2))
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
    return lambda: bj.mc_shapley(refund, CASES, WORLDS, 0, **_built(kwargs))


def batch(**kwargs):
    return lambda: bj.blame_batch(refund, CASES, 0, **_built(kwargs))


def later_interval(*args, **kwargs):
    """A `bj.stats.Interval(*args, **kwargs)` built when the row runs (its checks raise there)."""
    return _Later(lambda: bj.stats.Interval(*args, **kwargs))


def later_schedule(first, growth):
    """A `bj.stats.Schedule(first=first, growth=growth)` built when the row runs."""
    return _Later(lambda: bj.stats.Schedule(first=first, growth=growth))


class _Later:
    def __init__(self, make):
        self.make = make

    def __call__(self):
        return self.make()


def _built(kwargs):
    return {name: v() if isinstance(v, _Later) else v for name, v in kwargs.items()}


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


CASE_WORLDS = jax.tree_util.tree_map(lambda x: x[0], bj.fresh_worlds(0, range(1), 2))  # [W = 2]
EXPECTED_WORLD = jax.tree_util.tree_map(lambda x: x[0], bj.expected_worlds(range(1)))


def _chain40(ctx, case):
    """A chain of 40 steps: too many players to enumerate coalitions."""
    choice = ctx.choose("s0", case["tables"][0])
    for i in range(1, 40):
        choice = ctx.choose(f"s{i}", case["tables"][i], given=choice)
    return choice.take(case["score"])


_CHAIN40 = dict(
    tables=[np.zeros((2, 2) if i == 0 else (2, 2, 2), np.float32) for i in range(40)],
    score=np.zeros(2, np.float32),
)
OBSERVED_BAD_ROW1 = np.array([[0, 0, 0, 0], [0, 1, 0, 0]])  # case 1: retriever 1 after plan 0


def hard_gradient():
    value = lambda case: bj.shapley_values(two_step, case, CASE_WORLDS, mode=bj.Hard()).shapley[0]
    return jax.grad(value)(jax.tree_util.tree_map(lambda x: x[0], TWO))


def exact_table(failure):
    return bj.exact_blame(two_step, TWO, TWO_WORLDS).table(failure)


# -- traces, scorers, checkpoints, loaders: inputs written to files -------------------------
# `test_error` runs each row in a fresh temporary folder, so a trigger writes the files it
# reads under plain relative names (messages quote them as written).
def at(name: str, text: str | bytes = "") -> str:
    """Write `text` to the file `name` (in the row's temporary folder) and return the name."""
    path = pathlib.Path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    return name


def folder(name: str = "folder") -> str:
    pathlib.Path(name).mkdir(exist_ok=True)
    return name


T = bj.traces
PLAN = T.Step(
    "plan",
    agent="Planner",
    options=("search", "answer"),
    logits={"factual": (0.0, 0.0), "fix": (0.0, NEG)},
    accept=("search",),
    choice="answer",
)
RUN = T.Run("r0", (PLAN,), passed=False)


def call_run(output="answer", prompt=True):
    """A traced run of one model call of the Planner (a GenAI chat span), no decision."""
    attributes = {"gen_ai.operation.name": "chat"}
    if prompt:
        attributes["gen_ai.input.messages"] = json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "Plan."}]}]
        )
    call = T.Step("chat", agent="Planner", output=output, extra={"attributes": attributes})
    return T.Run("t1", (call,), passed=False)


CALL_RUN = call_run()
SPANS_EXPORT = json.dumps(
    {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t", "spanId": "s", "name": "x"}]}]}]}
)


def step(**changes):
    return T.Step(
        **dict(
            name="plan",
            agent="Planner",
            options=("search", "answer"),
            logits={"factual": (0.0, 0.0), "fix": (0.0, NEG)},
            accept=("search",),
            choice="answer",
        )
        | changes
    )


def run(*steps, **changes):
    return T.Run(**dict(run="r0", steps=steps or (PLAN,), passed=False) | changes)


def trace_line(**changes) -> str:
    """`RUN` as its line of a trace file, with top-level fields or step 0's fields replaced
    (`step_<field>=`); a value of `...` removes the field."""
    record = T.to_record(RUN)
    for name, value in changes.items():
        target, name = (
            (record["steps"][0], name[5:]) if name.startswith("step_") else (record, name)
        )
        target.pop(name) if value is ... else target.__setitem__(name, value)
    return json.dumps(record) + "\n"


def whowhen(**fields) -> str:
    """A Who&When record as JSON: one message by agent A, a failure; fields replaced."""
    record = {
        "is_correct": False,
        "mistake_agent": "A",
        "mistake_step": "0",
        "history": [{"name": "A", "content": "x"}],
    } | fields
    return json.dumps({k: v for k, v in record.items() if v is not ...})


def otlp(*attributes, status=2) -> str:
    """One OTLP JSON export of one root span; `attributes` as (key, OTLP value) pairs."""
    span = {
        "traceId": "t1",
        "spanId": "a",
        "name": "decide",
        "status": {"code": status},
        "attributes": [{"key": k, "value": v} for k, v in attributes],
    }
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})


def strings(*values):
    return {"arrayValue": {"values": [{"stringValue": v} for v in values]}}


def doubles(*values):
    return {"arrayValue": {"values": [{"doubleValue": v} for v in values]}}


def otlp_spans(*spans) -> str:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]})


def otlp_logs(trace, span) -> str:
    """One OTLP JSON export of one log record, the GenAI instrumentation's content event."""
    record = {"eventName": "gen_ai.client.inference.operation.details", "attributes": []}
    record |= {k: v for k, v in (("traceId", trace), ("spanId", span)) if v is not None}
    return json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [record]}]}]})


def console_span() -> str:
    """One span as the OpenTelemetry SDK's ConsoleSpanExporter prints it."""
    return json.dumps(
        {
            "name": "decide",
            "context": {"trace_id": "0x" + "1" * 32, "span_id": "0x" + "2" * 16},
            "parent_id": None,
            "status": {"status_code": "ERROR"},
            "attributes": {},
        },
        indent=4,
    )


def decision(probabilities):
    return otlp(
        ("decision.options", strings("a", "b")),
        ("decision.probabilities", doubles(*probabilities)),
        ("decision.choice", {"stringValue": "a"}),
    )


def trace_blame():
    return T.blame_runs([RUN], num_worlds=2)


def exact_result():
    return bj.exact_blame(two_step, TWO, TWO_WORLDS)


def result_dict(**changes):
    """`exact_result().to_dict()` with fields replaced (`...` removes one)."""
    data = exact_result().to_dict()
    for name, value in changes.items():
        data.pop(name) if value is ... else data.__setitem__(name, value)
    return data


def result_file(name="result.json", edit=None) -> str:
    exact_result().to_json(name)
    if edit is not None:
        at(name, edit(pathlib.Path(name).read_text()))
    return name


def checkpointed(path="run.ckpt", **kwargs):
    """blame_batch of `two_step` (every case fails) with a checkpoint at `path`."""
    return bj.blame_batch(
        two_step, TWO, kwargs.pop("key", 0), checkpoint=path, block_size=8, **kwargs
    )


def checkpoint_file(edit=None, path="run.ckpt") -> str:
    """A checkpoint of `checkpointed()`, its text changed by `edit`."""
    checkpointed(path)
    if edit is not None:
        at(path, edit(pathlib.Path(path).read_text()))
    return path


def newer_format(text):
    document = json.loads(text)
    document["format"] += 1
    return json.dumps(document)


def edited_progress(text):
    document = json.loads(text)
    document["progress"]["edited"] = 1
    return json.dumps(document)


def not_listening(scorer_class, **options):
    """`scorer_class` at 127.0.0.1 on a port bound by a socket that does not listen (the
    connection is refused at once), with one quick retry."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}" + (
            "/v1" if scorer_class is S.OpenAIScorer else ""
        )
        scorer = scorer_class(
            "m",
            base_url=url,
            api_key="none",
            timeout=0.5,
            retry=S.Retry(attempts=2, backoff=0.0),
            **options,
        )
        return scorer.score([REQUEST])


S = bj.scorers
REQUEST = S.Request("route", "factual", "refund please", ("refund", "escalate"))


def prefer_first(request):
    return np.array([0.0] + [-1.0] * (len(request.options) - 1))


def returns(logits):
    """A FunctionScorer whose function returns `logits` for every request, asked once."""
    return lambda: S.FunctionScorer(lambda request: logits, name="f").score([REQUEST])


def cache_file(name="scores.sqlite", schema=None) -> str:
    """A score cache file; with `schema`, its version changed to that."""
    S.Cache(name).close()
    if schema is not None:
        import sqlite3

        with sqlite3.connect(name) as db:
            db.execute("UPDATE meta SET value = ? WHERE name = 'schema'", (str(schema),))
        db.close()
    return name


def other_sqlite(name="other.sqlite") -> str:
    import sqlite3

    db = sqlite3.connect(name)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    return name


def lazily(runs=None, **kwargs):
    def request(run, step, variant, parent):
        return S.Request(step.name, variant, {"after": parent}, step.options)

    plan = T.Step("plan", options=("search", "answer"), accept=("search",), choice="answer")
    return S.fill_lazily(
        runs or [T.Run("r0", (plan,), passed=False)],
        S.FunctionScorer(prefer_first),
        kwargs.pop("request", request),
        num_worlds=2,
        **kwargs,
    )


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
        (
            "logits-without-variant-axis",
            'ctx.choose("a", x[0]): logits of shape [K]',
            bad_pipeline(lambda ctx, x: ctx.choose("a", x[0]).take(jnp.zeros(3))),
            ValueError,
            (
                "logits of step 'a' must have shape [V, K] (2 axes: variants, options), got shape (3,)",
            ),
        ),
        (
            "table-parent-axis-mismatch",
            'ctx.choose("b", zeros((2, 3, 2)), given=a), a with 2 options',
            bad_pipeline(
                lambda ctx, x: ctx.choose(
                    "b", jnp.zeros((2, 3, 2)), given=ctx.choose("a", x[:, :2])
                ).take(jnp.zeros(2))
            ),
            ValueError,
            (
                "logits of step 'b' have 3 rows on parent axis 0 but the parent choice has 2 options",
            ),
        ),
        (
            "table-missing-parent-axis",
            'ctx.choose("b", x, given=a): [V, K] logits with a parent',
            bad_pipeline(
                lambda ctx, x: ctx.choose("b", x, given=ctx.choose("a", x)).take(jnp.zeros(3))
            ),
            ValueError,
            ("logits of step 'b' must have shape [V, K_parent0, K]", "got shape (2, 3)"),
        ),
        (
            "int-logits",
            'ctx.choose("a", zeros((2, 3), int32))',
            bad_pipeline(
                lambda ctx, x: ctx.choose("a", jnp.zeros((2, 3), jnp.int32)).take(jnp.zeros(3))
            ),
            TypeError,
            ("logits of step 'a' must be floating point, got int32",),
        ),
        (
            "list-logits",
            'ctx.choose("a", [[0.0, 1.0]])',
            bad_pipeline(lambda ctx, x: ctx.choose("a", [[0.0, 1.0]]).take(jnp.zeros(2))),
            TypeError,
            ("logits of step 'a' must be an array, got list",),
        ),
        (
            "zero-variants",
            'ctx.choose("a", x[:0]): logits of shape [0, K]',
            bad_pipeline(lambda ctx, x: ctx.choose("a", x[:0]).take(jnp.zeros(3))),
            ValueError,
            ("logits of step 'a' need >= 1 variant and >= 1 option, got (0, 3)",),
        ),
        (
            "step-name-not-str",
            "ctx.choose(3, x)",
            bad_pipeline(lambda ctx, x: ctx.choose(3, x).take(jnp.zeros(3))),
            TypeError,
            ("`step` must be a str name, got int: 3",),
        ),
        (
            "negative-slot",
            'ctx.choose("a", x, slot=-1)',
            bad_pipeline(lambda ctx, x: ctx.choose("a", x, slot=-1).take(jnp.zeros(3))),
            TypeError,
            ("`slot` of step 'a' must be a non-negative Python int, got -1",),
        ),
        (
            "given-not-a-choice",
            'ctx.choose("a", x, given=1)',
            bad_pipeline(lambda ctx, x: ctx.choose("a", x, given=1).take(jnp.zeros(3))),
            TypeError,
            ("`given` of step 'a' must be a Choice or a tuple of Choices, got int",),
        ),
        (
            "step-draws-twice-in-one-slot",
            'two ctx.choose("a", x) calls, both slot 0',
            bad_pipeline(
                lambda ctx, x: (
                    ctx.choose("a", x).take(jnp.zeros(3)) + ctx.choose("a", x).take(jnp.zeros(3))
                )
            ),
            ValueError,
            ("step 'a' draws twice in slot 0; give each draw of a step its own `slot=`",),
        ),
        (
            "slots-with-different-shapes",
            'ctx.choose("a", x) and ctx.choose("a", x[:, :2], slot=1)',
            bad_pipeline(
                lambda ctx, x: (
                    ctx.choose("a", x).take(jnp.zeros(3))
                    + ctx.choose("a", x[:, :2], slot=1).take(jnp.zeros(2))
                )
            ),
            ValueError,
            ("step 'a' has 2 variants x 3 options in slot 0 but 2 x 2 in slot 1",),
        ),
        (
            "pipeline-returns-vector",
            "a pipeline returning a score of shape [3]",
            bad_pipeline(lambda ctx, x: jnp.zeros(3) + ctx.choose("a", x).take(jnp.zeros(3))),
            ValueError,
            ("`pipeline` must return a scalar score, got an output of shape (3,)",),
        ),
        (
            "pipeline-returns-choice",
            "a pipeline returning the Choice instead of a score",
            bad_pipeline(lambda ctx, x: ctx.choose("a", x)),
            ValueError,
            ("`pipeline` must return a scalar score, got an output of shape Choice",),
        ),
        (
            "pipeline-makes-no-draw",
            "a pipeline that never calls ctx.choose",
            bad_pipeline(lambda ctx, x: jnp.sum(x)),
            ValueError,
            ("`pipeline` made no `ctx.choose` draw; there is nothing to blame",),
        ),
        (
            "pipeline-not-callable",
            'exact_blame("refund", cases, worlds)',
            lambda: bj.exact_blame("refund", CASES, WORLDS),
            TypeError,
            ("`pipeline` must be callable, got str",),
        ),
        (
            "take-table-wrong-length",
            "choice.take(zeros(4)) on a 3-option choice",
            bad_pipeline(lambda ctx, x: ctx.choose("a", x).take(jnp.zeros(4))),
            ValueError,
            (
                "`choice.take(table)` needs a table with the 3 options on its first axis, got shape (4,)",
            ),
        ),
        (
            "deterministic-site-twice",
            'ctx.deterministic("t", 1.0) twice',
            bad_pipeline(
                lambda ctx, x: (
                    ctx.deterministic("t", 1.0)
                    + ctx.deterministic("t", 1.0)
                    + ctx.choose("a", x).take(jnp.zeros(3))
                )
            ),
            ValueError,
            ("deterministic site 't' is used twice; names must be unique",),
        ),
        (
            "python-branch-on-a-choice",
            "if choice.index == 0: ... (a Python branch on a drawn value)",
            bad_pipeline(branching_pipeline),
            TypeError,
            ("`pipeline`", "jnp.where"),
        ),
        (
            "ctx-choose-inside-lax-cond",
            "ctx.choose inside jax.lax.cond",
            lambda: bj.exact_blame(cond_pipeline, X, WORLDS),
            ValueError,
            (
                "step 'a': `ctx.choose` was called inside a JAX control-flow",
                "jax.lax.cond",
                "jnp.where",
            ),
        ),
        (
            "ctx-choose-inside-lax-scan",
            "ctx.choose inside jax.lax.scan",
            bad_pipeline(scan_pipeline),
            ValueError,
            ("step 'a'", "lax.scan", "top level"),
        ),
    ),
    *rows(
        "Cases",
        (
            "cases-empty",
            "exact_blame(refund, {}, worlds)",
            lambda: bj.exact_blame(refund, {}, WORLDS),
            ValueError,
            ("`cases` is empty: it must be a pytree of arrays with a leading failure axis",),
        ),
        (
            "cases-none",
            "exact_blame(refund, None, worlds)",
            lambda: bj.exact_blame(refund, None, WORLDS),
            ValueError,
            ("`cases` is empty",),
        ),
        (
            "cases-ragged-leading-axis",
            'cases with cases["planner"][:1] (1 row, the others 2)',
            lambda: bj.exact_blame(refund, dict(CASES, planner=CASES["planner"][:1]), WORLDS),
            ValueError,
            ("every leaf of `cases` must share one leading failure axis, got shapes [(1, 2, 2),",),
        ),
        (
            "cases-scalar-leaf",
            "cases with an extra leaf 1.0 (no case axis)",
            lambda: bj.exact_blame(refund, dict(CASES, extra=1.0), WORLDS),
            ValueError,
            ("every leaf of `cases` must share one leading failure axis, got shapes [(),",),
        ),
        (
            "cases-list-of-dicts",
            "[case_0, case_1]: a list of per-case dicts",
            lambda: bj.exact_blame(refund, [CASE, CASE], WORLDS),
            TypeError,
            (
                "`cases` must be one pytree whose arrays have a leading case axis, got a list of 2 per-case dicts; stack them first",
            ),
        ),
        (
            "cases-zero-failures",
            "cases with a leading axis of 0",
            lambda: bj.exact_blame(refund, jax.tree_util.tree_map(lambda x: x[:0], CASES), WORLDS),
            ValueError,
            ("`cases` holds zero failures; there is nothing to blame",),
        ),
        (
            "cases-without-case-axis",
            "exact_blame(refund, refund_tables(), worlds): one case, no leading axis",
            lambda: bj.exact_blame(refund, bj.demos.refund_tables(), WORLDS),
            ValueError,
            (
                "logits of step 'planner' must have shape [V, K] (2 axes: variants, options), got shape (2,)",
            ),
        ),
    ),
    *rows(
        "Worlds",
        (
            "worlds-key-array",
            "exact_blame(refund, cases, jr.split(key, 2))",
            lambda: bj.exact_blame(refund, CASES, jr.split(jr.key(0), 2)),
            TypeError,
            (
                "`worlds` must be a blamejax.World (see recorded_worlds, fresh_worlds, inferred_worlds), got PRNGKeyArray",
            ),
        ),
        (
            "worlds-seed",
            "exact_blame(refund, cases, 0): a seed instead of worlds",
            lambda: bj.exact_blame(refund, CASES, 0),
            TypeError,
            ("`worlds` must be a blamejax.World", "got int"),
        ),
        (
            "worlds-wrong-failure-count",
            "recorded_worlds(0, range(3)) for 2 cases",
            lambda: bj.exact_blame(refund, CASES, bj.recorded_worlds(0, range(3))),
            ValueError,
            ("`worlds.key` must have shape [F, W] = [2, W], got (3, 1)",),
        ),
        (
            "worlds-key-1d",
            "World(key=jr.split(key, 2)): keys [F], no world axis",
            lambda: bj.exact_blame(refund, CASES, bj.World(key=jr.split(jr.key(0), 2))),
            ValueError,
            ("`worlds.key` must have shape [F, W] = [2, W], got (2,)",),
        ),
        (
            "worlds-zero-per-failure",
            "World(key=worlds.key[:, :0]): W = 0",
            lambda: bj.exact_blame(refund, CASES, bj.World(key=WORLDS.key[:, :0])),
            ValueError,
            ("`worlds` holds W = 0 worlds per failure; need at least one",),
        ),
        (
            "overrides-wrong-count",
            "World(key, overrides=(one array,), valid=...) for 4 draw sites",
            lambda: bj.exact_blame(
                refund, CASES, worlds_with(overrides()[:1], (jnp.ones((2, 1), bool),))
            ),
            ValueError,
            ("`worlds.overrides` must hold one array per draw site (4), got 1",),
        ),
        (
            "overrides-wrong-shape",
            "overrides of shape [F, W, 3] for 2-option steps",
            lambda: bj.exact_blame(
                refund,
                CASES,
                worlds_with(overrides(3), tuple(jnp.ones((2, 1), bool) for _ in range(4))),
            ),
            ValueError,
            ("`worlds.overrides` for step 'planner' must have shape (2, 1, 2), got (2, 1, 3)",),
        ),
        (
            "overrides-without-valid",
            "World(key, overrides=...) with valid=None",
            lambda: bj.exact_blame(refund, CASES, worlds_with(overrides())),
            ValueError,
            ("`worlds.valid`",),
        ),
        (
            "valid-wrong-shape",
            "valid arrays of shape [3] instead of [F, W]",
            lambda: bj.exact_blame(
                refund, CASES, worlds_with(overrides(), tuple(jnp.ones(3, bool) for _ in range(4)))
            ),
            ValueError,
            ("`worlds.valid`", "(2, 1)"),
        ),
        (
            "fresh-worlds-zero",
            "fresh_worlds(0, range(2), 0)",
            lambda: bj.fresh_worlds(0, range(2), 0),
            ValueError,
            ("`num_worlds` must be a positive int, got 0",),
        ),
        (
            "fresh-worlds-too-many",
            "fresh_worlds(0, range(2), 10**12): more worlds than memory holds",
            lambda: bj.fresh_worlds(0, range(2), 10**12),
            ValueError,
            (
                "`num_worlds` = 1000000000000 for 2 cases needs about",
                "GiB, more than the",
                "GiB available",
                "ask for fewer worlds",
            ),
        ),
        (
            "inferred-worlds-too-many",
            "inferred_worlds(refund, cases, observed, 0, 10**12)",
            lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 4), np.int32), 0, 10**12),
            ValueError,
            (
                "`num_worlds` = 1000000000000 for 2 cases needs about",
                "GiB, more than the",
                "ask for fewer worlds",
            ),
        ),
        (
            "recorded-worlds-zero-cases",
            "recorded_worlds(0, range(0))",
            lambda: bj.recorded_worlds(0, range(0)),
            ValueError,
            ("`case_ids` must be a non-empty 1-D int array, got shape (0,)",),
        ),
        (
            "recorded-worlds-count-not-ids",
            "recorded_worlds(0, 5): a count where the ids belong",
            lambda: bj.recorded_worlds(0, 5),
            TypeError,
            (
                "`case_ids` must be the cases' ids",
                "got the bare int 5",
                "range(5)",
                "not their count",
            ),
        ),
        (
            "fresh-worlds-count-not-ids",
            "fresh_worlds(0, 3, 2): a count where the ids belong",
            lambda: bj.fresh_worlds(0, 3, 2),
            TypeError,
            ("`case_ids` must be the cases' ids", "got the bare int 3", "np.arange(3)"),
        ),
        (
            "case-ids-2d",
            "recorded_worlds(0, [[0, 1]])",
            lambda: bj.recorded_worlds(0, [[0, 1]]),
            ValueError,
            ("`case_ids` must be a non-empty 1-D int array, got shape (1, 2)",),
        ),
        (
            "case-ids-float",
            "recorded_worlds(0, [0.5, 1.0])",
            lambda: bj.recorded_worlds(0, [0.5, 1.0]),
            ValueError,
            ("`case_ids` must be a non-empty 1-D int array, got shape (2,), dtype float64",),
        ),
    ),
    *rows(
        "Keys and seeds",
        (
            "seed-float",
            "recorded_worlds(0.5, range(2))",
            lambda: bj.recorded_worlds(0.5, range(2)),
            TypeError,
            (KEY, "got float"),
        ),
        (
            "seed-bool",
            "recorded_worlds(True, range(2))",
            lambda: bj.recorded_worlds(True, range(2)),
            TypeError,
            (KEY, "got bool"),
        ),
        (
            "seed-str",
            'recorded_worlds("0", range(2))',
            lambda: bj.recorded_worlds("0", range(2)),
            TypeError,
            (KEY, "got str"),
        ),
        (
            "key-array",
            "recorded_worlds(jr.split(jr.key(0), 2), 2)",
            lambda: bj.recorded_worlds(jr.split(jr.key(0), 2), 2),
            ValueError,
            ("`key` must be a single key, got a key array of shape (2,)",),
        ),
        (
            "key-float-array",
            "recorded_worlds(jnp.zeros(2), range(2))",
            lambda: bj.recorded_worlds(jnp.zeros(2), range(2)),
            TypeError,
            (KEY, "shape (2,)"),
        ),
        (
            "seed-2**32",
            "recorded_worlds(2**32, range(2))",
            lambda: bj.recorded_worlds(2**32, range(2)),
            ValueError,
            ("`key`, an int seed, must be in [0, 2**32), got 4294967296",),
        ),
        (
            "seed-negative",
            "recorded_worlds(-1, range(2))",
            lambda: bj.recorded_worlds(-1, range(2)),
            ValueError,
            ("`key`, an int seed, must be in [0, 2**32), got -1",),
        ),
        (
            "seed-numpy-int64",
            "recorded_worlds(np.int64(2**40), range(2))",
            lambda: bj.recorded_worlds(np.int64(2**40), range(2)),
            ValueError,
            ("`key`, an int seed, must be in [0, 2**32), got 1099511627776",),
        ),
        (
            "case-ids-negative",
            "recorded_worlds(0, [-1, 2])",
            lambda: bj.recorded_worlds(0, [-1, 2]),
            ValueError,
            ("`case_ids` must lie in [0, 2**32), got ids from -1 to 2",),
        ),
        (
            "case-ids-above-2**32",
            "recorded_worlds(0, np.array([2**33]))",
            lambda: bj.recorded_worlds(0, np.array([2**33])),
            ValueError,
            ("`case_ids` must lie in [0, 2**32), got ids from 8589934592 to 8589934592",),
        ),
        (
            "mc-key-float",
            "mc_shapley(refund, cases, worlds, 0.5, ...)",
            lambda: bj.mc_shapley(refund, CASES, WORLDS, 0.5, max_evaluations=10_000),
            TypeError,
            (KEY, "got float"),
        ),
        (
            "batch-seed-2**32",
            "blame_batch(refund, cases, 2**32)",
            lambda: bj.blame_batch(refund, CASES, 2**32),
            ValueError,
            ("`key`, an int seed, must be in [0, 2**32), got 4294967296",),
        ),
        (
            "inferred-case-ids-negative",
            "inferred_worlds(..., case_ids=[-1, 0])",
            lambda: bj.inferred_worlds(
                refund, CASES, np.zeros((2, 4), int), 0, 2, case_ids=[-1, 0]
            ),
            ValueError,
            ("`case_ids` must lie in [0, 2**32), got ids from -1 to 0",),
        ),
    ),
    *rows(
        "Steps and fixes",
        (
            "steps-empty",
            "steps=[]",
            lambda: bj.exact_blame(refund, CASES, WORLDS, steps=[]),
            ValueError,
            (
                f"`steps` is empty; name at least one of this pipeline's steps {STEPS}, or pass None",
            ),
        ),
        (
            "steps-unknown",
            'steps=["planer"]',
            lambda: bj.exact_blame(refund, CASES, WORLDS, steps=["planer"]),
            ValueError,
            (f"unknown step 'planer'; this pipeline's steps are {STEPS}",),
        ),
        (
            "steps-duplicated",
            'steps=["planner", "planner"]',
            lambda: bj.exact_blame(refund, CASES, WORLDS, steps=["planner", "planner"]),
            ValueError,
            ("`steps` lists a step twice: ['planner', 'planner']",),
        ),
        (
            "steps-a-string",
            'steps="planner"',
            lambda: bj.exact_blame(refund, CASES, WORLDS, steps="planner"),
            TypeError,
            ("`steps` must be a sequence of step names, got 'planner'",),
        ),
        (
            "steps-indices",
            "steps=[0, 1]",
            lambda: bj.exact_blame(refund, CASES, WORLDS, steps=[0, 1]),
            TypeError,
            ("`steps` must be a sequence of step names, got [0, 1]",),
        ),
        (
            "step-without-fix",
            "two_step with draft logits of shape [V=1, K]",
            lambda: bj.exact_blame(two_step, dict(TWO, draft=TWO["draft"][:, :1]), TWO_WORLDS),
            ValueError,
            (
                "step 'draft' has no fix: its logits have 1 variant on axis 0",
                "leave the step out of `steps`",
            ),
        ),
        (
            "fix-variant-out-of-range",
            'fixes={"planner": 2} (V = 2)',
            lambda: bj.exact_blame(refund, CASES, WORLDS, fixes={"planner": 2}),
            ValueError,
            ("`fixes['planner']` must be a variant in [1, 2), got 2",),
        ),
        (
            "fix-variant-0",
            'fixes={"planner": 0} (the factual variant)',
            lambda: bj.exact_blame(refund, CASES, WORLDS, fixes={"planner": 0}),
            ValueError,
            ("`fixes['planner']` must be a variant in [1, 2), got 0",),
        ),
        (
            "fix-variant-float",
            'fixes={"planner": 1.0}',
            lambda: bj.exact_blame(refund, CASES, WORLDS, fixes={"planner": 1.0}),
            ValueError,
            ("`fixes['planner']` must be a variant in [1, 2), got 1.0",),
        ),
        (
            "fix-unknown-step",
            'fixes={"planer": 1}',
            lambda: bj.exact_blame(refund, CASES, WORLDS, fixes={"planer": 1}),
            ValueError,
            (f"unknown step 'planer'; this pipeline's steps are {STEPS}",),
        ),
        (
            "fix-not-among-steps",
            'steps=["writer"], fixes={"planner": 1}',
            lambda: bj.exact_blame(refund, CASES, WORLDS, steps=["writer"], fixes={"planner": 1}),
            ValueError,
            ("`fixes` names step 'planner', which is not among `steps` ['writer']",),
        ),
        (
            "fixes-a-list",
            'fixes=["planner"]',
            lambda: bj.exact_blame(refund, CASES, WORLDS, fixes=["planner"]),
            TypeError,
            ("`fixes` must be a dict", "['planner']"),
        ),
    ),
    *rows(
        "Score range",
        (
            "score-range-reversed",
            "score_range=(1, 0)",
            lambda: bj.exact_blame(refund, CASES, WORLDS, score_range=(1, 0)),
            ValueError,
            ("`score_range` must be finite with low < high, got (1, 0)",),
        ),
        (
            "score-range-infinite",
            "score_range=(0, inf)",
            lambda: bj.exact_blame(refund, CASES, WORLDS, score_range=(0, np.inf)),
            ValueError,
            ("`score_range` must be finite with low < high, got (0, inf)",),
        ),
        (
            "score-range-scalar",
            "score_range=1.0",
            lambda: bj.exact_blame(refund, CASES, WORLDS, score_range=1.0),
            TypeError,
            ("`score_range` must be a pair (low, high), got 1.0",),
        ),
        (
            "score-range-triple",
            "score_range=(0, 1, 2)",
            lambda: bj.exact_blame(refund, CASES, WORLDS, score_range=(0, 1, 2)),
            TypeError,
            ("`score_range` must be a pair (low, high), got (0, 1, 2)",),
        ),
        (
            "scores-outside-range-exact",
            "exact_blame(two_step, ...) with weight 4: scores 0 or 2, default score_range=(0, 1)",
            lambda: bj.exact_blame(two_step, two_cases(weight=4 * np.ones(())), TWO_WORLDS),
            ValueError,
            (
                "the pipeline returned scores in [0.0, 2.0], outside the declared `score_range` (0.0, 1.0)",
                "declare the true range",
            ),
        ),
        (
            "scores-outside-range-batch",
            "blame_batch(two_step, ..., score_range=(-1, 0.5))",
            lambda: bj.blame_batch(two_step, TWO_ONE_PASSES, 0, score_range=(-1, 0.5)),
            ValueError,
            (
                "the pipeline returned scores in [0.0, 1.0], outside the declared `score_range` (-1.0, 0.5)",
            ),
        ),
        (
            "nan-score-exact",
            "exact_blame(two_step, ...): score * sqrt(-1)",
            lambda: bj.exact_blame(two_step, TWO_NAN_SCORE, TWO_WORLDS),
            ValueError,
            (
                "the pipeline returned a NaN score: case 0, world 0: the pipeline's own score is NaN in coalition the empty coalition (the failed run)",
            ),
        ),
        (
            "nan-score-mc",
            "mc_shapley(two_step, ...): score * sqrt(-1)",
            lambda: bj.mc_shapley(
                two_step, TWO_NAN_SCORE, TWO_WORLDS, 0, max_evaluations=2000, stop=()
            ),
            ValueError,
            (
                "the pipeline returned a NaN score: failure 0, world 0: the pipeline's own score is NaN",
            ),
        ),
        (
            "nan-score-batch",
            "blame_batch(two_step, ...): score * sqrt(-1)",
            lambda: bj.blame_batch(two_step, TWO_NAN_SCORE, 0),
            ValueError,
            (
                "the pipeline returned a NaN score: case 0, world 0: the pipeline's own score is NaN",
            ),
        ),
    ),
    *rows(
        "Non-finite logits",
        (
            "nan-in-table-exact",
            'exact_blame(two_step, cases, ...) with cases["draft"][0, 0, 0] = nan',
            lambda: bj.exact_blame(
                two_step, dict(TWO, draft=TWO["draft"].at[0, 0, 0].set(jnp.nan)), TWO_WORLDS
            ),
            ValueError,
            (
                "`cases['draft']` contains NaN (first at index [0, 0, 0]); logits must be real numbers or -inf",
            ),
        ),
        (
            "inf-in-table-exact",
            'the same with cases["review"][1, 0, 1, 1] = +inf',
            lambda: bj.exact_blame(
                two_step, dict(TWO, review=TWO["review"].at[1, 0, 1, 1].set(jnp.inf)), TWO_WORLDS
            ),
            ValueError,
            (
                "`cases['review']` contains +inf (first at index [1, 0, 1, 1]); use large finite logits, or -inf",
            ),
        ),
        (
            "nan-in-table-mc",
            'mc_shapley with cases["planner"][0, 0, 0] = nan',
            lambda: bj.mc_shapley(
                refund, with_table("planner", (0, 0, 0), jnp.nan), WORLDS, 0, max_evaluations=10_000
            ),
            ValueError,
            ("`cases['planner']` contains NaN (first at index [0, 0, 0])",),
        ),
        (
            "nan-in-table-batch",
            'blame_batch with cases["planner"][0, 0, 0] = nan',
            lambda: bj.blame_batch(refund, with_table("planner", (0, 0, 0), jnp.nan), 0),
            ValueError,
            ("`cases['planner']` contains NaN (first at index [0, 0, 0])",),
        ),
        (
            "nan-in-table-replay",
            'replay with cases["planner"][0, 0, 0] = nan',
            lambda: bj.replay(refund, with_table("planner", (0, 0, 0), jnp.nan), WORLDS),
            ValueError,
            ("`cases['planner']` contains NaN (first at index [0, 0, 0])",),
        ),
        (
            "free-form-nan-logits-exact",
            "two_step computing log(-1) in the review's logits",
            lambda: bj.exact_blame(two_step, TWO_NAN_LOGITS, TWO_WORLDS),
            ValueError,
            (
                "the pipeline returned a NaN score: case 0, world 0: step 'review' " + NO_VALID,
                "in coalition the empty coalition (the failed run)",
            ),
        ),
        (
            "free-form-nan-logits-mc",
            "mc_shapley of the same",
            lambda: bj.mc_shapley(
                two_step, TWO_NAN_LOGITS, TWO_WORLDS, 0, max_evaluations=2000, stop=()
            ),
            ValueError,
            ("the pipeline returned a NaN score: failure 0, world 0: step 'review' " + NO_VALID,),
        ),
        (
            "free-form-nan-logits-batch",
            "blame_batch of the same",
            lambda: bj.blame_batch(two_step, TWO_NAN_LOGITS, 0),
            ValueError,
            ("the pipeline returned a NaN score: case 0, world 0: step 'review' " + NO_VALID,),
        ),
        (
            "all-neginf-row-exact",
            "two_step whose draft fix row is all -inf",
            lambda: bj.exact_blame(two_step, TWO_ALL_NEG, TWO_WORLDS),
            ValueError,
            (
                "the pipeline returned a NaN score: case 0, world 0: step 'draft' " + NO_VALID,
                "in coalition {draft, review}",
            ),
        ),
        (
            "all-neginf-row-batch",
            "blame_batch of the same",
            lambda: bj.blame_batch(two_step, TWO_ALL_NEG, 0),
            ValueError,
            (
                "the pipeline returned a NaN score: case 0, world 0: step 'draft' " + NO_VALID,
                "in coalition {draft, review}",
            ),
        ),
        (
            "all-neginf-inner-coalition-exact",
            "the review's fix row after draft 0 all -inf (only {review} draws from it)",
            lambda: bj.exact_blame(two_step, TWO_INNER_NEG, TWO_WORLDS),
            ValueError,
            (
                "the pipeline returned a NaN score: case 0, world 0: step 'review' " + NO_VALID,
                "in coalition {review}",
            ),
        ),
        (
            "all-neginf-inner-coalition-batch-mc",
            'blame_batch(..., estimator="mc") of the same',
            lambda: bj.blame_batch(two_step, TWO_INNER_NEG, 0, estimator="mc"),
            ValueError,
            (
                "the pipeline returned a NaN score: case 0, world 0: step 'review' " + NO_VALID,
                "in coalition {review}",
            ),
        ),
        (
            "all-neginf-inner-coalition-mc",
            "mc_shapley of the same",
            lambda: bj.mc_shapley(
                two_step, TWO_INNER_NEG, TWO_WORLDS, 0, max_evaluations=2000, stop=()
            ),
            ValueError,
            (
                "the pipeline returned a NaN score: failure 0, world 0: step 'review' " + NO_VALID,
                "in coalition {review}",
            ),
        ),
        (
            "nan-logits-replay",
            "replay(two_step, ...) with the review's logits NaN",
            lambda: bj.replay(two_step, TWO_NAN_LOGITS, TWO_WORLDS),
            ValueError,
            ("NaN score", "step 'review'"),
        ),
    ),
    *rows(
        "Mode",
        (
            "mode-string",
            'exact_blame(..., mode="hard")',
            lambda: bj.exact_blame(refund, CASES, WORLDS, mode="hard"),
            TypeError,
            (MODE + ", got 'hard'",),
        ),
        (
            "mode-class",
            "exact_blame(..., mode=bj.Hard) (the class)",
            lambda: bj.exact_blame(refund, CASES, WORLDS, mode=bj.Hard),
            TypeError,
            (MODE + ", got <class",),
        ),
        (
            "mode-string-mc",
            'mc_shapley(..., mode="relaxed")',
            mc(mode="relaxed"),
            TypeError,
            (MODE + ", got 'relaxed'",),
        ),
        (
            "mode-string-batch",
            'blame_batch(..., mode="hard")',
            batch(mode="hard"),
            TypeError,
            (MODE + ", got 'hard'",),
        ),
        (
            "tau-negative",
            "Relaxed(tau=-1)",
            lambda: bj.Relaxed(tau=-1),
            ValueError,
            ("`tau` must be a positive scalar temperature, got -1",),
        ),
        (
            "tau-zero",
            "Relaxed(tau=0.0)",
            lambda: bj.Relaxed(tau=0.0),
            ValueError,
            ("`tau` must be a positive scalar temperature, got 0.0",),
        ),
        (
            "tau-nan",
            "Relaxed(tau=nan)",
            lambda: bj.Relaxed(tau=float("nan")),
            ValueError,
            ("`tau` must be a positive scalar temperature, got nan",),
        ),
        (
            "tau-vector",
            "Relaxed(tau=jnp.array([1.0, 2.0]))",
            lambda: bj.Relaxed(tau=jnp.array([1.0, 2.0])),
            ValueError,
            ("`tau` must be a positive scalar temperature, got Array([1., 2.]",),
        ),
        (
            "tau-string",
            'Relaxed(tau="1")',
            lambda: bj.Relaxed(tau="1"),
            TypeError,
            ("`tau` must be a positive scalar temperature, got '1'",),
        ),
        (
            "mode-string-replay",
            'replay(refund, cases, worlds, mode="hard")',
            lambda: bj.replay(refund, CASES, WORLDS, mode="hard"),
            TypeError,
            (MODE + ", got 'hard'",),
        ),
        (
            "contrastive-relaxed",
            "contrastive(..., mode=Relaxed(1.0))",
            lambda: bj.contrastive(refund, CASES, WORLDS, mode=bj.Relaxed(1.0)),
            ValueError,
            ("the contrastive estimator counts bad runs, which needs `mode=Hard()`",),
        ),
    ),
    *rows(
        "exact_blame",
        (
            "max-steps-zero",
            "max_steps=0",
            lambda: bj.exact_blame(refund, CASES, WORLDS, max_steps=0),
            ValueError,
            ("`max_steps` must be a positive int, got 0",),
        ),
        (
            "max-steps-float",
            "max_steps=20.0",
            lambda: bj.exact_blame(refund, CASES, WORLDS, max_steps=20.0),
            ValueError,
            ("`max_steps` must be a positive int, got 20.0",),
        ),
        (
            "max-steps-below-n",
            'method="enumerate", max_steps=2 for 4 steps',
            lambda: bj.exact_blame(refund, CASES, WORLDS, method="enumerate", max_steps=2),
            ValueError,
            (
                "exact Shapley over n = 4 steps needs 2^4 coalitions",
                "above `max_steps` = 2",
                "Use Monte Carlo sampling (blamejax.mc_shapley) or raise `max_steps` deliberately",
            ),
        ),
        (
            "method-unknown",
            'method="exact"',
            lambda: bj.exact_blame(refund, CASES, WORLDS, method="exact"),
            ValueError,
            ("`method` must be one of ['auto', 'structured', 'enumerate'], got 'exact'",),
        ),
        (
            "method-structured-free-form",
            'method="structured" for a step whose logits are computed from a draw',
            lambda: bj.exact_blame(
                _free_form, _FREE_CASES, bj.recorded_worlds(0, range(2)), method="structured"
            ),
            ValueError,
            (
                "`method='structured'` does not apply to this pipeline",
                "step 'b' computes its logits from the option of 'a' by free JAX code",
            ),
        ),
        (
            "free-form-above-max-steps",
            "a free-form pipeline of 2 steps, max_steps=1",
            lambda: bj.exact_blame(
                _free_form, _FREE_CASES, bj.recorded_worlds(0, range(2)), max_steps=1
            ),
            ValueError,
            (
                "above `max_steps` = 1; the structured path does not apply because step 'b' computes",
                "blamejax.mc_shapley",
            ),
        ),
        (
            "block-size-not-power-of-two",
            "block_size=3",
            lambda: bj.exact_blame(refund, CASES, WORLDS, block_size=3),
            ValueError,
            ("`block_size` must be a positive power of two, got 3",),
        ),
        (
            "block-size-zero",
            "block_size=0",
            lambda: bj.exact_blame(refund, CASES, WORLDS, block_size=0),
            ValueError,
            ("`block_size` must be a positive power of two, got 0",),
        ),
        (
            "devices-empty",
            "devices=[]",
            lambda: bj.exact_blame(refund, CASES, WORLDS, devices=[]),
            TypeError,
            ("`devices` must be a jax device or a non-empty sequence of them, got []",),
        ),
        (
            "devices-names",
            'devices=["cpu"]',
            lambda: bj.exact_blame(refund, CASES, WORLDS, devices=["cpu"]),
            TypeError,
            ("`devices` must be a jax device or a non-empty sequence of them, got ['cpu']",),
        ),
        (
            "devices-string",
            'devices="cpu"',
            lambda: bj.exact_blame(refund, CASES, WORLDS, devices="cpu"),
            TypeError,
            ("`devices` must be a jax device or a non-empty sequence of them, got 'cpu'",),
        ),
    ),
    *rows(
        "mc_shapley",
        (
            "max-evaluations-below-first-look",
            "max_evaluations=10",
            mc(max_evaluations=10),
            ValueError,
            (
                "`max_evaluations` = 10 does not reach the first look: the schedule's first look = 16 samples cost 50 evaluations here",
            ),
        ),
        (
            "max-evaluations-float",
            "max_evaluations=1e4",
            mc(max_evaluations=1e4),
            TypeError,
            ("`max_evaluations` must be an int, got 10000.0",),
        ),
        (
            "max-evaluations-none",
            "max_evaluations=None",
            mc(max_evaluations=None),
            TypeError,
            ("`max_evaluations` must be an int, got None",),
        ),
        (
            "mc-delta-zero",
            "interval=Interval(delta=0)",
            mc(interval=later_interval(delta=0)),
            ValueError,
            ("`delta` must be an error level in (0, 1), got 0",),
        ),
        (
            "mc-delta-above-one",
            "interval=Interval(delta=1.5)",
            mc(interval=later_interval(delta=1.5)),
            ValueError,
            ("`delta` must be an error level in (0, 1), got 1.5",),
        ),
        (
            "mc-delta-nan",
            "interval=Interval(delta=nan)",
            mc(interval=later_interval(delta=float("nan"))),
            ValueError,
            ("`delta` must be an error level in (0, 1), got nan",),
        ),
        (
            "interval-kind-unknown",
            'interval=Interval("wide")',
            mc(interval=later_interval("wide")),
            ValueError,
            ("`kind` must be one of ('bernstein', 'hoeffding', 'normal'), got 'wide'",),
        ),
        (
            "mc-interval-a-string",
            'interval="normal"',
            mc(interval="normal"),
            TypeError,
            ("`interval` must be a blamejax.stats.Interval, got 'normal'",),
        ),
        (
            "mc-schedule-a-tuple",
            "schedule=(16, 1.25)",
            mc(schedule=(16, 1.25)),
            TypeError,
            ("`schedule` must be a blamejax.stats.Schedule, got (16, 1.25)",),
        ),
        (
            "stop-unknown-rule",
            'stop="first"',
            mc(stop="first"),
            ValueError,
            ("`stop` names an unknown rule 'first'; the rules are ['top1', 'ranking', 'width']",),
        ),
        (
            "stop-not-a-rule",
            "stop=5",
            mc(stop=5),
            TypeError,
            ("`stop` must be a rule name or a sequence of them, got 5",),
        ),
        (
            "epsilon-negative",
            "epsilon=-1.0",
            mc(epsilon=-1.0),
            ValueError,
            ("`epsilon` must be a finite number >= 0, got -1.0",),
        ),
        (
            "epsilon-nan",
            "epsilon=nan",
            mc(epsilon=float("nan")),
            ValueError,
            ("`epsilon` must be a finite number >= 0, got nan",),
        ),
        (
            "width-rule-without-epsilon",
            'stop="width", epsilon=0',
            mc(stop="width"),
            ValueError,
            ("the 'width' rule needs `epsilon` > 0",),
        ),
        (
            "mc-schedule-first-one",
            "schedule=Schedule(first=1, growth=1.25)",
            mc(schedule=later_schedule(1, 1.25)),
            ValueError,
            ("`first` must be an int >= 2 (the first look, in samples or failures), got 1",),
        ),
        (
            "mc-growth-one",
            "schedule=Schedule(first=16, growth=1.0)",
            mc(schedule=later_schedule(16, 1.0)),
            ValueError,
            (
                "`growth` must be a finite number >= 1 + 1e-4 (the schedule's growth factor), got 1.0",
            ),
        ),
        (
            "mc-growth-barely-above-one",
            "schedule=Schedule(first=16, growth=1 + 1e-12)",
            mc(schedule=later_schedule(16, 1 + 1e-12)),
            ValueError,
            (
                "`growth` must be a finite number >= 1 + 1e-4",
                "got 1.000000000001",
            ),
        ),
        (
            "mc-growth-string",
            'schedule=Schedule(first=16, growth="1.5")',
            mc(schedule=later_schedule(16, "1.5")),
            ValueError,
            (
                "`growth` must be a finite number >= 1 + 1e-4",
                "got '1.5'",
            ),
        ),
        (
            "mc-growth-infinite",
            "schedule=Schedule(first=16, growth=inf)",
            mc(schedule=later_schedule(16, float("inf"))),
            ValueError,
            (
                "`growth` must be",
                "got inf",
            ),
        ),
        (
            "antithetic-not-bool",
            'antithetic="yes"',
            mc(antithetic="yes"),
            TypeError,
            ("`antithetic` must be a bool (True or False), got 'yes'",),
        ),
        (
            "mc-block-size",
            "block_size=3",
            mc(block_size=3),
            ValueError,
            ("`block_size` must be a positive power of two, got 3",),
        ),
        (
            "lanes-zero",
            "lanes=0",
            mc(lanes=0),
            ValueError,
            ("`lanes` must be None or a positive int, got 0",),
        ),
        (
            "mc-one-step",
            'steps=["planner"]',
            mc(steps=["planner"]),
            ValueError,
            ("Monte Carlo Shapley needs at least 2 steps, got 1", "use exact_blame"),
        ),
    ),
    *rows(
        "blame_batch",
        (
            "noise-unknown",
            'noise="posterior"',
            batch(noise="posterior"),
            ValueError,
            ("`noise` must be one of ['fresh', 'inferred', 'recorded'], got 'posterior'",),
        ),
        (
            "num-worlds-zero",
            'noise="fresh", num_worlds=0',
            batch(noise="fresh", num_worlds=0),
            ValueError,
            ("`num_worlds` must be a positive int, got 0",),
        ),
        (
            "num-worlds-float",
            'noise="fresh", num_worlds=2.0',
            batch(noise="fresh", num_worlds=2.0),
            ValueError,
            ("`num_worlds` must be a positive int, got 2.0",),
        ),
        (
            "observed-without-inferred",
            "observed=... with noise='recorded'",
            batch(observed=np.zeros((2, 4), int)),
            ValueError,
            ("`observed` is used only with noise='inferred', got noise='recorded'",),
        ),
        (
            "observed-wrong-shape",
            'noise="inferred", observed of shape [2, 3] (4 sites)',
            batch(noise="inferred", observed=np.zeros((2, 3), int)),
            ValueError,
            (
                "`observed` must hold every case's observed option per draw site, shape [cases, sites] = [2, 4], got shape [2, 3]",
            ),
        ),
        (
            "observed-out-of-range",
            'noise="inferred", observed = 5 everywhere (K = 2)',
            lambda: bj.blame_batch(two_step, TWO, 0, noise="inferred", observed=np.full((2, 2), 5)),
            ValueError,
            ("`observed` for step 'draft' (slot 0) must lie in [0, 2), got values in [5, 5]",),
        ),
        (
            "observed-float",
            'noise="inferred", observed=np.zeros((2, 2)) (float), 1 of 2 cases failing',
            lambda: bj.blame_batch(
                two_step, TWO_ONE_PASSES, 0, noise="inferred", observed=np.zeros((2, 2))
            ),
            ValueError,
            ("`observed` must be an int array", "[2, 2]", "float64"),
        ),
        (
            "observed-impossible-option-names-case",
            'noise="inferred", key=2: case 1 observed at a -inf option',
            lambda: bj.blame_batch(
                two_step, TWO, 2, noise="inferred", observed=np.array([[0, 1], [1, 0]])
            ),
            ValueError,
            (
                "case 1: the observed option 1 of step 'draft' (slot 0) has logit -inf in the factual run",
            ),
        ),
        (
            "threshold-above-range",
            "threshold=2.0",
            batch(threshold=2.0),
            ValueError,
            ("`threshold` must lie in (0.0, 1.0], got 2.0",),
        ),
        (
            "threshold-at-low",
            "threshold=0.0",
            batch(threshold=0.0),
            ValueError,
            ("`threshold` must lie in (0.0, 1.0], got 0.0",),
        ),
        (
            "threshold-nan",
            "threshold=nan",
            batch(threshold=float("nan")),
            ValueError,
            ("`threshold` must be a finite number (or None for the top of the range), got nan",),
        ),
        (
            "threshold-string",
            'threshold="high"',
            batch(threshold="high"),
            ValueError,
            ("`threshold`", "'high'"),
        ),
        (
            "estimator-unknown",
            'estimator="bayes"',
            batch(estimator="bayes"),
            ValueError,
            ("`estimator` must be one of ('auto', 'exact', 'mc'), got 'bayes'",),
        ),
        (
            "num-permutations-one",
            'estimator="mc", num_permutations=1',
            batch(estimator="mc", num_permutations=1),
            ValueError,
            ("`num_permutations` must be an int >= 2, got 1",),
        ),
        (
            "interval-kind-hoeffding",
            'interval=Interval("hoeffding")',
            batch(interval=later_interval("hoeffding")),
            ValueError,
            ("`interval.kind` must be one of ('bernstein', 'normal'), got 'hoeffding'",),
        ),
        (
            "interval-and-old-delta-together",
            "interval=Interval(), delta=0.05",
            batch(interval=later_interval(), delta=0.05),
            TypeError,
            ("`blame_batch` got `interval` and the old `delta` together; pass only `interval`",),
        ),
        (
            "batch-delta-zero",
            "interval=Interval(delta=0)",
            batch(interval=later_interval(delta=0)),
            ValueError,
            ("`delta` must be an error level in (0, 1), got 0",),
        ),
        (
            "batch-delta-nan",
            "interval=Interval(delta=nan)",
            batch(interval=later_interval(delta=float("nan"))),
            ValueError,
            ("`delta` must be an error level in (0, 1), got nan",),
        ),
        (
            "batch-delta-string",
            'interval=Interval(delta="0.1")',
            batch(interval=later_interval(delta="0.1")),
            TypeError,
            (
                "`delta`",
                "'0.1'",
            ),
        ),
        (
            "schedule-first-one",
            "schedule=Schedule(first=1, growth=1.5)",
            batch(schedule=later_schedule(1, 1.5)),
            ValueError,
            ("`first` must be an int >= 2 (the first look, in samples or failures), got 1",),
        ),
        (
            "schedule-a-dict",
            'schedule={"first": 4}',
            batch(schedule={"first": 4}),
            TypeError,
            ("`schedule` must be a blamejax.stats.Schedule, got {'first': 4}",),
        ),
        (
            "growth-one",
            "schedule=Schedule(first=10, growth=1.0)",
            batch(schedule=later_schedule(10, 1.0)),
            ValueError,
            (
                "`growth` must be a finite number >= 1 + 1e-4 (the schedule's growth factor), got 1.0",
            ),
        ),
        (
            "growth-barely-above-one",
            "schedule=Schedule(first=10, growth=1 + 1e-12)",
            batch(schedule=later_schedule(10, 1 + 1e-12)),
            ValueError,
            (
                "`growth` must be a finite number >= 1 + 1e-4",
                "got 1.000000000001",
            ),
        ),
        (
            "max-failures-zero",
            "max_failures=0",
            batch(max_failures=0),
            ValueError,
            ("`max_failures` must be None or a positive int, got 0",),
        ),
        (
            "batch-stop-unknown-rule",
            'stop="ranking"',
            batch(stop="ranking"),
            ValueError,
            (
                "`stop` must be () (analyse every failure) or 'top1' (stop at the first look where the top step is separated), got 'ranking'",
            ),
        ),
        (
            "option-names-too-few",
            'option_names={"draft": ("first",)} (K = 2)',
            lambda: bj.blame_batch(two_step, TWO, 0, option_names={"draft": ("first",)}),
            ValueError,
            ("`option_names['draft']` must name all 2 options, got 1",),
        ),
        (
            "option-names-unknown-step",
            'option_names={"drafter": ("a", "b")}',
            lambda: bj.blame_batch(two_step, TWO, 0, option_names={"drafter": ("a", "b")}),
            ValueError,
            ("unknown step 'drafter'; this pipeline's steps are ['draft', 'review']",),
        ),
        (
            "option-names-a-list",
            'option_names=["first", "second"]',
            lambda: bj.blame_batch(two_step, TWO, 0, option_names=["first", "second"]),
            TypeError,
            ("`option_names` must be a dict",),
        ),
    ),
    *rows(
        "Interventions",
        (
            "do-action-unknown-step",
            'do_action(structure, "planer", 0)',
            lambda: do.do_action(STRUCTURE, "planer", 0),
            ValueError,
            (f"`step` = 'planer' is not a step of this pipeline; its steps are {STEPS}",),
        ),
        (
            "do-action-step-index-out-of-range",
            "do_action(structure, 7, 0)",
            lambda: do.do_action(STRUCTURE, 7, 0),
            ValueError,
            ("`step` = 7 is out of range: this pipeline has 4 steps, indices 0..3",),
        ),
        (
            "do-action-option-out-of-range",
            'do_action(structure, "planner", 2) (K = 2)',
            lambda: do.do_action(STRUCTURE, "planner", 2),
            ValueError,
            ("`option` of step 'planner' must be in [0, 2), got 2",),
        ),
        (
            "do-action-option-negative",
            'do_action(structure, "planner", -1)',
            lambda: do.do_action(STRUCTURE, "planner", -1),
            ValueError,
            ("`option` of step 'planner' must be in [0, 2), got -1",),
        ),
        (
            "do-action-option-float",
            'do_action(structure, "planner", 1.0)',
            lambda: do.do_action(STRUCTURE, "planner", 1.0),
            TypeError,
            ("`option` of step 'planner' must be an integer scalar, got 1.0",),
        ),
        (
            "downstream-unknown",
            'do_action(..., downstream="later")',
            lambda: do.do_action(STRUCTURE, "planner", 0, downstream="later"),
            ValueError,
            ("`downstream` must be one of ('held', 'fresh', 'direct'), got 'later'",),
        ),
        (
            "downstream-fresh-without-stream",
            'do_action(..., downstream="fresh")',
            lambda: do.do_action(STRUCTURE, "planner", 0, downstream="fresh"),
            ValueError,
            ("downstream='fresh' needs `stream`",),
        ),
        (
            "downstream-direct-without-factual",
            'do_action(..., downstream="direct")',
            lambda: do.do_action(STRUCTURE, "planner", 0, downstream="direct"),
            ValueError,
            ("downstream='direct' needs `factual`",),
        ),
        (
            "downstream-direct-bad-factual",
            'do_action(..., downstream="direct", factual=zeros(3, int32)) (4 sites)',
            lambda: do.do_action(
                STRUCTURE, "planner", 0, downstream="direct", factual=jnp.zeros(3, jnp.int32)
            ),
            ValueError,
            (
                "`factual` must be the factual run's choice at every draw site, an int array of shape [4]",
                "got int32[3]",
            ),
        ),
        (
            "stream-without-fresh",
            'do_action(..., stream=1) with downstream="held"',
            lambda: do.do_action(STRUCTURE, "planner", 0, stream=1),
            ValueError,
            ("`stream` is only used with downstream='fresh', got downstream='held'",),
        ),
        (
            "do-resample-negative-stream",
            'do_resample(structure, "writer", -1)',
            lambda: do.do_resample(STRUCTURE, "writer", -1),
            ValueError,
            ("`stream` must be a non-negative integer, got -1",),
        ),
        (
            "do-context-wrong-shape",
            'do_context(structure, "writer", zeros(2)) (K = 3)',
            lambda: do.do_context(STRUCTURE, "writer", jnp.zeros(2, jnp.float32)),
            ValueError,
            (
                "`shift` of step 'writer' must be a float array of shape [3] (one entry per option), got float32[2]",
            ),
        ),
        (
            "do-context-nan",
            'do_context(structure, "writer", [0, nan, 0])',
            lambda: do.do_context(STRUCTURE, "writer", jnp.array([0.0, jnp.nan, 0.0])),
            ValueError,
            ("`shift` of step 'writer' must be real or -inf (an impossible option)",),
        ),
        (
            "do-policy-missing-variant",
            'do_policy(structure, "writer", 2)',
            lambda: do.do_policy(STRUCTURE, "writer", 2),
            ValueError,
            ("`variant` = 2 does not exist at step 'writer', which has 2 variant(s) (0..1)",),
        ),
        (
            "do-observation-unknown-site",
            'do_observation(structure, "search", zeros(3))',
            lambda: do.do_observation(STRUCTURE, "search", jnp.zeros(3)),
            ValueError,
            ("`name` = 'search' is not a deterministic site of this pipeline; its sites are []",),
        ),
        (
            "do-observation-on-a-step",
            'do_observation(structure, "writer", zeros(3))',
            lambda: do.do_observation(STRUCTURE, "writer", jnp.zeros(3)),
            ValueError,
            (
                "`name` = 'writer' is a step that samples (ctx.choose), not a deterministic site",
                "use do_action",
            ),
        ),
        (
            "plan-not-a-plan",
            'do_action(..., plan="factual")',
            lambda: do.do_action(STRUCTURE, "planner", 0, plan="factual"),
            TypeError,
            ("`plan` must be a blamejax.Plan (or None), got str",),
        ),
        (
            "replay-plan-not-a-plan",
            'replay(refund, cases, worlds, plan="factual")',
            lambda: bj.replay(refund, CASES, WORLDS, plan="factual"),
            TypeError,
            ("`plan` must be a blamejax.Plan (or None for the factual run), got str",),
        ),
        (
            "replay-plan-of-another-pipeline",
            "replay(refund, ..., plan=factual_plan(two_step's structure))",
            lambda: bj.replay(
                refund,
                CASES,
                WORLDS,
                plan=bj.pipeline.factual_plan(
                    bj.discover(two_step, jax.tree_util.tree_map(lambda x: x[0], TWO))
                ),
            ),
            ValueError,
            ("`plan` has 2 step plans", "this pipeline has 4 steps"),
        ),
        (
            "contrastive-rollouts-zero",
            "contrastive(..., num_rollouts=0)",
            lambda: bj.contrastive(refund, CASES, WORLDS, num_rollouts=0),
            ValueError,
            ("`num_rollouts` must be a positive int, got 0",),
        ),
        (
            "contrastive-baseline-unknown",
            'contrastive(..., baseline="fixed")',
            lambda: bj.contrastive(refund, CASES, WORLDS, baseline="fixed"),
            ValueError,
            ("`baseline` must be one of ('factual', 'rollouts'), got 'fixed'",),
        ),
        (
            "contrastive-unknown-step",
            'contrastive(..., steps=["planer"])',
            lambda: bj.contrastive(refund, CASES, WORLDS, steps=["planer"]),
            ValueError,
            ("`steps` = 'planer' is not a step of this pipeline",),
        ),
        (
            "contrastive-threshold-string",
            'contrastive(..., threshold="x")',
            lambda: bj.contrastive(refund, CASES, WORLDS, threshold="x"),
            ValueError,
            ("`threshold` must be a finite number, got 'x'",),
        ),
        (
            "contrastive-intervention-not-callable",
            "contrastive(..., intervention=3)",
            lambda: bj.contrastive(refund, CASES, WORLDS, intervention=3),
            TypeError,
            ("`intervention` must be None or a function (k, r, factual) -> Plan, got 3",),
        ),
    ),
    *rows(
        "Statistics",
        (
            "schedule-first-one-stats",
            "stats.Schedule(first=1, growth=2.0)",
            lambda: bj.stats.Schedule(first=1, growth=2.0),
            ValueError,
            ("`first` must be an int >= 2 (the first look, in samples or failures), got 1",),
        ),
        (
            "schedule-growth-one",
            "stats.Schedule(first=2, growth=1.0)",
            lambda: bj.stats.Schedule(first=2, growth=1.0),
            ValueError,
            (
                "`growth` must be a finite number >= 1 + 1e-4 (the schedule's growth factor), got 1.0",
            ),
        ),
        (
            "schedule-growth-nan",
            "stats.Schedule(first=2, growth=nan)",
            lambda: bj.stats.Schedule(first=2, growth=float("nan")),
            ValueError,
            (
                "`growth` must be a finite number >= 1 + 1e-4 (the schedule's growth factor), got nan",
            ),
        ),
        (
            "schedule-growth-barely-above-one",
            "stats.Schedule(first=2, growth=1 + 1e-12)",
            lambda: bj.stats.Schedule(first=2, growth=1 + 1e-12),
            ValueError,
            (
                "`growth` must be a finite number >= 1 + 1e-4",
                "got 1.000000000001",
            ),
        ),
        (
            "looks-too-many",
            "stats.looks(Schedule(first=2, growth=1 + 1e-4), 10**50)",
            lambda: bj.stats.looks(bj.stats.Schedule(first=2, growth=1 + 1e-4), 10**50),
            ValueError,
            (
                "`growth` = 1.0001 is so close to 1 that the schedule from 2 to",
                "use a larger growth factor or a smaller budget",
            ),
        ),
        (
            "schedule-growth-infinite",
            "stats.Schedule(first=2, growth=inf)",
            lambda: bj.stats.Schedule(first=2, growth=float("inf")),
            ValueError,
            (
                "`growth` must be",
                "got inf",
            ),
        ),
        (
            "looks-budget-below-the-first-look",
            "stats.looks(Schedule(first=4, growth=2.0), 3)",
            lambda: bj.stats.looks(bj.stats.Schedule(first=4, growth=2.0), 3),
            ValueError,
            ("`budget` must be an int >= 4 (at least the schedule's first look), got 3",),
        ),
        (
            "looks-not-a-schedule",
            "stats.looks((2, 2.0), 20)",
            lambda: bj.stats.looks((2, 2.0), 20),
            TypeError,
            ("`schedule` must be a blamejax.stats.Schedule, got (2, 2.0)",),
        ),
        (
            "interval-delta-a-string",
            'stats.Interval(delta="0.1")',
            lambda: bj.stats.Interval(delta="0.1"),
            TypeError,
            ("`delta` must be an error level in (0, 1), got '0.1'",),
        ),
        (
            "hoeffding-t-zero",
            "stats.hoeffding_radius(0, 2.0, 0.1)",
            lambda: bj.stats.hoeffding_radius(0, 2.0, 0.1),
            ValueError,
            ("`t` (the number of samples) must be at least 1, got 0",),
        ),
        (
            "hoeffding-delta-above-one",
            "stats.hoeffding_radius(10, 2.0, 1.5)",
            lambda: bj.stats.hoeffding_radius(10, 2.0, 1.5),
            ValueError,
            ("`delta` must be an error level in (0, 1), got 1.5",),
        ),
        (
            "hoeffding-delta-array",
            "stats.hoeffding_radius(10, 2.0, np.array([0.1, 3.0]))",
            lambda: bj.stats.hoeffding_radius(10, 2.0, np.array([0.1, 3.0])),
            ValueError,
            ("`delta` must be an error level in (0, 1)",),
        ),
        (
            "bernstein-t-one",
            "stats.bernstein_radius(1, 0.25, 2.0, 0.1)",
            lambda: bj.stats.bernstein_radius(1, 0.25, 2.0, 0.1),
            ValueError,
            ("`t` (the number of samples) must be at least 2, got 1",),
        ),
        (
            "normal-delta-zero",
            "stats.normal_radius(10, 0.25, 0)",
            lambda: bj.stats.normal_radius(10, 0.25, 0),
            ValueError,
            ("`delta` must be an error level in (0, 1), got 0",),
        ),
        (
            "confidence-radius-unknown-kind",
            'stats.confidence_radius("hoefding", 10, 0.25, 2.0, 0.1)',
            lambda: bj.stats.confidence_radius("hoefding", 10, 0.25, 2.0, 0.1),
            ValueError,
            ("`kind`", "'hoefding'"),
        ),
        (
            "look-interval-unknown-rule",
            'stats.look_interval(values, 1, "hoefding", 0.1, 2.0)',
            lambda: bj.stats.look_interval(np.zeros((5, 2)), 1, "hoefding", 0.1, 2.0),
            ValueError,
            ("`rule`", "'hoefding'"),
        ),
        (
            "look-delta-n-zero",
            "stats.look_delta(0.1, 0, 1)",
            lambda: bj.stats.look_delta(0.1, 0, 1),
            ValueError,
            ("`n` (the number of steps) must be at least 1, got 0",),
        ),
        (
            "look-delta-k-zero",
            "stats.look_delta(0.1, 4, 0)",
            lambda: bj.stats.look_delta(0.1, 4, 0),
            ValueError,
            ("`k` (the look number) is 1-based, got 0",),
        ),
        (
            "wilson-successes-above-trials",
            "stats.wilson_interval(5, 3)",
            lambda: bj.stats.wilson_interval(5, 3),
            ValueError,
            ("need 0 <= successes <= trials and trials >= 1, got 5 of 3",),
        ),
        (
            "wilson-delta",
            "stats.wilson_interval(1, 3, delta=2)",
            lambda: bj.stats.wilson_interval(1, 3, delta=2),
            ValueError,
            ("`delta` must be an error level in (0, 1), got 2",),
        ),
    ),
    *rows(
        "inferred_worlds",
        (
            "observed-shape",
            "inferred_worlds(refund, cases, zeros((2, 3), int), 0, 2) (4 sites)",
            lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 3), int), 0, 2),
            ValueError,
            ("`observed` must be an int array of shape [F, sites] = [2, 4], got shape (2, 3)",),
        ),
        (
            "observed-dtype",
            "inferred_worlds(refund, cases, zeros((2, 4)), 0, 2) (float)",
            lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 4)), 0, 2),
            ValueError,
            (
                "`observed` must be an int array of shape [F, sites] = [2, 4], got shape (2, 4), dtype float64",
            ),
        ),
        (
            "observed-option-out-of-range",
            "observed writer option 3 (K = 3)",
            lambda: bj.inferred_worlds(refund, CASES, np.array([[0, 0, 3, 0]] * 2), 0, 2),
            ValueError,
            ("`observed` for step 'writer' (slot 0) must lie in [0, 3), got values in [3, 3]",),
        ),
        (
            "observed-option-with-logit-neginf",
            "observed retriever option 1 after plan 0 (logit -inf)",
            lambda: bj.inferred_worlds(refund, CASES, OBSERVED_BAD_ROW1, 0, 2),
            ValueError,
            (
                "case 1: the observed option 1 of step 'retriever' (slot 0) has logit -inf in the factual run, so it could not have been chosen",
            ),
        ),
        (
            "observed-neginf-with-case-ids",
            "the same with case_ids=[7, 8]",
            lambda: bj.inferred_worlds(refund, CASES, OBSERVED_BAD_ROW1, 0, 2, case_ids=[7, 8]),
            ValueError,
            ("case 8: the observed option 1 of step 'retriever'",),
        ),
        (
            "inferred-num-worlds-zero",
            "inferred_worlds(..., num_worlds=0)",
            lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 4), int), 0, 0),
            ValueError,
            ("`num_worlds` must be a positive int, got 0",),
        ),
        (
            "inferred-case-ids-length",
            "inferred_worlds(..., case_ids=[0, 1, 2]) for 2 cases",
            lambda: bj.inferred_worlds(
                refund, CASES, np.zeros((2, 4), int), 0, 2, case_ids=[0, 1, 2]
            ),
            ValueError,
            ("`case_ids` must hold one id per case (2), got shape (3,)",),
        ),
        (
            "inferred-key-float",
            "inferred_worlds(..., key=1.5)",
            lambda: bj.inferred_worlds(refund, CASES, np.zeros((2, 4), int), 1.5, 2),
            TypeError,
            (KEY, "got float"),
        ),
    ),
    *rows(
        "Differentiable",
        (
            "gradient-through-hard-mode",
            "jax.grad of shapley_values(..., mode=Hard())",
            hard_gradient,
            ValueError,
            (
                "a gradient was requested through the hard (Gumbel-max) choice of step 'draft'",
                "mode=blamejax.Relaxed(tau)",
            ),
        ),
        (
            "shapley-values-batched-case",
            "shapley_values(refund, cases, worlds_of_case): cases, not one case",
            lambda: bj.shapley_values(refund, CASES, CASE_WORLDS),
            ValueError,
            (
                "logits of step 'planner' must have shape [V, K] (2 axes: variants, options), got shape (2, 2, 2)",
            ),
        ),
        (
            "shapley-values-unknown-step",
            'shapley_values(..., steps=["planer"])',
            lambda: bj.shapley_values(refund, CASE, CASE_WORLDS, steps=["planer"]),
            ValueError,
            ("unknown step 'planer'",),
        ),
        (
            "shapley-values-worlds-f-w",
            "shapley_values(refund, case, fresh_worlds(0, range(1), 2)): keys [F, W], not [W]",
            lambda: bj.shapley_values(refund, CASE, bj.fresh_worlds(0, range(1), 2)),
            ValueError,
            ("`worlds", "[W]"),
        ),
        (
            "shapley-values-worlds-key-array",
            "shapley_values(refund, case, jr.split(key, 2))",
            lambda: bj.shapley_values(refund, CASE, jr.split(jr.key(0), 2)),
            TypeError,
            ("`worlds` must be a blamejax.World",),
        ),
        (
            "shapley-values-mode-string",
            'shapley_values(..., mode="relaxed")',
            lambda: bj.shapley_values(refund, CASE, CASE_WORLDS, mode="relaxed"),
            TypeError,
            (MODE + ", got 'relaxed'",),
        ),
        (
            "batch-mean-shapley-worlds-w",
            "batch_mean_shapley(refund, cases, worlds_of_case): keys [W], not [F, W]",
            lambda: bj.differentiable.batch_mean_shapley(refund, CASES, CASE_WORLDS),
            ValueError,
            ("`worlds.key` must have shape [F, W] = [2, W], got (2,)",),
        ),
        (
            "shapley-values-40-steps",
            "shapley_values(chain of 40 steps, case, sampled worlds)",
            lambda: bj.shapley_values(_chain40, _CHAIN40, CASE_WORLDS),
            ValueError,
            ("n = 40 steps needs 2^40 coalitions", "`max_steps` = 20", "bj.expected_worlds"),
        ),
        (
            "shapley-values-nan-logits",
            "shapley_values(refund, case with a NaN logit, worlds)",
            lambda: bj.shapley_values(
                refund, dict(CASE, planner=CASE["planner"].at[0, 0].set(jnp.nan)), CASE_WORLDS
            ),
            ValueError,
            ("`case['planner']` contains NaN (first at index [0, 0])",),
        ),
        (
            "shapley-values-score-range",
            "shapley_values(refund, case whose scores are 2..3, worlds)",
            lambda: bj.shapley_values(
                refund, dict(CASE, reply_right=CASE["reply_right"] + 2), CASE_WORLDS
            ),
            ValueError,
            ("scores must lie in `score_range` = (0.0, 1.0), got scores in [",),
        ),
        (
            "expected-worlds-relaxed",
            "shapley_values(refund, case, expected_worlds, mode=Relaxed(0.5))",
            lambda: bj.shapley_values(refund, CASE, EXPECTED_WORLD, mode=bj.Relaxed(0.5)),
            ValueError,
            ("`expected_worlds` integrates hard (Gumbel-max) draws exactly", "Relaxed(tau=0.5)"),
        ),
        (
            "expected-worlds-enumerate",
            'exact_blame(refund, cases, expected_worlds(range(2)), method="enumerate")',
            lambda: bj.exact_blame(refund, CASES, bj.expected_worlds(range(2)), method="enumerate"),
            ValueError,
            ("`expected_worlds` needs the structured path", "got method='enumerate'"),
        ),
        (
            "expected-noise-mc",
            'blame_batch(refund, cases, 0, noise="expected-fresh", estimator="mc")',
            lambda: bj.blame_batch(refund, CASES, 0, noise="expected-fresh", estimator="mc"),
            ValueError,
            ("noise='expected-fresh' is integrated exactly", "got estimator='mc'"),
        ),
        (
            "expected-worlds-observed-shape",
            "expected_worlds(range(2), observed of one row)",
            lambda: bj.expected_worlds(range(2), np.zeros((1, 4), int)),
            ValueError,
            ("`observed` must be an int array [F, sites] with F = 2", "got shape (1, 4)"),
        ),
        (
            "fit-num-steps-zero",
            "fit_fixes(objective, zeros(2), num_steps=0)",
            lambda: bj.fit_fixes(jnp.sum, jnp.zeros(2), num_steps=0),
            ValueError,
            ("`num_steps` must be a positive int, got 0",),
        ),
        (
            "fit-int-params",
            "fit_fixes(objective, zeros(2, int32))",
            lambda: bj.fit_fixes(jnp.sum, jnp.zeros(2, jnp.int32)),
            TypeError,
            ("`params` must hold floating-point arrays, got a leaf of dtype int32",),
        ),
        (
            "fit-objective-not-scalar",
            "fit_fixes(lambda p: p, zeros(2)): a vector objective",
            lambda: bj.fit_fixes(lambda p: p, jnp.zeros(2), num_steps=2),
            TypeError,
            ("`objective`", "scalar", "(2,)"),
        ),
        (
            "fit-optimizer-string",
            'fit_fixes(objective, zeros(2), optimizer="adam")',
            lambda: bj.fit_fixes(jnp.sum, jnp.zeros(2), optimizer="adam", num_steps=2),
            TypeError,
            ("`optimizer` must be an optax GradientTransformation", "'adam'"),
        ),
    ),
    *rows(
        "Command line",
        (
            "cli-unknown-demo",
            "python -m blamejax demo nope",
            cli("demo", "nope"),
            SystemExit,
            ("argument name: invalid choice: 'nope'",),
        ),
        (
            "cli-no-command",
            "python -m blamejax",
            cli(),
            SystemExit,
            ("the following arguments are required: command",),
        ),
        (
            "cli-seed-2**70",
            "python -m blamejax demo refund --seed 2**70",
            cli("demo", "refund", "--seed", str(2**70)),
            SystemExit,
            (f"argument --seed: must be in [0, 2**32), got {2**70}",),
        ),
        (
            "cli-seed-negative",
            "python -m blamejax demo refund --seed -1",
            cli("demo", "refund", "--seed", "-1"),
            SystemExit,
            ("argument --seed: must be in [0, 2**32), got -1",),
        ),
        (
            "cli-seed-float",
            "python -m blamejax demo refund --seed 1.5",
            cli("demo", "refund", "--seed", "1.5"),
            SystemExit,
            ("argument --seed: must be an int, got '1.5'",),
        ),
        (
            "cli-cases-zero",
            "python -m blamejax demo refund --cases 0",
            cli("demo", "refund", "--cases", "0"),
            SystemExit,
            ("--cases must be at least 1 for demo 'refund', got 0",),
        ),
        (
            "cli-cases-too-many",
            "python -m blamejax demo refund --cases 100000000",
            cli("demo", "refund", "--cases", "100000000"),
            SystemExit,
            (
                "--cases 100,000,000: demo 'refund' would need about",
                "GiB available",
                "use fewer cases",
            ),
        ),
        (
            "cli-cases-not-int",
            "python -m blamejax demo refund --cases abc",
            cli("demo", "refund", "--cases", "abc"),
            SystemExit,
            ("argument --cases: invalid int value: 'abc'",),
        ),
        (
            "cli-out-on-refund",
            "python -m blamejax demo refund --out x",
            cli("demo", "refund", "--out", "x"),
            SystemExit,
            ("--out: not used by demo 'refund' (used by: fit, rag)",),
        ),
        (
            "cli-noise-on-fit",
            "python -m blamejax demo fit --noise fresh",
            cli("demo", "fit", "--noise", "fresh"),
            SystemExit,
            ("--noise: not used by demo 'fit' (used by: rag)",),
        ),
        (
            "cli-noise-unknown",
            "python -m blamejax demo rag --noise bogus",
            cli("demo", "rag", "--noise", "bogus"),
            SystemExit,
            ("argument --noise: invalid choice: 'bogus'",),
        ),
        (
            "cli-worlds-zero",
            "python -m blamejax demo rag --worlds 0",
            cli("demo", "rag", "--worlds", "0"),
            SystemExit,
            ("--worlds must be at least 1", "got 0"),
        ),
        (
            "cli-worlds-zero-on-refund",
            "python -m blamejax demo refund --worlds 0",
            cli("demo", "refund", "--worlds", "0"),
            SystemExit,
            ("--worlds: not used by demo 'refund' (used by: rag)",),
        ),
        (
            "cli-permutations-one",
            "python -m blamejax demo rag --permutations 1",
            cli("demo", "rag", "--permutations", "1"),
            SystemExit,
            ("--permutations must be at least 2", "got 1"),
        ),
    ),
    *rows(
        "Results and demos",
        (
            "result-table-failure-out-of-range",
            "exact_blame(two_step, ...).table(5) (cases 0 and 1)",
            lambda: exact_table(5),
            ValueError,
            ("`case` must be the id of a failure in this result, got 5", "case ids are [0, 1]"),
        ),
        (
            "attribute-not-a-power-of-two",
            "attribute(jnp.zeros(3))",
            lambda: bj.attribute(jnp.zeros(3)),
            ValueError,
            ("`values` must have length 2**n with n >= 1, got 3",),
        ),
        (
            "attribute-list",
            "attribute([0.0, 1.0])",
            lambda: bj.attribute([0.0, 1.0]),
            TypeError,
            ("`values` must be a 1-D array of the 2**n coalition values, got list",),
        ),
        (
            "attribute-two-dimensional",
            "attribute(jnp.zeros((2, 4)))",
            lambda: bj.attribute(jnp.zeros((2, 4))),
            TypeError,
            ("`values` must be a 1-D array", "got shape (2, 4)"),
        ),
        (
            "attribute-integers",
            "attribute(jnp.arange(4))",
            lambda: bj.attribute(jnp.arange(4)),
            TypeError,
            ("`values` must be floating point, got int",),
        ),
        (
            "refund-cases-zero",
            "demos.refund_cases(0)",
            lambda: bj.demos.refund_cases(0),
            ValueError,
            ("`num_cases` must be a positive int, got 0",),
        ),
        (
            "refund-mechanism-unknown",
            'demos.refund_cases(2, "C")',
            lambda: bj.demos.refund_cases(2, "C"),
            ValueError,
            ("`mechanism` must be 'A' or 'B', got 'C'",),
        ),
    ),
    *rows(
        "Trace files",
        (
            "trace-read-missing",
            'traces.read("runs.jsonl"), no such file',
            lambda: T.read("runs.jsonl"),
            FileNotFoundError,
            ("path='runs.jsonl': no such trace file or folder",),
        ),
        (
            "trace-read-empty-folder",
            "traces.read(folder) of a folder with no .jsonl file",
            lambda: T.read(folder()),
            FileNotFoundError,
            ("path='folder' is a folder with no .jsonl trace files",),
        ),
        (
            "trace-read-not-a-path",
            "traces.read(3)",
            lambda: T.read(3),
            TypeError,
            ("`path` must be a trace file or folder (str or os.PathLike), got 3",),
        ),
        (
            "trace-read-invalid-json",
            "a trace line `{not json`",
            lambda: T.read(at("bad.jsonl", "{not json\n")),
            T.TraceError,
            (
                "1 problem in trace data (1 item could not be loaded)",
                "bad.jsonl:1: not valid JSON: Expecting property name",
            ),
        ),
        (
            "trace-read-not-text",
            "a trace file of bytes that are not UTF-8",
            lambda: T.read(at("bin.jsonl", b"\xff\xfe\x00")),
            T.TraceError,
            ("bin.jsonl: cannot be read as UTF-8 text:",),
        ),
        (
            "trace-read-line-not-object",
            "a trace line `[1, 2]`",
            lambda: T.read(at("list.jsonl", "[1, 2]\n")),
            T.TraceError,
            ("list.jsonl:1: expected a run object (one per line), got a list [1, 2]",),
        ),
        (
            "trace-read-newer-format",
            'a line with "format": "blamejax-trace/9"',
            lambda: T.read(at("new.jsonl", trace_line(format="blamejax-trace/9"))),
            T.TraceError,
            (
                'new.jsonl:1: format: "blamejax-trace/9" is a newer format than this blamejax reads ("blamejax-trace/1"); upgrade blamejax',
            ),
        ),
        (
            "trace-read-no-run-id",
            "a line without its run id",
            lambda: T.read(at("norun.jsonl", trace_line(run=...))),
            T.TraceError,
            ("norun.jsonl:1: run: missing; expected the run id, a non-empty string",),
        ),
        (
            "trace-read-choice-not-an-option",
            'a step with "choice": "maybe" (options search, answer)',
            lambda: T.read(at("choice.jsonl", trace_line(step_choice="maybe"))),
            T.TraceError,
            (
                'choice.jsonl:1: steps[0].choice: "maybe" is not one of the options ["search", "answer"]',
            ),
        ),
        (
            "trace-read-nan-logit-string",
            'a logit written as the string "NaN"',
            lambda: T.read(at("nan.jsonl", trace_line(step_logits={"factual": [0.0, "NaN"]}))),
            T.TraceError,
            (
                'nan.jsonl:1: steps[0].logits.factual[1]: expected a finite number or "-inf", got a string "NaN"',
            ),
        ),
        (
            "trace-read-bare-nan",
            "a logit written as the bare token NaN (not JSON)",
            lambda: T.read(at("bare.jsonl", trace_line().replace('"-inf"', "NaN"))),
            T.TraceError,
            ('bare.jsonl:1: steps[0].logits.fix[1]: expected a finite number or "-inf", got NaN',),
        ),
        (
            "trace-read-short-logits",
            "one logit for a step with two options",
            lambda: T.read(at("short.jsonl", trace_line(step_logits={"factual": [0.0]}))),
            T.TraceError,
            ("short.jsonl:1: steps[0].logits.factual: expected 2 logits (one per option), got 1",),
        ),
        (
            "trace-read-score-string",
            'a run with "score": "high"',
            lambda: T.read(at("score.jsonl", trace_line(score="high"))),
            T.TraceError,
            ('score.jsonl:1: score: expected a finite number, got a string "high"',),
        ),
        (
            "trace-read-duplicate-run",
            "the same run id on two lines",
            lambda: T.read(at("dup.jsonl", trace_line() * 2)),
            T.TraceError,
            ("dup.jsonl:2: run: duplicate run id 'r0' (first at dup.jsonl:1)",),
        ),
        (
            "trace-read-errors-unknown",
            'traces.read(path, errors="ignore")',
            lambda: T.read(at("ok.jsonl", trace_line()), errors="ignore"),
            ValueError,
            ("errors must be 'raise' or 'collect', got 'ignore'",),
        ),
        (
            "trace-validate-not-lines",
            "traces.validate(3)",
            lambda: T.validate(3),
            TypeError,
            ("path_or_lines must be a path or an iterable of lines (str), got int",),
        ),
        (
            "trace-write-one-run",
            'traces.write("runs.jsonl", run): a Run, not a list',
            lambda: T.write("runs.jsonl", RUN),
            TypeError,
            ("`runs` must be a list of bj.traces.Run, got Run; pass [run] for one run",),
        ),
        (
            "trace-write-step-name",
            'Run("r0", ("plan",)): a step name instead of a Step',
            lambda: T.write("runs.jsonl", [run("plan")]),
            TypeError,
            ("`steps[0]` of run 'r0' must be a bj.traces.Step, got 'plan'",),
        ),
        (
            "trace-step-options-string",
            'Step("plan", options="ab")',
            lambda: step(options="ab"),
            TypeError,
            ("`options` of step 'plan' must be a list of strings, got the string 'ab'",),
        ),
        (
            "trace-write-nan-score",
            "traces.write(path, [Run(..., score=nan)])",
            lambda: T.write("runs.jsonl", [run(score=float("nan"))]),
            T.TraceError,
            ("runs.jsonl:1: score: expected a finite number, got a number NaN",),
        ),
        (
            "trace-write-nan-logit",
            "a Step whose factual logits are (nan, 0.0)",
            lambda: T.write("runs.jsonl", [run(step(logits={"factual": (float("nan"), 0.0)}))]),
            T.TraceError,
            (
                'runs.jsonl:1: steps[0].logits.factual[0]: NaN is not a logit; expected a finite number or "-inf"',
            ),
        ),
        (
            "trace-write-duplicate-run",
            "traces.write(path, [run, run])",
            lambda: T.write("runs.jsonl", [RUN, RUN]),
            T.TraceError,
            ("runs.jsonl:2: run: duplicate run id 'r0' (first at runs[0])",),
        ),
        (
            "trace-write-missing-folder",
            'traces.write("missing/runs.jsonl", runs)',
            lambda: T.write("missing/runs.jsonl", [RUN]),
            FileNotFoundError,
            ("cannot write 'missing/runs.jsonl': its folder", "does not exist"),
        ),
        (
            "trace-write-to-folder",
            "traces.write(folder, runs)",
            lambda: T.write(folder(), [RUN]),
            IsADirectoryError,
            ("cannot write 'folder': it is a folder; give a file path",),
        ),
    ),
    *rows(
        "Trace importers",
        (
            "whowhen-missing",
            'traces.from_whowhen("7.json"), no such file',
            lambda: T.from_whowhen("7.json"),
            FileNotFoundError,
            ("path='7.json': no such Who&When file or folder",),
        ),
        (
            "whowhen-empty-file",
            "an empty Who&When file",
            lambda: T.from_whowhen(at("7.json")),
            T.TraceError,
            ("7.json:1: not valid JSON: Expecting value at column 1",),
        ),
        (
            "whowhen-not-object",
            "a Who&When file holding []",
            lambda: T.from_whowhen(at("7.json", "[]")),
            T.TraceError,
            ("7.json: expected a Who&When object with a 'history', got []",),
        ),
        (
            "whowhen-no-history",
            "a Who&When record without its history",
            lambda: T.from_whowhen(at("7.json", whowhen(history=...))),
            T.TraceError,
            ("7.json: history: expected a non-empty list of messages, got null",),
        ),
        (
            "whowhen-mistake-step-past",
            'mistake_step "5" in a history of one message',
            lambda: T.from_whowhen(at("7.json", whowhen(mistake_step="5"))),
            T.TraceError,
            (
                '7.json: mistake_step: expected a string holding a 0-based index into history (0 to 0), got "5", past the history',
            ),
        ),
        (
            "whowhen-is-correct-string",
            'is_correct "false" (a string)',
            lambda: T.from_whowhen(at("7.json", whowhen(is_correct="false"))),
            T.TraceError,
            ('7.json: is_correct: expected true or false, got "false"',),
        ),
        (
            "whowhen-is-corrected-string",
            'is_corrected "no" (the hand-crafted dialect, a string)',
            lambda: T.from_whowhen(at("7.json", whowhen(is_correct=..., is_corrected="no"))),
            T.TraceError,
            ('7.json: is_corrected: expected true or false, got "no"',),
        ),
        (
            "whowhen-message-without-agent",
            "a history message with neither name nor role",
            lambda: T.from_whowhen(at("7.json", whowhen(history=[{"content": "x"}]))),
            T.TraceError,
            (
                "7.json: history[0]: no agent: expected a non-empty 'name', or a 'role' naming the agent",
            ),
        ),
        (
            "whowhen-passed-string",
            'traces.from_whowhen(path, passed="no")',
            lambda: T.from_whowhen(at("7.json", whowhen()), passed="no"),
            TypeError,
            ("passed must be True, False or None, got 'no'",),
        ),
        (
            "otel-not-an-export",
            'traces.from_otel(path) of {"spans": []}',
            lambda: T.from_otel(at("spans.json", '{"spans": []}')),
            T.TraceError,
            (
                "spans.json: not a span or log format that blamejax reads; tried OTLP JSON spans",
                "ConsoleSpanExporter prints",
                'got {"spans": []}',
            ),
        ),
        (
            "otel-blamejax-trace",
            "traces.from_otel(path) of a blamejax trace file",
            lambda: T.from_otel(at("runs.jsonl", trace_line())),
            T.TraceError,
            (
                "runs.jsonl: a blamejax trace (one run per line), not spans: read it with bj.traces.read",
            ),
        ),
        (
            "otel-mixed-formats",
            "a folder of OTLP JSON spans and ConsoleSpanExporter spans",
            lambda: T.from_otel(
                at("spans/a.json", otlp()) and at("spans/b.log", console_span()) and "spans"
            ),
            T.TraceError,
            (
                "b.log: mixed formats: this holds the spans the OpenTelemetry SDK's ConsoleSpanExporter prints, but",
                'a.json holds OTLP JSON spans {"resourceSpans": [...]}; keep one span format in a file or folder',
            ),
        ),
        (
            "otel-no-root",
            "two spans, each the other's parent: no root",
            lambda: T.from_otel(
                at(
                    "spans.json",
                    otlp_spans(
                        {"traceId": "t1", "spanId": "a", "parentSpanId": "b", "name": "x"},
                        {"traceId": "t1", "spanId": "b", "parentSpanId": "a", "name": "y"},
                    ),
                )
            ),
            T.TraceError,
            (
                "spans.json: span[a].parentSpanId: trace t1 has no root span (every span has a parent)",
            ),
        ),
        (
            "otel-unknown-parent",
            "a span whose parent is not in the trace",
            lambda: T.from_otel(
                at(
                    "spans.json",
                    otlp_spans({"traceId": "t1", "spanId": "a", "parentSpanId": "b", "name": "x"}),
                )
            ),
            T.TraceError,
            ("spans.json: span[a].parentSpanId: unknown parent span b: not in trace t1",),
        ),
        (
            "otel-outcome-unknown",
            "a root span with status UNSET and no outcomes=",
            lambda: T.from_otel(at("spans.json", otlp(status=0))),
            T.TraceError,
            (
                "spans.json: span[a].status: the outcome of trace t1 is unknown: its root span's status is UNSET",
                "no outcome.passed/outcome.score attribute or gen_ai.evaluation.result event on it; pass outcomes={'t1': True/False or a score}",
            ),
        ),
        (
            "otel-outcome-ok",
            "a root span with status OK (OpenInference's default) and no outcome",
            lambda: T.from_otel(at("spans.json", otlp(status=1))),
            T.TraceError,
            (
                "spans.json: span[a].status: the outcome of trace t1 is unknown: its root span's status is OK, "
                "which is not taken as passed unless ok_means_passed=True",
            ),
        ),
        (
            "otel-outcome-attribute-string",
            'a root span with outcome.passed "no"',
            lambda: T.from_otel(at("spans.json", otlp(("outcome.passed", {"stringValue": "no"})))),
            T.TraceError,
            ('spans.json: span[a].outcome.passed: expected true or false, got "no"',),
        ),
        (
            "otel-ok-means-passed-int",
            "traces.from_otel(path, ok_means_passed=1)",
            lambda: T.from_otel(at("spans.json", otlp()), ok_means_passed=1),
            TypeError,
            ("ok_means_passed must be True or False, got 1",),
        ),
        (
            "otel-outcome-key-none",
            "traces.from_otel(path, outcome_key=None)",
            lambda: T.from_otel(at("spans.json", otlp()), outcome_key=None),
            TypeError,
            (
                "outcome_key must be 'trace_id', 'root_name' or the name of a root-span attribute, got None",
            ),
        ),
        (
            "otel-outcome-unknown-root-name",
            'traces.from_otel(path, outcome_key="root_name", outcomes={"plan": False})',
            lambda: T.from_otel(
                at("spans.json", otlp()), outcome_key="root_name", outcomes={"plan": False}
            ),
            T.TraceError,
            ("spans.json: outcomes['plan']: no root span has this name",),
        ),
        (
            "otel-log-without-span",
            "a log record whose span is not in the spans read",
            lambda: T.from_otel(
                at("spans/a.json", otlp())
                and at("spans/logs.json", otlp_logs("t1", "0000000000000009"))
                and "spans"
            ),
            T.TraceError,
            (
                "logs.json: logRecords[0] (gen_ai.client.inference.operation.details).spanId: no span 0000000000000009 in trace t1 to join it to",
            ),
        ),
        (
            "otel-log-without-ids",
            "a log record with no trace or span id, beside spans",
            lambda: T.from_otel(
                at("spans/a.json", otlp())
                and at("spans/logs.json", otlp_logs(None, None))
                and "spans"
            ),
            T.TraceError,
            (
                "logs.json: logRecords[0] (gen_ai.client.inference.operation.details): no traceId/spanId: "
                "a log record that no span holds cannot be joined to a run",
            ),
        ),
        (
            "otel-decision-no-logits",
            "a span with decision.options and no decision.probabilities",
            lambda: T.from_otel(at("spans.json", otlp(("decision.options", strings("a", "b"))))),
            T.TraceError,
            (
                "spans.json: span[a].decision.probabilities: missing: a decision with options needs the probabilities of its options",
                "bj.traces.record_decision",
            ),
        ),
        (
            "otel-outcomes-list",
            "traces.from_otel(path, outcomes=[True])",
            lambda: T.from_otel(at("spans.json", otlp()), outcomes=[True]),
            TypeError,
            ("outcomes must be a mapping of trace id -> bool or score, got list",),
        ),
        (
            "otel-outcome-nan",
            'traces.from_otel(path, outcomes={"t1": nan})',
            lambda: T.from_otel(at("spans.json", otlp()), outcomes={"t1": float("nan")}),
            TypeError,
            ("outcomes['t1'] must be True/False or a finite score (trace ids are str), got nan",),
        ),
        (
            "otel-outcome-unknown-trace",
            'traces.from_otel(path, outcomes={"t9": True})',
            lambda: T.from_otel(at("spans.json", otlp()), outcomes={"t9": True}),
            T.TraceError,
            ("spans.json: outcomes['t9']: no trace has this id",),
        ),
        (
            "openinference-probabilities-count",
            "decision.probabilities [0.5] for two options",
            lambda: T.from_openinference(at("spans.json", decision([0.5]))),
            T.TraceError,
            (
                "spans.json: span[a].decision.probabilities: expected 2 probabilities (one per option), got 1",
            ),
        ),
        (
            "openinference-probability-negative",
            "decision.probabilities [-0.5, 1.5]",
            lambda: T.from_openinference(at("spans.json", decision([-0.5, 1.5]))),
            T.TraceError,
            (
                "spans.json: span[a].decision.probabilities[0]: expected a probability in [0, 1], got -0.5",
            ),
        ),
    ),
    *rows(
        "Blaming traces",
        (
            "trace-cases-empty",
            "traces.trace_cases([])",
            lambda: T.trace_cases([]),
            ValueError,
            ("`runs` is empty: nothing to blame",),
        ),
        (
            "trace-cases-one-run",
            "traces.trace_cases(run): a Run, not a list",
            lambda: T.trace_cases(RUN),
            TypeError,
            ("`runs` must be a list of bj.traces.Run, got Run",),
        ),
        (
            "trace-cases-records",
            "traces.trace_cases([record]): JSON records, not Runs",
            lambda: T.trace_cases([T.to_record(RUN)]),
            TypeError,
            ("`runs[0]` must be a bj.traces.Run, got dict",),
        ),
        (
            "trace-cases-fix-factual",
            'traces.trace_cases(runs, fix="factual")',
            lambda: T.trace_cases([RUN], fix="factual"),
            ValueError,
            ("`fix` must be the name of a fix variant (not 'factual'), got 'factual'",),
        ),
        (
            "trace-cases-fix-unknown",
            'traces.trace_cases(runs, fix="repair"): no step has it',
            lambda: T.trace_cases([RUN], fix="repair"),
            ValueError,
            ("no drawn step of run 'r0' has a 'repair' logits variant: no step can be blamed",),
        ),
        (
            "trace-cases-free-text-only",
            "a run whose only step is free text",
            lambda: T.trace_cases([run(T.Step("note", agent="A", output="hi"))]),
            ValueError,
            (
                "run 'r0' has no decision step with options, logits and a choice: nothing can be blamed (free-text steps await a scorer)",
            ),
        ),
        (
            "trace-cases-different-steps",
            "two runs with differently named decision steps",
            lambda: T.trace_cases([RUN, run(step(name="other"), run="r1")]),
            ValueError,
            (
                "runs 'r0' and 'r1' have different drawn steps",
                "split them with bj.traces.group_runs(runs)",
            ),
        ),
        (
            "trace-cases-no-choice",
            "a step with logits but no observed choice",
            lambda: T.trace_cases([run(step(choice=None))]),
            ValueError,
            ("run 'r0', step 'plan': it has logits but no observed `choice`",),
        ),
        (
            "trace-cases-choice-impossible",
            "an observed choice whose factual logit is -inf",
            lambda: T.trace_cases([run(step(logits={"factual": (0.0, NEG), "fix": (0.0, NEG)}))]),
            ValueError,
            (
                "run 'r0', step 'plan': the observed choice 'answer' has factual logit -inf, so it could not have been chosen",
            ),
        ),
        (
            "trace-cases-no-accept",
            "no step has accept labels, and no score=",
            lambda: T.trace_cases([run(step(accept=None))]),
            ValueError,
            ("no drawn step has `accept` labels", "give `score=`"),
        ),
        (
            "trace-cases-score-string",
            'traces.trace_cases(runs, score="accept")',
            lambda: T.trace_cases([RUN], score="accept"),
            TypeError,
            ("`score` must be a function of the choices or None, got 'accept'",),
        ),
        (
            "trace-worlds-too-many",
            "traces.blame_runs(runs, num_worlds=10**12)",
            lambda: T.blame_runs([RUN], num_worlds=10**12),
            ValueError,
            ("`num_worlds` = 1000000000000 for 1 case needs about", "ask for fewer worlds"),
        ),
        (
            "trace-score-unknown-step",
            'traces.blame_runs(runs, score=lambda choices: choices["planx"].take(...))',
            lambda: T.blame_runs(
                [RUN], num_worlds=2, score=lambda choices: choices["planx"].take(jnp.ones(2))
            ),
            KeyError,
            (
                "`score` asked for the choice of step 'planx', which is not a drawn step of these runs; the drawn steps are ['plan']",
            ),
        ),
        (
            "trace-score-nan",
            "traces.blame_runs(runs, score=lambda choices: jnp.nan)",
            lambda: T.blame_runs([RUN], num_worlds=2, score=lambda choices: jnp.nan),
            ValueError,
            (
                "the pipeline returned a NaN score: case 0, world 0: the pipeline's own score is NaN",
            ),
        ),
        (
            "trace-score-above-range",
            "a score function returning 2.0 for a pass (the range is [0, 1])",
            lambda: T.blame_runs(
                [RUN],
                num_worlds=2,
                score=lambda choices: 2.0 * choices["plan"].take(jnp.array([1.0, 0.0])),
            ),
            ValueError,
            (
                "the pipeline returned scores in [0.0, 2.0], outside the declared `score_range` (0.0, 1.0)",
            ),
        ),
        (
            "group-runs-fix-int",
            "traces.group_runs(runs, fix=3)",
            lambda: T.group_runs([RUN], fix=3),
            ValueError,
            ("`fix` must be the name of a fix variant (not 'factual'), got 3",),
        ),
        (
            "blame-runs-estimator",
            'traces.blame_runs(runs, estimator="MC")',
            lambda: T.blame_runs([RUN], estimator="MC"),
            ValueError,
            ("`estimator` must be one of ('exact', 'mc'), got 'MC'",),
        ),
        (
            "blame-runs-mc-without-budget",
            'traces.blame_runs(runs, estimator="mc")',
            lambda: T.blame_runs([RUN], estimator="mc"),
            ValueError,
            ("`max_evaluations` (the Monte Carlo budget per run) is required with estimator='mc'",),
        ),
        (
            "blame-runs-num-worlds-zero",
            "traces.blame_runs(runs, num_worlds=0)",
            lambda: T.blame_runs([RUN], num_worlds=0),
            ValueError,
            ("`num_worlds` must be a positive int, got 0",),
        ),
        (
            "blame-runs-trace-cases-fix",
            'traces.blame_runs(trace_cases(runs), fix="other")',
            lambda: T.blame_runs(T.trace_cases([RUN]), fix="other"),
            ValueError,
            ("`fix` and `score` belong to trace_cases; they cannot be changed for a TraceCases",),
        ),
        (
            "readout-trace-blame",
            "traces.readout(blame_runs(runs)): the TraceBlame, not its .result",
            lambda: T.readout(trace_blame()),
            TypeError,
            ("`result` must be an ExactResult, MCResult or BatchResult, got TraceBlame",),
        ),
        (
            "readout-failure-out-of-range",
            "traces.readout(result, failure=3) (1 run)",
            lambda: T.readout(trace_blame().result, failure=3),
            ValueError,
            ("`failure` must be an int in [0, 1), got 3",),
        ),
        (
            "readout-tolerance-negative",
            "traces.readout(result, tolerance=-1)",
            lambda: T.readout(trace_blame().result, tolerance=-1),
            ValueError,
            ("`tolerance` must be a finite number >= 0, got -1",),
        ),
        (
            "readout-agents-list",
            'traces.readout(result, ["Planner"])',
            lambda: T.readout(trace_blame().result, ["Planner"]),
            TypeError,
            ("`agents` must be a mapping {step: agent}, got list",),
        ),
        (
            "readout-agents-unknown-step",
            'traces.readout(result, {"plann": "Planner"})',
            lambda: T.readout(trace_blame().result, {"plann": "Planner"}),
            ValueError,
            ("`agents` names steps ['plann'] that are not among the result's steps ['plan']",),
        ),
        (
            "readout-threshold-string",
            'traces.readout(result, threshold="high")',
            lambda: T.readout(trace_blame().result, threshold="high"),
            ValueError,
            ("`threshold` must be a finite number, got 'high'",),
        ),
        (
            "readout-threshold-nan",
            "traces.readout(result, threshold=nan)",
            lambda: T.readout(trace_blame().result, threshold=float("nan")),
            ValueError,
            ("`threshold` must be a finite number, got nan",),
        ),
        (
            "readout-threshold-on-mc",
            "traces.readout(mc_shapley(two_step, ...), threshold=0.5)",
            lambda: T.readout(
                bj.mc_shapley(two_step, TWO, TWO_WORLDS, 0, max_evaluations=64), threshold=0.5
            ),
            ValueError,
            (
                "`threshold` decides repairs from fix-alone values, which an MCResult does not carry; leave it None, got 0.5",
            ),
        ),
        (
            "cli-whowhen-missing",
            "python -m blamejax whowhen 7.json (no such file)",
            cli("whowhen", "7.json"),
            SystemExit,
            ("'7.json': no such file or folder",),
        ),
        (
            "cli-whowhen-empty-folder",
            "python -m blamejax whowhen folder (no .json file)",
            lambda: cli("whowhen", folder())(),
            SystemExit,
            ("path='folder' is a folder with no .json Who&When files",),
        ),
        (
            "cli-whowhen-invalid-file",
            "python -m blamejax whowhen 7.json (an empty file)",
            lambda: cli("whowhen", at("7.json"))(),
            SystemExit,
            ("1 problem in trace data", "7.json:1: not valid JSON"),
        ),
        (
            "cli-whowhen-predictions-missing",
            "python -m blamejax whowhen 7.json --predictions p.json (no such file)",
            lambda: cli("whowhen", at("7.json", whowhen()), "--predictions", "p.json")(),
            SystemExit,
            ("predictions file 'p.json': no such file",),
        ),
        (
            "cli-whowhen-predictions-folder",
            "python -m blamejax whowhen 7.json --predictions folder",
            lambda: cli("whowhen", at("7.json", whowhen()), "--predictions", folder())(),
            SystemExit,
            ("predictions file 'folder' is a folder; expected a JSON file",),
        ),
        (
            "cli-whowhen-predictions-list",
            "a predictions file holding [1, 2]",
            lambda: cli(
                "whowhen", at("7.json", whowhen()), "--predictions", at("p.json", "[1, 2]")
            )(),
            SystemExit,
            ('p.json: expected a JSON object {run id: {"agent", "step"}}, got list',),
        ),
        (
            "cli-whowhen-predictions-unknown-run",
            'predictions {"8": {"agent": "A", "step": 0}} for run 7',
            lambda: cli(
                "whowhen",
                at("7.json", whowhen()),
                "--predictions",
                at("p.json", '{"8": {"agent": "A", "step": 0}}'),
            )(),
            SystemExit,
            ("invalid predictions", "p.json: ['8']: unknown run id (not among the 1 runs)"),
        ),
        (
            "cli-whowhen-predictions-step-string",
            'predictions {"7": {"agent": "A", "step": "zero"}}',
            lambda: cli(
                "whowhen",
                at("7.json", whowhen()),
                "--predictions",
                at("p.json", '{"7": {"agent": "A", "step": "zero"}}'),
            )(),
            SystemExit,
            (
                "invalid predictions",
                "p.json: ['7'].step: expected an integer step index or null, got 'zero'",
            ),
        ),
        (
            "cli-whowhen-seed-negative",
            "python -m blamejax whowhen 7.json --seed -3",
            cli("whowhen", "7.json", "--seed", "-3"),
            SystemExit,
            ("argument --seed: must be in [0, 2**32), got -3",),
        ),
    ),
    *rows(
        "Scorers",
        (
            "scorer-one-request",
            "scorer.score(request): a Request, not a list",
            lambda: S.FunctionScorer(prefer_first).score(REQUEST),
            TypeError,
            ("`requests` must be a list of bj.scorers.Request, got Request",),
        ),
        (
            "scorer-request-three-fields",
            'scorer.score([("route", "factual", "hi")])',
            lambda: S.FunctionScorer(prefer_first).score([("route", "factual", "hi")]),
            TypeError,
            (
                "`requests[0]` must be a bj.scorers.Request(step, variant, inputs, options), got ('route', 'factual', 'hi')",
            ),
        ),
        (
            "scorer-request-options-string",
            'Request("route", "factual", "hi", "ab")',
            lambda: S.FunctionScorer(prefer_first).score([REQUEST._replace(options="ab")]),
            TypeError,
            ("`requests[0].options` must be a list of strings, got 'ab'",),
        ),
        (
            "scorer-request-options-repeated",
            'Request(..., options=("a", "a"))',
            lambda: S.FunctionScorer(prefer_first).score([REQUEST._replace(options=("a", "a"))]),
            ValueError,
            ("`requests[0].options` must be distinct, got ['a', 'a']",),
        ),
        (
            "scorer-request-inputs-set",
            "Request(..., inputs={1, 2})",
            lambda: S.FunctionScorer(prefer_first).score([REQUEST._replace(inputs={1, 2})]),
            TypeError,
            (
                "`requests[0].inputs` must be plain JSON (str, number, bool, None, list, dict), got {1, 2}",
            ),
        ),
        (
            "scorer-request-inputs-nan",
            'Request(..., inputs={"x": nan})',
            lambda: S.FunctionScorer(prefer_first).score(
                [REQUEST._replace(inputs={"x": float("nan")})]
            ),
            TypeError,
            (
                "`requests[0].inputs` must be plain JSON",
                "Out of range float values are not JSON compliant",
            ),
        ),
        (
            "function-scorer-not-callable",
            'FunctionScorer("model")',
            lambda: S.FunctionScorer("model"),
            TypeError,
            ("`fn` must be a function of a Request", "got 'model'"),
        ),
        (
            "function-scorer-lambda-with-cache",
            'FunctionScorer(lambda r: ..., cache=Cache("scores.sqlite"))',
            lambda: S.FunctionScorer(lambda r: [0.0, 0.0], cache=S.Cache("scores.sqlite")),
            ValueError,
            (
                "`name` is required with a cache for",
                "a lambda or a local function has no stable name",
            ),
        ),
        (
            "function-scorer-concurrency-zero",
            "FunctionScorer(fn, concurrency=0)",
            lambda: S.FunctionScorer(prefer_first, concurrency=0),
            ValueError,
            ("`concurrency` must be an integer >= 1 (the most calls at once), got 0",),
        ),
        (
            "function-scorer-cache-path",
            'FunctionScorer(fn, cache="scores.sqlite"): a path, not a Cache',
            lambda: S.FunctionScorer(prefer_first, cache="scores.sqlite"),
            TypeError,
            ("`cache` must be a bj.scorers.Cache or None, got 'scores.sqlite'",),
        ),
        (
            "scorer-returns-nan",
            "a scorer function returning [nan, 0.0]",
            returns([float("nan"), 0.0]),
            ValueError,
            (
                "FunctionScorer('f') returned logits [nan, 0.0] for step 'route'",
                "expected finite numbers or -inf, not all -inf",
            ),
        ),
        (
            "scorer-returns-inf",
            "a scorer function returning [inf, 0.0]",
            returns([float("inf"), 0.0]),
            ValueError,
            ("FunctionScorer('f') returned logits [inf, 0.0]", "expected finite numbers or -inf"),
        ),
        (
            "scorer-returns-all-neginf",
            "a scorer function returning [-inf, -inf]",
            returns([NEG, NEG]),
            ValueError,
            ("FunctionScorer('f') returned logits [-inf, -inf]", "not all -inf"),
        ),
        (
            "scorer-returns-wrong-length",
            "a scorer function returning 3 logits for 2 options",
            returns([0.0, 1.0, 2.0]),
            ValueError,
            (
                "FunctionScorer('f') returned logits of shape (3,) for step 'route'",
                "expected shape (2,), one per option",
            ),
        ),
        (
            "scorer-returns-dict",
            'a scorer function returning {"refund": 0.0, "escalate": 1.0}',
            returns({"refund": 0.0, "escalate": 1.0}),
            ValueError,
            ("FunctionScorer('f') returned {'refund': 0.0, 'escalate': 1.0}", "expected 2 numbers"),
        ),
        (
            "batched-scorer-returns-none",
            "FunctionScorer(fn, batched=True) whose fn returns None",
            lambda: S.FunctionScorer(lambda requests: None, batched=True, name="f").score(
                [REQUEST]
            ),
            ValueError,
            (
                "FunctionScorer('f') (batched) returned None for 1 requests: expected [N, K] logits or a list of N rows",
            ),
        ),
        (
            "batched-scorer-too-few-rows",
            "a batched fn returning 1 row for 2 requests",
            lambda: S.FunctionScorer(lambda requests: [[0.0, 0.0]], batched=True, name="f").score(
                [REQUEST, REQUEST._replace(variant="fix")]
            ),
            ValueError,
            ("FunctionScorer('f') returned 1 rows of logits for 2 requests",),
        ),
        (
            "openai-model-empty",
            'OpenAIScorer("")',
            lambda: S.OpenAIScorer(""),
            TypeError,
            ("`model` must be a non-empty string, got ''",),
        ),
        (
            "openai-mode-unknown",
            'OpenAIScorer("m", mode="logprob")',
            lambda: S.OpenAIScorer("m", mode="logprob"),
            ValueError,
            ("`mode` must be one of ('logprobs', 'json'), got 'logprob'",),
        ),
        (
            "openai-temperature",
            'OpenAIScorer("m", temperature=3)',
            lambda: S.OpenAIScorer("m", temperature=3),
            ValueError,
            ("`temperature` must be a number in [0, 2] or None (the server's default), got 3",),
        ),
        (
            "openai-top-logprobs",
            'OpenAIScorer("m", top_logprobs=50)',
            lambda: S.OpenAIScorer("m", top_logprobs=50),
            ValueError,
            ("`top_logprobs` must be an integer in [1, 20], got 50",),
        ),
        (
            "openai-timeout-zero",
            'OpenAIScorer("m", timeout=0)',
            lambda: S.OpenAIScorer("m", timeout=0),
            ValueError,
            ("`timeout` must be a number of seconds > 0, got 0",),
        ),
        (
            "openai-timeout-bool",
            'OpenAIScorer("m", timeout=True)',
            lambda: S.OpenAIScorer("m", timeout=True),
            ValueError,
            ("`timeout` must be a number of seconds > 0, got True",),
        ),
        (
            "openai-revision-empty",
            'OpenAIScorer("m", revision="")',
            lambda: S.OpenAIScorer("m", revision=""),
            TypeError,
            ("`revision` must be a non-empty string or None, got ''",),
        ),
        (
            "by-variant-missing",
            'ByVariant({"factual": scorer}).score([Request("route", "fix", ...)])',
            lambda: S.ByVariant(
                {"factual": S.FunctionScorer(lambda r: [0.0, 0.0], name="f")}
            ).score([REQUEST._replace(variant="fix")]),
            ValueError,
            (
                "has no scorer for variant 'fix' (step 'route', variant 'fix'",
                "give one in `scorers` or pass `default`",
            ),
        ),
        (
            "by-variant-not-a-scorer",
            'ByVariant({"fix": len})',
            lambda: S.ByVariant({"fix": len}),
            TypeError,
            ("`scorers['fix']` must be a bj.scorers.Scorer, got <built-in function len>",),
        ),
        (
            "llama-n-ctx-zero",
            "LlamaScorer(n_ctx=0)",
            lambda: S.LlamaScorer(n_ctx=0),
            ValueError,
            ("`n_ctx` must be an integer >= 1, got 0",),
        ),
        (
            "response-option-unranked",
            "logits_from_response(response, options): an option the top 20 miss",
            lambda: bj.traces.logits_from_response(
                {"choices": [{"logprobs": {"content": [{"token": "ref", "logprob": -0.1}]}}]},
                ["Refund", "close"],
            ),
            S.ReplyError,
            (
                "option 'close' is not among the returned tokens [\"ref\"]",
                "unranked, not impossible",
                "absent='floor'",
                "bj.scorers.LlamaScorer",
            ),
        ),
        (
            "response-rule-likelihood",
            'logits_from_response(response, options, rule="likelihood")',
            lambda: bj.traces.logits_from_response({}, ["a", "b"], rule="likelihood"),
            ValueError,
            ("`rule='likelihood'` needs each option's token log-probabilities",),
        ),
        (
            "openai-base-url-port",
            'OpenAIScorer("m", base_url=8000)',
            lambda: S.OpenAIScorer("m", base_url=8000),
            TypeError,
            ("`base_url` must be a string or None, got 8000",),
        ),
        (
            "openai-absent-unknown",
            'OpenAIScorer("m", absent="zero")',
            lambda: S.OpenAIScorer("m", absent="zero"),
            ValueError,
            ("`absent` must be one of ('error', 'floor'), got 'zero'",),
        ),
        (
            "openai-template-unknown-field",
            'OpenAIScorer("m", template="Pick {option}")',
            lambda: S.OpenAIScorer("m", template="Pick {option}"),
            ValueError,
            (
                "`template` uses unknown fields ['option']; it may use {step}, {variant}, {inputs} and {options}",
            ),
        ),
        (
            "openai-template-without-options",
            'OpenAIScorer("m", template="Pick one")',
            lambda: S.OpenAIScorer("m", template="Pick one"),
            ValueError,
            ("`template` must show the options with {options}, got 'Pick one'",),
        ),
        (
            "openai-21-options",
            "an OpenAIScorer in logprobs mode asked about 21 options",
            lambda: S.OpenAIScorer("m", base_url="http://127.0.0.1:9/v1", api_key="none").score(
                [REQUEST._replace(options=tuple("abcdefghijklmnopqrstu"))]
            ),
            ValueError,
            (
                "mode='logprobs' labels options with one letter each, at most 20",
                "got 21",
                "use mode='json'",
            ),
        ),
        (
            "openai-server-not-listening",
            "OpenAIScorer at a local port where no server listens, timeout=0.5, Retry(attempts=2)",
            lambda: not_listening(S.OpenAIScorer),
            S.ScorerError,
            (
                "OpenAIScorer(model='m', mode='logprobs') on step 'route'",
                "gave up after 2 attempt(s); the last failed with: connection failed",
            ),
        ),
        (
            "anthropic-temperature",
            'AnthropicScorer("m", temperature=1.5)',
            lambda: S.AnthropicScorer("m", temperature=1.5),
            ValueError,
            ("`temperature` must be a number in [0, 1] or None for this API, got 1.5",),
        ),
        (
            "anthropic-server-not-listening",
            "AnthropicScorer at a local port where no server listens",
            lambda: not_listening(S.AnthropicScorer),
            S.ScorerError,
            (
                "AnthropicScorer(model='m', mode='json') on step 'route'",
                "gave up after 2 attempt(s); the last failed with: connection failed",
            ),
        ),
        (
            "retry-attempts-zero",
            'OpenAIScorer("m", retry=Retry(attempts=0))',
            lambda: S.OpenAIScorer("m", retry=S.Retry(attempts=0)),
            ValueError,
            ("`retry.attempts` must be an integer >= 1, got 0",),
        ),
        (
            "retry-attempts-bool",
            'OpenAIScorer("m", retry=Retry(attempts=True))',
            lambda: S.OpenAIScorer("m", retry=S.Retry(attempts=True)),
            ValueError,
            ("`retry.attempts` must be an integer >= 1, got True",),
        ),
        (
            "retry-backoff-negative",
            'OpenAIScorer("m", retry=Retry(backoff=-1))',
            lambda: S.OpenAIScorer("m", retry=S.Retry(backoff=-1)),
            ValueError,
            ("`retry.backoff` must be a finite number of seconds >= 0, got -1",),
        ),
        (
            "retry-backoff-string",
            'OpenAIScorer("m", retry=Retry(backoff="1"))',
            lambda: S.OpenAIScorer("m", retry=S.Retry(backoff="1")),
            ValueError,
            ("`retry.backoff` must be a finite number of seconds >= 0, got '1'",),
        ),
        (
            "retry-max-backoff-infinite",
            'OpenAIScorer("m", retry=Retry(max_backoff=inf))',
            lambda: S.OpenAIScorer("m", retry=S.Retry(max_backoff=float("inf"))),
            ValueError,
            ("`retry.max_backoff` must be a finite number of seconds >= 0, got inf",),
        ),
        (
            "retry-dict",
            'OpenAIScorer("m", retry={"attempts": 3})',
            lambda: S.OpenAIScorer("m", retry={"attempts": 3}),
            TypeError,
            ("`retry` must be a bj.scorers.Retry, got {'attempts': 3}",),
        ),
        (
            "fill-lazily-scorer-function",
            "fill_lazily(runs, fn, request): a function, not a Scorer",
            lambda: S.fill_lazily([RUN], prefer_first, lambda *a: REQUEST),
            TypeError,
            ("`scorer` must be a bj.scorers.Scorer, got <function",),
        ),
        (
            "fill-lazily-runs-empty",
            "fill_lazily([], scorer, request)",
            lambda: S.fill_lazily([], S.FunctionScorer(prefer_first), lambda *a: REQUEST),
            TypeError,
            ("`runs` must be a non-empty list of bj.traces.Run, got an empty list",),
        ),
        (
            "fill-lazily-max-rounds-zero",
            "fill_lazily(..., max_rounds=0)",
            lambda: lazily(max_rounds=0),
            ValueError,
            ("`max_rounds` must be an integer >= 1, got 0",),
        ),
        (
            "fill-lazily-players-string",
            'fill_lazily(..., players="plan")',
            lambda: lazily(players="plan"),
            TypeError,
            ("`players` must be a list of step names or None, got the string 'plan'",),
        ),
        (
            "fill-lazily-players-unknown",
            'fill_lazily(..., players=["plann"])',
            lambda: lazily(players=["plann"]),
            ValueError,
            ("`players` ['plann'] are not decision steps to score",),
        ),
        (
            "fill-lazily-request-options",
            "a request function giving options other than the step's",
            lambda: lazily(
                request=lambda run, step, variant, parent: S.Request(
                    step.name, variant, "x", ("a", "b")
                )
            ),
            ValueError,
            (
                "`request` returned options ['a', 'b'] for step 'plan', expected its options ['search', 'answer']",
            ),
        ),
        (
            "fill-lazily-request-none",
            "a request function returning None",
            lambda: lazily(request=lambda *args: None),
            TypeError,
            (
                "`request(...)` must be a bj.scorers.Request(step, variant, inputs, options), got None",
            ),
        ),
        (
            "fill-lazily-nothing-to-score",
            "fill_lazily of runs whose steps all have logits",
            lambda: S.fill_lazily([RUN], S.FunctionScorer(prefer_first), lambda *a: REQUEST),
            ValueError,
            ("run 'r0' has no decision step without logits: nothing to score",),
        ),
    ),
    *rows(
        "Score caches",
        (
            "cache-corrupt",
            "Cache(path) of a file that is not SQLite",
            lambda: S.Cache(at("scores.sqlite", b"not sqlite" * 100)),
            S.CacheError,
            (
                "scores.sqlite: not a readable SQLite score cache (file is not a database); delete it or choose another path",
            ),
        ),
        (
            "cache-other-sqlite",
            "Cache(path) of another program's SQLite file",
            lambda: S.Cache(other_sqlite()),
            S.CacheError,
            ("other.sqlite: an SQLite file that is not a blamejax score cache (tables ['t'])",),
        ),
        (
            "cache-other-schema",
            "Cache(path) of a cache of schema version 2",
            lambda: S.Cache(cache_file(schema=2)),
            S.CacheError,
            (
                "scores.sqlite: a score cache of schema version 2, but this blamejax reads version 1",
            ),
        ),
        (
            "cache-folder",
            "Cache(folder)",
            lambda: S.Cache(folder()),
            IsADirectoryError,
            ("`path` 'folder' is a folder; expected the cache's file (created if absent)",),
        ),
        (
            "cache-missing-folder",
            'Cache("missing/scores.sqlite")',
            lambda: S.Cache("missing/scores.sqlite"),
            FileNotFoundError,
            ("`path` 'missing/scores.sqlite': its folder", "does not exist"),
        ),
        (
            "cache-offline-missing-file",
            'Cache("scores.sqlite", offline=True), no such file',
            lambda: S.Cache("scores.sqlite", offline=True),
            FileNotFoundError,
            (
                "offline cache 'scores.sqlite' does not exist: offline mode replays a cache scored earlier",
            ),
        ),
        (
            "cache-offline-miss",
            "an offline cache asked for a request it does not hold",
            lambda: S.FunctionScorer(prefer_first, cache=S.Cache(cache_file(), offline=True)).score(
                [REQUEST]
            ),
            S.OfflineMiss,
            (
                "offline cache scores.sqlite holds no score of FunctionScorer(",
                "for step 'route', variant 'factual'",
                "score it online once, or ship the cache that has it",
            ),
        ),
        (
            "cache-timeout-negative",
            "Cache(path, timeout=-1)",
            lambda: S.Cache("scores.sqlite", timeout=-1),
            ValueError,
            ("`timeout` must be a finite number of seconds >= 0", "got -1"),
        ),
        (
            "cache-timeout-string",
            'Cache(path, timeout="5")',
            lambda: S.Cache("scores.sqlite", timeout="5"),
            ValueError,
            ("`timeout` must be a finite number of seconds >= 0", "got '5'"),
        ),
        (
            "cache-offline-string",
            'Cache(path, offline="yes")',
            lambda: S.Cache("scores.sqlite", offline="yes"),
            TypeError,
            ("`offline` must be True or False, got 'yes'",),
        ),
        (
            "cache-put-nan",
            'cache.put("model", request, [nan, 0.0])',
            lambda: S.Cache("scores.sqlite").put("model", REQUEST, [float("nan"), 0.0]),
            ValueError,
            (
                "`logits` must be 2 numbers, one per option of step 'route'",
                "finite or -inf and not all -inf; got [nan, 0.0]",
            ),
        ),
        (
            "cache-get-step-name",
            'cache.get("model", "route"): a step name, not a Request',
            lambda: S.Cache("scores.sqlite").get("model", "route"),
            TypeError,
            (
                "`request` must be a bj.scorers.Request(step, variant, inputs, options), got 'route'",
            ),
        ),
    ),
    *rows(
        "Checkpoints",
        (
            "checkpoint-other-key",
            "blame_batch(..., 1, checkpoint=p) on a checkpoint that key 0 wrote",
            lambda: checkpointed(checkpoint_file(), key=1),
            bj.estimators.CheckpointError,
            (
                "`checkpoint` file",
                "run.ckpt' was written by a call with other arguments: `key` differs",
                "Pass the same arguments to resume from it, or another `checkpoint` path",
            ),
        ),
        (
            "checkpoint-other-delta",
            "blame_batch(..., interval=Interval(delta=0.2), checkpoint=p) on a checkpoint of delta=0.1",
            lambda: checkpointed(checkpoint_file(), interval=bj.stats.Interval(delta=0.2)),
            bj.estimators.CheckpointError,
            (
                "was written by a call with other arguments: `delta` differs (file: 0.1, this call: 0.2)",
            ),
        ),
        (
            "checkpoint-other-cases",
            "blame_batch on other cases with the same checkpoint",
            lambda: bj.blame_batch(
                two_step, TWO_ONE_PASSES, 0, checkpoint=checkpoint_file(), block_size=8
            ),
            bj.estimators.CheckpointError,
            (
                "was written by a call with other arguments: `cases` differ (leaf ['draft'] holds other values)",
            ),
        ),
        (
            "checkpoint-truncated",
            "a checkpoint file cut in half",
            lambda: checkpointed(checkpoint_file(lambda t: t[: len(t) // 2])),
            bj.estimators.CheckpointError,
            ("run.ckpt' is truncated or corrupt (not valid JSON:", "delete it to start over"),
        ),
        (
            "checkpoint-empty",
            "an empty checkpoint file",
            lambda: checkpointed(at("run.ckpt")),
            bj.estimators.CheckpointError,
            ("run.ckpt' is truncated or corrupt (not valid JSON: Expecting value",),
        ),
        (
            "checkpoint-edited",
            "a checkpoint edited by hand (its checksum no longer matches)",
            lambda: checkpointed(checkpoint_file(edited_progress)),
            bj.estimators.CheckpointError,
            (
                "run.ckpt' is corrupt (its checksum does not match its content); delete it to start over",
            ),
        ),
        (
            "checkpoint-newer-format",
            "a checkpoint of format 2",
            lambda: checkpointed(checkpoint_file(newer_format)),
            bj.estimators.CheckpointError,
            ("run.ckpt' has format 2, newer than this blamejax reads (format 1)",),
        ),
        (
            "checkpoint-not-a-checkpoint",
            "checkpoint= a result's JSON file",
            lambda: checkpointed(result_file()),
            bj.estimators.CheckpointError,
            ("result.json' is not a blamejax checkpoint (no \"kind\": 'blamejax checkpoint')",),
        ),
        (
            "checkpoint-missing-folder",
            'checkpoint="missing/run.ckpt"',
            lambda: checkpointed("missing/run.ckpt"),
            ValueError,
            ("`checkpoint`'s folder", "missing' does not exist"),
        ),
        (
            "checkpoint-folder",
            "checkpoint= a folder",
            lambda: checkpointed(folder()),
            ValueError,
            ("`checkpoint` must be a file path, got the folder",),
        ),
        (
            "checkpoint-int",
            "checkpoint=3",
            lambda: checkpointed(3),
            TypeError,
            ("`checkpoint` must be a file path (str or os.PathLike), got 3",),
        ),
    ),
    *rows(
        "Compile cache",
        (
            "compile-cache-int",
            "enable_compile_cache(3)",
            lambda: bj.enable_compile_cache(3),
            TypeError,
            ("`path` must be a folder path (str or os.PathLike), got 3",),
        ),
        (
            "compile-cache-empty",
            'enable_compile_cache("")',
            lambda: bj.enable_compile_cache(""),
            TypeError,
            ("`path` must be a non-empty folder path, got ''",),
        ),
        (
            "compile-cache-file",
            "enable_compile_cache(path of a file)",
            lambda: bj.enable_compile_cache(at("afile", "x")),
            NotADirectoryError,
            ("`path` 'afile' is a file; the compile cache needs a folder",),
        ),
        (
            "compile-cache-under-a-file",
            'enable_compile_cache("afile/jax"), afile a file',
            lambda: bj.enable_compile_cache(at("afile", "x") + "/jax"),
            NotADirectoryError,
            ("`path` 'afile/jax': cannot make the folder (Not a directory)",),
        ),
        (
            "cli-compile-cache-both",
            "python -m blamejax demo refund --compile-cache DIR --no-compile-cache",
            cli("demo", "refund", "--compile-cache", "cache", "--no-compile-cache"),
            SystemExit,
            ("--compile-cache and --no-compile-cache: give one of them, not both",),
        ),
        (
            "cli-compile-cache-file",
            "python -m blamejax demo refund --compile-cache FILE",
            lambda: cli("demo", "refund", "--compile-cache", at("afile", "x"))(),
            SystemExit,
            (
                "--compile-cache: cannot use the folder: `path` 'afile' is a file; the compile cache needs a folder",
            ),
        ),
        (
            "cli-compile-cache-empty",
            'python -m blamejax demo refund --compile-cache ""',
            cli("demo", "refund", "--compile-cache", ""),
            SystemExit,
            (
                "--compile-cache: cannot use the folder: `path` must be a non-empty folder path, got ''",
            ),
        ),
    ),
    *rows(
        "Saved results",
        (
            "load-missing",
            'ExactResult.load_json("result.json"), no such file',
            lambda: bj.ExactResult.load_json("result.json"),
            FileNotFoundError,
            ("`path` 'result.json': no such file",),
        ),
        (
            "load-folder",
            "ExactResult.load_json(folder)",
            lambda: bj.ExactResult.load_json(folder()),
            IsADirectoryError,
            ("`path` 'folder' is a folder; expected a JSON file",),
        ),
        (
            "load-not-a-path",
            "ExactResult.load_json(3)",
            lambda: bj.ExactResult.load_json(3),
            TypeError,
            ("`path` must be a file path (str or os.PathLike), got 3",),
        ),
        (
            "load-empty-file",
            "ExactResult.load_json of an empty file",
            lambda: bj.ExactResult.load_json(at("result.json")),
            ValueError,
            ("'result.json' is empty; expected a file that `to_json` wrote",),
        ),
        (
            "load-invalid-json",
            "ExactResult.load_json of a file holding `{`",
            lambda: bj.ExactResult.load_json(at("result.json", "{")),
            ValueError,
            (
                "'result.json' is not valid JSON (Expecting property name",
                "expected a file that `to_json` wrote",
            ),
        ),
        (
            "load-bare-nan",
            "a result file with a bare NaN token",
            lambda: bj.ExactResult.load_json(
                result_file(edit=lambda t: t.replace("0.0", "NaN", 1))
            ),
            ValueError,
            ("'result.json': not strict JSON: the bare token NaN (blamejax writes NaN as null)",),
        ),
        (
            "load-other-type",
            "MCResult.load_json of an ExactResult's file",
            lambda: bj.MCResult.load_json(result_file()),
            ValueError,
            ("expected a dict of type 'MCResult', got 'ExactResult'",),
        ),
        (
            "load-checkpoint-as-result",
            "BatchResult.load_json of a checkpoint file",
            lambda: bj.BatchResult.load_json(checkpoint_file()),
            ValueError,
            (
                "expected a dict of type 'BatchResult', got a dict without \"type\" (keys ['arrays', 'fingerprint', 'format', 'kind'",
            ),
        ),
        (
            "from-dict-list",
            "ExactResult.from_dict([1])",
            lambda: bj.ExactResult.from_dict([1]),
            ValueError,
            ("expected a dict of type 'ExactResult', got a list",),
        ),
        (
            "from-dict-newer-format",
            'ExactResult.from_dict(d) with d["format"] = 2',
            lambda: bj.ExactResult.from_dict(result_dict(format=2)),
            ValueError,
            ("unknown ExactResult format 2, expected 1",),
        ),
        (
            "from-dict-missing-field",
            'ExactResult.from_dict(d) without d["shapley"]',
            lambda: bj.ExactResult.from_dict(result_dict(shapley=...)),
            ValueError,
            ("the ExactResult dict lacks the field 'shapley'",),
        ),
        (
            "from-dict-unknown-field",
            'ExactResult.from_dict(d) with d["extra"] = 1',
            lambda: bj.ExactResult.from_dict(result_dict(extra=1)),
            ValueError,
            ("ExactResult has no fields ['extra']",),
        ),
        (
            "from-dict-without-arrays",
            'ExactResult.from_dict(d) without d["arrays"]',
            lambda: bj.ExactResult.from_dict(result_dict(arrays=...)),
            ValueError,
            (
                'the ExactResult dict lacks "arrays" (the dtype and shape of each array field), got None',
            ),
        ),
        (
            "from-dict-shape-mismatch",
            'ExactResult.from_dict(d) with d["shapley"] cut to one row',
            lambda: bj.ExactResult.from_dict(result_dict(shapley=result_dict()["shapley"][:1])),
            ValueError,
            (
                "the ExactResult field 'shapley' does not match its entry under \"arrays\"",
                "cannot reshape array of size 2 into shape (2,2)",
            ),
        ),
        (
            "to-json-missing-folder",
            'result.to_json("missing/result.json")',
            lambda: exact_result().to_json("missing/result.json"),
            FileNotFoundError,
            ("cannot write 'missing/result.json': its folder", "does not exist"),
        ),
        (
            "to-json-folder",
            "result.to_json(folder)",
            lambda: exact_result().to_json(folder()),
            IsADirectoryError,
            ("cannot write 'folder': it is a folder; give a file path",),
        ),
    ),
    *rows(
        "Decisions declared on traced runs, and the blame command",
        (
            "declare-decisions-unmatched",
            'traces.declare_decisions([call_run], {"Plannr": ("search", "answer")})',
            lambda: T.declare_decisions([CALL_RUN], {"Plannr": ("search", "answer")}),
            ValueError,
            (
                "options are declared for agents ['Plannr'] that match no step of runs 't1'; "
                "the agents with model calls in these runs are ['Planner']",
            ),
        ),
        (
            "declare-decisions-by-span-unmatched",
            'traces.declare_decisions([call_run], {"chat gpt": (...)}, by="span")',
            lambda: T.declare_decisions([CALL_RUN], {"chat gpt": ("search", "answer")}, by="span"),
            ValueError,
            (
                "options are declared for spans ['chat gpt'] that match no step of runs 't1'; "
                "the span names in these runs are ['chat']",
            ),
        ),
        (
            "declare-decisions-function-nothing",
            "traces.declare_decisions([call_run], lambda run, step: None)",
            lambda: T.declare_decisions([CALL_RUN], lambda run, step: None),
            ValueError,
            ("the function declaring the options declared none for any step of runs 't1'",),
        ),
        (
            "declare-decisions-by",
            'traces.declare_decisions([call_run], {...}, by="name")',
            lambda: T.declare_decisions([CALL_RUN], {"Planner": ("a", "b")}, by="name"),
            ValueError,
            ("`by` must be one of ('agent', 'span'), got 'name'",),
        ),
        (
            "declare-decisions-no-reply",
            "traces.declare_decisions: the declared call kept no reply text",
            lambda: T.declare_decisions([call_run(output=None)], {"Planner": ("search", "answer")}),
            ValueError,
            (
                "run 't1', step 'chat': declared a decision, but it kept no reply text to read "
                "the choice from; record the content",
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY",
            ),
        ),
        (
            "declare-decisions-reply-names-no-option",
            'traces.declare_decisions: the reply is "maybe"',
            lambda: T.declare_decisions(
                [call_run(output="maybe")], {"Planner": ("search", "answer")}
            ),
            ValueError,
            ("run 't1', step 'chat': its reply \"maybe\" names no single option of",),
        ),
        (
            "declare-decisions-accept-not-option",
            'traces.declare_decisions(..., accept={"Planner": ("web",)})',
            lambda: T.declare_decisions(
                [CALL_RUN], {"Planner": ("search", "answer")}, accept={"Planner": ("web",)}
            ),
            ValueError,
            ("run 't1', step 'chat': `accept` names [\"web\"], which are not among its options",),
        ),
        (
            "score-decisions-no-prompt",
            "traces.score_decisions: the declared call kept no prompt",
            lambda: T.score_decisions(
                T.declare_decisions([call_run(prompt=False)], {"Planner": ("search", "answer")}),
                S.FunctionScorer(prefer_first),
            ),
            ValueError,
            (
                "run 't1', step 'chat': it kept no prompt for the scorer to read",
                "or pass request=(run, step, variant, parent) -> Request",
            ),
        ),
        (
            "score-decisions-nothing",
            "traces.score_decisions([call_run], scorer): no decision declared",
            lambda: T.score_decisions([CALL_RUN], S.FunctionScorer(prefer_first)),
            ValueError,
            (
                "no declared decision step is without logits: nothing to score (declare them "
                "first with bj.traces.declare_decisions)",
            ),
        ),
        (
            "score-decisions-choice-impossible",
            "traces.score_decisions: the scorer gives the observed choice -inf",
            lambda: T.score_decisions(
                T.declare_decisions([CALL_RUN], {"Planner": ("search", "answer")}),
                S.FunctionScorer(lambda r: np.array([0.0, NEG])),
            ),
            ValueError,
            ("run 't1', step 'chat': the scorer gives the observed choice 'answer' logit -inf",),
        ),
        (
            "score-decisions-not-a-scorer",
            "traces.score_decisions(runs, lambda r: ...)",
            lambda: T.score_decisions([CALL_RUN], prefer_first),
            TypeError,
            ("`scorer` must be a bj.scorers.Scorer",),
        ),
        (
            "decisions-from-logprobs-unmatched",
            'traces.decisions_from_logprobs([call_run], {"Writer": ("cite", "guess")})',
            lambda: T.decisions_from_logprobs([CALL_RUN], {"Writer": ("cite", "guess")}),
            ValueError,
            (
                "options are declared for agents ['Writer'], which match no step of runs 't1'; "
                "the agents with model calls in these runs are ['Planner']",
            ),
        ),
        (
            "decisions-from-logprobs-no-response",
            'traces.decisions_from_logprobs([call_run], {"Planner": ...}): no response kept',
            lambda: T.decisions_from_logprobs([CALL_RUN], {"Planner": ("search", "answer")}),
            ValueError,
            (
                "the calls of agents ['Planner'] in runs 't1' kept no chat completion with "
                "log-probabilities: no step became a decision",
                "declare the decisions with bj.traces.declare_decisions",
            ),
        ),
        (
            "mlflow-spans-not-a-list",
            'traces.from_mlflow("trace.json"), its "data": {"spans": {}}',
            lambda: T.from_mlflow(
                at("trace.json", json.dumps({"info": {"trace_id": "tr-1"}, "data": {"spans": {}}}))
            ),
            T.TraceError,
            ("trace.json: data.spans: expected a list of spans, got {}",),
        ),
        (
            "prompt-of-not-a-step",
            "traces.prompt_of(run)",
            lambda: T.prompt_of(CALL_RUN),
            TypeError,
            ("`step` must be a bj.traces.Step, got Run",),
        ),
        (
            "cli-blame-decisions-not-json",
            "python -m blamejax blame spans.jsonl --decisions d.json (not JSON) --scorer m",
            lambda: _cli.main(
                ["blame", "spans.jsonl", "--decisions", at("d.json", "{oops"), "--scorer", "m"]
            ),
            SystemExit,
            ("--decisions d.json: not valid JSON:",),
        ),
        (
            "cli-blame-fix-shape",
            'python -m blamejax blame ... --decisions {"planner": {"options": [...], "fix": "x"}}',
            lambda: _cli.main(
                [
                    "blame",
                    "spans.jsonl",
                    "--decisions",
                    at("d.json", '{"planner": {"options": ["a", "b"], "fix": "x"}}'),
                    "--scorer",
                    "m",
                ]
            ),
            SystemExit,
            (
                '--decisions d.json: \'planner\': "fix" must be {"system": "the corrected '
                'system message"} or {"append": "text added to the system message"}',
            ),
        ),
        (
            "cli-blame-missing-traces",
            "python -m blamejax blame missing.jsonl --decisions d.json --scorer m",
            lambda: _cli.main(
                [
                    "blame",
                    "missing.jsonl",
                    "--decisions",
                    at("d.json", '{"planner": {"options": ["a", "b"]}}'),
                    "--scorer",
                    "m",
                    "--cache",
                    "s.sqlite",
                ]
            ),
            SystemExit,
            ("TRACES missing.jsonl: no such file or folder",),
        ),
        (
            "cli-whowhen-span-file",
            "python -m blamejax whowhen spans.json (OTLP spans)",
            lambda: _cli.main(["whowhen", at("spans.json", SPANS_EXPORT)]),
            SystemExit,
            (
                "spans.json holds OpenTelemetry or OpenInference spans, not labelled runs",
                "python -m blamejax blame spans.json --decisions DECISIONS.json --scorer MODEL",
            ),
        ),
    ),
]

CATEGORIES = tuple(dict.fromkeys(row.category for row in ROWS))


def _param(row: Row):
    marks = [pytest.mark.xfail(strict=True, reason=f"open: {row.open}")] if row.open else []
    return pytest.param(row, id=row.id, marks=marks)


@pytest.mark.parametrize("row", [_param(row) for row in ROWS])
def test_error(row: Row, capsys, tmp_path, monkeypatch):
    """The bad input raises `row.error` with a message that matches `row.match`. The command
    line exits with status 2 and the message on stderr (argparse's `parser.error`). Each row
    runs in a fresh temporary folder, where its trigger writes the files it needs."""
    monkeypatch.chdir(tmp_path)
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
        lines += [
            f"### {category}",
            "",
            "| id | input | raises | the message a user reads |",
            "|---|---|---|---|",
        ]
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
