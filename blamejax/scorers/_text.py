"""Free-text steps: a `TextRequest` (step, variant, inputs, seed, sampling settings), and the
seed of a step's text drawn from its addressed noise (`text_seed`).

A model that writes free text samples on its server; its luck cannot be held fixed the way a
decision's Gumbel noise is. What blamejax can hold fixed is the request: the seed is a pure
function of the world and the step (as every draw of `bj.noise` is), it is sent to the API
where the API takes one, and it is part of the cache key. So the text of a step in a world is
asked once and replayed from the cache ever after, and the recorded world's text can be
stored once (`scorer.record`) and replayed with no call at all.

What this is not: a counterfactual. A changed input (a fixed earlier step) is a new request,
answered by a fresh sample, not by the same luck applied to the new input: blame of a
free-text step is interventional. A seed fixes the sample only on servers that honour it, for
the same model and input, and then only as far as the server is deterministic.
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any, NamedTuple

import jax.random as jr
import numpy as np

from ..noise import as_key, text_key, world_key
from ._request import Request, canonical_json

SEED_LIMIT = 2**31  # seeds are in [0, 2**31): every server's seed type holds them


class TextRequest(NamedTuple):
    """One free-text step to be written by a model: `step`, in `variant`, given `inputs`,
    sampled with `seed` at `temperature`, at most `max_tokens` tokens.

    - `step`, `variant`: as in `Request` (a non-empty string each).
    - `inputs`: what the model is sent: a string (one user message), or a list of chat
      messages `{"role": "system" | "user" | "assistant", "content": str}`.
    - `seed`: an integer in [0, 2**31), usually `text_seed(key, step, case=..., world=...)`.
    - `temperature` (default 1.0), `max_tokens` (default 256): sent with the request.

    Everything that decides the sample is in the request, so `key` (one stable line of JSON)
    with the scorer's model is the row of the cache.

    ```python
    from blamejax.scorers import TextRequest
    r = TextRequest("note", "factual", "Summarise the ticket.", seed=7)
    assert r.key == '["text","note","factual","Summarise the ticket.",7,1.0,256]'
    ```
    """

    step: str
    variant: str
    inputs: Any
    seed: int
    temperature: float = 1.0
    max_tokens: int = 256

    @property
    def key(self) -> str:
        """The request as canonical JSON (with its seed, temperature and length): its cache key."""
        return canonical_json(
            [
                "text",
                self.step,
                self.variant,
                self.inputs,
                self.seed,
                float(self.temperature),
                self.max_tokens,
            ],
            where="inputs",
        )

    def describe(self) -> str:
        """The request in words, for error messages."""
        inputs = canonical_json(self.inputs, where="inputs")
        if len(inputs) > 120:
            inputs = inputs[:117] + "..."
        return f"step {self.step!r}, variant {self.variant!r}, seed {self.seed}, inputs {inputs}"

    def messages(self) -> list[dict]:
        """`inputs` as chat messages."""
        return (
            [{"role": "user", "content": self.inputs}]
            if isinstance(self.inputs, str)
            else list(self.inputs)
        )


class TextAnswer(NamedTuple):
    """What one text call returned: the text and the tokens it used (0 if unknown)."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0


ROLES = ("system", "user", "assistant")


def check_text_request(request, *, where: str = "requests[0]") -> TextRequest:
    """`request` (a `TextRequest` or a tuple of its fields) checked."""
    if isinstance(request, Request):
        raise TypeError(
            f"`{where}` is a bj.scorers.Request (options to score, with `scorer.score`); "
            f"`generate` writes text for a TextRequest(step, variant, inputs, seed), got {request!r:.120}"
        )
    if not isinstance(request, tuple) or not 4 <= len(request) <= 6:
        raise TypeError(
            f"`{where}` must be a bj.scorers.TextRequest(step, variant, inputs, seed), got {request!r}"
        )
    request = TextRequest(*request)
    for name in ("step", "variant"):
        value = getattr(request, name)
        if not isinstance(value, str) or not value:
            raise TypeError(f"`{where}.{name}` must be a non-empty string, got {value!r}")
    inputs = request.inputs
    if isinstance(inputs, str):
        if not inputs:
            raise ValueError(
                f"`{where}.inputs` must be a non-empty string or a list of messages, got ''"
            )
    elif isinstance(inputs, (list, tuple)) and inputs:
        for i, m in enumerate(inputs):
            if not (
                isinstance(m, dict)
                and set(m) == {"role", "content"}
                and m["role"] in ROLES
                and isinstance(m["content"], str)
            ):
                raise TypeError(
                    f"`{where}.inputs[{i}]` must be a message {{'role': one of {list(ROLES)}, "
                    f"'content': str}}, got {m!r}"
                )
        request = request._replace(inputs=[dict(m) for m in inputs])
    else:
        raise TypeError(
            f"`{where}.inputs` must be a non-empty string or a list of chat messages, got {inputs!r}"
        )
    seed = request.seed
    if (
        isinstance(seed, bool)
        or not isinstance(seed, (int, np.integer))
        or not 0 <= int(seed) < SEED_LIMIT
    ):
        raise ValueError(
            f"`{where}.seed` must be an integer in [0, 2**31) (see text_seed), got {seed!r}"
        )
    t = request.temperature
    if (
        isinstance(t, bool)
        or not isinstance(t, numbers.Real)
        or not (math.isfinite(t) and 0.0 <= t <= 2.0)
    ):
        raise ValueError(f"`{where}.temperature` must be a number in [0, 2], got {t!r}")
    m = request.max_tokens
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"`{where}.max_tokens` must be an integer >= 1, got {m!r}")
    return request._replace(seed=int(seed), temperature=float(t), max_tokens=int(m))


def check_text_requests(requests, *, name: str = "requests") -> list[TextRequest]:
    if isinstance(requests, (TextRequest, str, bytes)) or not isinstance(requests, (list, tuple)):
        raise TypeError(
            f"`{name}` must be a list of bj.scorers.TextRequest, got {type(requests).__name__}"
        )
    return [check_text_request(r, where=f"{name}[{i}]") for i, r in enumerate(requests)]


def text_seed(key, step: str, *, case: int = 0, world: int = 0, slot: int = 0) -> int:
    """The seed of `step`'s text in world `world` of case `case`, drawn from its noise.

    The seed is the first word of the key ``text_key(world_key(key, case, world), step,
    slot)`` (`bj.noise.text_key`: ``fold_in(fold_in(fold_in(world, TEXT_TAG), stable_hash(step)),
    slot)``), kept below 2**31: the same address scheme as every draw of `bj.noise`, in a
    family of its own (so it never coincides with a Gumbel).
    World 0 is the recorded world (`bj.recorded_worlds`); the inferred worlds of
    `bj.traces.blame_runs` are 1 ... W. The same in every process and with or without
    64-bit mode.

    **Arguments:** `key` (int seed or typed key: the root key of the blame), `step` (its
    name), `case` (the run's index among the cases), `world`, `slot` (which text of the step;
    0 for a step that writes once).

    **Returns:** a Python `int` in [0, 2**31).

    ```python
    from blamejax.scorers import text_seed
    seed = text_seed(0, "note")                     # the recorded world of case 0
    assert seed == text_seed(0, "note") and 0 <= seed < 2**31
    assert seed != text_seed(0, "note", world=1)    # another world, another sample
    ```
    """
    if not isinstance(step, str) or not step:
        raise TypeError(f"`step` must be a non-empty string, got {step!r}")
    for name, value in (("case", case), ("world", world), ("slot", slot)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, np.integer))
            or not 0 <= int(value) < 2**32
        ):
            raise ValueError(f"`{name}` must be an integer in [0, 2**32), got {value!r}")
    world_of_case = world_key(as_key(key), np.uint32(case), np.uint32(world))
    site = text_key(world_of_case, step, np.uint32(slot))
    return int(np.asarray(jr.key_data(site)).reshape(-1)[0]) % SEED_LIMIT


def text_identity(kind: str, model: str) -> str:
    """The identity a model adapter's texts are cached under (the request holds the rest)."""
    return json.dumps({"kind": kind + "-text", "model": model}, sort_keys=True, ensure_ascii=False)
