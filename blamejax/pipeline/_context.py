"""The pipeline API: a pipeline is `pipeline(ctx, case) -> score`, written for one failure,
one world and one plan. The context `ctx` owns the plan (what each step does in this run),
the world (its noise) and the sampling rule (hard Gumbel-max or relaxed Gumbel-softmax).

```python
def refund(ctx, case):
    plan = ctx.choose("planner", case.planner)                 # table [V, K]
    doc = ctx.choose("retriever", case.retriever, given=plan)  # table [V, K_plan, K]
    return doc.take(case.doc_is_right)                          # score in [0, 1]
```

`ctx` calls must not sit inside a `lax.cond`, `lax.scan` or `lax.while_loop` of the user's
own: the context would leak tracers out of them. Use Python control flow over a static
number of steps, and `jnp.where` for data-dependent choices.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ..noise import fresh_key, gumbel_at, gumbel_sites

_NEG_LARGE = -1e30  # stands in for -inf inside softmax so no row becomes NaN


class Hard(eqx.Module):
    """Exact Gumbel-max sampling: `argmax(l + g)`; choices are integers."""

    def __check_init__(self):
        pass


class Relaxed(eqx.Module):
    """Gumbel-softmax sampling `softmax((l + g) / tau)` with the same addressed noise.

    With `straight_through=True` the forward values are the hard one-hot choices and the
    gradients are those of the relaxed probabilities.
    """

    tau: Float[Array, ""] | float = 1.0
    straight_through: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if not isinstance(self.tau, jax.core.Tracer):
            tau = np.asarray(self.tau)
            if not np.issubdtype(tau.dtype, np.number):
                raise TypeError(f"`tau` must be a positive scalar temperature, got {self.tau!r}")
            if tau.shape != () or not bool(tau > 0):
                raise ValueError(f"`tau` must be a positive scalar temperature, got {self.tau!r}")


class Choice(eqx.Module):
    """What one draw chose.

    - `index`: `Int[Array, ""]`, the chosen option (in relaxed mode, the most probable one).
    - `probs`: `Float[Array, "K"]` in relaxed mode, `None` in hard mode.
    - `num_options`: K.

    A context that defers its tabulated draws (`Context(defer=True)`) returns choices whose
    index is worked out the first time it is read (`_Deferred`).
    """

    _index: Int[Array, ""] | None
    probs: Float[Array, " K"] | None
    num_options: int = eqx.field(static=True)
    _deferred: Any = eqx.field(static=True, default=None)
    _reads: Any = eqx.field(static=True, default=None)

    def __init__(self, index, probs, num_options, deferred=None, reads=None):
        self._index = index
        self.probs = probs
        self.num_options = num_options
        self._deferred = deferred
        self._reads = reads

    @property
    def index(self) -> Int[Array, ""]:
        """The chosen option, an int32 scalar (a deferred draw is made the first time it is read)."""
        if self._deferred is not None:
            return self._deferred.value()
        return self._index

    def take(self, table):
        """Read `table[index]` (hard) or `probs @ table` (relaxed).

        `table` has the options on its first axis, `[K, ...]`. In relaxed mode it must be
        finite: a `-inf` entry gives `0 * -inf = NaN`, and the estimators refuse the NaN
        score with an error naming the failure and coalition.
        """
        table = jnp.asarray(table)
        if table.ndim == 0 or table.shape[0] != self.num_options:
            raise ValueError(
                f"`choice.take(table)` needs a table with the {self.num_options} options on "
                f"its first axis, got shape {table.shape}"
            )
        if self.probs is None:
            if self._reads is None:
                return table[self.index]
            return self._reads.take(table, self.index)
        return jnp.tensordot(self.probs.astype(table.dtype), table, axes=1)


class _TableReads:
    """Where the rows a context's hard choices read from tables came from, so that a table
    over several steps' options read one step at a time (`v.take(d.take(table))`) costs one
    gather from the table itself, `table[d.index, v.index]`, and not a gather from a row that
    depends on `d`'s coalition bits for every one of `v`'s (under the coalition `vmap`s, that
    second gather batches both its operand and its index, tens of times slower on the CPU).

    `take(table, index)` returns `table[index]`; when `table` is a row this object made, it
    reads the same entry from the row's source, with the indices laid into one flat index."""

    def __init__(self):
        self._rows: dict[int, tuple] = {}  # id(row) -> (row, source, flat index, axes read)

    def take(self, table, index):
        known = self._rows.get(id(table))
        if known is not None and known[0] is table:
            _, source, flat, axes = known
            axes += 1
            flat = flat * source.shape[axes - 1] + index
            leading = int(np.prod(source.shape[:axes]))
            out = source.reshape((leading,) + source.shape[axes:])[flat]
        else:
            source, flat, axes = table, index, 1
            out = table[index]
        if out.ndim:  # a row: remember where it came from (and keep it, so no id is reused)
            self._rows[id(out)] = (out, source, flat, axes)
        return out


class StepPlan(NamedTuple):
    """What one step does in one run. Every field is a scalar array, one per step, so that
    batching one step's plan never batches another step's computation.

    - `variant`: `Int[Array, ""]`, 0 = factual, v >= 1 = fix v.
    - `noise`: `Int[Array, ""]`, -1 = the world's noise (override where valid, otherwise
      addressed); r >= 0 = fresh noise stream r (used to resample a step).
    - `forced`: `Int[Array, ""]`, -1 = sample; a >= 0 = force option a in every slot.
    - `shift`: `None` (the default: no change, no cost) or `Float[Array, "K"]`, added to
      every logits row the step decides from (`do_context`); `-inf` removes an option.
    """

    variant: Int[Array, ""]
    noise: Int[Array, ""]
    forced: Int[Array, ""]
    shift: Float[Array, " K"] | None = None


class ValuePlan(NamedTuple):
    """Override of a deterministic site: `active` (bool scalar) and the `value` to use."""

    active: Bool[Array, ""]
    value: Any


class Plan(NamedTuple):
    """A plan for every step (`steps`, in the structure's order), every deterministic
    site (`values`, `None` entries mean "no override"), and optionally a forced option
    per draw site (`forced_sites`, -1 = not forced; used to replay observed choices), and
    optionally the steps' variants as one array (`variants`, the same values as `steps`)."""

    steps: tuple[StepPlan, ...]
    values: tuple[ValuePlan | None, ...]
    forced_sites: tuple | None = None
    # `None`, or every step's `variant` again as one `Int[Array, "steps"]` (a coalition's
    # plan built from a mask): a context that defers its draws reads the variants of many
    # steps from it in one gather instead of stacking the steps' scalars.
    variants: Int[Array, " steps"] | None = None


def factual_plan(structure) -> Plan:
    """The plan of the run as it happened: every step factual, world noise, no forcing."""
    zero = np.int32(0)
    none = np.int32(-1)
    steps = tuple(StepPlan(zero, none, none) for _ in structure.steps)
    return Plan(steps=steps, values=tuple(None for _ in structure.values))


class World(eqx.Module):
    """The luck of one run.

    - `key`: the world's key; every Gumbel is addressed from it (see `gumbel_at`).
    - `overrides`: `None`, or one `Float[Array, "K"]` per site (in `Structure.sites`
      order): Gumbels recorded from a log or produced by abduction.
    - `valid`: `None`, or one `Bool[Array, ""]` per site; where true the override wins over
      the addressed value.
    """

    key: PRNGKeyArray
    overrides: tuple | None = None
    valid: tuple | None = None


def world_noise(structure, world: World) -> Float[Array, "sites K"]:
    """The addressed Gumbels of every draw site of one world (overrides not applied)."""
    sites = structure.sites
    num_options = max(site.num_options for site in sites)
    return gumbel_sites(
        world.key, tuple(s.step for s in sites), tuple(s.slot for s in sites), num_options
    )


def check_choose_args(step, logits, given, slot):
    """Validate one `ctx.choose` call; return (parents, tabulated)."""
    if not isinstance(step, str):
        raise TypeError(f"`step` must be a str name, got {type(step).__name__}: {step!r}")
    if not isinstance(slot, int) or slot < 0:
        raise TypeError(f"`slot` of step {step!r} must be a non-negative Python int, got {slot!r}")
    if not hasattr(logits, "shape") or not hasattr(logits, "dtype"):
        raise TypeError(f"logits of step {step!r} must be an array, got {type(logits).__name__}")
    if not jnp.issubdtype(logits.dtype, jnp.floating):
        raise TypeError(f"logits of step {step!r} must be floating point, got {logits.dtype}")
    if given is None:
        parents = ()
    elif isinstance(given, Choice):
        parents = (given,)
    elif isinstance(given, (tuple, list)) and all(isinstance(g, Choice) for g in given):
        parents = tuple(given)
    else:
        raise TypeError(
            f"`given` of step {step!r} must be a Choice or a tuple of Choices, "
            f"got {type(given).__name__}"
        )
    expected_ndim = 2 + len(parents)
    if logits.ndim != expected_ndim:
        want = "[V, " + "".join(f"K_parent{i}, " for i in range(len(parents))) + "K]"
        raise ValueError(
            f"logits of step {step!r} must have shape {want} ({expected_ndim} axes: variants, "
            f"{'one axis per parent, ' if parents else ''}options), got shape {logits.shape}"
        )
    for i, parent in enumerate(parents):
        if logits.shape[1 + i] != parent.num_options:
            raise ValueError(
                f"logits of step {step!r} have {logits.shape[1 + i]} rows on parent axis {i} "
                f"but the parent choice has {parent.num_options} options (shape {logits.shape})"
            )
    if logits.shape[0] < 1 or logits.shape[-1] < 1:
        raise ValueError(
            f"logits of step {step!r} need >= 1 variant and >= 1 option, got {logits.shape}"
        )
    return parents, bool(parents)


class Context:
    """The `ctx` a pipeline receives. Built by the engine; users only call its methods."""

    def __init__(
        self,
        structure,
        plan: Plan,
        world: World,
        mode=Hard(),
        record=None,
        noise=None,
        rows_per_world=False,
        defer=False,
    ):
        self.structure = structure
        # `rows_per_world`: a tabulated step's table with a row that has no valid option
        # invalidates the run whether or not the run reaches that row. The check is then made
        # once per world, not once per coalition (`exact_run`'s first pass, redone with the
        # per-run check when it finds such a row).
        self.rows_per_world = rows_per_world
        self.plan = plan
        self.world = world
        self.mode = mode
        self.record = record  # a dict filled by `trace_run`, else None
        self._invalid = None  # Bool[Array, ""] once a draw is made: some draw had no valid option
        # `defer`: tabulated hard draws are not made one by one but collected (`_pending`)
        # until an index is read or the run ends, then made together (`_resolve`): one
        # argmax over every collected table and one loop over the chain of gathers, so the
        # compiled program no longer holds a few kernels per step (Monte Carlo's long
        # chains). The same integers as the draws made one by one.
        # The draws are made at the trace the pipeline runs at, even when user code first
        # reads an index inside a `jax.jit` or `vmap` of its own (`_resolve`); without JAX's
        # trace context (a private API), the context makes every draw at once instead.
        self._trace = _current_trace()
        self.defer = (
            defer
            and isinstance(mode, Hard)
            and record is None
            and not rows_per_world
            and self._trace is not None
        )
        self._pending: list[_Pending] = []
        self._reads = _TableReads() if isinstance(mode, Hard) else None
        # The addressed Gumbels of every site, [sites, K_max]: computed once per world.
        self.noise = world_noise(structure, world) if noise is None else noise

    @property
    def invalid(self):
        """`Bool[Array, ""]`, whether some draw had no valid option (`None` before any draw);
        reading it makes the deferred draws."""
        self._resolve()
        return self._invalid

    def _flag(self, invalid):
        self._invalid = invalid if self._invalid is None else self._invalid | invalid

    # -- noise ------------------------------------------------------------------------
    def _noise(self, step_plan: StepPlan, site_index: int, site) -> Float[Array, " K"]:
        world = self.world
        noise = self.noise[site_index, : site.num_options]
        if world.overrides is not None:
            noise = jnp.where(world.valid[site_index], world.overrides[site_index], noise)
        if _is_active(step_plan.noise, lambda x: x >= 0):
            fresh = gumbel_at(
                fresh_key(world.key, jnp.maximum(step_plan.noise, 0)),
                site.step,
                site.slot,
                site.num_options,
            )
            noise = jnp.where(step_plan.noise >= 0, fresh, noise)
        return noise

    # -- the two calls a pipeline makes -------------------------------------------------
    def choose(self, step: str, logits, given=None, slot: int = 0) -> Choice:
        """Draw step `step` from `logits` under this context's plan and world.

        **Arguments:**
        - `step`: the step's name (its noise is addressed by this name).
        - `logits`: `[V, K]` for a root or free-form step (the logits may be computed by any
          JAX code from earlier outputs), or `[V, K_parent, K]` (one axis per parent) for a
          tabulated step whose logits depend only on the `given` parent choices.
        - `given`: a parent `Choice`, a tuple of them, or `None`.
        - `slot`: which draw of this step (for a step that draws more than once).

        **Returns:** a `Choice`.
        """
        parents, tabulated = check_choose_args(step, logits, given, slot)
        structure = self.structure
        step_index = structure.step_index(step)
        site_index = structure.site_index(step, slot)
        site = structure.sites[site_index]
        step_plan = self.plan.steps[step_index]
        noise = self._noise(step_plan, site_index, site)
        variant = step_plan.variant
        logits = jnp.asarray(logits)
        if logits.dtype.itemsize < 4:  # bfloat16/float16: the Gumbels would be rounded to it
            logits = logits.astype(jnp.float32)
        if step_plan.shift is not None:
            logits = logits + _lift(jnp.asarray(step_plan.shift, logits.dtype), logits)
        forced = step_plan.forced
        if self.plan.forced_sites is not None:
            site_forced = self.plan.forced_sites[site_index]
            forced = jnp.where(site_forced >= 0, site_forced, forced)
        if (
            self.defer
            and (tabulated or logits.shape[0] <= 2)
            and not _is_active(forced, lambda x: x != -1)
        ):
            if self._pending and self._pending[0].logits.dtype != logits.dtype:
                self._resolve()  # one batch holds tables of one dtype (the same sums)
            deferred = _Deferred(self)
            plain = self.world.overrides is None and not _is_active(
                step_plan.noise, lambda x: x >= 0
            )
            self._pending.append(
                _Pending(
                    logits,
                    None if plain else noise,
                    variant,
                    parents,
                    step,
                    step_index,
                    site_index,
                    deferred,
                )
            )
            return Choice(
                index=None,
                probs=None,
                num_options=site.num_options,
                deferred=deferred,
                reads=self._reads,
            )
        if isinstance(self.mode, Hard):
            # A step without parents and with at most two variants is tabulated too: the
            # argmax of every variant's row costs no more than gathering one row and taking
            # its argmax, and where the logits do not depend on earlier choices it is then
            # computed once per world instead of once per coalition (the same choice, bit
            # for bit).
            if tabulated or logits.shape[0] <= 2:
                index, invalid = _tabulated_hard(
                    logits, noise, variant, parents, step, self.rows_per_world
                )
            else:
                index = _free_hard_step(logits, noise, variant, step)
                invalid = index < 0  # a row with no valid option (see `hard_argmax`)
                index = jnp.maximum(index, 0)
            probs = None
        else:
            probs = _relaxed_probs(logits, noise, variant, parents, self.mode)
            index = jnp.argmax(probs).astype(jnp.int32)
            row = _seen_logits(logits, variant, parents)
            invalid = _invalid_rows(row, row + noise.astype(row.dtype))
        if _is_active(forced, lambda x: x != -1):
            # A forced option needs no valid row, but must be an option: a traced one outside
            # [0, K) (or below -1, "not forced") invalidates the run instead of being clamped.
            out_of_range = (forced >= site.num_options) | (forced < -1)
            invalid = jnp.where(forced >= 0, out_of_range, invalid | out_of_range)
            index = jnp.where(forced >= 0, jnp.minimum(forced, site.num_options - 1), index).astype(
                jnp.int32
            )
            if probs is not None:
                hot = jax.nn.one_hot(forced, site.num_options, dtype=probs.dtype)
                probs = jnp.where(forced >= 0, hot, probs)
        # A draw with no valid option makes the run's score NaN (`run_score`), which every
        # estimator refuses with an error naming the failure, the step and the plan.
        self._flag(invalid)
        if self.record is not None:
            self.record[("site", site_index)] = dict(
                logits=_seen_logits(logits, variant, parents),
                noise=noise,
                choice=index,
                variant=jnp.asarray(variant, jnp.int32),
                invalid=invalid,
            )
        return Choice(index=index, probs=probs, num_options=site.num_options, reads=self._reads)

    def _resolve(self):
        """Make the deferred draws (`defer`), in the order they were asked for, at the trace
        the pipeline runs at (not that of a `jax.jit` of the user's in which an index may be
        read first: its tracers would leak out of it)."""
        if not self._pending:
            return
        with _at_trace(self._trace):
            self._resolve_here()

    def _resolve_here(self):
        pending, self._pending = self._pending, []
        if len(pending) == 1:  # nothing to batch: the draw made on its own
            p = pending[0]
            index, invalid = _tabulated_hard(
                p.logits, p.noise_row(self.noise), p.variant, p.parents, p.step
            )
            p.deferred.resolved = index
            self._flag(invalid)
        elif pending:
            indices, invalid = _resolve_chain(pending, self.noise, self.plan.variants)
            for k, p in enumerate(pending):
                p.deferred.resolved = indices[k]
            self._flag(invalid)

    def deterministic(self, name: str, value):
        """A deterministic site (a tool's output): returns `value` unless the plan
        overrides it (`do_observation`). The value is recorded in traces."""
        index = self.structure.value_index(name)
        value = jnp.asarray(value)
        override = self.plan.values[index]
        if override is not None:
            value = jnp.where(override.active, jnp.asarray(override.value, value.dtype), value)
        if self.record is not None:
            self.record[("value", index)] = value
        return value


def _current_trace():
    """JAX's current trace (`jax._src.core.trace_ctx.trace`), or None where this JAX has no
    such context (deferred draws are then off)."""
    try:
        from jax._src import core

        return core.trace_ctx.trace
    except (ImportError, AttributeError):
        return None


def _at_trace(trace):
    """A context manager that makes `trace` JAX's current trace."""
    from jax._src import core

    return core.set_current_trace(trace)


class _Deferred:
    """The index of a deferred draw: worked out by its context the first time it is read."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.resolved = None

    def value(self):
        if self.resolved is None:
            self.ctx._resolve()
        return self.resolved


class _Pending(NamedTuple):
    """A tabulated hard draw waiting to be made (`Context(defer=True)`)."""

    logits: Any  # [V, *K_parents, K], shift applied
    noise: Any  # [K], or None for the world's addressed noise of the site (`Context.noise`)
    variant: Any  # Int[Array, ""]
    parents: tuple  # Choices, deferred or not
    step: str
    step_index: int
    site_index: int
    deferred: _Deferred

    def noise_row(self, world_noise):
        """The `[K]` Gumbels this draw adds to its logits."""
        if self.noise is None:
            return world_noise[self.site_index, : self.logits.shape[-1]]
        return self.noise


def _resolve_chain(pending: list[_Pending], world_noise, plan_variants=None):
    """Make several tabulated hard draws at once: `(indices [m], invalid)`.

    Every table's rows are padded to the same `[R, K]` with `-inf` options (never chosen,
    and a row of only `-inf` has no valid option either way), stacked, and given one
    `hard_argmax`; then a scan over the draws gathers each chosen row's option, reading the
    parents' options from the indices already made. The same integers as `_tabulated_hard`
    draw by draw, with a compiled program that does not grow with the number of draws: it
    compiles several times faster for long chains, and each evaluation costs more (a loop
    step per draw instead of one fused gather; see benchmarks/results/bench_mc_chain_compare.md)."""
    m = len(pending)
    rows = [int(np.prod(p.logits.shape[:-1])) for p in pending]
    num_rows = max(rows)
    num_options = max(p.logits.shape[-1] for p in pending)
    dtype = pending[0].logits.dtype  # one dtype per batch (`Context.choose`)

    def padded(p, r):
        table = p.logits.reshape(r, p.logits.shape[-1])
        pad = ((0, num_rows - r), (0, num_options - p.logits.shape[-1]))
        if pad != ((0, 0), (0, 0)):
            table = jnp.pad(table, pad, constant_values=-np.inf)
        return table.reshape(-1)

    # Laid end to end along one axis (not stacked on a new one): tables that are
    # consecutive parts of one array (a batch's cases, `_take_slots`) are then that array
    # again, and XLA copies nothing.
    flat = jnp.concatenate([padded(p, r) for p, r in zip(pending, rows)])
    tables = flat.reshape(m, num_rows, num_options)  # [m, R, K]
    if all(p.noise is None for p in pending):  # one gather of the world's noise
        sites = np.asarray([p.site_index for p in pending], np.int32)
        noise = world_noise[sites, :num_options].astype(dtype)  # [m, K]
    else:
        own = [p.noise_row(world_noise) for p in pending]
        noise = jnp.stack(
            [jnp.pad(r.astype(dtype), (0, num_options - r.shape[0])) for r in own]
        )  # [m, K]
    steps = ", ".join(dict.fromkeys(p.step for p in pending))
    best = hard_argmax(tables, noise[:, None, :], steps)  # [m, R]

    # The flat row of draw k: variant * stride + sum over parents of option * stride. A
    # parent is an earlier draw of this batch or an index made before it (`outside`).
    position = {id(p.deferred): k for k, p in enumerate(pending)}
    outside = []  # indices of parents made before this batch
    num_parents = max(1, max(len(p.parents) for p in pending))
    parent_of = np.full((m, num_parents), -1, np.int64)  # see `_registers`
    stride = np.zeros((m, num_parents), np.int32)
    variant_stride = np.zeros((m,), np.int32)
    for k, p in enumerate(pending):
        shape = p.logits.shape[1:-1]
        variant_stride[k] = int(np.prod(shape))
        for i, parent in enumerate(p.parents):
            stride[k, i] = int(np.prod(shape[i + 1 :]))
            d = parent._deferred
            if d is not None and id(d) in position:
                parent_of[k, i] = position[id(d)]
            else:
                parent_of[k, i] = m + len(outside)
                outside.append(jnp.asarray(parent.index, jnp.int32))
    source, target, num_registers = _registers(parent_of)
    if plan_variants is None:
        variants = jnp.stack([jnp.asarray(p.variant, jnp.int32) for p in pending])
    else:  # one gather, not m scalars stacked (`Plan.variants`)
        steps_k = np.asarray([p.step_index for p in pending], np.int32)
        variants = jnp.asarray(plan_variants, jnp.int32)[steps_k]
    registers = jnp.zeros((num_registers,), jnp.int32)
    if outside:
        registers = registers.at[: len(outside)].set(jnp.stack(outside))
    lax = jax.lax

    def body(carry, x):
        # A `lax.scan` over the draws: a draw's row of `best` and its constants are the
        # scanned inputs, and the options made are its outputs, laid out draw by draw (under
        # `vmap` too), so each step reads and writes contiguous memory. The carry holds only
        # the options some later draw still reads (`_registers`): for a chain, one. (Unrolling
        # the scan made the call slower in `bench_mc.py --chain-one 32`.)
        best_k, variant, source_k, stride_k, variant_stride_k, target_k = x
        flat = variant * variant_stride_k
        for i in range(num_parents):
            parent = lax.dynamic_index_in_dim(carry, source_k[i], keepdims=False)
            flat = flat + parent * stride_k[i]
        chosen = best_k.at[flat].get(mode="promise_in_bounds")  # -1: no valid option
        carry = lax.dynamic_update_index_in_dim(carry, jnp.maximum(chosen, 0), target_k, 0)
        return carry, chosen

    xs = (best, variants, *map(jnp.asarray, (source, stride, variant_stride, target)))
    _, chosen = lax.scan(body, registers, xs)
    return jnp.maximum(chosen, 0), jnp.any(chosen < 0)


def _registers(parent_of):
    """Where the scan of `_resolve_chain` keeps the options that later draws read: `(source
    [m, P], target [m], number of registers)`. `parent_of[k, i]` is the parent's draw
    (k' < k), `m + j` for the j-th index made before the batch, or -1 for none.

    Draw k reads parent i from register `source[k, i]` (0 where it has none; its stride is
    0) and writes its option to register `target[k]`. The indices made before the batch take
    the first registers; a register is reused once the last draw that reads it has read it,
    and options nobody reads go to one scratch register, so a chain needs two registers,
    not one per draw."""
    m, num_parents = parent_of.shape
    last_read = {}  # owner (a draw, or m + j) -> the last draw that reads it
    for k in range(m):
        for owner in parent_of[k]:
            if owner >= 0:
                last_read[int(owner)] = k
    register_of = {}  # owner -> register
    for owner in sorted(o for o in last_read if o >= m):
        register_of[owner] = len(register_of)
    num_registers = len(register_of)
    free: list[int] = []
    source = np.zeros((m, num_parents), np.int32)
    target = np.zeros((m,), np.int32)
    for k in range(m):
        for i, owner in enumerate(parent_of[k]):
            if owner >= 0:
                source[k, i] = register_of[int(owner)]
        for owner in [o for o in register_of if last_read[o] == k]:  # read for the last time
            free.append(register_of.pop(owner))
        if k in last_read:  # a later draw reads this option: keep it
            if free:
                register_of[k] = free.pop()
            else:
                register_of[k] = num_registers
                num_registers += 1
            target[k] = register_of[k]
        else:
            target[k] = -1
    target[target == -1] = num_registers  # the scratch register
    return source, target, num_registers + 1


def _is_active(x, pred) -> bool:
    """False only when `x` is a concrete array for which `pred` is false everywhere, so
    that unused plan features (fresh noise, forcing) cost nothing in the compiled code."""
    if isinstance(x, jax.core.Tracer):
        return True
    return bool(np.any(pred(np.asarray(x))))


def _step_eval(fn, **kwargs):
    """Mark one step evaluation in the jaxpr (a named `pjit`), so that
    `count_step_evaluations` can count how many times each step runs after `vmap`."""
    return jax.jit(fn, **kwargs)


@_step_eval
def _gather_choice(table, flat_index):
    # The flat index is in bounds by construction (variant < V, parent < K_parent).
    return table.reshape(-1).at[flat_index].get(mode="promise_in_bounds")


_HARD_GRADIENT_MESSAGE = (
    "a gradient was requested through the hard (Gumbel-max) choice of step {step!r}. argmax "
    "has zero gradient almost everywhere, so this gradient would silently be zero. To "
    "differentiate blame with respect to logits, evaluate in relaxed mode: "
    "mode=blamejax.Relaxed(tau) (Gumbel-softmax) or blamejax.Relaxed(tau, straight_through=True) "
    "(hard values forward, relaxed gradients backward)."
)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def hard_argmax(logits, noise, step: str = "?"):
    """`argmax(logits + noise)` over the last axis, as int32, or -1 for a row with no valid
    option (every logit `-inf`, or a NaN or `+inf` anywhere: `jnp.argmax` would pick an option
    from it silently). Differentiating it with respect to the logits raises a `ValueError`
    that explains how to get a useful gradient."""
    # `lax` primitives, not jnp functions (each a small jitted function of its own, which every
    # coalition `vmap` above traces again): the same integers, at a fraction of the trace time.
    noise = noise if noise.ndim == logits.ndim else _lift(noise, logits)
    perturbed = jax.lax.add(logits, noise.astype(logits.dtype))
    best = jax.lax.argmax(perturbed, perturbed.ndim - 1, np.int32)
    return jax.lax.select(_invalid_rows(logits, perturbed), jax.lax.full_like(best, -1), best)


def _invalid_rows(logits, perturbed):
    """Rows (last axis) from which no option can be drawn: all `-inf`, or NaN or `+inf`."""
    lax, last = jax.lax, (logits.ndim - 1,)
    bad = lax.bitwise_or(
        lax.ne(perturbed, perturbed), lax.eq(logits, lax.full_like(logits, np.inf))
    )
    impossible = lax.eq(logits, lax.full_like(logits, -np.inf))
    return lax.bitwise_or(lax.reduce_or(bad, last), lax.reduce_and(impossible, last))


@hard_argmax.defjvp
def _hard_argmax_jvp(step, primals, tangents):
    raise ValueError(_HARD_GRADIENT_MESSAGE.format(step=step))


def _tabulated_hard(logits, noise, variant, parents, step="?", rows_per_world=False):
    """The choice and whether it had no valid option (-1 rows of `hard_argmax`). The argmax
    over every [variant, parent] row depends only on the world, so under the coalition vmaps
    it is computed once per world; the run itself is a 1-D gather. With `rows_per_world`,
    so is the check: any row without a valid option invalidates the run."""
    best = hard_argmax(logits, noise, step)  # [V, *K_parents]
    if rows_per_world:
        invalid, best = jnp.any(best < 0), jnp.maximum(best, 0)
    flat = jnp.asarray(variant, jnp.int32)
    for axis, parent in enumerate(parents):
        flat = flat * logits.shape[1 + axis] + parent.index
    index = _gather_choice(best, flat)
    if rows_per_world:
        return index, invalid
    return jnp.maximum(index, 0), index < 0


def _lift(noise, logits):
    """Give the [K] noise the leading unit axes of `logits` (explicit broadcasting)."""
    return noise.astype(logits.dtype).reshape((1,) * (logits.ndim - 1) + noise.shape)


def _free_hard(logits, noise, variant, step="?"):
    row = jnp.take(logits, variant, axis=0)
    return hard_argmax(row, noise, step)


_free_hard_step = _step_eval(_free_hard, static_argnums=(3,))


def _relaxed_probs(logits, noise, variant, parents, mode: Relaxed):
    safe = jnp.where(jnp.isneginf(logits), _NEG_LARGE, logits)
    noise = _lift(noise, logits)
    soft = jax.nn.softmax((safe + noise) / mode.tau, axis=-1)  # [V, *K_parents, K]
    if mode.straight_through:
        hard = jax.nn.one_hot(
            jnp.argmax(logits + noise, axis=-1), logits.shape[-1], dtype=soft.dtype
        )
        soft = hard + soft - jax.lax.stop_gradient(soft)
    table = jnp.take(soft, variant, axis=0)  # [*K_parents, K]
    for parent in parents:
        if parent.probs is None:
            table = jnp.take(table, parent.index, axis=0)
        else:
            table = jnp.tensordot(parent.probs.astype(table.dtype), table, axes=1)
    return table


def _seen_logits(logits, variant, parents):
    """The logits row the draw actually saw (for traces and abduction)."""
    row = jnp.take(logits, variant, axis=0)
    for parent in parents:
        row = jnp.take(row, parent.index, axis=0)
    return row
