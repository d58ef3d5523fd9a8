"""A meter of what scoring cost: calls, retries, tokens and cache hits."""

from __future__ import annotations

import threading


class Meter:
    """Counts, safe to share between threads and scorers.

    - `calls`: answers obtained from the model (or the function), one per scored request or
      written text;
    - `attempts`: HTTP requests sent, retries included; `retries`: the attempts that failed
      and were retried (rate limits, server errors, timeouts);
    - `hits`: requests answered from the cache; `misses`: requests the cache did not hold;
    - `input_tokens`, `output_tokens`: as the server reported them (0 where it did not).

    ```python
    from blamejax.scorers import Meter
    meter = Meter()
    meter.add(calls=2, input_tokens=30)
    assert meter.snapshot()["calls"] == 2 and meter.hits == 0
    ```
    """

    FIELDS = ("calls", "attempts", "retries", "hits", "misses", "input_tokens", "output_tokens")

    def __init__(self):
        self._lock = threading.Lock()
        for name in self.FIELDS:
            setattr(self, name, 0)

    def add(self, **counts: int) -> None:
        """Add `counts` (names among `Meter.FIELDS`)."""
        unknown = set(counts) - set(self.FIELDS)
        if unknown:
            raise ValueError(
                f"unknown meter fields {sorted(unknown)}; expected some of {list(self.FIELDS)}"
            )
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + int(value))

    def snapshot(self) -> dict:
        """The counts as a dict."""
        with self._lock:
            return {name: getattr(self, name) for name in self.FIELDS}

    def __repr__(self) -> str:
        return "Meter(" + ", ".join(f"{k}={v}" for k, v in self.snapshot().items()) + ")"
