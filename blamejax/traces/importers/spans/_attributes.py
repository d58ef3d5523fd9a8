"""What a span's attributes say about its step: agent, output, tokens and, for a decision,
options, logits, choice and accept. One reader for the OpenTelemetry GenAI attributes, one for
the OpenInference attributes; each records the attributes it consumed in `used` (the rest stay
in the step's `extra`) and raises `Bad` naming the attribute that is wrong.
"""

import json
import math
import re

from ...format._check import shown
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


def _name(value) -> str | None:
    return value if isinstance(value, str) and value else None


#: `gen_ai.operation.name` values of a model call (the GenAI conventions' inference spans).
MODEL_OPERATIONS = ("chat", "text_completion", "generate_content", "completion", "embeddings")


def _otel_agent_span(span) -> tuple[bool, str | None]:
    """(whether `span` runs an agent, the agent it names): an `invoke_agent` span (its
    `gen_ai.agent.name`, else its name after "invoke_agent "), or a Traceloop agent span,
    `traceloop.span.kind` "agent" (its `gen_ai.agent.name`, else `traceloop.entity.name`,
    else its name without ".agent", as Traceloop's `@agent` decorator names it)."""
    a = span["attributes"]
    if (
        a.get("gen_ai.operation.name") == "invoke_agent"
        or span["name"].split(" ")[0] == "invoke_agent"
    ):
        return True, _name(a.get("gen_ai.agent.name")) or span["name"].partition(" ")[
            2
        ].strip() or None
    if a.get("traceloop.span.kind") == "agent":
        named = _name(a.get("traceloop.entity.name")) or span["name"].removesuffix(".agent")
        return True, _name(a.get("gen_ai.agent.name")) or _name(named)
    return False, None


def _langgraph_node(a) -> str | None:
    """The LangGraph node a span ran in: `metadata.langgraph_node` (LangChain's run metadata,
    which OpenInference's LangChain instrumentation writes as the JSON string `metadata`);
    LangGraph's own nodes (`__start__`, `__end__`) name none."""
    metadata = a.get("metadata")
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            return None
    node = metadata.get("langgraph_node") if isinstance(metadata, dict) else None
    return node if _name(node) and not node.startswith("__") else None


def agent_of(span, above, own, agent_span, named, used, key) -> tuple[str | None, bool]:
    """The agent of `span` by the agent rule of docs/traces.md, and whether an agent span
    named it (which its children inherit):

    1. an agent span names its own agent (`named`; else the agent above);
    2. a span under an agent span takes the nearest one's agent;
    3. a span's own `key` attribute (`own`) names its agent;
    4. a span that started while an agent span of its trace ran (not above it) takes that
       agent: OpenInference's LangChain spans follow LangChain's own run tree, so a call
       made inside the user's AGENT span is parented beside it, not under it;
    5. a span of a LangGraph node takes the node's name (`metadata.langgraph_node`);
    6. else its parent's agent.

    `above` is `(agent, from_agent_span, beside)`: the parent step's agent, whether an agent
    span named it, and the agent of the innermost agent span running when this span started. The attribute `key` is consumed when it agrees with the agent."""
    agent_above, from_agent_span, beside = above
    node = _langgraph_node(span["attributes"])
    if agent_span:
        agent, from_agent_span = named or agent_above, True
    elif from_agent_span:
        agent = agent_above
    elif own is not None:
        agent = own
    elif beside is not None:
        agent, from_agent_span = beside, True
    elif node is not None:
        agent = node
    else:
        agent = agent_above
    if own is not None and own == agent:
        used.add(key)
    return agent, from_agent_span


def _indexed(a, pattern) -> str | None:
    """The texts of the attributes matching `pattern` (one group: the index), joined by
    newlines in index order (`gen_ai.completion.0.content`, `llm.output_messages.0...`)."""
    found = (re.fullmatch(pattern, k) for k in a)
    contents = sorted((int(m.group(1)), a[m.group(0)]) for m in found if m)
    return "\n".join(c for _, c in contents if isinstance(c, str)) or None


def otel_fields(span, above, used) -> dict:
    """Step fields from OpenTelemetry GenAI attributes (`used`: the attributes consumed).

    `above` is as in `agent_of`. Agent spans are `invoke_agent` spans and Traceloop's agent spans
    (`traceloop.span.kind` "agent"). The output is the text parts of
    `gen_ai.output.messages`, else the older indexed `gen_ai.completion.<i>.content`, else
    `gen_ai.tool.call.result`, else what an event or joined log record says; the tokens
    `gen_ai.usage.input_tokens`/`output_tokens`, else the older `prompt_tokens`/
    `completion_tokens`. The returned `"from_agent_span"`, `"agent_span"` and `"model_call"`
    are for the importer (the children, the agents beside, the warning)."""
    a = span["attributes"]
    agent_span, named = _otel_agent_span(span)
    own = _name(a.get("gen_ai.agent.name"))
    agent, from_agent_span = agent_of(
        span, above, own, agent_span, named, used, "gen_ai.agent.name"
    )
    if agent_span and named is not None and named == _name(a.get("traceloop.entity.name")):
        used.add("traceloop.entity.name")
    output = _text(a.get("gen_ai.output.messages"))
    if output is None:
        output = _indexed(a, r"gen_ai\.completion\.(\d+)\.content")
    if output is None and isinstance(a.get("gen_ai.tool.call.result"), str):
        output = a["gen_ai.tool.call.result"]
    for event in [*span["events"], *span.get("logs", ())]:  # content captured as events or logs
        if output is None and isinstance(event, dict):
            attributes = event.get("attributes") or {}
            output = _text(attributes.get("gen_ai.output.messages"))
            if output is None and event.get("name") == "gen_ai.choice":
                output = _choice_text(event.get("body"))
    keys = [("input", "gen_ai.usage.input_tokens"), ("output", "gen_ai.usage.output_tokens")]
    for i, (name, key) in enumerate(keys):
        older = f"gen_ai.usage.{'prompt' if name == 'input' else 'completion'}_tokens"
        if key not in a and older in a:
            keys[i] = (name, older)
    tokens = _tokens(a, keys, used)
    model_call = (
        a.get("gen_ai.operation.name") in MODEL_OPERATIONS
        or "gen_ai.request.model" in a
        or "llm.request.type" in a
    )
    return step_fields(a, used, agent, output, tokens, from_agent_span, agent_span, model_call)


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


def step_fields(a, used, agent, output, tokens, from_agent_span, agent_span, model_call) -> dict:
    """What every span importer reads from a span, as the fields of its step: the agent
    (and whether an agent span named it), the output, the tokens, whether the span is an
    agent span and a model call, and a decision's fields (`decision_fields`)."""
    fields = dict(
        agent=agent,
        output=output,
        tokens=tokens,
        from_agent_span=from_agent_span,
        agent_span=agent_span,
        model_call=model_call,
    )
    return decision_fields(a, fields, used)


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


def _reply_text(value: str) -> str | None:
    """The reply text of a model's whole reply kept as JSON (a chat completion, LangChain's
    `LLMResult` or `AIMessage`; "" when it holds none, as a failed call's), None for any
    other value."""
    if not value.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(value)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not ("choices" in data or "generations" in data):
        return None
    from ._langchain import as_chat_completion

    try:
        text = as_chat_completion(data)["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return ""
    return text if isinstance(text, str) else ""


def openinference_fields(span, above, used) -> dict:
    """Step fields from OpenInference attributes (`used`: the attributes consumed).

    `above` is as for `otel_fields`. An AGENT span names its agent: `agent.name`, else its
    span name, except a root AGENT span without `agent.name` (the workflow that holds the
    run, not an agent), which names none; the rest of the agent rule is `agent_of`'s. The
    output is the text of `llm.output_messages.<i>.message.content` (in index order), else
    `output.value` (the raw `output.value` of an LLM span, the chat completion's JSON, stays
    in `extra`)."""
    a = span["attributes"]
    kind = a.get("openinference.span.kind")
    own = _name(a.get("agent.name"))
    agent_span = kind == "AGENT" and (own is not None or span["parent"] is not None)
    named = (own or span["name"]) if agent_span else None
    agent, from_agent_span = agent_of(span, above, own, agent_span, named, used, "agent.name")
    output = _indexed(a, r"llm\.output_messages\.(\d+)\.message\.content")
    if output is None and isinstance(a.get("output.value"), str):
        reply = _reply_text(a["output.value"])
        if reply is None:  # plain text: the output itself
            output = a["output.value"]
            used.add("output.value")
        else:  # a whole reply (LangChain's LLMResult, a chat completion): its text; kept
            output = reply or None
    tokens = _tokens(
        a, (("input", "llm.token_count.prompt"), ("output", "llm.token_count.completion")), used
    )
    model_call = kind == "LLM"
    return step_fields(a, used, agent, output, tokens, from_agent_span, agent_span, model_call)
