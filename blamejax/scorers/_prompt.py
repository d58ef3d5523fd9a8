"""The prompts the model adapters send, and their checks."""

from __future__ import annotations

import json
import string

from .._replies import LABELS as LABELS
from ._request import Request

MODES = ("logprobs", "json")
FIELDS = ("step", "variant", "inputs", "options")

LOGPROBS_TEMPLATE = (
    "Step: {step}\n\nWhat the step sees:\n{inputs}\n\nWhich option should this step choose?\n"
    "{options}\n\nAnswer with the letter of the best option only."
)
JSON_TEMPLATE = (
    "Step: {step}\n\nWhat the step sees:\n{inputs}\n\nThe options: {options}\n\n"
    "For each option, how likely is it the right choice for this step? Reply with one JSON "
    "object only: its keys are the options exactly as written, its values probabilities "
    "between 0 and 1."
)
SYSTEM = {
    "logprobs": "You pick one option. Reply with its letter and nothing else.",
    "json": "You score options. Reply with one JSON object and nothing else.",
}


def check_mode(mode) -> str:
    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {MODES}, got {mode!r}")
    return mode


def check_template(template, mode: str) -> str:
    """`template` (None: the mode's default) checked: a `str.format` string using only
    {step}, {variant}, {inputs} and {options}, and using {options}."""
    if template is None:
        return LOGPROBS_TEMPLATE if mode == "logprobs" else JSON_TEMPLATE
    if not isinstance(template, str):
        raise TypeError(f"`template` must be a string or None, got {template!r}")
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as error:
        raise ValueError(
            f"`template` is not a valid format string ({error}): {template!r}"
        ) from None
    unknown = fields - set(FIELDS)
    if unknown:
        raise ValueError(
            f"`template` uses unknown fields {sorted(unknown)}; it may use {{step}}, {{variant}}, "
            "{inputs} and {options} (write a literal brace as {{ or }})"
        )
    if "options" not in fields:
        raise ValueError(f"`template` must show the options with {{options}}, got {template!r}")
    return template


def check_options(request: Request, mode: str) -> None:
    if mode == "logprobs" and len(request.options) > len(LABELS):
        raise ValueError(
            f"mode='logprobs' labels options with one letter each, at most {len(LABELS)} (the most "
            f"top_logprobs a server returns), got {len(request.options)} for {request.describe()}; "
            "use mode='json'"
        )


def render(template: str, request: Request, mode: str) -> str:
    """The user message for `request`."""
    inputs = (
        request.inputs
        if isinstance(request.inputs, str)
        else json.dumps(request.inputs, ensure_ascii=False, sort_keys=True, indent=1)
    )
    if mode == "logprobs":
        options = "\n".join(f"{LABELS[i]}. {o}" for i, o in enumerate(request.options))
    else:
        options = json.dumps(list(request.options), ensure_ascii=False)
    return template.format(
        step=request.step, variant=request.variant, inputs=inputs, options=options
    )
