"""The graph of a tabulated pipeline: which draws each draw reads, and which the score reads.

A pipeline is *tabulated* when every draw's logits are a table over its parents' options
(`ctx.choose(step, table, given=parents)`, or a root's `[V, K]`) that no other draw changes,
and the score depends on the draws only through their options. Then, in one world, each
draw is a map from its parents' options to its own option, one map per variant, and the
score is a table over the options of the few draws it reads (its *scope*).

`find_graph` learns this by tracing the pipeline once with every draw's option an input
(`jax.make_jaxpr`, nothing is computed) and following which inputs each output depends on:
a draw whose logits depend on another draw is *free-form*, and the score's dependencies are
its scope. `read_tables` then gives, for one case, every draw's logits table and the score
table over the scope.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._compile import cached
from ..pipeline import Choice, Structure, check_choose_args, one_case


class Graph(NamedTuple):
    """What a pipeline's draws and score read (static, hashable).

    - `parents`: per draw site (`Structure.sites` order), the sites of its `given` choices.
    - `scope`: the sites whose options the score depends on, ascending.
    - `free`: `(site, sites)` pairs: a draw whose logits depend on the options of `sites`
      other than through `given` (a free-form step); empty for a tabulated pipeline.
    - `foreign`: sites whose `given` holds a choice the context did not return.
    - `factors`: the score as a product of factors (read off its last multiplications), the
      sites each factor reads; `((scope),)` when it is no product. A score too wide to
      tabulate whole (a run passes when every step chose an accepted option) is carried as
      its factors, each multiplied in at its last site.
    """

    parents: tuple[tuple[int, ...], ...]
    scope: tuple[int, ...]
    free: tuple[tuple[int, tuple[int, ...]], ...]
    foreign: tuple[int, ...] = ()
    factors: tuple[tuple[int, ...], ...] = ()

    @property
    def tabulated(self) -> bool:
        """Whether every draw is a table over its parents' options (no free-form draw)."""
        return not self.free and not self.foreign


class _Reader:
    """A stand-in context whose draws return the options it is given, and which keeps every
    draw's logits table and parents."""

    def __init__(self, structure: Structure, indices):
        self.structure = structure
        self.indices = indices
        num_sites = len(structure.sites)
        self.logits: list = [None] * num_sites
        self.parents: list = [None] * num_sites
        self.foreign: list[int] = []
        self._site_of: dict[int, int] = {}
        self._choices: list[Choice] = []  # kept alive, so that no id is reused

    def choose(self, step, logits, given=None, slot: int = 0):
        parents, _ = check_choose_args(step, logits, given, slot)
        site = self.structure.site_index(step, slot)
        logits = jnp.asarray(logits)
        if logits.dtype.itemsize < 4:  # as `Context.choose`: the Gumbels are added in float32
            logits = logits.astype(jnp.float32)
        self.logits[site] = logits
        sites = []
        for parent in parents:
            if id(parent) in self._site_of:
                sites.append(self._site_of[id(parent)])
            else:
                self.foreign.append(site)
        self.parents[site] = tuple(sites)
        choice = Choice(index=self.indices[site], probs=None, num_options=int(logits.shape[-1]))
        self._site_of[id(choice)] = site
        self._choices.append(choice)
        return choice

    def deterministic(self, name: str, value):
        return jnp.asarray(value)


def read_tables(pipeline: Callable, structure: Structure, case, indices):
    """Run `pipeline` on one case with every draw's option given (`indices`, one int32 scalar
    per site): `(logits, parents, foreign, score)`, the logits table of every site (the
    variants on axis 0, a parent per middle axis), the parent sites of each, the sites whose
    `given` held a foreign choice, and the score (a float)."""
    reader = _Reader(structure, indices)
    score = pipeline(reader, case)
    missing = [structure.sites[i] for i, table in enumerate(reader.logits) if table is None]
    if missing:
        raise ValueError(
            f"the pipeline skipped draws it made when first traced: {missing}; a pipeline "
            "must make the same draws in every run (use jnp.where, not Python branches on values)"
        )
    score = jnp.asarray(score, dtype=jnp.result_type(float))
    return tuple(reader.logits), tuple(reader.parents), tuple(reader.foreign), score


def site_indices(structure: Structure):
    """One int32 zero per draw site (the options `read_tables` is traced with)."""
    return tuple(np.zeros((), np.int32) for _ in structure.sites)  # NumPy: nothing compiled eagerly


def find_graph(pipeline: Callable, structure: Structure, cases) -> Graph:
    """The `Graph` of `pipeline`, from the shapes of `cases` (a leading case axis), traced once
    and cached with the structure."""
    return _traced(pipeline, structure, one_case(cases))[0]


def _traced(pipeline, structure, case):
    """`(graph, closed jaxpr, factor atoms)`, cached on the pipeline, structure and shapes."""
    case = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), case)
    leaves, treedef = jax.tree_util.tree_flatten(case)
    key = (pipeline, structure, treedef, tuple((x.shape, x.dtype) for x in leaves))
    return cached("structured.graph", key, lambda: _find_graph(pipeline, structure, case))


def _find_graph(pipeline, structure, case):
    found = {}

    def traced(case, indices):
        logits, parents, foreign, score = read_tables(pipeline, structure, case, indices)
        found.update(parents=parents, foreign=foreign)
        return logits, score

    closed = jax.make_jaxpr(traced)(case, site_indices(structure))
    num_case_leaves = len(jax.tree_util.tree_leaves(case))
    num_sites = len(structure.sites)
    inputs = [0] * num_case_leaves + [1 << s for s in range(num_sites)]
    env = {}
    outputs = _dependencies(closed.jaxpr, inputs, env)
    free = []
    for site in range(num_sites):
        deps = outputs[site]
        if deps:
            free.append((site, tuple(s for s in range(num_sites) if deps >> s & 1)))
    score = outputs[num_sites]
    atoms = _product_atoms(closed.jaxpr, closed.jaxpr.outvars[num_sites])

    def sites_of(mask):
        return tuple(s for s in range(num_sites) if mask >> s & 1)

    factors = tuple(sites_of(_read(env, a)) for a in atoms)
    graph = Graph(
        parents=found["parents"],
        scope=sites_of(score),
        free=tuple(free),
        foreign=tuple(sorted(set(found["foreign"]))),
        factors=factors,
    )
    return graph, closed, tuple(atoms)


def _read(env, var):
    return 0 if isinstance(var, jax.extend.core.Literal) else env.get(var, 0)


def _product_atoms(jaxpr, out) -> list:
    """The factors of `out` in `jaxpr`: the operands of the multiplications (and float casts)
    it is made by, left to right; `[out]` when it is no product."""
    producer = {v: eqn for eqn in jaxpr.eqns for v in eqn.outvars}

    def split(var):
        eqn = None if isinstance(var, jax.extend.core.Literal) else producer.get(var)
        if eqn is not None and eqn.primitive.name == "mul" and len(eqn.invars) == 2:
            a, b = eqn.invars
            if _shape(a) == _shape(b) == ():
                return split(a) + split(b)
        if eqn is not None and eqn.primitive.name == "convert_element_type":
            inner = eqn.invars[0]
            if jnp.issubdtype(inner.aval.dtype, jnp.floating) and _shape(inner) == ():
                return split(inner)
        return [var]

    return split(out)


def _shape(var):
    return tuple(getattr(var.aval, "shape", ()))


def _dependencies(jaxpr, inputs: list[int], env=None) -> list[int]:
    """For each output of `jaxpr`, the set (a bit mask) of the input masks it depends on. An
    equation's outputs depend on all its inputs, except in calls whose inner jaxpr is
    followed (so a `jit`-wrapped function with several outputs is not lumped together).
    `env`, when given, is filled with every variable's mask."""
    env = {} if env is None else env
    env.update(zip(jaxpr.invars, inputs))

    def read(var):
        return 0 if isinstance(var, jax.extend.core.Literal) else env.get(var, 0)

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        inner = _inner_jaxpr(eqn)
        if (
            inner is not None
            and len(inner.invars) == len(ins)
            and len(inner.outvars) == len(eqn.outvars)
        ):
            outs = _dependencies(inner, ins)
        else:
            union = 0
            for d in ins:
                union |= d
            outs = [union] * len(eqn.outvars)
        for var, d in zip(eqn.outvars, outs):
            env[var] = d
    return [read(v) for v in jaxpr.outvars]


def _inner_jaxpr(eqn):
    """The jaxpr a call-like equation runs on its inputs one to one (`jit`, `custom_jvp_call`,
    `custom_vjp_call`, `closed_call`), or None."""
    for name in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        value = eqn.params.get(name)
        if value is None:
            continue
        inner = getattr(value, "jaxpr", value)
        if hasattr(inner, "eqns") and not getattr(value, "consts", ()):
            return inner
        if hasattr(inner, "eqns"):
            return None  # closed over constants: their order is not the equation's inputs
    return None


def score_table(pipeline: Callable, structure: Structure, graph: Graph, case):
    """The score over every joint option of `graph.scope`, `[K_s1, K_s2, ...]` (a scalar for a
    score that reads no draw), for one case: the pipeline's score part run under `vmap` over
    the grid of options (the other draws' options are zero; the score does not read them)."""
    sizes = [structure.sites[s].num_options for s in graph.scope]
    grid = (
        np.indices(sizes, dtype=np.int32).reshape(len(sizes), -1)
        if sizes
        else np.zeros((0, 1), np.int32)
    )

    def one(options):
        indices = list(site_indices(structure))
        for k, s in enumerate(graph.scope):
            indices[s] = options[k]
        return read_tables(pipeline, structure, case, tuple(indices))[3]

    values = jax.vmap(one, in_axes=1)(jnp.asarray(grid))
    return values.reshape(sizes)


def site_logits(pipeline: Callable, structure: Structure, case):
    """Every draw site's logits table for one case (a tabulated pipeline's tables do not
    depend on the options)."""
    return read_tables(pipeline, structure, case, site_indices(structure))[0]


def factor_tables(pipeline: Callable, structure: Structure, graph: Graph, case, factors):
    """The tables of the score's `factors` (scopes, as chosen by the caller) for one case: the
    whole score table when `factors` is `(graph.scope,)`, otherwise each factor of
    `graph.factors` over its own sites, computed from the traced program's multiplications."""
    if tuple(factors) == (graph.scope,) and graph.factors != factors:
        return (score_table(pipeline, structure, graph, case),)
    _, closed, atoms = _traced(pipeline, structure, case)
    dtype = jnp.result_type(float)
    leaves = jax.tree_util.tree_leaves(case)
    info = closed.jaxpr.debug_info
    info = info._replace(result_paths=tuple(f"factor[{k}]" for k in range(len(atoms))))
    inner = closed.jaxpr.replace(outvars=list(atoms), debug_info=info)
    run = jax.extend.core.jaxpr_as_fun(jax.extend.core.ClosedJaxpr(inner, closed.consts))

    def values(indices):
        return [jnp.asarray(x, dtype) for x in run(*leaves, *indices)]

    tables: list = [None] * len(graph.factors)
    # Every factor of one site in one pass: option k at every site at once (each such factor
    # reads its own site only), clipped to the site's options.
    unary = [k for k, scope in enumerate(graph.factors) if len(scope) == 1]
    if unary:
        size = max(structure.sites[graph.factors[k][0]].num_options for k in unary)

        def diagonal(option):
            indices = [jnp.minimum(option, site.num_options - 1) for site in structure.sites]
            out = values(indices)
            return [out[k] for k in unary]

        columns = jax.vmap(diagonal)(jnp.arange(size, dtype=jnp.int32))
        for k, column in zip(unary, columns):
            tables[k] = column[: structure.sites[graph.factors[k][0]].num_options]
    for k, scope in enumerate(graph.factors):
        if tables[k] is not None:
            continue
        if not scope:  # a constant factor
            tables[k] = values(list(site_indices(structure)))[k]
            continue
        sizes = [structure.sites[s].num_options for s in scope]
        grid = np.indices(sizes, dtype=np.int32).reshape(len(sizes), -1)

        def one(options, k=k, scope=scope):
            indices = list(site_indices(structure))
            for i, s in enumerate(scope):
                indices[s] = options[i]
            return values(indices)[k]

        tables[k] = jax.vmap(one, in_axes=1)(jnp.asarray(grid)).reshape(sizes)
    return tuple(tables)
