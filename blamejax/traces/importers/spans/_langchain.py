"""LangChain's shapes of a model's reply, as the OpenAI chat completion that blamejax's
reply-to-logits rule reads: an `LLMResult` (what OpenInference's LangChain instrumentation
keeps in `output.value`: `{"generations": [[{"text", "generation_info": {"logprobs"}}]]}`),
an `AIMessage` (the object, its `model_dump()`, or LangChain's serialised
`{"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}}`), whose
`response_metadata["logprobs"]` holds OpenAI's log-probabilities.
"""

from __future__ import annotations

from collections.abc import Mapping


def _completion(text, logprobs) -> dict:
    return {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text if isinstance(text, str) else ""},
                "logprobs": logprobs if isinstance(logprobs, Mapping) else None,
            }
        ],
    }


def _message_fields(data):
    """(content, response_metadata) of an AIMessage as a dict (plain or serialised), or None."""
    if not isinstance(data, Mapping):
        return None
    if data.get("lc") == 1 and isinstance(data.get("kwargs"), Mapping):
        ident = data.get("id")
        if isinstance(ident, list) and ident and str(ident[-1]).startswith("AIMessage"):
            data = data["kwargs"]
        else:
            return None
    elif data.get("type") not in ("ai", "AIMessageChunk") or "response_metadata" not in data:
        return None
    metadata = data.get("response_metadata")
    return data.get("content"), metadata if isinstance(metadata, Mapping) else {}


def as_chat_completion(response):
    """`response` as a chat completion when it is one of LangChain's shapes (an `LLMResult`,
    an `AIMessage` or its dict); anything else is returned as it is."""
    if not isinstance(response, Mapping):
        metadata = getattr(response, "response_metadata", None)
        if isinstance(metadata, Mapping) and hasattr(response, "content"):  # an AIMessage
            return _completion(response.content, metadata.get("logprobs"))
        return response
    if "choices" in response:
        return response
    generations = response.get("generations")
    if isinstance(generations, list):  # an LLMResult: the first generation of the first prompt
        first = generations[0] if generations and isinstance(generations[0], list) else None
        generation = first[0] if first and isinstance(first[0], Mapping) else None
        if generation is None:
            return response
        info = generation.get("generation_info") or {}
        logprobs = info.get("logprobs") if isinstance(info, Mapping) else None
        text = generation.get("text")
        message = _message_fields(generation.get("message"))
        if message is not None:
            text = text if isinstance(text, str) and text else message[0]
            logprobs = logprobs or message[1].get("logprobs")
        return _completion(text, logprobs)
    message = _message_fields(response)
    if message is not None:
        return _completion(message[0], message[1].get("logprobs"))
    return response
