"""The error of `decisions_from_logprobs` when its declaration turned no step into a
decision: the declared agents are not in the runs, or none of their calls kept a response
with log-probabilities (then the way out is a scorer: `declare_decisions`)."""

from __future__ import annotations

from ._declare import is_model_call


def nothing_matched(runs, options, declared_for: set, converted: int) -> None:
    """Raise `ValueError` when no step of `runs` became a decision, naming what was declared,
    what the runs hold, and the next step."""
    if not runs:
        raise ValueError("`runs` is empty: no step to make a decision of")
    where = ", ".join(repr(r.run) for r in runs[:5]) + (", ..." if len(runs) > 5 else "")
    agents = sorted({s.agent for r in runs for s in r.steps if s.agent and is_model_call(s)})
    missing = [] if callable(options) else [a for a in options if a not in declared_for]
    if missing:
        raise ValueError(
            f"options are declared for agents {missing}, which match no step of runs {where}; "
            f"the agents with model calls in these runs are {agents}"
            + (" (none: see the agent rule in docs/traces.md)" if not agents else "")
        )
    if converted:
        return
    if callable(options):
        what = "the function declaring the options declared none for a step that kept a response"
    else:
        what = (
            f"the calls of agents {sorted(a for a in declared_for if a is not None)} in runs "
            f"{where} kept no chat completion with log-probabilities"
        )
    raise ValueError(
        f"{what}: no step became a decision. Only OpenInference keeps the response (in "
        "output.value; ask the model with logprobs=True, top_logprobs=N). For a trace without "
        "log-probabilities, declare the decisions with bj.traces.declare_decisions and score "
        "them with bj.traces.score_decisions and a scorer"
    )
