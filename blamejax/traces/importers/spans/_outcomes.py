"""How an imported trace went: the outcome of one run, from what the user gave or what the
trace says, never guessed.

In order, the first that applies: `outcomes=` (keyed by trace id, by the root span's name or
by a root-span attribute, `outcome_key`); the root span's `outcome.passed` / `outcome.score`
attributes; a `gen_ai.evaluation.result` event (or log record) on the root span; a root span
with status ERROR (failed); every root OK, only with `ok_means_passed=True` (passed). A trace
none of these applies to has no outcome: a problem naming its root span.
"""

import math
from collections.abc import Mapping

from ...format._check import shown

OUTCOME_PASSED = "outcome.passed"
OUTCOME_SCORE = "outcome.score"
EVALUATION_RESULT = "gen_ai.evaluation.result"
EVALUATION_LABEL = "gen_ai.evaluation.score.label"
EVALUATION_VALUE = "gen_ai.evaluation.score.value"
#: `gen_ai.evaluation.score.label` values read as passed / failed (compared in lower case).
PASS_LABELS = ("pass", "passed", "correct", "success", "succeeded", "true", "yes")
FAIL_LABELS = ("fail", "failed", "incorrect", "failure", "false", "no")
#: What `outcome_key` may be besides the name of a root-span attribute.
KEYS = ("trace_id", "root_name")


def _is_score(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_outcomes(outcomes, outcome_key) -> dict:
    """`outcomes` as a dict, checked: keys str (or int, for an integer attribute), values
    True/False or a finite score."""
    if not isinstance(outcome_key, str) or not outcome_key:
        raise TypeError(
            f"outcome_key must be 'trace_id', 'root_name' or the name of a root-span attribute, got {outcome_key!r}"
        )
    if outcomes is None:
        return {}
    if not isinstance(outcomes, Mapping):
        raise TypeError(
            f"outcomes must be a mapping of trace id -> bool or score, got {type(outcomes).__name__}"
        )
    for key, value in outcomes.items():
        ok = isinstance(value, bool) or _is_score(value)
        good_key = isinstance(key, str) or (isinstance(key, int) and not isinstance(key, bool))
        if not good_key or not ok:
            raise TypeError(
                f"outcomes[{key!r}] must be True/False or a finite score (trace ids are str), got {value!r}"
            )
    return dict(outcomes)


def keys_of(tid, roots, outcome_key) -> list:
    """The keys `outcomes` may hold for this trace, given `outcome_key`."""
    if outcome_key == "trace_id":
        return [tid]
    if outcome_key == "root_name":
        return [s["name"] for s in roots]
    values = [s["attributes"].get(outcome_key) for s in roots]
    return [v for v in values if isinstance(v, str | int) and not isinstance(v, bool)]


def _as_outcome(value):
    return (None, value) if isinstance(value, bool) else (float(value), None)


def _from_attributes(root, bad):
    a = root["attributes"]
    passed, score = a.get(OUTCOME_PASSED), a.get(OUTCOME_SCORE)
    if passed is not None and not isinstance(passed, bool):
        bad(root, OUTCOME_PASSED, f"expected true or false, got {shown(passed)}")
        return None
    if score is not None and not _is_score(score):
        bad(root, OUTCOME_SCORE, f"expected a finite number, got {shown(score)}")
        return None
    if passed is None and score is None:
        return None
    return (None if score is None else float(score), passed)


def _from_evaluation(root, bad):
    results = [
        e
        for e in [*root["events"], *root.get("logs", ())]
        if isinstance(e, dict) and e.get("name") == EVALUATION_RESULT
    ]
    if not results:
        return None
    if len(results) > 1:
        names = [(e.get("attributes") or {}).get("gen_ai.evaluation.name") for e in results]
        bad(
            root,
            "events",
            f"{len(results)} {EVALUATION_RESULT} events on the root span ({shown(names)}): "
            "which one is the run's outcome is ambiguous; pass outcomes=",
        )
        return None
    a = results[0].get("attributes") or {}
    label, value = a.get(EVALUATION_LABEL), a.get(EVALUATION_VALUE)
    passed = None
    if isinstance(label, str) and label.strip().lower() in PASS_LABELS:
        passed = True
    elif isinstance(label, str) and label.strip().lower() in FAIL_LABELS:
        passed = False
    score = float(value) if _is_score(value) else None
    if passed is None and score is None:
        bad(
            root,
            f"events.{EVALUATION_RESULT}",
            f"neither {EVALUATION_LABEL} ({shown(label)}) says pass or fail "
            f"(one of {', '.join(PASS_LABELS)} / {', '.join(FAIL_LABELS)}) nor is "
            f"{EVALUATION_VALUE} ({shown(value)}) a number",
        )
        return None
    return score, passed


def outcome(tid, roots, outcomes, outcome_key, ok_means_passed, bad, matched: set):
    """`(score, passed, source)` of one trace, `source` saying where it came from; `(None,
    None, None)` after reporting through `bad(span, field, message)` when it has none.
    `matched` collects the `outcomes` keys used."""
    for key in keys_of(tid, roots, outcome_key):
        if key in outcomes:
            matched.add(key)
            return (*_as_outcome(outcomes[key]), "outcomes")
    for finder, source in (
        (_from_attributes, "outcome attributes"),
        (_from_evaluation, EVALUATION_RESULT),
    ):
        found = [f for f in (finder(root, bad) for root in roots) if f is not None]
        if len(set(found)) > 1:
            bad(roots[0], "", f"the root spans of trace {tid} disagree on the outcome ({source})")
            return None, None, None
        if found:
            return (*found[0], source)
    statuses = {s["status"] for s in roots}
    if "ERROR" in statuses:
        return None, False, "status ERROR"
    if statuses == {"OK"} and ok_means_passed:
        return None, True, "status OK (ok_means_passed)"
    status = (
        "OK, which is not taken as passed unless ok_means_passed=True"
        if statuses == {"OK"}
        else "UNSET"
    )
    bad(
        roots[0],
        "status",
        f"the outcome of trace {tid} is unknown: its root span's status is {status}, and it has "
        f"no {OUTCOME_PASSED}/{OUTCOME_SCORE} attribute or {EVALUATION_RESULT} event on it; "
        f"pass outcomes={{{tid!r}: True/False or a score}}",
    )
    return None, None, None
