"""Argument checks shared by every entry point: each raises a `TypeError`/`ValueError` that names
the argument as the user typed it, what was expected and what was received.

They run eagerly, on the host, before anything is compiled.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from .noise import as_key as as_key  # checked where keys enter; defined with the noise
from .pipeline import Hard, Relaxed, Structure, World


def leading_size(cases) -> int:
    """The number of cases F: every array of `cases` must have the same leading axis."""
    if isinstance(cases, (list, tuple)) and cases and all(isinstance(c, dict) for c in cases):
        raise TypeError(
            f"`cases` must be one pytree whose arrays have a leading case axis, got a "
            f"{type(cases).__name__} of {len(cases)} per-case dicts; stack them first: "
            "jax.tree_util.tree_map(lambda *xs: numpy.stack(xs), *cases)"
        )
    leaves = jax.tree_util.tree_leaves(cases)
    if not leaves:
        raise ValueError(
            "`cases` is empty: it must be a pytree of arrays with a leading failure axis"
        )
    sizes = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in leaves}
    if None in sizes or len(sizes) != 1:
        shapes = [np.shape(leaf) for leaf in leaves]
        raise ValueError(
            f"every leaf of `cases` must share one leading failure axis, got shapes {shapes}"
        )
    size = sizes.pop()
    if size == 0:
        raise ValueError("`cases` holds zero failures; there is nothing to blame")
    return int(size)


def check_score_range(score_range) -> tuple[float, float]:
    try:
        low, high = (float(x) for x in score_range)
    except (TypeError, ValueError):
        raise TypeError(f"`score_range` must be a pair (low, high), got {score_range!r}") from None
    if not (np.isfinite(low) and np.isfinite(high) and low < high):
        raise ValueError(f"`score_range` must be finite with low < high, got {score_range!r}")
    return low, high


def check_worlds(worlds: World, num_failures: int, structure: Structure) -> int:
    """Check that `worlds` has keys `[F, W]` (and matching overrides); return W."""
    if not isinstance(worlds, World):
        raise TypeError(
            f"`worlds` must be a blamejax.World (see recorded_worlds, fresh_worlds, "
            f"inferred_worlds), got {type(worlds).__name__}"
        )
    shape = tuple(worlds.key.shape)
    if len(shape) != 2 or shape[0] != num_failures:
        raise ValueError(f"`worlds.key` must have shape [F, W] = [{num_failures}, W], got {shape}")
    if shape[1] == 0:
        raise ValueError("`worlds` holds W = 0 worlds per failure; need at least one")
    if worlds.overrides is not None:
        if worlds.valid is None or len(worlds.valid) != len(worlds.overrides):
            raise ValueError(
                "`worlds.valid` must hold one bool array per draw site when `worlds.overrides` "
                f"is given ({len(structure.sites)} sites), got "
                f"{None if worlds.valid is None else len(worlds.valid)}"
            )
        for site, valid in zip(structure.sites, worlds.valid):
            if tuple(np.shape(valid)) != shape:
                raise ValueError(
                    f"`worlds.valid` for step {site.step!r} must have shape {shape}, got {tuple(np.shape(valid))}"
                )
        if len(worlds.overrides) != len(structure.sites):
            raise ValueError(
                f"`worlds.overrides` must hold one array per draw site ({len(structure.sites)}), "
                f"got {len(worlds.overrides)}"
            )
        for site, override in zip(structure.sites, worlds.overrides):
            if tuple(override.shape) != shape + (site.num_options,):
                raise ValueError(
                    f"`worlds.overrides` for step {site.step!r} must have shape "
                    f"{shape + (site.num_options,)}, got {tuple(override.shape)}"
                )
    return shape[1]


def resolve_players(structure: Structure, steps, fixes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Check `steps` (the players; default every step) and `fixes` (step -> fix variant,
    default 1) against the pipeline, and return (player indices, fix variants)."""
    if steps is None:
        names = list(structure.steps)
    else:
        if isinstance(steps, str) or not all(isinstance(s, str) for s in steps):
            raise TypeError(f"`steps` must be a sequence of step names, got {steps!r}")
        names = list(steps)
        if not names:
            raise ValueError(
                f"`steps` is empty; name at least one of this pipeline's steps {list(structure.steps)}, "
                "or pass None for all of them"
            )
        if len(set(names)) != len(names):
            raise ValueError(f"`steps` lists a step twice: {names}")
    players = tuple(structure.step_index(s) for s in names)
    if fixes is not None and not isinstance(fixes, dict):
        raise TypeError(f"`fixes` must be a dict {{step: fix variant}}, got {fixes!r}")
    fixes = dict(fixes or {})
    for name in fixes:
        structure.step_index(name)  # unknown names raise
        if name not in names:
            raise ValueError(f"`fixes` names step {name!r}, which is not among `steps` {names}")
    variants = []
    for name, p in zip(names, players):
        num_variants = structure.num_variants[p]
        fix = fixes.get(name, 1)
        if num_variants < 2:
            raise ValueError(
                f"step {name!r} has no fix: its logits have {num_variants} variant on axis 0 "
                "(variant 0 is the factual run); add a fix variant or leave the step out of `steps`"
            )
        if not isinstance(fix, (int, np.integer)) or not 1 <= fix < num_variants:
            raise ValueError(
                f"`fixes[{name!r}]` must be a variant in [1, {num_variants}), got {fix!r}"
            )
        variants.append(int(fix))
    return players, tuple(variants)


def check_delta(delta) -> float:
    if not isinstance(delta, (float, int)) or isinstance(delta, bool) or not 0 < delta < 1:
        raise ValueError(f"`delta` must be an error level in (0, 1), got {delta!r}")
    return float(delta)


def check_positive_int(value, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{argument}` must be a positive int, got {value!r}")
    return int(value)


def check_threshold(threshold) -> float:
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not np.isfinite(threshold)
    ):
        raise ValueError(f"`threshold` must be a finite number, got {threshold!r}")
    return float(threshold)


def check_mode(mode):
    """`mode` must be `Hard()` or `Relaxed(tau)` (an instance, not a string or the class)."""
    if isinstance(mode, (Hard, Relaxed)):
        return mode
    raise TypeError(f"`mode` must be blamejax.Hard() or blamejax.Relaxed(tau), got {mode!r}")


def check_scores_in_range(
    low: float, high: float, score_range, explain=None, nan: bool = False
) -> None:
    """The lowest and highest score a pipeline returned must lie in the declared range, and be
    numbers: a NaN score (a draw with no valid option, or the pipeline's own arithmetic) is
    an error, never a pass. `nan` says a NaN was seen (compiled min/max reductions may skip
    NaN, so callers also test their results); `explain()`, called only then, says where."""
    low_decl, high_decl = score_range
    if nan or np.isnan(low) or np.isnan(high):
        where = explain() if explain is not None else ""
        raise ValueError(
            "the pipeline returned a NaN score" + (f": {where}" if where else "") + "; every "
            "draw needs at least one finite logit, and the score must be a number"
        )
    if float(low) < low_decl or float(high) > high_decl:
        raise ValueError(
            f"the pipeline returned scores in [{float(low)}, {float(high)}], outside the declared "
            f"`score_range` {tuple(score_range)}; declare the true range (the confidence bounds use it)"
        )


class NotAFailureWarning(UserWarning):
    """The runs given as failures already reach the top of the score range in their factual
    run under every supplied world, so there is nothing to repair and their blame is zero (or
    only the harm a fix does): the worlds most likely do not reproduce those failures."""


def warn_not_failures(empty, score_range, what: str = "failures") -> None:
    """Warn (`NotAFailureWarning`) when some of the `what` have v(empty), the factual score
    averaged over their worlds, at the top of `score_range`."""
    empty = np.asarray(empty, dtype=np.float64)
    passing = np.flatnonzero(empty >= float(score_range[1]))
    if passing.size == 0:
        return
    shown = ", ".join(str(int(i)) for i in passing[:10]) + (", ..." if passing.size > 10 else "")
    import warnings

    warnings.warn(
        f"{passing.size} of {empty.size} {what} ({shown}) already score the top of "
        f"`score_range` ({float(score_range[1])}) in their factual run under every supplied "
        "world, so their blame is zero: the `worlds` do not reproduce these failures (were they "
        "made with another key, or for other case ids?). To blame such runs on purpose, filter "
        "this warning: warnings.simplefilter('ignore', bj.estimators.NotAFailureWarning)",
        NotAFailureWarning,
        stacklevel=3,
    )


def available_memory() -> tuple[int, str]:
    """(bytes, where the figure comes from): MemAvailable of /proc/meminfo, else the machine's
    physical memory, else 4 GiB."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf(
            "SC_PHYS_PAGES"
        ), "the machine's physical memory"
    except (ValueError, OSError, AttributeError):
        return 4 * 2**30, "an assumed 4 GiB: the machine's memory is unknown"


def check_memory(need: int, what: str, advice: str) -> None:
    """Refuse up front, with the figures, a request whose arrays alone would need more than
    the memory available (instead of running the machine out of memory)."""
    available, source = available_memory()
    if need > available:
        raise ValueError(
            f"{what} needs about {need / 2**30:.1f} GiB, more than the {available / 2**30:.1f} GiB "
            f"available ({source}); {advice}"
        )
