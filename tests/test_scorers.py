"""bj.scorers: the protocol, the function scorer, the SQLite cache (concurrent writers, a
killed writer, corrupt files, offline replay), and the OpenAI and Anthropic adapters run with
their real client libraries against a local server (tests/scorer_server.py) on 127.0.0.1.
Only the tests that take the `api` fixture talk to a server; every other test is offline."""

import ast
import json
import math
import pathlib
import sqlite3
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scorer_server import FakeAPI, Reply, anthropic_scorer, chat, message, openai_scorer

import blamejax as bj
from blamejax.scorers import (
    AnthropicScorer,
    Cache,
    CacheError,
    FunctionScorer,
    Meter,
    OfflineMiss,
    OpenAIScorer,
    ReplyError,
    Request,
    Retry,
    ScorerError,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
ROUTE = Request("route", "factual", {"ticket": "refund please"}, ("refund", "escalate", "close"))


@pytest.fixture
def api():
    server = FakeAPI()
    try:
        yield server
    finally:
        server.close()


def lengths(request):
    return -np.asarray([len(o) for o in request.options], np.float64)


# The protocol and the function scorer --------------------------------------------------


def test_request_key_is_stable_and_checked():
    a = Request("s", "factual", {"b": 1, "a": [1.5, "é"]}, ("x", "y"))
    b = Request("s", "factual", {"a": [1.5, "é"], "b": 1}, ["x", "y"])
    assert a.key == b.key == '["s","factual",{"a":[1.5,"é"],"b":1},["x","y"]]'
    scorer = FunctionScorer(lengths)
    with pytest.raises(ValueError, match=r"`requests\[0\].options` must be distinct"):
        scorer.score([Request("s", "factual", "", ("x", "x"))])
    with pytest.raises(TypeError, match=r"`requests\[1\].inputs` must be plain JSON"):
        scorer.score([a, Request("s", "factual", {1, 2}, ("x",))])
    with pytest.raises(TypeError, match="`requests` must be a list"):
        scorer.score(a)


def test_function_scorer_checks_what_the_function_returns():
    with pytest.raises(ValueError, match=r"shape \(2,\).*expected shape \(3,\)"):
        FunctionScorer(lambda r: [0.0, 1.0]).score([ROUTE])
    with pytest.raises(ValueError, match="expected finite numbers or -inf"):
        FunctionScorer(lambda r: [0.0, math.nan, 1.0]).score([ROUTE])
    with pytest.raises(ValueError, match="not all -inf"):
        FunctionScorer(lambda r: [-math.inf] * 3).score([ROUTE])
    with pytest.raises(ValueError, match="`name` is required with a cache"):
        FunctionScorer(lambda r: [0.0] * 3, cache=Cache(":memory:"))


def test_batched_jax_function_equals_a_loop_and_repeats_are_asked_once():
    weights = jnp.asarray([0.5, -1.0, 2.0])

    def one(x):
        return jnp.tanh(x * weights)

    calls = []

    def batched(requests):
        calls.append(len(requests))
        xs = jnp.asarray([r.inputs["x"] for r in requests])
        return np.asarray(jax.jit(jax.vmap(one))(xs))

    requests = [Request("s", "factual", {"x": x}, ("a", "b", "c")) for x in (0.5, -1.0, 0.5, 2.0)]
    scorer = FunctionScorer(batched, batched=True, name="tanh")
    got = scorer.score(requests)
    assert calls == [3]  # the repeated request is asked once
    for request, row in zip(requests, got):
        np.testing.assert_allclose(
            row, np.asarray(one(jnp.asarray(request.inputs["x"]))), rtol=1e-6
        )
    assert scorer.meter.snapshot() == {
        "calls": 3,
        "attempts": 0,
        "retries": 0,
        "hits": 0,
        "misses": 4,
        "input_tokens": 0,
        "output_tokens": 0,
    }
    threaded = FunctionScorer(
        lambda r: np.tanh(r.inputs["x"] * np.asarray(weights, np.float64)), concurrency=4
    )
    for a, b in zip(threaded.score(requests), got):
        np.testing.assert_allclose(a, b, rtol=1e-6)


# The cache ------------------------------------------------------------------------------


def test_cache_hits_offline_misses_and_exact_logits(tmp_path):
    path = tmp_path / "scores.sqlite"
    rows = {"a": [0.1, -math.inf, 1 / 3], "b": [5e-324, -1e308, 0.0]}
    fn = lambda r: rows[r.inputs]
    scorer = FunctionScorer(fn, name="rows", cache=Cache(path))
    requests = [Request("s", "factual", k, ("x", "y", "z")) for k in rows]
    first = scorer.score(requests)
    again = scorer.score(requests)
    assert scorer.meter.calls == 2 and scorer.meter.hits == 2
    offline = FunctionScorer(fn, name="rows", cache=Cache(path, offline=True))
    replay = offline.score(requests)
    for a, b, c in zip(first, again, replay):
        assert a.tobytes() == b.tobytes() == c.tobytes()
    assert [r.tolist() for r in replay] == list(rows.values())
    miss = Request("s", "fix", "a", ("x", "y", "z"))
    with pytest.raises(
        OfflineMiss, match=r"holds no score of FunctionScorer\('rows'\) for step 's', variant 'fix'"
    ):
        offline.score([requests[0], miss])
    assert offline.meter.calls == 0
    other = FunctionScorer(fn, name="rows", version="2", cache=Cache(path, offline=True))
    with pytest.raises(OfflineMiss, match="variant 'factual'"):  # a new version is a new key
        other.score(requests[:1])


def test_cache_rejects_a_corrupt_file_another_schema_and_a_foreign_database(tmp_path):
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is not a database, " * 100)
    with pytest.raises(CacheError, match=r"corrupt\.sqlite: not a readable SQLite score cache"):
        Cache(corrupt)
    old = tmp_path / "old.sqlite"
    Cache(old).close()
    with sqlite3.connect(old) as db:
        db.execute("UPDATE meta SET value = '99' WHERE name = 'schema'")
    with pytest.raises(
        CacheError,
        match=r"old\.sqlite: a score cache of schema version 99, but this blamejax reads version 1",
    ):
        Cache(old)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(
        CacheError, match=r"foreign\.sqlite: an SQLite file that is not a blamejax score cache"
    ):
        Cache(foreign)


WRITER = """
import json, sys, time, pathlib
import numpy as np
path, tag, go = sys.argv[1], float(sys.argv[2]), pathlib.Path(sys.argv[3])
cache = Cache(path)
pathlib.Path(f"{go}.{int(tag)}").touch()  # ready
deadline = time.monotonic() + 30
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.002)
mine = list(range(0, 150) if tag == 1 else range(100, 250))
other = pathlib.Path(f"{go}.{3 - int(tag)}.first")
mismatch, saw_other = 0, False
for n, i in enumerate(mine):
    if n == len(mine) - 1:  # the last write waits (30 s at most) until the other has written
        deadline = time.monotonic() + 30
        while not other.exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        saw_other = other.exists()
    r = Request("s", "factual", i, ("x", "y"))
    stored = cache.put("writer", r, np.array([tag, float(i)]))
    mismatch += stored.tolist() != cache.get("writer", r).tolist()
    if n == 0:
        pathlib.Path(f"{go}.{int(tag)}.first").touch()
    time.sleep(0.001)
print(json.dumps({"mismatch": mismatch, "saw_other": saw_other}))
"""


# The children load only the modules of bj.scorers they use (the cache, the request, the
# scorer protocol need neither jax nor the rest of the package), so that they start fast.
ALONE = f"""
import sys, types
for name, path in (("blamejax", {str(ROOT / "blamejax")!r}), ("blamejax.scorers", {str(ROOT / "blamejax" / "scorers")!r})):
    module = types.ModuleType(name)
    module.__path__ = [path]
    sys.modules[name] = module
from blamejax.scorers._cache import Cache
from blamejax.scorers._request import Request
from blamejax.scorers._scorer import FunctionScorer
"""


def _python(script, *args):
    return subprocess.Popen(
        [sys.executable, "-c", ALONE + textwrap.dedent(script), *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_write_one_cache_at_once(tmp_path):
    path, go = tmp_path / "shared.sqlite", tmp_path / "go"
    writers = [_python(WRITER, path, tag, go) for tag in (1, 2)]
    try:
        deadline = time.monotonic() + 30
        while (
            not all(pathlib.Path(f"{go}.{tag}").exists() for tag in (1, 2))
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        go.touch()
        outs = [w.communicate(timeout=60) for w in writers]
    finally:
        for w in writers:
            w.kill()
    reports = []
    for (out, err), w in zip(outs, writers):
        assert w.returncode == 0, err
        reports.append(json.loads(out))
    assert [r["mismatch"] for r in reports] == [0, 0]
    # They did overlap: each one's last write came after the other's first (an order of
    # events, not a reading of the clock, so a loaded machine cannot break it).
    assert [r["saw_other"] for r in reports] == [True, True]
    cache = Cache(path, offline=True)
    assert len(cache) == 250
    for i in range(250):
        tag, value = cache.get("writer", Request("s", "factual", i, ("x", "y"))).tolist()
        assert (
            value == i
            and tag == (1.0 if i < 100 else 2.0 if i >= 150 else tag)
            and tag in (1.0, 2.0)
        )
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


KILLED = """
import os, signal, sys
def fn(request):
    if request.inputs == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return [float(request.inputs), 0.0]
scorer = FunctionScorer(fn, name="dies", cache=Cache(sys.argv[1]))
scorer.score([Request("s", "factual", i, ("x", "y")) for i in range(10)])
"""


def test_a_killed_run_loses_no_answer_already_given(tmp_path):
    path = tmp_path / "killed.sqlite"
    child = _python(KILLED, path)
    try:
        child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == -9
    cache = Cache(path, offline=True)
    assert len(cache) == 5
    assert [
        cache.get(
            '{"kind": "function", "name": "dies", "version": "1"}',
            Request("s", "factual", i, ("x", "y")),
        ).tolist()
        for i in range(5)
    ] == [[float(i), 0.0] for i in range(5)]


# The optional client libraries ---------------------------------------------------------


def test_the_core_never_imports_a_client_library(monkeypatch):
    for path in (ROOT / "blamejax").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            assert not any(n.split(".")[0] in ("openai", "anthropic") for n in names), path
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ImportError, match=r'pip install "blamejax\[openai\]"'):
        OpenAIScorer("m")
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(ImportError, match=r'pip install "blamejax\[anthropic\]"'):
        AnthropicScorer("m")


# The adapters against a local server ---------------------------------------------------


def test_openai_logprobs_become_logits(api):
    api.script.append(Reply(chat("B", {"B": -0.2, " A": -2.5, "A": -3.0, "Sure": -4.0, "C": -6.0})))
    scorer = openai_scorer(api)
    [logits] = scorer.score([ROUTE])
    np.testing.assert_allclose(logits, [np.logaddexp(-2.5, -3.0), -0.2, -6.0], rtol=0, atol=1e-12)
    [(path, body)] = api.received
    assert path == "/v1/chat/completions"
    assert body["model"] == "test-model" and body["temperature"] == 0.0 and body["max_tokens"] == 1
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    assert "A. refund\nB. escalate\nC. close" in body["messages"][1]["content"]
    assert scorer.meter.snapshot() | {} == {
        "calls": 1,
        "attempts": 1,
        "retries": 0,
        "hits": 0,
        "misses": 1,
        "input_tokens": 11,
        "output_tokens": 1,
    }


def test_openai_logprobs_absent_letter_is_an_error_or_the_floor(api):
    api.script.append(Reply(chat("A", {"A": -0.1, "B": -3.0})))
    with pytest.raises(
        ReplyError, match=r"the letter 'C' of option 'close' is not among the returned tokens"
    ):
        openai_scorer(api).score([ROUTE])
    api.script.append(Reply(chat("A", {"A": -0.1, "B": -3.0})))
    [logits] = openai_scorer(api, absent="floor").score([ROUTE])
    assert logits.tolist() == [-0.1, -3.0, -3.0]
    api.script.append(Reply(chat("A", None)))
    with pytest.raises(ReplyError, match="returned no log-probabilities.*use mode='json'"):
        openai_scorer(api).score([ROUTE])


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
def test_json_scores_become_logits(api, adapter):
    text = '```json\n{"close": 0, "refund": 0.75, "escalate": 0.25}\n```'
    api.script.append(Reply(chat(text) if adapter == "openai" else message(text)))
    scorer = openai_scorer(api, mode="json") if adapter == "openai" else anthropic_scorer(api)
    [logits] = scorer.score([ROUTE])
    assert logits.tolist() == [math.log(0.75), math.log(0.25), -math.inf]
    [(path, body)] = api.received
    assert path == ("/v1/chat/completions" if adapter == "openai" else "/v1/messages")
    assert body["temperature"] == 0.0 and "logprobs" not in body
    assert '["refund", "escalate", "close"]' in body["messages"][-1]["content"]
    assert scorer.meter.input_tokens == (11 if adapter == "openai" else 13)


MALFORMED = [
    ("Refund, clearly.", "replied with text that is not JSON"),
    ('{"refund": 0.5, "escalate": 0.5}', r"gave no score for the options \['close'\]"),
    (
        '{"refund": "high", "escalate": 0.1, "close": 0.1}',
        "scored option 'refund' with 'high': expected a probability",
    ),
    (
        '{"refund": 0.5, "escalate": 0.1, "close": 0.1, "apologise": 0.3}',
        r"scored options that were not offered, \['apologise'\]",
    ),
    ('{"refund": 1.5, "escalate": 0.1, "close": 0.1}', "scored option 'refund' with 1.5"),
    ('{"refund": 0, "escalate": 0, "close": 0}', "scored every option 0"),
    ('["refund"]', "JSON that is not an object"),
    ('{"refund": NaN, "escalate": 0.1, "close": 0.1}', "not JSON"),
]


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
def test_malformed_json_replies_are_clear_errors(api, adapter, tmp_path):
    cache = Cache(tmp_path / "c.sqlite")
    scorer = (
        openai_scorer(api, mode="json", cache=cache)
        if adapter == "openai"
        else anthropic_scorer(api, cache=cache)
    )
    for text, error in MALFORMED:
        api.script.append(Reply(chat(text) if adapter == "openai" else message(text)))
        with pytest.raises(ReplyError, match=error) as raised:
            scorer.score([ROUTE])
        assert "step 'route', variant 'factual'" in str(raised.value)
    assert len(cache) == 0 and len(api.received) == len(MALFORMED)  # not retried, not stored


@pytest.mark.parametrize(
    "adapter, header",
    [
        ("openai", {"retry-after": "0.2"}),
        ("openai", {"retry-after-ms": "200"}),
        ("anthropic", {"retry-after": "0.2"}),
    ],
)
def test_a_rate_limit_is_retried_after_the_wait_it_asks_for(api, adapter, header):
    text = '{"refund": 0.5, "escalate": 0.25, "close": 0.25}'
    api.script.append(
        Reply({"error": {"message": "slow down", "type": "rate_limit_error"}}, 429, header)
    )
    api.script.append(Reply(chat(text) if adapter == "openai" else message(text)))
    scorer = openai_scorer(api, mode="json") if adapter == "openai" else anthropic_scorer(api)
    start = time.monotonic()
    [logits] = scorer.score([ROUTE])
    assert time.monotonic() - start >= 0.2
    assert logits.tolist() == [math.log(0.5), math.log(0.25), math.log(0.25)]
    assert (scorer.meter.attempts, scorer.meter.retries, scorer.meter.calls) == (2, 1, 1)


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
def test_server_errors_give_up_after_the_retries(api, adapter):
    for _ in range(3):
        api.script.append(Reply({"error": {"message": "boom", "type": "api_error"}}, 500))
    scorer = (
        openai_scorer(api, retry=Retry(attempts=3, backoff=0.01))
        if adapter == "openai"
        else anthropic_scorer(api, retry=Retry(attempts=3, backoff=0.01))
    )
    with pytest.raises(
        ScorerError,
        match=r"on step 'route'.*gave up after 3 attempt\(s\); the last failed with: HTTP 500",
    ):
        scorer.score([ROUTE])
    assert len(api.received) == 3 and (scorer.meter.attempts, scorer.meter.retries) == (3, 2)


def test_a_client_error_is_not_retried(api):
    api.script.append(
        Reply({"error": {"message": "no such model", "type": "invalid_request_error"}}, 404)
    )
    scorer = openai_scorer(api)
    with pytest.raises(ScorerError, match="HTTP 404 for step 'route'"):
        scorer.score([ROUTE])
    assert len(api.received) == 1


def test_a_slow_server_times_out(api):
    """Each attempt waits its timeout at least (a lower bound, which load cannot break); that
    the client gave up on its own is read from the server, which has answered neither request
    (it holds them for 60 s), not from an upper bound on the clock."""
    for _ in range(2):
        api.script.append(Reply(chat("A", {"A": 0.0}), delay=60.0))
    scorer = OpenAIScorer(
        "test-model",
        base_url=f"{api.url}/v1",
        api_key="test",
        timeout=0.3,
        retry=Retry(attempts=2, backoff=0.0),
    )
    start = time.monotonic()
    with pytest.raises(
        ScorerError,
        match=r"gave up after 2 attempt\(s\); the last failed with: no reply within the timeout of 0.3 s",
    ):
        scorer.score([ROUTE])
    assert time.monotonic() - start >= 0.6
    deadline = time.monotonic() + 30  # the server may read the second request late
    while len(api.received) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(api.received) == 2 and api.in_flight == 2  # both still unanswered


def test_concurrency_is_limited(api):
    """The server holds each request until three are in flight (or all 8 have come), so
    the most in flight is 3 whatever the load, and a limit that let more through would show."""

    def model(body):
        deadline = time.monotonic() + 30
        while api.in_flight < 3 and len(api.received) < 8 and time.monotonic() < deadline:
            time.sleep(0.002)
        return Reply(chat("A", {"A": -0.5, "B": -1.0, "C": -2.0}))

    api.model = model
    requests = [ROUTE._replace(inputs={"ticket": str(i)}) for i in range(8)]
    scorer = openai_scorer(api, concurrency=3)
    assert len(scorer.score(requests)) == 8
    assert api.most_in_flight == 3 and scorer.meter.calls == 8


def _scored_run(scorer):
    """Two decision steps scored through the protocol, blamed through bj.traces."""
    plan_opts, reply_opts = ("search", "answer"), ("cite", "guess", "refuse")
    requests = [
        Request("plan", "factual", {"question": "When does the café open?"}, plan_opts),
        Request(
            "plan",
            "fix",
            {"question": "When does the café open?", "hint": "check the hours"},
            plan_opts,
        ),
        Request("reply", "factual", {"draft": "It opens at 9."}, reply_opts),
        Request("reply", "fix", {"draft": "It opens at 9.", "hint": "quote the page"}, reply_opts),
    ]
    plan_f, plan_x, reply_f, reply_x = (tuple(row.tolist()) for row in scorer.score(requests))
    plan = bj.traces.Step(
        "plan",
        agent="Planner",
        options=plan_opts,
        logits={"factual": plan_f, "fix": plan_x},
        accept=("search",),
        choice="answer",
    )
    reply = bj.traces.Step(
        "reply",
        agent="Writer",
        parents=("plan",),
        options=reply_opts,
        logits={"factual": reply_f, "fix": reply_x},
        accept=("cite",),
        choice="guess",
    )
    run = bj.traces.Run("r0", (plan, reply), passed=False)
    return requests, bj.traces.blame_runs([run], key=3, num_worlds=8)


def test_offline_replay_gives_the_same_logits_and_blame_bit_for_bit(api, tmp_path):
    path = tmp_path / "scores.sqlite"
    online = openai_scorer(api, cache=Cache(path))
    requests, blamed = _scored_run(online)
    assert online.meter.calls == 4 and len(api.received) == 4
    logits = online.score(requests)
    assert online.meter.hits == 4 and len(api.received) == 4
    url = api.url
    api.close()  # no server from here on
    offline = OpenAIScorer(
        "test-model", base_url=f"{url}/v1", api_key="test", cache=Cache(path, offline=True)
    )
    replayed = offline.score(requests)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(logits, replayed))
    _, again = _scored_run(offline)
    assert offline.meter.calls == 0 and offline.meter.attempts == 0
    assert np.asarray(blamed.result.shapley).tobytes() == np.asarray(again.result.shapley).tobytes()
    for field in ("banzhaf", "empty", "full"):
        assert (
            np.asarray(getattr(blamed.result, field)).tobytes()
            == np.asarray(getattr(again.result, field)).tobytes()
        )
    with pytest.raises(
        OfflineMiss,
        match=r"scores\.sqlite holds no score of OpenAIScorer\(model='test-model', mode='logprobs'\) for step 'plan', variant 'other'",
    ):
        offline.score([requests[0]._replace(variant="other")])
    changed = OpenAIScorer(
        "test-model",
        base_url=f"{url}/v1",
        api_key="test",
        template="{options}?",
        cache=Cache(path, offline=True),
    )
    with pytest.raises(OfflineMiss):  # another prompt template is another key
        changed.score(requests[:1])


def test_adapter_arguments_are_checked():
    with pytest.raises(ValueError, match="`mode` must be one of"):
        OpenAIScorer("m", mode="text")
    with pytest.raises(ValueError, match=r"`template` uses unknown fields \['question'\]"):
        OpenAIScorer("m", template="{question} {options}")
    with pytest.raises(ValueError, match=r"`template` must show the options"):
        AnthropicScorer("m", template="{inputs}")
    with pytest.raises(ValueError, match="`top_logprobs` must be an integer in"):
        OpenAIScorer("m", top_logprobs=50)
    with pytest.raises(TypeError, match="`meter` must be a bj.scorers.Meter"):
        OpenAIScorer("m", meter={})
    many = Request("s", "factual", "", tuple(f"o{i}" for i in range(21)))
    with pytest.raises(ValueError, match="at most 20.*use mode='json'"):
        OpenAIScorer(
            "m", api_key="x", base_url="http://127.0.0.1:9/v1", retry=Retry(attempts=1)
        ).score([many])
    assert isinstance(Meter(), Meter)
