"""Decisions marked in the user's own code through the OpenTelemetry API, so that any
exporter carries them and the span importers read them back as decision steps.

A decision is written as the `decision.*` attributes the importers read (docs/traces.md,
"Decision spans"): `decision.options`, `decision.probabilities` (the softmax of the factual
logits), `decision.fix.probabilities` (of the fix's logits, when given), `decision.choice`
and `decision.accept`. Only `opentelemetry-api` is used (the SDK, processors and exporters
are the user's), and it is imported when a decision is recorded, not with blamejax.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..format._check import shown
from ..importers.spans._attributes import (
    DECISION_ACCEPT,
    DECISION_CHOICE,
    DECISION_FIX_PROBABILITIES,
    DECISION_OPTIONS,
    DECISION_PROBABILITIES,
)
from ._declare import check_options


def _probabilities(logits, options, name) -> list[float]:
    """softmax(`logits`) in float64, checked: one finite number or -inf per option."""
    if isinstance(logits, str) or not isinstance(logits, Sequence | np.ndarray):
        raise TypeError(f"`{name}` must be a list of numbers (one per option), got {shown(logits)}")
    values = list(logits)
    if len(values) != len(options):
        raise ValueError(
            f"`{name}` must have {len(options)} numbers (one per option), got {len(values)}"
        )
    for i, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, int | float | np.floating | np.integer):
            raise TypeError(f"`{name}[{i}]` must be a number, got {shown(x)}")
        if math.isnan(x) or x == math.inf:
            raise ValueError(f"`{name}[{i}]` must be finite or -inf, got {x!r}")
    row = np.asarray(values, np.float64)
    if np.all(row == -np.inf):
        raise ValueError(f"`{name}`: every option is -inf; at least one must be possible")
    p = np.exp(row - row.max())
    return [float(x) for x in p / p.sum()]


def decision_attributes(options, logits, choice, *, fix_logits=None, accept=None) -> dict:
    """The span attributes that make a span a decision step for `bj.traces.from_otel` and
    `bj.traces.from_openinference`.

    **Arguments:**
    - `options`: the options the decision chose among (distinct strings).
    - `logits`: the factual logits or log-probabilities, one per option (`-inf`: impossible);
      written as their softmax, `decision.probabilities` (read back as log p, which differ
      from the logits by a constant: the same choice probabilities).
    - `choice`: the option chosen (its probability must not be 0).
    - `fix_logits`: the fix's logits, one per option, or `None` (to be scored later).
    - `accept`: the options that count as right at this step, or `None`.

    **Returns:** `{attribute: value}` for `span.set_attributes(...)`: lists of strings and of
    floats, strings.

    **Raises:** `TypeError`/`ValueError` naming the argument: options not distinct strings,
    logits of the wrong length, NaN or +inf, all -inf, a choice or an accepted option that
    is not an option, a choice whose logit is -inf.

    ```python
    import math
    import blamejax as bj

    attributes = bj.traces.decision_attributes(("search", "answer"), (0.0, -math.inf), "search",
                                               fix_logits=(0.0, 0.0), accept=("search",))
    assert attributes["decision.probabilities"] == [1.0, 0.0]
    assert attributes["decision.fix.probabilities"] == [0.5, 0.5]
    ```
    """
    options = check_options(options)
    out = {
        DECISION_OPTIONS: list(options),
        DECISION_PROBABILITIES: _probabilities(logits, options, "logits"),
    }
    if fix_logits is not None:
        out[DECISION_FIX_PROBABILITIES] = _probabilities(fix_logits, options, "fix_logits")
    if not isinstance(choice, str) or choice not in options:
        raise ValueError(
            f"`choice` must be one of the options {shown(list(options))}, got {shown(choice)}"
        )
    if out[DECISION_PROBABILITIES][options.index(choice)] == 0.0:
        raise ValueError(
            f"`choice` {choice!r} has probability 0 under `logits`, so it could not have been chosen"
        )
    out[DECISION_CHOICE] = choice
    if accept is not None:
        if isinstance(accept, str) or not isinstance(accept, Sequence):
            raise TypeError(f"`accept` must be a list of options or None, got {shown(accept)}")
        unknown = [a for a in accept if a not in options]
        if unknown:
            raise ValueError(
                f"`accept` names {shown(unknown)}, which are not options {shown(list(options))}"
            )
        out[DECISION_ACCEPT] = list(accept)
    return out


def _trace_api():
    try:
        from opentelemetry import trace
    except ImportError:
        raise ImportError(
            "recording a decision needs the OpenTelemetry API: pip install opentelemetry-api "
            '(or "blamejax[otel]"); the SDK and exporters are your own'
        ) from None
    return trace


def record_decision(
    name: str,
    options,
    logits,
    choice,
    *,
    fix_logits=None,
    accept=None,
    agent: str | None = None,
    tracer=None,
):
    """Mark a decision in your own code: one span named `name`, a child of the current span,
    holding `decision_attributes(...)`; any exporter carries it and `bj.traces.from_otel` /
    `from_openinference` read it back as a decision step.

    **Arguments:**
    - `name`: the span's name, which becomes the step's name.
    - `options`, `logits`, `choice`, `fix_logits`, `accept`: as in `decision_attributes`
      (the logits may come from the LLM call: `bj.traces.logits_from_response`).
    - `agent`: written as `gen_ai.agent.name` and `agent.name`; `None` (default): the step
      takes the agent of its nearest ancestor span, as the importers do.
    - `tracer`: an OpenTelemetry `Tracer`; default `trace.get_tracer("blamejax")`, from the
      global tracer provider.

    **Returns:** the ended span's `SpanContext` (its `trace_id` is the run's id:
    `format(context.trace_id, "032x")`).

    **Raises:** as `decision_attributes`; `ImportError` without `opentelemetry-api`.

    ```python
    # doctest: skip (needs the OpenTelemetry SDK; docs/traces.md runs a full example)
    import blamejax as bj
    with tracer.start_as_current_span("invoke_agent Planner") as span:
        span.set_attribute("gen_ai.agent.name", "Planner")
        response = client.chat.completions.create(..., logprobs=True, top_logprobs=5)
        options = ("search", "answer")
        bj.traces.record_decision("plan", options, bj.traces.logits_from_response(response, options),
                                  bj.traces.choice_from_response(response, options), accept=("search",))
    ```
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"`name` must be a non-empty string, got {shown(name)}")
    if agent is not None and (not isinstance(agent, str) or not agent):
        raise TypeError(f"`agent` must be a non-empty string or None, got {shown(agent)}")
    attributes = decision_attributes(options, logits, choice, fix_logits=fix_logits, accept=accept)
    if agent is not None:
        attributes["gen_ai.agent.name"] = agent
        attributes["agent.name"] = agent
    if tracer is None:
        tracer = _trace_api().get_tracer("blamejax")
    with tracer.start_as_current_span(name, attributes=attributes) as span:
        return span.get_span_context()
