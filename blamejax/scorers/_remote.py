"""What the model adapters share: the optional client library, the client made on first
use, the mapping of its errors to retries, and the meter of attempts."""

from __future__ import annotations

import importlib
import json
import numbers
import threading

from ._cache import Cache
from ._meter import Meter
from ._parse import ABSENT
from ._prompt import SYSTEM, check_mode, check_template
from ._request import Request
from ._retry import Retry, ScorerError, Transient, check_retry, retry_after, with_retries
from ._scorer import Scorer
from ._text import text_identity


def import_client(module: str, extra: str):
    """The client library `module`, or an ImportError saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f'this scorer needs the `{module}` client library: pip install "blamejax[{extra}]" ({error})'
        ) from None


class RemoteScorer(Scorer):
    """A scorer that asks a model behind an HTTP API (see `OpenAIScorer`, `AnthropicScorer`)."""

    module = ""  # the client library
    extra = ""  # the pyproject extra that installs it
    kind = ""

    def __init__(
        self,
        model: str,
        *,
        mode: str,
        template: str | None,
        system: str | None,
        temperature: float,
        max_tokens: int,
        timeout: float,
        retry: Retry,
        concurrency: int,
        cache: Cache | None,
        meter: Meter | None,
        client,
        client_options: dict,
        settings: dict,
    ):
        self._sdk = import_client(self.module, self.extra)
        if not isinstance(model, str) or not model:
            raise TypeError(f"`model` must be a non-empty string, got {model!r}")
        self.model = model
        self.mode = check_mode(mode)
        self.template = check_template(template, self.mode)
        if system is not None and not isinstance(system, str):
            raise TypeError(f"`system` must be a string or None, got {system!r}")
        self.system = SYSTEM[self.mode] if system is None else system
        if temperature is not None and (
            isinstance(temperature, bool)
            or not isinstance(temperature, numbers.Real)
            or not 0.0 <= temperature <= 2.0
        ):
            raise ValueError(
                f"`temperature` must be a number in [0, 2] or None (the server's default), got {temperature!r}"
            )
        self.temperature = None if temperature is None else float(temperature)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"`max_tokens` must be an integer >= 1, got {max_tokens!r}")
        self.max_tokens = max_tokens
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
            raise ValueError(f"`timeout` must be a number of seconds > 0, got {timeout!r}")
        self.timeout = float(timeout)
        self.retry = check_retry(retry)
        for name, value in client_options.items():
            if value is not None and not isinstance(value, str):
                raise TypeError(f"`{name}` must be a string or None, got {value!r}")
        if settings.get("absent", "error") not in ABSENT:
            raise ValueError(f"`absent` must be one of {ABSENT}, got {settings['absent']!r}")
        super().__init__(cache=cache, meter=meter, concurrency=concurrency)
        self._client = client
        self._client_options = client_options
        self._lock = threading.Lock()
        self.identity = json.dumps(
            {
                "kind": self.kind,
                "model": model,
                "mode": self.mode,
                "template": self.template,
                "system": self.system,
                "temperature": self.temperature,
                "max_tokens": max_tokens,
                **settings,
            },
            sort_keys=True,
            ensure_ascii=False,
        )
        self.text_identity = text_identity(self.kind, model)
        self.name = f"{type(self).__name__}(model={model!r}, mode={self.mode!r})"

    @property
    def client(self):
        """The client, made on first use (an offline replay never makes one)."""
        with self._lock:
            if self._client is None:
                options = {k: v for k, v in self._client_options.items() if v is not None}
                self._client = self._make_client(timeout=self.timeout, max_retries=0, **options)
            return self._client

    def _make_client(self, **options):
        raise NotImplementedError

    def _request(self, request: Request, send):
        """`send(client)`, its errors mapped: 429, 5xx, timeouts and dropped connections are
        retried with backoff; other HTTP errors raise `ScorerError` at once."""
        sdk = self._sdk

        def attempt():
            try:
                return send(self.client)
            except sdk.APITimeoutError:
                raise Transient(
                    f"no reply within the timeout of {self.timeout} s (raise `timeout`; a local "
                    "server on a busy machine answers faster with one thread)"
                ) from None
            except sdk.APIStatusError as error:
                status = error.status_code
                if status == 429 or status >= 500:
                    raise Transient(
                        f"HTTP {status}: {error.message}", retry_after(error.response.headers)
                    ) from None
                raise ScorerError(
                    f"{self.name}: HTTP {status} for {request.describe()}: {error.message}"
                ) from None
            except sdk.APIConnectionError as error:
                raise Transient(f"connection failed: {error}") from None

        def count(retried: bool):
            self.meter.add(attempts=1, retries=int(retried))

        return with_retries(
            attempt, self.retry, what=f"{self.name} on {request.describe()}", on_attempt=count
        )


def tokens(usage, *names) -> int:
    """The first of `usage`'s fields `names` that is an integer, else 0."""
    for name in names:
        value = getattr(usage, name, None)
        if isinstance(value, int):
            return value
    return 0
