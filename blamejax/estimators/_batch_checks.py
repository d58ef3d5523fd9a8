"""`blame_batch`'s checks of what its arguments must agree on, one line each in the entry
point: the noise mode and its question, the observed choices, the threshold, the stopping
rule, the estimator (`"auto"` resolved) and the option names. The plain checks (numbers,
flags, choices) are `blamejax._arguments`'."""

from __future__ import annotations

import numpy as np

from .._arguments import check_bool, check_threshold
from .._checks import leading_size
from ._batch_state import BatchSettings
from ._exact import structured_plan

NOISE_MODES = {
    "recorded": "counterfactual, this run's own luck: had this step run its fix, with the "
    "recorded noise replayed exactly, would the run have succeeded?",
    "inferred": "counterfactual, posterior luck: the noise abducted from the observed choices "
    "alone (Gumbel-max coupling), averaged over posterior worlds",
    "fresh": "interventional, new luck: how much does fixing this step help on average over "
    "fresh noise (not about this particular run)",
}
"""The batch noise modes, each with the question its blame answers."""


EXPECTED_NOISE_MODES = {
    "expected-inferred": "counterfactual, posterior luck integrated exactly: 'inferred' in the "
    "limit of infinitely many worlds (expected_worlds; tabulated pipelines)",
    "expected-fresh": "interventional, new luck integrated exactly: 'fresh' in the limit of "
    "infinitely many worlds (expected_worlds; tabulated pipelines)",
}
"""The noise modes `blame_batch` integrates exactly (the structured exact path)."""


QUESTIONS = {**NOISE_MODES, **EXPECTED_NOISE_MODES}


EXACT_AUTO_LIMIT = 14


def stop_from_flag(stop_early) -> tuple[str, ...]:
    """The `stop` of the old `stop_early` flag."""
    return ("top1",) if check_bool(stop_early, "stop_early") else ()


def check_observed(observed, noise: str, cases, structure) -> None:
    """`observed`: `None`, or for inferred noise an int array `[cases, sites]`."""
    if observed is None:
        return None
    expected = (leading_size(cases), len(structure.sites))
    if not np.issubdtype(np.asarray(observed).dtype, np.integer):
        raise ValueError(
            f"`observed` must be an int array of shape [cases, sites] = {list(expected)}, got "
            f"dtype {np.asarray(observed).dtype}"
        )
    if noise not in ("inferred", "expected-inferred"):  # the message's first form is tested
        raise ValueError(f"`observed` is used only with noise='inferred', got noise={noise!r}")
    if np.shape(observed) != expected:
        raise ValueError(
            f"`observed` must hold every case's observed option per draw site, shape "
            f"[cases, sites] = {list(expected)}, got shape {list(np.shape(observed))}"
        )
    return observed


def check_batch_threshold(threshold, low: float, high: float) -> float:
    """`threshold`, in (low, high] (`None`: the top of the range), as a float."""
    threshold = check_threshold(threshold, none_for="the top of the range")
    threshold = high if threshold is None else threshold
    if not low < threshold <= high:
        raise ValueError(f"`threshold` must lie in ({low}, {high}], got {threshold}")
    return threshold


def check_stop(stop) -> bool:
    """`stop`: `()` (analyse every failure) or `"top1"` (stop once the top step separates);
    whether to stop early."""
    names = (stop,) if isinstance(stop, str) else stop
    if not isinstance(names, (tuple, list)) or any(name != "top1" for name in names):
        raise ValueError(
            "`stop` must be () (analyse every failure) or 'top1' (stop at the first look where "
            f"the top step is separated), got {stop!r}"
        )
    return bool(names)


def resolved_estimator(settings: BatchSettings, cases) -> BatchSettings:
    """The settings with `"exact"` or `"mc"`: integrated noise needs the exact estimator;
    `"auto"` is exact up to `EXACT_AUTO_LIMIT` steps, or where the structured path applies.
    Then `keep_coalitions`, which needs every coalition's score, is checked against it."""
    game, noise, estimator = settings.game, settings.noise, settings.estimator
    if noise.startswith("expected"):  # integrated noise: the structured exact path only
        if estimator == "mc":
            raise ValueError(
                f"noise={noise!r} is integrated exactly by the exact estimator's structured "
                "path; got estimator='mc'"
            )
        estimator = "exact"
    if estimator == "auto":
        exact = game.num_players <= EXACT_AUTO_LIMIT or structured_plan(game, cases)[2] is None
        estimator = "exact" if exact else "mc"
    if settings.keep_coalitions and noise.startswith("expected"):
        raise ValueError(
            f"`keep_coalitions=True` keeps sampled worlds' coalition scores; noise={noise!r} "
            "integrates the worlds and scores no coalition"
        )
    if settings.keep_coalitions and estimator != "exact":
        raise ValueError(
            f"`keep_coalitions=True` needs the exact estimator (every coalition's score), got estimator={estimator!r}"
        )
    return settings._replace(estimator=estimator)


def check_noise(noise) -> str:
    if not isinstance(noise, str) or noise not in QUESTIONS:
        raise ValueError(
            f"`noise` must be one of {sorted(NOISE_MODES)}, got {noise!r} (or, integrated "
            f"exactly, one of {sorted(EXPECTED_NOISE_MODES)})"
        )
    return noise


def checked_option_names(option_names, structure):
    """`option_names`, checked against the pipeline, as `((step, names or None), ...)`."""
    if option_names is None:
        return None
    if not isinstance(option_names, dict):
        raise TypeError(
            f"`option_names` must be a dict {{step: option names}}, got {option_names!r}"
        )
    out = []
    for step in structure.steps:
        labels = option_names.get(step)
        k = structure.num_options[structure.step_index(step)]
        if labels is not None and len(labels) != k:
            raise ValueError(
                f"`option_names[{step!r}]` must name all {k} options, got {len(labels)}"
            )
        out.append((step, tuple(labels) if labels is not None else None))
    for step in option_names:
        structure.step_index(step)  # unknown names raise
    return tuple(out)
