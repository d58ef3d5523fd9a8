"""The adapter for OpenAI-compatible chat completion servers (hosted, or local: vLLM,
llama.cpp's server, Ollama), through the official `openai` client."""

from __future__ import annotations

from ._cache import Cache
from ._meter import Meter
from ._parse import ReplyError, logits_from_json, logits_from_logprobs
from ._prompt import check_options, render
from ._remote import RemoteScorer, tokens
from ._retry import Retry
from ._scorer import Answer
from ._text import TextAnswer


class OpenAIScorer(RemoteScorer):
    """Scores options with a model behind an OpenAI-compatible `POST /chat/completions`.

    Two modes:
    - `mode="logprobs"` (default): the options are shown as letters A, B, C, ...; one token
      is asked for (`max_tokens=1`, `logprobs=True`, `top_logprobs`), and option i's logit is
      the log-probability of its letter as the first token (rules in
      `bj.scorers.logits_from_logprobs`; at most 20 options). Use it where the server
      returns log-probabilities.
    - `mode="json"`: the model is asked for one JSON object `{option: probability}` at
      `temperature`; logits are log p (rules in `bj.scorers.logits_from_json`).

    **Arguments:**
    - `model`: the model name the server knows; `base_url`: the server (`None`: the
      client's default or `OPENAI_BASE_URL`), e.g. `"http://localhost:8000/v1"`;
      `api_key` (`None`: `OPENAI_API_KEY`; local servers take any string).
    - `template`: the user message, a `str.format` string with `{step}`, `{variant}`,
      `{inputs}`, `{options}` (default: the mode's); `system`: the system message.
    - `temperature` (default 0; `None` sends none: the server's default), `max_tokens` (json mode; default 256), `top_logprobs`
      (logprobs mode; default 20), `absent` (`"error"` or `"floor"`, logprobs mode).
    - `revision`: what else decides the scores behind the name `model` (the model file's
      hash and the server's build; `bj.scorers.llama_server` gives it as `server.revision`),
      kept in the cache key so that scores of two files or builds served under one name
      never mix; `None`: the name alone.
    - `timeout`: seconds per HTTP request; `retry`: a `Retry` (429 and 5xx, honouring
      `Retry-After`, timeouts and dropped connections); `concurrency`: requests at once.
    - `cache`, `meter`: as for every `Scorer`; `client`: an `openai.OpenAI` to use instead.

    The cache key holds the model, its `revision`, mode, template, system message, temperature
    and token settings, not the address: a hosted answer replays from the cache anywhere.

    `generate(text_requests)` writes free-text steps: each `TextRequest`'s messages are sent
    with its `seed`, `temperature` and `max_tokens` (the template and system message are not
    used), and the texts are cached under the model and the request.

    **Raises:** `ImportError` naming `pip install "blamejax[openai]"` without the client.

    ```python
    # doctest: skip (needs a server; see tests/test_scorers.py and docs/real_runs.md)
    from blamejax.scorers import OpenAIScorer, Request, Cache
    scorer = OpenAIScorer("qwen2.5-7b-instruct", base_url="http://localhost:8000/v1", api_key="none",
                          cache=Cache("scores.sqlite"))
    [logits] = scorer.score([Request("route", "factual", "refund please", ("refund", "escalate"))])
    ```
    """

    module = "openai"
    extra = "openai"
    kind = "openai-chat"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        mode: str = "logprobs",
        template: str | None = None,
        system: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 256,
        top_logprobs: int = 20,
        absent: str = "error",
        revision: str | None = None,
        timeout: float = 60.0,
        retry: Retry = Retry(),
        concurrency: int = 4,
        cache: Cache | None = None,
        meter: Meter | None = None,
        client=None,
    ):
        if (
            isinstance(top_logprobs, bool)
            or not isinstance(top_logprobs, int)
            or not 1 <= top_logprobs <= 20
        ):
            raise ValueError(f"`top_logprobs` must be an integer in [1, 20], got {top_logprobs!r}")
        if revision is not None and (not isinstance(revision, str) or not revision):
            raise TypeError(f"`revision` must be a non-empty string or None, got {revision!r}")
        settings = {"top_logprobs": top_logprobs, "absent": absent} if mode == "logprobs" else {}
        if revision is not None:
            settings["revision"] = revision
        super().__init__(
            model,
            mode=mode,
            template=template,
            system=system,
            temperature=temperature,
            max_tokens=1 if mode == "logprobs" else max_tokens,
            timeout=timeout,
            retry=retry,
            concurrency=concurrency,
            cache=cache,
            meter=meter,
            client=client,
            client_options={"base_url": base_url, "api_key": api_key},
            settings=settings,
        )
        self.top_logprobs = top_logprobs
        self.absent = absent

    def _make_client(self, **options):
        return self._sdk.OpenAI(**options)

    def _answer(self, request):
        check_options(request, self.mode)
        messages = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": render(self.template, request, self.mode)},
        ]
        extra = (
            {"logprobs": True, "top_logprobs": self.top_logprobs} if self.mode == "logprobs" else {}
        )
        if self.temperature is not None:
            extra["temperature"] = self.temperature

        def send(client):
            return client.chat.completions.create(
                model=self.model,
                messages=messages,
                max_tokens=self.max_tokens,
                **extra,
            )

        choice, *used = self._reply(request, self._request(request, send))
        if self.mode == "json":
            return Answer(logits_from_json(choice.message.content, request, who=self.name), *used)
        content = getattr(getattr(choice, "logprobs", None), "content", None) or []
        top = [(t.token, t.logprob) for t in (content[0].top_logprobs or [])] if content else []
        return Answer(logits_from_logprobs(top, request, absent=self.absent, who=self.name), *used)

    def _generate(self, request):
        def send(client):
            return client.chat.completions.create(
                model=self.model,
                messages=request.messages(),
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                seed=request.seed,
            )

        choice, *used = self._reply(request, self._request(request, send))
        return TextAnswer(choice.message.content, *used)

    def _reply(self, request, response) -> tuple:
        """A response's first choice, and its prompt and completion tokens."""
        usage = getattr(response, "usage", None)
        try:
            choice = response.choices[0]
        except (AttributeError, IndexError, TypeError):
            raise ReplyError(
                f"{self.name} returned a response without choices for {request.describe()}: {response!r:.200}"
            ) from None
        return choice, tokens(usage, "prompt_tokens"), tokens(usage, "completion_tokens")
