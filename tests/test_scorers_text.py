"""bj.scorers free-text steps: `TextRequest`, `text_seed` and `scorer.generate` / `record`.

The seed is a pure function of (key, case, world, step, slot), the same in 32- and 64-bit
mode; the OpenAI and Anthropic adapters, with their real client libraries against the local
server of tests/scorer_server.py, send it (OpenAI) with the temperature, and the text is cached
under the request: the same seed and inputs make one call, then hits; the recorded world's
texts replay with no call; an offline miss names the request; another world is another seed
and a fresh call (interventional, not counterfactual)."""

import sqlite3
import subprocess
import sys
import textwrap

import jax
import jax.random as jr
import numpy as np
import pytest
from scorer_server import (
    FakeAPI,
    Reply,
    anthropic_scorer,
    chat,
    chat_text_model,
    message,
    message_text_model,
    openai_scorer,
)

import blamejax as bj
from blamejax.scorers import (
    Cache,
    FunctionScorer,
    OfflineMiss,
    OpenAIScorer,
    ReplyError,
    ScorerError,
    TextRequest,
    text_seed,
)

NOTE = [
    {"role": "system", "content": "You are the Writer."},
    {"role": "user", "content": "Summarise the ticket."},
]


@pytest.fixture
def chat_api():
    server = FakeAPI(model=chat_text_model)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def messages_api():
    server = FakeAPI(model=message_text_model)
    try:
        yield server
    finally:
        server.close()


# The seed ------------------------------------------------------------------------------


def test_text_seed_is_the_addressed_noise_of_the_step():
    key = jr.key(5)
    # By hand, with jax.random itself: world key, then the text family, the step, the slot.
    site = jr.fold_in(jr.fold_in(key, 2), 3)
    site = jr.fold_in(jr.fold_in(jr.fold_in(site, 0x54455854), bj.noise.stable_hash("note")), 1)
    expected = int(np.asarray(jr.key_data(site))[0]) % 2**31
    assert text_seed(key, "note", case=2, world=3, slot=1) == expected
    assert text_seed(5, "note", case=2, world=3, slot=1) == expected  # an int seed is that key
    seeds = {
        text_seed(key, s, case=c, world=w)
        for s in ("note", "plan")
        for c in range(3)
        for w in range(4)
    }
    assert len(seeds) == 24  # every address its own seed
    assert all(isinstance(s, int) and 0 <= s < 2**31 for s in seeds)
    # The recorded world is world 0: the key of bj.recorded_worlds.
    recorded = bj.recorded_worlds(key, np.arange(3)).key[2, 0]
    by_world = jr.fold_in(
        jr.fold_in(jr.fold_in(recorded, 0x54455854), bj.noise.stable_hash("note")), 0
    )
    assert text_seed(key, "note", case=2) == int(np.asarray(jr.key_data(by_world))[0]) % 2**31


def test_text_seed_is_the_same_in_64_bit_mode_and_in_another_process():
    here = [text_seed(7, "note", case=c, world=w) for c in range(2) for w in range(3)]
    code = textwrap.dedent(
        """
        import jax
        jax.config.update("jax_enable_x64", True)
        from blamejax.scorers import text_seed
        print([text_seed(7, "note", case=c, world=w) for c in range(2) for w in range(3)])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == str(here)


def test_text_seed_and_text_requests_are_checked():
    with pytest.raises(TypeError, match="`step` must be a non-empty string"):
        text_seed(0, "")
    with pytest.raises(ValueError, match=r"`world` must be an integer in \[0, 2\*\*32\), got -1"):
        text_seed(0, "note", world=-1)
    writer = FunctionScorer(None, text=lambda r: "x")
    with pytest.raises(
        ValueError, match=r"`requests\[0\].seed` must be an integer in \[0, 2\*\*31\)"
    ):
        writer.generate([TextRequest("note", "factual", "hi", 2**31)])
    with pytest.raises(TypeError, match=r"`requests\[1\].inputs\[0\]` must be a message"):
        writer.generate(
            [
                TextRequest("note", "factual", "hi", 1),
                TextRequest("note", "factual", [{"role": "bot"}], 1),
            ]
        )
    with pytest.raises(
        ValueError, match=r"`requests\[0\].temperature` must be a number in \[0, 2\]"
    ):
        writer.generate([TextRequest("note", "factual", "hi", 1, temperature=3.0)])
    with pytest.raises(TypeError, match="`requests` must be a list of bj.scorers.TextRequest"):
        writer.generate(TextRequest("note", "factual", "hi", 1))
    with pytest.raises(
        TypeError, match=r"`requests\[0\]` is a bj.scorers.Request \(options to score"
    ):
        writer.generate([bj.scorers.Request("note", "factual", "hi", ("a", "b"))])
    with pytest.raises(TypeError, match=r"`requests\[0\]` must be a bj.scorers.Request"):
        FunctionScorer(lambda r: [0.0]).score([TextRequest("note", "factual", "hi", 1)])
    with pytest.raises(TypeError, match="writes no text: it scores options only"):
        FunctionScorer(lambda r: [0.0]).generate([TextRequest("note", "factual", "hi", 1)])
    with pytest.raises(ReplyError, match="expected a string of text"):
        FunctionScorer(None, text=lambda r: 3).generate([TextRequest("note", "factual", "hi", 1)])
    assert (
        TextRequest("n", "factual", NOTE, 1).key == TextRequest("n", "factual", tuple(NOTE), 1).key
    )


# generate through the cache --------------------------------------------------------------


def test_the_same_seed_and_inputs_make_one_call_then_hits(chat_api, tmp_path):
    path = tmp_path / "texts.sqlite"
    writer = openai_scorer(chat_api, cache=Cache(path))
    seed = text_seed(0, "note")
    request = TextRequest("note", "factual", NOTE, seed, temperature=0.7, max_tokens=64)
    text, same = writer.generate([request, request])
    assert same == text
    assert text == f"seed={seed} temperature=0.7 max_tokens=64: Summarise the ticket."
    assert len(chat_api.received) == 1  # one call for the two identical requests
    path_sent, body = chat_api.received[0]
    assert path_sent == "/v1/chat/completions"
    assert body["seed"] == seed and body["temperature"] == 0.7 and body["messages"] == NOTE
    assert writer.meter.snapshot() == {
        "calls": 1,
        "attempts": 1,
        "retries": 0,
        "hits": 0,
        "misses": 2,
        "input_tokens": 5,
        "output_tokens": 9,
    }
    assert (
        writer.generate([request]) == [text]
        and len(chat_api.received) == 1
        and writer.meter.hits == 1
    )
    # Another world is another seed: a fresh call and another sample.
    other = request._replace(seed=text_seed(0, "note", world=1))
    [fresh] = writer.generate([other])
    assert (
        len(chat_api.received) == 2
        and fresh != text
        and chat_api.received[1][1]["seed"] == other.seed
    )
    # The texts live beside the scores, in their own table; a new scorer replays them offline.
    cache = Cache(path, offline=True)
    assert cache.num_texts() == 2 and len(cache) == 0
    url = chat_api.url
    chat_api.close()
    offline = OpenAIScorer("test-model", base_url=f"{url}/v1", api_key="test", cache=cache)
    assert offline.generate([request, other]) == [text, fresh]
    assert offline.meter.calls == 0 and offline.meter.attempts == 0 and offline.meter.hits == 2


def test_an_offline_miss_names_the_request(tmp_path):
    Cache(tmp_path / "texts.sqlite").close()  # an empty cache
    cache = Cache(tmp_path / "texts.sqlite", offline=True)
    writer = OpenAIScorer(
        "test-model", base_url="http://127.0.0.1:9/v1", api_key="test", cache=cache
    )
    changed = TextRequest("note", "fix", "Summarise the corrected ticket.", text_seed(0, "note"))
    with pytest.raises(
        OfflineMiss,
        match=rf"texts\.sqlite holds no text of OpenAIScorer\(model='test-model', mode='logprobs'\) for "
        rf"step 'note', variant 'fix', seed {changed.seed}, inputs \"Summarise the corrected ticket\.\" "
        r"\(and 1 other missing request\(s\)\); generate it online once",
    ):
        writer.generate([changed, changed._replace(seed=1)])
    assert writer.meter.calls == 0 and writer.meter.attempts == 0


def test_recorded_texts_replay_with_no_call_and_a_changed_input_is_a_fresh_sample(
    chat_api, tmp_path
):
    path = tmp_path / "texts.sqlite"
    recorded = TextRequest("note", "factual", NOTE, text_seed(3, "note", case=1))
    writer = openai_scorer(chat_api, cache=Cache(path))
    writer.record([recorded], ["The ticket asks for a refund."])
    assert writer.generate([recorded]) == ["The ticket asks for a refund."]
    assert chat_api.received == [] and writer.meter.calls == 0 and writer.meter.hits == 1
    writer.record([recorded], ["The ticket asks for a refund."])  # the same text again: kept
    with pytest.raises(
        ValueError, match="already holds another text for step 'note', variant 'factual'"
    ):
        writer.record([recorded], ["Something else."])
    # After a fix upstream the step sees other inputs: a new request, a fresh sample (not the
    # recorded luck applied to the new input: interventional).
    fixed = recorded._replace(
        inputs=[*NOTE[:1], {"role": "user", "content": "Summarise the corrected ticket."}]
    )
    [text] = writer.generate([fixed])
    assert len(chat_api.received) == 1 and text.endswith("Summarise the corrected ticket.")
    with pytest.raises(TypeError, match="`texts` must be a list of 1 strings"):
        writer.record([recorded], "one")
    with pytest.raises(ValueError, match="has no cache"):
        openai_scorer(chat_api).record([recorded], ["x"])


def test_anthropic_sends_the_temperature_and_system_and_caches_under_the_seed(
    messages_api, tmp_path
):
    writer = anthropic_scorer(messages_api, cache=Cache(tmp_path / "texts.sqlite"))
    request = TextRequest("note", "factual", NOTE, text_seed(0, "note"), temperature=0.5)
    [text] = writer.generate([request])
    path_sent, body = messages_api.received[0]
    assert path_sent == "/v1/messages"
    assert body["system"] == "You are the Writer." and body["messages"] == NOTE[1:]
    assert body["temperature"] == 0.5 and "seed" not in body  # the API takes no seed
    assert text == "seed=None temperature=0.5 max_tokens=256: Summarise the ticket."
    assert writer.meter.input_tokens == 6 and writer.meter.output_tokens == 8
    assert writer.generate([request]) == [text] and len(messages_api.received) == 1
    [other] = writer.generate(
        [request._replace(seed=request.seed + 1)]
    )  # another seed, another key
    assert len(messages_api.received) == 2 and other == text  # (this stand-in ignores the seed)


def test_text_calls_are_retried_and_malformed_replies_are_errors(chat_api, messages_api):
    writer = openai_scorer(chat_api)
    request = TextRequest("note", "factual", "hi", 11)
    chat_api.script.extend(
        [
            Reply({"error": {"message": "slow down"}}, status=429, headers={"retry-after": "0"}),
            Reply(chat("hello")),
        ]
    )
    assert writer.generate([request]) == ["hello"]
    assert writer.meter.attempts == 2 and writer.meter.retries == 1
    chat_api.script.extend([Reply({"error": {"message": "down"}}, status=500)] * 3)
    with pytest.raises(ScorerError, match="gave up after 3 attempt"):
        writer.generate([request._replace(seed=12)])
    chat_api.script.append(Reply(chat(None)))
    with pytest.raises(ReplyError, match="expected a string of text"):
        writer.generate([request._replace(seed=13)])
    messages_api.script.append(Reply(message("x") | {"content": None}))
    with pytest.raises(ReplyError, match="without content"):
        anthropic_scorer(messages_api).generate([request])


def test_a_function_writer_gets_the_seed_and_jit_equals_eager(tmp_path):
    """A local text model: a JAX function of the seed picks words; the cache keys on the seed."""
    words = ("refund", "escalate", "close", "wait")

    def sample(seed, n):
        return jax.random.randint(jr.key(seed), (n,), 0, len(words))

    def write(request):
        picks = np.asarray(jax.jit(sample, static_argnums=1)(request.seed, 4))
        assert (picks == np.asarray(sample(request.seed, 4))).all()  # jit equals eager
        return " ".join(words[i] for i in picks)

    writer = FunctionScorer(None, text=write, name="words", cache=Cache(tmp_path / "t.sqlite"))
    requests = [
        TextRequest("note", "factual", "hi", text_seed(0, "note", world=w)) for w in range(3)
    ]
    texts = writer.generate(requests)
    assert texts == [write(r) for r in requests] and writer.meter.calls == 3
    assert writer.generate(requests[::-1]) == texts[::-1] and writer.meter.calls == 3
    with pytest.raises(TypeError, match="was given no `fn`: it writes text only"):
        writer.score([bj.scorers.Request("s", "factual", "", ("a",))])


def test_threaded_generate_equals_a_loop(tmp_path):
    def write(request):
        return f"{request.inputs}:{request.seed}"

    requests = [
        TextRequest("note", "factual", f"ticket {i % 3}", text_seed(0, "note", world=i))
        for i in range(8)
    ]
    loop = [write(r) for r in requests]
    threaded = FunctionScorer(
        None, text=write, name="w", concurrency=4, cache=Cache(tmp_path / "t.sqlite")
    )
    assert threaded.generate(requests) == loop and threaded.meter.calls == 8


def test_a_cache_written_before_the_texts_table_gains_it(tmp_path):
    path = tmp_path / "old.sqlite"
    scores = FunctionScorer(lambda r: [0.0, 1.0], name="f", cache=Cache(path))
    [logits] = scores.score([bj.scorers.Request("s", "factual", "x", ("a", "b"))])
    scores.cache.close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE texts")  # as a schema-1 file of before free-text steps
    db.commit()
    db.close()
    cache = Cache(path)
    assert len(cache) == 1 and cache.num_texts() == 0
    writer = FunctionScorer(None, text=lambda r: "hello", name="f", cache=cache)
    request = TextRequest("note", "factual", "hi", 3)
    assert (
        writer.generate([request]) == ["hello"]
        and Cache(path, offline=True).get_text(writer.text_identity, request) == "hello"
    )
