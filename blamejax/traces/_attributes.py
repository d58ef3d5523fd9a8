"""What a span's attributes say about its step: agent, output, tokens and, for a decision,
options, logits, choice and accept. One reader for the OpenTelemetry GenAI attributes, one for
the OpenInference attributes; each records the attributes it consumed in `used` (the rest stay
in the step's `extra`) and raises `Bad` naming the attribute that is wrong.
"""

import json
import math
import re

from ._check import shown
from ._otlp import Bad


def _text(messages) -> str | None:
    """The text parts of GenAI messages ([{"role", "parts": [{"type": "text", "content"}]}])."""
    if isinstance(messages, str):
        try:
            messages = json.loads(messages)
        except json.JSONDecodeError:
            return messages
    if not isinstance(messages, list):
        return None
    texts = [
        part["content"]
        for m in messages
        if isinstance(m, dict)
        for part in m.get("parts", [])
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("content"), str)
    ]
    return "\n".join(texts) if texts else None


def _count(attributes, key, used) -> int | None:
    value = attributes.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Bad(f"{key}: expected a token count (an integer >= 0), got {shown(value)}")
    used.add(key)
    return value


def _tokens(attributes, keys, used) -> dict | None:
    counts = {name: _count(attributes, key, used) for name, key in keys}
    counts = {k: v for k, v in counts.items() if v is not None}
    return counts or None


def _choice_text(body) -> str | None:
    """The message text of a `gen_ai.choice` event's body (the older GenAI events)."""
    message = body.get("message") if isinstance(body, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


def _is_agent_span(span) -> bool:
    a = span["attributes"]
    return (
        a.get("gen_ai.operation.name") == "invoke_agent"
        or span["name"].split(" ")[0] == "invoke_agent"
    )


def otel_fields(span, above, used) -> dict:
    """Step fields from OpenTelemetry GenAI attributes (`used`: the attributes consumed).

    `above` is `(agent, from_agent_span)` of the parent step. The agent is that of the
    nearest `invoke_agent` span, itself included: its `gen_ai.agent.name`, else its span name
    after "invoke_agent "; a span under one keeps its own `gen_ai.agent.name` (an
    instrumentation's default, say) in `extra`. Outside every agent span, a span's own
    `gen_ai.agent.name`, else its parent's agent. The returned `"from_agent_span"` says which
    rule named the agent (for the children)."""
    a = span["attributes"]
    agent_above, from_agent_span = above
    own = a.get("gen_ai.agent.name")
    own = own if isinstance(own, str) and own else None
    if _is_agent_span(span):
        named = span["name"].partition(" ")[2].strip() or None
        agent, from_agent_span = own or named or agent_above, True
    elif from_agent_span or own is None:
        agent = agent_above
    else:
        agent = own
    if own is not None and own == agent:
        used.add("gen_ai.agent.name")
    output = _text(a.get("gen_ai.output.messages"))
    if output is None and isinstance(a.get("gen_ai.tool.call.result"), str):
        output = a["gen_ai.tool.call.result"]
    for event in [*span["events"], *span.get("logs", ())]:  # content captured as events or logs
        if output is None and isinstance(event, dict):
            attributes = event.get("attributes") or {}
            output = _text(attributes.get("gen_ai.output.messages"))
            if output is None and event.get("name") == "gen_ai.choice":
                output = _choice_text(event.get("body"))
    tokens = _tokens(
        a, (("input", "gen_ai.usage.input_tokens"), ("output", "gen_ai.usage.output_tokens")), used
    )
    fields = dict(agent=agent, output=output, tokens=tokens, from_agent_span=from_agent_span)
    return decision_fields(a, fields, used)


def _list(a, key, used, kind):
    value = a.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)  # a JSON string of the list
        except json.JSONDecodeError:
            raise Bad(
                f"{key}: expected a list (or a JSON string of one), got {shown(value)}"
            ) from None
    if not isinstance(value, list) or not all(
        isinstance(x, kind) and not isinstance(x, bool) for x in value
    ):
        what = "strings" if kind is str else "numbers"
        raise Bad(f"{key}: expected a list of {what}, got {shown(a.get(key))}")
    used.add(key)
    return value


def _log_probabilities(a, key, num_options, used):
    p = _list(a, key, used, int | float)
    if len(p) != num_options:
        raise Bad(f"{key}: expected {num_options} probabilities (one per option), got {len(p)}")
    for i, x in enumerate(p):
        if not 0 <= x <= 1:
            raise Bad(f"{key}[{i}]: expected a probability in [0, 1], got {shown(x)}")
    if not any(p):
        raise Bad(f"{key}: every probability is 0; at least one option must be possible")
    return tuple(math.log(x) if x > 0 else -math.inf for x in p)


DECISION_OPTIONS = "decision.options"
DECISION_PROBABILITIES = "decision.probabilities"
DECISION_FIX_PROBABILITIES = "decision.fix.probabilities"
DECISION_CHOICE = "decision.choice"
DECISION_ACCEPT = "decision.accept"


def decision_fields(a, fields, used) -> dict:
    """`fields` with a decision's options, logits, choice and accept when the attributes
    `a` hold `decision.*` (a span of kind DECISION must)."""
    if a.get("openinference.span.kind") != "DECISION" and DECISION_OPTIONS not in a:
        return fields
    if DECISION_OPTIONS not in a:
        raise Bad(f"{DECISION_OPTIONS}: a DECISION span needs its options (a list of strings)")
    options = tuple(_list(a, DECISION_OPTIONS, used, str))
    fields["options"] = options
    if DECISION_PROBABILITIES not in a:
        raise Bad(
            f"{DECISION_PROBABILITIES}: missing: a decision with options needs the probabilities "
            "of its options in the run (what ran), one per option; record the decision with "
            "bj.traces.record_decision(name, options, logits, choice)"
        )
    logits = {"factual": _log_probabilities(a, DECISION_PROBABILITIES, len(options), used)}
    if DECISION_FIX_PROBABILITIES in a:
        logits["fix"] = _log_probabilities(a, DECISION_FIX_PROBABILITIES, len(options), used)
    fields["logits"] = logits
    if DECISION_CHOICE in a:
        choice = a[DECISION_CHOICE]
        if not isinstance(choice, str) or choice not in options:
            raise Bad(
                f"{DECISION_CHOICE}: expected one of the options {shown(list(options))}, got {shown(choice)}"
            )
        used.add(DECISION_CHOICE)
        fields["choice"] = choice
    if DECISION_ACCEPT in a:
        fields["accept"] = tuple(_list(a, DECISION_ACCEPT, used, str))
    return fields


def openinference_fields(span, above, used) -> dict:
    """Step fields from OpenInference attributes (`used`: the attributes consumed).

    `above` is `(agent, from_agent_span)` of the parent step. An AGENT span names its agent:
    `agent.name`, else its span name, except a root AGENT span without `agent.name` (the
    workflow that holds the run, not an agent), which names none. A span under an AGENT span
    that named an agent takes that agent (its own `agent.name` stays in `extra`); elsewhere
    its own `agent.name`, else its parent's agent. The output is the text of
    `llm.output_messages.<i>.message.content` (in index order), else `output.value` (the
    raw `output.value` of an LLM span, the chat completion's JSON, stays in `extra`)."""
    a = span["attributes"]
    kind = a.get("openinference.span.kind")
    agent_above, from_agent_span = above
    own = a.get("agent.name")
    own = own if isinstance(own, str) and own else None
    if kind == "AGENT" and (own or span["parent"] is not None):
        agent, from_agent_span = own or span["name"], True
    elif from_agent_span or own is None:
        agent = agent_above
    else:
        agent = own
    if own is not None and own == agent:
        used.add("agent.name")
    found = (re.fullmatch(r"llm\.output_messages\.(\d+)\.message\.content", k) for k in a)
    contents = sorted((int(m.group(1)), a[m.group(0)]) for m in found if m)  # by index
    output = "\n".join(c for _, c in contents if isinstance(c, str)) or None
    if output is None and isinstance(a.get("output.value"), str):
        output = a["output.value"]
        used.add("output.value")
    tokens = _tokens(
        a, (("input", "llm.token_count.prompt"), ("output", "llm.token_count.completion")), used
    )
    fields = dict(agent=agent, output=output, tokens=tokens, from_agent_span=from_agent_span)
    return decision_fields(a, fields, used)
