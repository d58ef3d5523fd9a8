"""Argument checks shared by every entry point that know pipelines, worlds and plans (the plain
ones, of numbers, flags and choices, are in `blamejax._arguments`): each raises a `TypeError`/`ValueError` that names
the argument as the user typed it, what was expected and what was received.

They run eagerly, on the host, before anything is compiled.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence

import jax
import numpy as np

from ._arguments import check_threshold as check_threshold  # traces' read-outs still ask here
from .noise import as_key as as_key  # checked where keys enter; defined with the noise
from .pipeline import Hard, Plan, Relaxed, Structure, World, factual_plan

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def leading_size(cases) -> int:
    """The number of cases F: every array of `cases` must have the same leading axis."""
    if isinstance(cases, (list, tuple)) and cases and all(isinstance(c, dict) for c in cases):
        raise TypeError(
            f"`cases` must be one pytree whose arrays have a leading case axis, got a "
            f"{type(cases).__name__} of {len(cases)} per-case dicts; stack them first: "
            "jax.tree_util.tree_map(lambda *xs: numpy.stack(xs), *cases)"
        )
    check_no_python_lists(cases, "cases")
    leaves = jax.tree_util.tree_leaves(cases)
    if not leaves:
        raise ValueError(
            "`cases` is empty: it must be a pytree of arrays with a leading failure axis"
        )
    sizes = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in leaves}
    if None in sizes or len(sizes) != 1:
        shapes = [np.shape(leaf) for leaf in leaves]
        shown = ", ".join(str(shape) for shape in shapes[:12])
        shown += f", ... ({len(shapes)} leaves)" if len(shapes) > 12 else ""
        raise ValueError(
            f"every leaf of `cases` must share one leading failure axis, got shapes [{shown}]"
        )
    size = sizes.pop()
    if size == 0:
        raise ValueError("`cases` holds zero failures; there is nothing to blame")
    return int(size)


def _is_scalar(x) -> bool:
    if isinstance(x, (bool, int, float, complex, np.generic)):
        return True
    return isinstance(x, (np.ndarray, jax.Array)) and x.ndim == 0


def _is_number_list(x) -> bool:
    """A Python list or tuple (not a NamedTuple) of numbers, or of such lists."""
    if not isinstance(x, (list, tuple)) or hasattr(x, "_fields") or not x:
        return False
    return all(_is_scalar(item) or _is_number_list(item) for item in x)


def check_no_python_lists(tree, argument: str) -> None:
    """Refuse a Python list or tuple of numbers inside `tree` (pytree leaves are its numbers,
    one scalar each, which no shape check could name): a `TypeError` naming its path.

    ```python
    check_no_python_lists({"a": [[0.0, 1.0]]}, "cases")  # TypeError: `cases` leaf ['a'] is a Python list; ...
    ```
    """
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_number_list)[0]
    lists = [(path, leaf) for path, leaf in flat if _is_number_list(leaf)]
    if not lists:
        return
    path, leaf = lists[0]
    where = f"`{argument}` leaf {jax.tree_util.keystr(path)}" if path else f"`{argument}`"
    others = [jax.tree_util.keystr(p) for p, _ in lists[1:4]]
    also = f" (so are {', '.join(others)}{', ...' if len(lists) > 4 else ''})" if others else ""
    raise TypeError(
        f"{where} is a Python {type(leaf).__name__}{also}; convert it with np.asarray / "
        f"jnp.asarray (an array with a leading case axis): a pytree's leaves are arrays, and "
        f"each number of a Python list would be a leaf of its own"
    )


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
    if worlds.case_id is not None and tuple(np.shape(worlds.case_id)) != shape:
        raise ValueError(
            f"`worlds.case_id` must have the keys' shape {shape}, got {tuple(np.shape(worlds.case_id))}"
        )
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


def split_case_ids(worlds: World) -> tuple[World, np.ndarray | None]:
    """`worlds` without their case ids (the compiled programs never see them), and the case
    id of each failure (`None` when the worlds carry none). Call after `check_worlds`."""
    if worlds.case_id is None:
        return worlds, None
    ids = np.asarray(worlds.case_id[:, 0]).astype(np.int64)  # one column to the host
    return World(key=worlds.key, overrides=worlds.overrides, valid=worlds.valid), ids


def resolve_players(structure: Structure, steps, fixes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Check `steps` (the players; default every step) and `fixes` (step -> fix variant,
    default 1) against the pipeline, and return (player indices, fix variants)."""
    players = check_steps(structure, steps)
    names = [structure.steps[p] for p in players]
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


def check_steps(structure: Structure, steps, indices: bool = False) -> tuple[int, ...]:
    """`steps` (a sequence; `None` = every step) as indices into `structure.steps`, in the
    order given: not a string, not empty, no step twice, every one a step of the pipeline.
    Its elements are step names, or with `indices` names or int indices."""
    if steps is None:
        return tuple(range(structure.num_steps))
    what = "a sequence of step names" + (" or indices" if indices else "")
    if isinstance(steps, (str, bytes)) or not isinstance(steps, (Sequence, np.ndarray)):
        raise TypeError(f"`steps` must be {what}, got {steps!r}")
    if not indices and not all(isinstance(s, str) for s in steps):
        raise TypeError(f"`steps` must be {what}, got {steps!r}")
    if len(steps) == 0:
        raise ValueError(
            f"`steps` is empty; name at least one of this pipeline's steps {list(structure.steps)}, "
            "or pass None for all of them"
        )
    if indices:
        players = tuple(structure.step_index(s, "steps") for s in steps)
    else:
        players = tuple(structure.step_index(s) for s in steps)
    if len(set(players)) != len(players):
        raise ValueError(f"`steps` lists a step twice: {list(steps)}")
    return players


def check_mode(mode):
    """`mode` must be `Hard()` or `Relaxed(tau)` (an instance, not a string or the class)."""
    if isinstance(mode, (Hard, Relaxed)):
        return mode
    raise TypeError(f"`mode` must be blamejax.Hard() or blamejax.Relaxed(tau), got {mode!r}")


def check_hard_mode(mode, why: str) -> Hard:
    """`mode`, a checked `Hard()`: `why` says what needs hard choices ("the contrastive
    estimator counts bad runs")."""
    if not isinstance(check_mode(mode), Hard):
        raise ValueError(f"{why}, which needs `mode=Hard()`, got {mode!r}")
    return mode


def check_plan(plan, structure: Structure) -> Plan:
    """`plan`, a `Plan` of this pipeline (`None`: the factual plan)."""
    if plan is None:
        return factual_plan(structure)
    if not isinstance(plan, Plan):
        raise TypeError(
            f"`plan` must be a blamejax.Plan (or None for the factual run), got {type(plan).__name__}"
        )
    if len(plan.steps) != structure.num_steps or len(plan.values) != len(structure.values):
        raise ValueError(
            f"`plan` has {len(plan.steps)} step plans and {len(plan.values)} value plans; this "
            f"pipeline has {structure.num_steps} steps {list(structure.steps)} and "
            f"{len(structure.values)} deterministic sites"
        )
    return plan


def check_observed(observed, num_cases: int, structure: Structure) -> np.ndarray:
    """`observed`, the recorded option of every draw site of every case: an int array
    `[F, sites]` whose column i lies in [0, K_i). Returned on the host."""
    observed = np.asarray(observed)
    num_sites = len(structure.sites)
    if observed.shape != (num_cases, num_sites) or not np.issubdtype(observed.dtype, np.integer):
        raise ValueError(
            f"`observed` must be an int array of shape [F, sites] = [{num_cases}, {num_sites}], "
            f"got shape {observed.shape}, dtype {observed.dtype}"
        )
    for i, site in enumerate(structure.sites):
        column = observed[:, i]
        if column.min() < 0 or column.max() >= site.num_options:
            raise ValueError(
                f"`observed` for step {site.step!r} (slot {site.slot}) must lie in "
                f"[0, {site.num_options}), got values in [{column.min()}, {column.max()}]"
            )
    return observed


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


def warn_not_failures(empty, score_range, what: str = "failures", case_ids=None) -> None:
    """Warn (`NotAFailureWarning`) when some of the `what` have v(empty), the factual score
    averaged over their worlds, at the top of `score_range`; they are named by their case
    ids (`case_ids`, positions when `None`)."""
    empty = np.asarray(empty, dtype=np.float64)
    passing = np.flatnonzero(empty >= float(score_range[1]))
    if passing.size == 0:
        return
    named = passing if case_ids is None else np.asarray(case_ids)[passing]
    shown = ", ".join(str(int(i)) for i in named[:10]) + (", ..." if passing.size > 10 else "")
    label = "" if case_ids is None else ("case id " if passing.size == 1 else "case ids ")
    warnings.warn(
        f"{passing.size} of {empty.size} {what} ({label}{shown}) already score the top of "
        f"`score_range` ({float(score_range[1])}) in their factual run under every supplied "
        "world, so their blame is zero: the `worlds` do not reproduce these failures (were they "
        "made with another key, or for other case ids?). To blame such runs on purpose, filter "
        "this warning: warnings.simplefilter('ignore', bj.estimators.NotAFailureWarning)",
        NotAFailureWarning,
        stacklevel=user_stacklevel(),
    )


def user_stacklevel() -> int:
    """The `stacklevel` with which a `warnings.warn` made by the caller of this function
    points at the first frame outside the blamejax package: the user's line, whatever
    wrappers and helpers of the package lie between. Call it in the `warnings.warn` call:
    `warnings.warn(message, Category, stacklevel=user_stacklevel())`."""
    frame, level = sys._getframe(1), 1  # the frame that warns is stacklevel 1
    while frame.f_back is not None and _in_package(frame):
        frame, level = frame.f_back, level + 1
    return level


def _in_package(frame) -> bool:
    return os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE)


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
