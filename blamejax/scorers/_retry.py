"""Retries with exponential backoff on rate limits (429), server errors (5xx), timeouts and
dropped connections; `Retry-After` is honoured."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable
from typing import NamedTuple


class ScorerError(RuntimeError):
    """A request that could not be answered: a client error (4xx other than 429), or a
    transient failure that outlasted the retries."""


class Transient(Exception):
    """A failure worth retrying; `retry_after` (seconds) is what the server asked for."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class Retry(NamedTuple):
    """How often and how patiently to retry.

    - `attempts`: the most requests sent for one answer (1 = no retry).
    - `backoff`: the wait after the first failure, in seconds; it doubles after each
      further failure, up to `max_backoff`.
    - A server's `Retry-After` (seconds or an HTTP date; or `retry-after-ms`) replaces the
      computed wait, whatever its length.

    ```python
    from blamejax.scorers import Retry
    retry = Retry(attempts=4, backoff=0.5)
    assert [retry.wait(i, None) for i in range(3)] == [0.5, 1.0, 2.0]
    assert retry.wait(0, 3.0) == 3.0
    ```
    """

    attempts: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0

    def wait(self, failures: int, retry_after: float | None) -> float:
        """Seconds to wait after `failures + 1` failed attempts."""
        if retry_after is not None:
            return max(0.0, retry_after)
        return min(self.max_backoff, self.backoff * 2.0**failures)


def check_retry(retry) -> Retry:
    if not isinstance(retry, Retry):
        raise TypeError(f"`retry` must be a bj.scorers.Retry, got {retry!r}")
    if (
        isinstance(retry.attempts, bool)
        or not isinstance(retry.attempts, int)
        or retry.attempts < 1
    ):
        raise ValueError(f"`retry.attempts` must be an integer >= 1, got {retry.attempts!r}")
    for name in ("backoff", "max_backoff"):
        value = getattr(retry, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 <= value < math.inf
        ):
            raise ValueError(
                f"`retry.{name}` must be a finite number of seconds >= 0, got {value!r}"
            )
    return retry


def retry_after(headers) -> float | None:
    """The wait a response's headers ask for, in seconds, or None."""
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return float(value) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def with_retries(
    call: Callable, retry: Retry, *, what: str, on_attempt: Callable, sleep=time.sleep
):
    """`call()`, retried while it raises `Transient`; `on_attempt(retried: bool)` after
    each attempt (True when it failed and another attempt follows)."""
    for failures in range(retry.attempts):
        try:
            out = call()
        except Transient as error:
            last = failures + 1 == retry.attempts
            on_attempt(not last)
            if last:
                raise ScorerError(
                    f"{what}: gave up after {retry.attempts} attempt(s); the last failed with: {error}"
                ) from error
            sleep(retry.wait(failures, error.retry_after))
            continue
        on_attempt(False)
        return out
    raise AssertionError("unreachable")
