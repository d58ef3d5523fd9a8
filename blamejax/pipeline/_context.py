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

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ..noise import fresh_key, gumbel_at, gumbel_sites
from ._choice import Choice, check_choose_args
from ._deferred import _at_trace, _current_trace, _Deferred, _Pending, _resolve_chain
from ._draws import (
    _free_hard_step,
    _invalid_rows,
    _lift,
    _relaxed_probs,
    _seen_logits,
    _tabulated_hard,
)
from ._modes import Hard
from ._plans import Plan, StepPlan


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


class World(eqx.Module):
    """The luck of one run.

    - `key`: the world's key; every Gumbel is addressed from it (see `gumbel_at`).
    - `overrides`: `None`, or one `Float[Array, "K"]` per site (in `Structure.sites`
      order): Gumbels recorded from a log or produced by abduction.
    - `valid`: `None`, or one `Bool[Array, ""]` per site; where true the override wins over
      the addressed value.
    - `case_id`: `None`, or the id of the case the world belongs to (`UInt32[Array, ""]`,
      `[F, W]` over a batch). `recorded_worlds`, `fresh_worlds` and `inferred_worlds` set it,
      so results carry the ids of the cases they blame; the pipeline never reads it.
    """

    key: PRNGKeyArray
    overrides: tuple | None = None
    valid: tuple | None = None
    case_id: Array | None = None


def world_noise(structure, world: World) -> Float[Array, "sites K"]:
    """The addressed Gumbels of every draw site of one world (overrides not applied)."""
    sites = structure.sites
    num_options = max(site.num_options for site in sites)
    return gumbel_sites(
        world.key, tuple(s.step for s in sites), tuple(s.slot for s in sites), num_options
    )


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
        # A recording context (`trace_run`) defers too: each batch of draws is then recorded
        # as a whole (`("batch", j)`: the sites' choices, rows seen and noise, stacked).
        self.defer = (
            defer and isinstance(mode, Hard) and not rows_per_world and self._trace is not None
        )
        self._pending: list[_Pending] = []
        self._lookup = None  # see `_indices`
        self._reads = _TableReads() if isinstance(mode, Hard) else None
        # The addressed Gumbels of every site, [sites, K_max]: computed once per world.
        self.noise = world_noise(structure, world) if noise is None else noise

    def _indices(self, step: str, slot: int) -> tuple[int, int]:
        """The positions of `step` and of its draw in `slot` (`Structure.step_index`,
        `site_index`), looked up in tables made once per context: scanning the structure
        at every draw was quadratic in the number of steps."""
        if self._lookup is None:
            sites = {(site.step, site.slot): i for i, site in enumerate(self.structure.sites)}
            steps = {name: i for i, name in enumerate(self.structure.steps)}
            self._lookup = (steps, sites)
        steps, sites = self._lookup
        if step not in steps or (step, slot) not in sites:  # the structure's own error
            return self.structure.step_index(step), self.structure.site_index(step, slot)
        return steps[step], sites[(step, slot)]

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
        step_index, site_index = self._indices(step, slot)
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
        if self.record is not None:
            self._resolve_recorded(pending)
        elif len(pending) == 1:  # nothing to batch: the draw made on its own
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

    def _resolve_recorded(self, pending):
        """Make the deferred draws of a recording context and record them as one batch."""
        indices, invalid, seen, noise = _resolve_chain(
            pending, self.noise, self.plan.variants, seen=True
        )
        for k, p in enumerate(pending):
            p.deferred.resolved = indices[k]
        self._flag(jnp.any(invalid))
        if self.plan.variants is None:
            variants = jnp.stack([jnp.asarray(p.variant, jnp.int32) for p in pending])
        else:
            steps = np.asarray([p.step_index for p in pending], np.int32)
            variants = jnp.asarray(self.plan.variants, jnp.int32)[steps]
        self.record[("batch", len(self.record))] = dict(
            sites=tuple(p.site_index for p in pending),
            logits=seen,
            noise=noise,
            choice=indices,
            variant=variants,
            invalid=invalid,
        )

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


def _is_active(x, pred) -> bool:
    """False only when `x` is a concrete array for which `pred` is false everywhere, so
    that unused plan features (fresh noise, forcing) cost nothing in the compiled code."""
    if isinstance(x, jax.core.Tracer):
        return True
    return bool(np.any(pred(np.asarray(x))))
