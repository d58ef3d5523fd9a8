"""What `score_fixes` and `fill_lazily` share: the checks of their scorer, request function
and step names, and the question for one row of a recorded step's logits table."""

from __future__ import annotations

from .._arguments import check_function
from ._request import Request, check_request
from ._scorer import check_scorer as check_scorer

ROW_REQUEST = "(run, step, variant, parent) -> Request"


def check_row_request(request):
    """`request`, a function `(run, step, variant, parent) -> Request`."""
    return check_function(request, "request", ROW_REQUEST, allow_none=False)


def check_step_names(names, argument: str):
    """`names`, a list of step names or `None` (a lone string is refused, not split)."""
    if isinstance(names, str):
        raise TypeError(
            f"`{argument}` must be a list of step names or None, got the string {names!r}; "
            f"write [{names!r}]"
        )
    return names


def ask_row(request, run, step, variant: str, parent, where: str) -> Request:
    """`request(run, step, variant, parent)`, checked: a `Request` with the step's options
    (`where` names the row in the error, e.g. "step 'plan' of run 'r0'")."""
    made = check_request(request(run, step, variant, parent), where="request(...)")
    if made.options != tuple(step.options):
        raise ValueError(
            f"`request` returned options {list(made.options)} for {where}, expected its "
            f"options {list(step.options)}"
        )
    return made
