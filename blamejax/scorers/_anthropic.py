"""The adapter for Anthropic's Messages API, through the official `anthropic` client."""

from __future__ import annotations

from ._cache import Cache
from ._meter import Meter
from ._parse import ReplyError, logits_from_json
from ._prompt import render
from ._remote import RemoteScorer, tokens
from ._retry import Retry
from ._scorer import Answer
from ._text import TextAnswer


class AnthropicScorer(RemoteScorer):
    """Scores options with a model behind Anthropic's `POST /v1/messages`: the model is
    asked for one JSON object `{option: probability}` at `temperature` (default 0), and the
    logits are log p (rules in `bj.scorers.logits_from_json`). The API returns no
    log-probabilities, so JSON scores are the only mode. The temperature is sent in the
    request body; `temperature=None` sends none, for models that take no sampling settings.

    `generate(text_requests)` writes free-text steps (system messages of the request go in
    the `system` field). The API takes no seed, so a missing text is an unseeded sample; the
    seed is still part of the cache key, and replay from the cache is exact.

    **Arguments:** `model`; `base_url` (`None`: the client's default); `api_key` (`None`:
    `ANTHROPIC_API_KEY`); `template`, `system`, `temperature`, `max_tokens` (default 256),
    `timeout`, `retry`, `concurrency`, `cache`, `meter`, `client` (an `anthropic.Anthropic`),
    as for `OpenAIScorer`.

    **Raises:** `ImportError` naming `pip install "blamejax[anthropic]"` without the client.

    ```python
    # doctest: skip (needs the API or a server; see tests/test_scorers.py)
    from blamejax.scorers import AnthropicScorer, Request
    scorer = AnthropicScorer("claude-model-name")
    [logits] = scorer.score([Request("route", "factual", "refund please", ("refund", "escalate"))])
    ```
    """

    module = "anthropic"
    extra = "anthropic"
    kind = "anthropic-messages"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        template: str | None = None,
        system: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 256,
        timeout: float = 60.0,
        retry: Retry = Retry(),
        concurrency: int = 4,
        cache: Cache | None = None,
        meter: Meter | None = None,
        client=None,
    ):
        if temperature is not None and (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not 0.0 <= temperature <= 1.0
        ):
            raise ValueError(
                f"`temperature` must be a number in [0, 1] or None for this API, got {temperature!r}"
            )
        super().__init__(
            model,
            mode="json",
            template=template,
            system=system,
            temperature=temperature,
            max_tokens=max_tokens,
            timeout=timeout,
            retry=retry,
            concurrency=concurrency,
            cache=cache,
            meter=meter,
            client=client,
            client_options={"base_url": base_url, "api_key": api_key},
            settings={},
        )

    def _make_client(self, **options):
        return self._sdk.Anthropic(**options)

    def _answer(self, request):
        message = render(self.template, request, self.mode)

        # The temperature goes in the body as it is: recent clients no longer name it.
        body = {} if self.temperature is None else {"temperature": self.temperature}

        def send(client):
            return client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=self.system,
                messages=[{"role": "user", "content": message}],
                extra_body=body,
            )

        text, used, made = self._reply(request, self._request(request, send))
        return Answer(logits_from_json(text, request, who=self.name), used, made)

    def _generate(self, request):
        messages = request.messages()
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        turns = [m for m in messages if m["role"] != "system"]
        options = {"system": system} if system else {}

        def send(client):
            return client.messages.create(
                model=self.model,
                max_tokens=request.max_tokens,
                messages=turns,
                extra_body={"temperature": request.temperature},
                **options,
            )

        return TextAnswer(*self._reply(request, self._request(request, send)))

    def _reply(self, request, response) -> tuple[str, int, int]:
        """A message's text blocks joined, and its input and output tokens."""
        usage = getattr(response, "usage", None)
        blocks = getattr(response, "content", None)
        if not isinstance(blocks, list):
            raise ReplyError(
                f"{self.name} returned a response without content for {request.describe()}"
            )
        text = "".join(getattr(b, "text", "") for b in blocks if getattr(b, "type", None) == "text")
        return text, tokens(usage, "input_tokens"), tokens(usage, "output_tokens")
