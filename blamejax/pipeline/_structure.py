"""What a pipeline is made of, found by tracing it once without running it.

`discover` runs the pipeline under `jax.eval_shape` with a recording context. It
returns a `Structure`: the steps in the order they first draw, every draw site
(step, slot) with its number of options and variants, and the deterministic sites.
Everything is checked here, eagerly, before anything is compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._compile import cached
from ._choice import Choice, check_choose_args


class Site(NamedTuple):
    """One draw of a step. `slot` tells apart several draws of the same step."""

    step: str
    slot: int
    num_options: int  # K
    num_variants: int  # V (0 = factual, 1.. = fixes)
    parent_options: tuple[int, ...]  # K of each parent choice, () for a root or free-form step
    tabulated: bool  # True when the logits came as a [V, *K_parents, K] table with `given`


class ValueSite(NamedTuple):
    """A deterministic site (`ctx.deterministic`), whose value a plan may override."""

    name: str
    shape: tuple[int, ...]
    dtype: Any
    position: int = -1  # how many draw sites came before it (-1: unknown)


class Structure(NamedTuple):
    """The static description of a pipeline: hashable, so it can key caches."""

    steps: tuple[str, ...]  # in order of first draw
    num_variants: tuple[int, ...]  # per step
    num_options: tuple[int, ...]  # per step (equal across the step's slots)
    sites: tuple[Site, ...]
    values: tuple[ValueSite, ...]

    @property
    def num_steps(self) -> int:
        """How many steps the pipeline has."""
        return len(self.steps)

    def step_index(self, step, argument: str | None = None) -> int:
        """The position of `step` in `steps`.

        With `argument` (the name of the user's argument, e.g. `"step"`), `step` may also be
        an int index, and errors name that argument: a `TypeError` for another type, a
        `ValueError` for an index out of range, an unknown name, or the name of a
        deterministic site (which does not sample). Without it, `step` is a step name and an
        unknown one is a `ValueError` naming the steps."""
        if argument is None:
            try:
                return self.steps.index(step)
            except ValueError:
                raise ValueError(
                    f"unknown step {step!r}; this pipeline's steps are {list(self.steps)}"
                ) from None
        if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer, str)):
            raise TypeError(
                f"`{argument}` must be a step index (int) or a step name (str), got "
                f"{type(step).__name__}: {step!r}"
            )
        names = list(self.steps)
        if isinstance(step, str):
            if step in names:
                return names.index(step)
            if any(v.name == step for v in self.values):
                raise ValueError(
                    f"`{argument}` = {step!r} is a deterministic site (ctx.deterministic), not a "
                    f"step that samples; use do_observation to replace its value. Steps: {names}"
                )
            raise ValueError(
                f"`{argument}` = {step!r} is not a step of this pipeline; its steps are {names}"
            )
        if not 0 <= int(step) < len(names):
            raise ValueError(
                f"`{argument}` = {int(step)} is out of range: this pipeline has {len(names)} steps, "
                f"indices 0..{len(names) - 1} ({names})"
            )
        return int(step)

    def site_index(self, step: str, slot: int) -> int:
        """The position in `sites` of the draw of `step` in `slot`."""
        for i, site in enumerate(self.sites):
            if site.step == step and site.slot == slot:
                return i
        raise ValueError(f"step {step!r} has no draw in slot {slot}")

    def value_index(self, name: str) -> int:
        """The position in `values` of the deterministic site `name`."""
        for i, value in enumerate(self.values):
            if value.name == name:
                return i
        names = [v.name for v in self.values]
        raise ValueError(f"unknown deterministic site {name!r}; this pipeline has {names}")


class _Recorder:
    """A stand-in context that records every call instead of running the plan."""

    def __init__(self):
        self.sites: list[Site] = []
        self.values: list[ValueSite] = []
        self.draws: list = []  # each draw's index, touched once the pipeline has returned
        # Each step's first site and every (step, slot) drawn: the checks below look them up
        # instead of scanning every earlier site (quadratic in a pipeline of 1,000 steps).
        self.first: dict[str, Site] = {}
        self.drawn: set[tuple[str, int]] = set()

    def choose(self, step, logits, given=None, slot: int = 0):
        parents, tabulated = check_choose_args(step, logits, given, slot)
        num_variants, num_options = logits.shape[0], logits.shape[-1]
        if (step, slot) in self.drawn:
            raise ValueError(
                f"step {step!r} draws twice in slot {slot}; give each draw of a step its "
                "own `slot=` (a draw's noise is addressed by step and slot)"
            )
        site = self.first.get(step)
        if site is not None:
            if (site.num_variants, site.num_options) != (num_variants, num_options):
                raise ValueError(
                    f"step {step!r} has {site.num_variants} variants x {site.num_options} "
                    f"options in slot {site.slot} but {num_variants} x {num_options} in slot "
                    f"{slot}; every draw of a step must have the same variants and options"
                )
        self.drawn.add((step, int(slot)))
        self.sites.append(
            Site(
                step=step,
                slot=int(slot),
                num_options=int(num_options),
                num_variants=int(num_variants),
                parent_options=tuple(p.num_options for p in parents) if tabulated else (),
                tabulated=tabulated,
            )
        )
        self.first.setdefault(step, self.sites[-1])
        row = logits[(0,) + (0,) * (logits.ndim - 2)]
        index = jnp.argmax(row).astype(jnp.int32)
        self.draws.append((step, index))
        return Choice(index=index, probs=None, num_options=int(num_options))

    def deterministic(self, name: str, value):
        if not isinstance(name, str):
            raise TypeError(f"`name` must be a str, got {type(name).__name__}")
        if any(v.name == name for v in self.values):
            raise ValueError(f"deterministic site {name!r} is used twice; names must be unique")
        value = jnp.asarray(value)
        self.values.append(ValueSite(name, tuple(value.shape), value.dtype, len(self.sites)))
        return value


def discover_batch(pipeline: Callable, cases) -> Structure:
    """`discover` for one case of a batch (`cases` with a leading case axis), without
    slicing any array; cached on the pipeline and the shapes, so a repeated call is cheap."""
    leaves, treedef = jax.tree_util.tree_flatten(cases)
    try:
        cache_key = (pipeline, treedef, tuple((np.shape(x)[1:], x.dtype) for x in leaves))
    except AttributeError:
        return discover(pipeline, one_case(cases))
    return cached("structure.batch", cache_key, lambda: discover(pipeline, one_case(cases)))


def one_case(cases):
    """The shapes and dtypes of one case of a batch (the leading axis dropped): what
    `discover` needs, without slicing any array."""
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x)[1:], x.dtype), cases)


def discover(pipeline: Callable, case) -> Structure:
    """Trace `pipeline(ctx, case)` once (no computation) and return its `Structure`.

    **Arguments:**
    - `pipeline`: a function `pipeline(ctx, case) -> score`.
    - `case`: one case (no leading failure axis).

    **Returns:** a `Structure`.

    **Raises:** `TypeError`/`ValueError` naming the step when a call is malformed, when
    the pipeline makes no draw, or when it returns something other than a scalar score.
    """
    if not callable(pipeline):
        raise TypeError(f"`pipeline` must be callable, got {type(pipeline).__name__}")
    leaves, treedef = jax.tree_util.tree_flatten(case)
    cache_key = (
        pipeline,
        treedef,
        tuple((np.shape(x), getattr(x, "dtype", type(x))) for x in leaves),
    )
    return cached("structure", cache_key, lambda: _discover(pipeline, case))


def _run_at_top(recorder: _Recorder, pipeline: Callable, case):
    """Run `pipeline` on the recorder and refuse a draw made below the pipeline's own trace:
    one inside the user's `lax.cond`/`lax.scan`/`lax.while_loop` (or a nested `jit`/`vmap`)
    would leak out of that function's trace, and JAX would fail later with a leaked-tracer error
    that does not say why."""
    top = getattr(jnp.zeros(()), "_trace", None)  # the trace the pipeline itself runs in
    out = pipeline(recorder, case)
    for step, index in recorder.draws:
        trace = getattr(index, "_trace", None)
        if top is not None and trace is not None and trace is not top:
            raise ValueError(
                f"step {step!r}: `ctx.choose` was called inside a JAX control-flow or "
                "transformed function (`jax.lax.cond`, `lax.switch`, `lax.scan`, "
                "`lax.while_loop`, `lax.fori_loop`, a nested `jit` or `vmap`); the context must "
                "see every draw at the top level of the pipeline. Make every draw "
                "unconditionally and pick between results with `jnp.where`, and loop in Python "
                "over a static number of steps"
            )
    return out


def _discover(pipeline: Callable, case) -> Structure:
    recorder = _Recorder()
    try:
        out = jax.eval_shape(lambda c: _run_at_top(recorder, pipeline, c), case)
    except jax.errors.TracerBoolConversionError as error:
        raise TypeError(
            "`pipeline` branches in Python (`if`, `while`, `and`/`or`) on a value it computed "
            "from a draw; every run must make the same draws, so choose between values with "
            "jnp.where instead"
        ) from error
    if not hasattr(out, "shape") or tuple(out.shape) != ():
        shape = getattr(out, "shape", type(out).__name__)
        raise ValueError(f"`pipeline` must return a scalar score, got an output of shape {shape}")
    if (
        not jnp.issubdtype(out.dtype, jnp.floating)
        and not jnp.issubdtype(out.dtype, jnp.integer)
        and out.dtype != jnp.bool_
    ):
        raise TypeError(f"`pipeline` must return a numeric score, got dtype {out.dtype}")
    if not recorder.sites:
        raise ValueError("`pipeline` made no `ctx.choose` draw; there is nothing to blame")
    steps: list[str] = []
    for site in recorder.sites:
        if site.step not in steps:
            steps.append(site.step)
    first = recorder.first
    return Structure(
        steps=tuple(steps),
        num_variants=tuple(first[s].num_variants for s in steps),
        num_options=tuple(first[s].num_options for s in steps),
        sites=tuple(recorder.sites),
        values=tuple(recorder.values),
    )


def check_finite_logits(case, what: str = "cases") -> None:
    """Raise if any floating leaf of `case` holds NaN or +inf (``-inf`` is allowed)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(case)
    for path, leaf in leaves:
        if isinstance(leaf, jax.core.Tracer):
            continue
        arr = np.asarray(leaf)
        if not np.issubdtype(arr.dtype, np.floating):
            continue
        name = jax.tree_util.keystr(path)
        if np.isnan(arr).any():
            where = np.argwhere(np.isnan(arr))[0].tolist()
            raise ValueError(
                f"`{what}{name}` contains NaN (first at index {where}); logits must be real "
                "numbers or -inf for an impossible option"
            )
        if np.isposinf(arr).any():
            where = np.argwhere(np.isposinf(arr))[0].tolist()
            raise ValueError(
                f"`{what}{name}` contains +inf (first at index {where}); use large finite "
                "logits, or -inf for impossible options"
            )
