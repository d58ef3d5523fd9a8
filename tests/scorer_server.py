"""A small HTTP server on 127.0.0.1 that answers like the two model APIs on the endpoints
the scorer adapters use (`POST /v1/chat/completions`, `POST /v1/messages`), for
tests/test_scorers.py and tests/test_traces_instrumented.py. Each reply is scripted by the
test; every request is recorded."""

from __future__ import annotations

import collections
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Reply:
    def __init__(self, body, status=200, headers=None, delay=0.0):
        self.body, self.status, self.headers, self.delay = body, status, dict(headers or {}), delay


def chat(content="", top=None, prompt_tokens=11, completion_tokens=1):
    """An OpenAI chat completion; `top` is `{token: logprob}` for the first token."""
    logprobs = None
    if top is not None:
        entries = [{"token": t, "logprob": lp, "bytes": None} for t, lp in top.items()]
        first = next(iter(top)) if top else ""
        logprobs = {
            "content": [
                {
                    "token": first,
                    "logprob": top.get(first, 0.0),
                    "bytes": None,
                    "top_logprobs": entries,
                }
            ]
        }
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": logprobs,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def message(text, input_tokens=13, output_tokens=7):
    """An Anthropic message."""
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "test-model",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def letters_model(body):
    """A deterministic stand-in model for the logprobs mode: the letters of the options in
    the user message get log-probabilities that depend on the whole prompt."""
    prompt = body["messages"][-1]["content"]
    letters = re.findall(r"^([A-T])\. ", prompt, re.MULTILINE)
    seed = sum(map(ord, prompt))
    top = {letter: -0.125 * ((seed * (i + 3)) % 29) for i, letter in enumerate(letters)}
    return Reply(chat(letters[0] if letters else "", top))


def rules_model(rules, fallback=letters_model):
    """Chat completions that answer from `rules`, `[(text, {token: logprob})]`: the first rule
    whose text is in one of the request's messages answers with its most probable token, and
    with the log-probabilities (best first, at most `top_logprobs`) when the request asks for
    them (`logprobs=True`), as a real server does. Requests no rule matches go to `fallback`."""

    def model(body):
        texts = [m.get("content") for m in body.get("messages", [])]
        for text, table in rules:
            if any(isinstance(t, str) and text in t for t in texts):
                ranked = dict(sorted(table.items(), key=lambda kv: -kv[1]))
                if not body.get("logprobs"):
                    return Reply(chat(next(iter(ranked))))
                top = dict(list(ranked.items())[: body.get("top_logprobs") or 1])
                return Reply(chat(next(iter(top)), top))
        return fallback(body)

    return model


class FakeAPI:
    """`script`: replies served in order; when empty, `model(body) -> Reply` answers."""

    def __init__(self, model=letters_model):
        self.script = collections.deque()
        self.model = model
        self.received = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with api._lock:
                    api.received.append((self.path, body))
                    api.in_flight += 1
                    api.most_in_flight = max(api.most_in_flight, api.in_flight)
                    reply = api.script.popleft() if api.script else None
                try:
                    if self.path not in ("/v1/chat/completions", "/v1/messages"):
                        reply = Reply(
                            {"error": {"message": f"no endpoint {self.path}"}}, status=404
                        )
                    elif reply is None:
                        reply = api.model(body)
                    if reply.delay:
                        api._stop.wait(reply.delay)
                    data = (
                        reply.body
                        if isinstance(reply.body, bytes)
                        else json.dumps(reply.body).encode()
                    )
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)
                finally:
                    with api._lock:
                        api.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def close(self):
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


def text_of(body) -> str:
    """A deterministic stand-in for a text model: it says what it was asked and with which
    seed and temperature, so a test can see what the adapter sent."""
    last = body["messages"][-1]["content"]
    return f"seed={body.get('seed')} temperature={body.get('temperature')} max_tokens={body.get('max_tokens')}: {last}"


def chat_text_model(body):
    """Chat completions answered with `text_of(body)` as the message content."""
    return Reply(chat(text_of(body), prompt_tokens=5, completion_tokens=9))


def message_text_model(body):
    """Anthropic messages answered with `text_of(body)` (no seed: the API takes none)."""
    return Reply(message(text_of(body), input_tokens=6, output_tokens=8))


def openai_scorer(api: FakeAPI, **options):
    """An `OpenAIScorer` of the real `openai` client talking to `api` (quick retries)."""
    from blamejax.scorers import OpenAIScorer, Retry

    options.setdefault("retry", Retry(attempts=3, backoff=0.0))
    return OpenAIScorer(
        "test-model", base_url=f"{api.url}/v1", api_key="test", timeout=5.0, **options
    )


def anthropic_scorer(api: FakeAPI, **options):
    """An `AnthropicScorer` of the real `anthropic` client talking to `api` (quick retries)."""
    from blamejax.scorers import AnthropicScorer, Retry

    options.setdefault("retry", Retry(attempts=3, backoff=0.0))
    return AnthropicScorer("test-model", base_url=api.url, api_key="test", timeout=5.0, **options)
