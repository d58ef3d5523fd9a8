"""Synthetic structural causal models whose culprit is known: random pipelines, controlled
error injection (golden labels) and multi-culprit cases with analytic Shapley values.

**The pipelines.** `make_scm` draws a pipeline of n steps, each choosing one of K options.
Option 0 is the *good* output of every step (the "good path"); options 1..K-1 are errors.
A step's *input* is good when every parent chose option 0. Each step has two variants:

- variant 0, the **factual** implementation: on a good input it keeps to the good option
  except with probability `noise`; on a bad input it outputs the good option with
  probability `recovery` and otherwise propagates the error (mostly to one bad option,
  drawn per case and parent configuration);
- variant 1, the **fix**: the same behaviour with `fix_noise` and `fix_recovery` (a better
  implementation of the step).

The run succeeds (score 1) when the case's *critical* steps are good: for injected
failures, the last step (every step is its ancestor); for multi-culprit cases, a rule over
the culprits. Topologies: a chain (step i reads step i - 1) or a random DAG (the chain plus,
with probability `extra_parent`, a second parent drawn among the earlier steps).

**Controlled injection** (the procedure of Who&When Pro, on an SCM): draw runs of the clean
pipeline with their recorded noise and keep the successful ones; in each, step k's factual
variant becomes a *corrupted* implementation (on a good input it outputs the good option only
with probability `leak`) whose fix is the original implementation. The prefix before k
replays exactly (same variant, same noise); k and the steps after it react. A run is kept
when it now fails and no step before k repairs it by its fix alone; its golden label is k,
the earliest step whose fix alone turns the failure into a success (k's fix always does: it
restores the original, successful run).

**Multi-culprit cases**: m culprit steps are corrupted outright (the good option impossible)
and their fixes always output the good option, whatever their input. *Conjunctive*: the
run fails only when every culprit is bad, so fixing any one repairs it. *Disjunctive*: any
bad culprit fails the run, so every culprit must be fixed. Either way the other steps, whose
fixes change their own outputs but not the score, are null players, and by symmetry each
culprit's Shapley value is exactly 1/m.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._evaluate import mask_values, run_score
from ._noise import world_key
from ._pipeline import World, factual_plan
from ._structure import discover
from ._worlds import as_key

TOPOLOGIES = ("chain", "dag")
KINDS = ("conjunctive", "disjunctive")
RULE_ALL, RULE_ANY = 0, 1  # success iff every / some critical step is good


class SCMCase(NamedTuple):
    """One case of an SCM pipeline (a batch has a leading case axis on every leaf).

    - `logits`: one table per step, `Float[Array, "2 *K_parents K"]` (variant 0 factual,
      1 fix; one axis per parent; `-inf` marks an impossible option).
    - `critical`: `Float[Array, "n"]`, 1.0 for the steps whose output the score reads.
    - `rule`: `Int[Array, ""]`, 0: success iff every critical step is good; 1: iff some is.
    """

    logits: tuple
    critical: Float[Array, " n"]
    rule: Int[Array, ""]


class SCM(eqx.Module):
    """A synthetic pipeline: its topology and how its steps behave (see the module doc).

    - `num_steps` (n), `num_options` (K): sizes.
    - `parents`: per step, the indices of its parents (`()` for step 0).
    - `agents`: per step, the index of the agent it belongs to (consecutive groups).
    - `topology`: `"chain"` or `"dag"`.
    - `noise`, `recovery`: the factual variant's probability of leaving the good option on a
      good input, and of producing it anyway on a bad input.
    - `fix_noise`, `fix_recovery`: the same for each step's fix.
    - `leak`: the probability that a corrupted step still outputs the good option.

    Build one with `make_scm`. `scm.pipeline` is the pipeline function (one per topology,
    so that blamejax's compiled functions are reused across cases and calls).
    """

    num_steps: int = eqx.field(static=True)
    num_options: int = eqx.field(static=True)
    parents: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    agents: tuple[int, ...] = eqx.field(static=True)
    topology: str = eqx.field(static=True)
    noise: float = eqx.field(static=True)
    recovery: float = eqx.field(static=True)
    fix_noise: float = eqx.field(static=True)
    fix_recovery: float = eqx.field(static=True)
    leak: float = eqx.field(static=True)

    def __check_init__(self):
        if len(self.parents) != self.num_steps or len(self.agents) != self.num_steps:
            raise ValueError(
                f"`parents` and `agents` need one entry per step ({self.num_steps}), got "
                f"{len(self.parents)} and {len(self.agents)}"
            )
        for i, ps in enumerate(self.parents):
            if any(not 0 <= p < i for p in ps):
                raise ValueError(f"step {i}'s parents {ps} must be earlier steps")

    @property
    def pipeline(self):
        """`pipeline(ctx, case) -> score` for this topology, usable with every blamejax API."""
        return scm_pipeline(self.parents, self.num_options)

    @property
    def steps(self) -> tuple[str, ...]:
        """The step names, `("step0", "step1", ...)`."""
        return tuple(step_name(i) for i in range(self.num_steps))

    @property
    def num_agents(self) -> int:
        return max(self.agents) + 1


def step_name(i: int) -> str:
    return f"step{i}"


@functools.cache
def scm_pipeline(parents: tuple[tuple[int, ...], ...], num_options: int):
    """The pipeline of an SCM with these parents: step i draws from its `[2, *K_parents, K]`
    table given its parents' choices, and the score is the case's rule over its critical
    steps. Cached, so that one topology is one function (blamejax caches compiled code per
    pipeline function)."""
    good = np.zeros(num_options, np.float32)
    good[0] = 1.0

    def pipeline(ctx, case: SCMCase):
        # Each step's choice contributes a factor read from a [K] table that depends only on
        # the case: 1 for a step the score ignores; for a critical step, 1 if good and 0 if
        # bad (rule "all"), or 1 if bad and 0 if good (rule "any", where the product is the
        # probability that every critical step failed). One gather and one product per step.
        every = case.rule == RULE_ALL
        product = jnp.ones((), jnp.float32)
        choices = []
        for i, ps in enumerate(parents):
            given = tuple(choices[p] for p in ps) if ps else None
            choice = ctx.choose(step_name(i), case.logits[i], given=given)
            choices.append(choice)
            factor = jnp.where(case.critical[i] > 0, jnp.where(every, good, 1.0 - good), 1.0)
            product = product * choice.take(factor.astype(jnp.float32))
        return jnp.where(every, product, 1.0 - product)

    pipeline.__name__ = pipeline.__qualname__ = "scm_pipeline"
    return pipeline


# -- building an SCM --------------------------------------------------------------------------
def _probability(value, name: str, low: float, high: float, *, high_open: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}: {value!r}")
    value = float(value)
    ok = low <= value < high if high_open else low <= value <= high
    if not ok:
        bracket = ")" if high_open else "]"
        raise ValueError(f"`{name}` must lie in [{low:g}, {high:g}{bracket}, got {value!r}")
    return value


def _count(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__}: {value!r}")
    if value < minimum:
        raise ValueError(f"`{name}` must be at least {minimum}, got {int(value)}")
    return int(value)


def make_scm(
    key,
    num_steps: int,
    num_options: int = 4,
    *,
    topology: str = "chain",
    extra_parent: float = 0.5,
    noise: float = 0.1,
    recovery: float = 0.05,
    fix_noise: float = 0.02,
    fix_recovery: float = 0.25,
    leak: float = 0.1,
    steps_per_agent: int = 1,
) -> SCM:
    """A random synthetic pipeline with a known good path (option 0 at every step).

    **Arguments:**
    - `key`: an int seed or a typed key; it draws the DAG's extra parents (a chain uses no
      randomness here). Case tables are drawn later, by `inject_errors` or `multi_culprit_cases`.
    - `num_steps`: n >= 1.
    - `num_options`: K >= 2 (option 0 good, the others errors).
    - `topology`: `"chain"` or `"dag"` (each step i >= 2 also reads, with probability
      `extra_parent`, one earlier step drawn uniformly from 0..i-2).
    - `noise`: the factual variant's probability of leaving the good option on a good input,
      in [0, (K-1)/K) (so the good option stays the most likely): how stochastic a step is.
    - `recovery`: the factual variant's probability of outputting the good option on a bad
      input, in [0, 1).
    - `fix_noise`, `fix_recovery`: the same for each step's fix variant.
    - `leak`: the probability that a corrupted step outputs the good option on a good input,
      in [0, 1).
    - `steps_per_agent`: consecutive steps grouped into one agent (for agent-level accuracy).

    **Returns:** an `SCM`.

    **Raises:** `ValueError`/`TypeError` naming the argument: n < 1, K < 2, an unknown
    topology, a probability out of its range.

    ```python
    scm = make_scm(0, num_steps=8, num_options=4, noise=0.1)
    failures = inject_errors(1, scm, num_failures=100)
    result = bj.exact_blame(scm.pipeline, failures.cases, failures.worlds)
    ```
    """
    num_steps = _count(num_steps, "num_steps", 1)
    num_options = _count(num_options, "num_options", 2)
    if topology not in TOPOLOGIES:
        raise ValueError(f"`topology` must be one of {TOPOLOGIES}, got {topology!r}")
    extra_parent = _probability(extra_parent, "extra_parent", 0.0, 1.0, high_open=False)
    top = (num_options - 1) / num_options
    noise = _probability(noise, "noise", 0.0, top)
    fix_noise = _probability(fix_noise, "fix_noise", 0.0, top)
    recovery = _probability(recovery, "recovery", 0.0, 1.0)
    fix_recovery = _probability(fix_recovery, "fix_recovery", 0.0, 1.0)
    leak = _probability(leak, "leak", 0.0, 1.0)
    steps_per_agent = _count(steps_per_agent, "steps_per_agent", 1)
    key = as_key(key)
    parents = [()] + [(i - 1,) for i in range(1, num_steps)]
    if topology == "dag":
        for i in range(2, num_steps):
            key_coin, key_pick = jr.split(jr.fold_in(key, i))
            if bool(jr.bernoulli(key_coin, extra_parent)):
                parents[i] = (int(jr.randint(key_pick, (), 0, i - 1)), i - 1)
    return SCM(
        num_steps=num_steps,
        num_options=num_options,
        parents=tuple(parents),
        agents=tuple(i // steps_per_agent for i in range(num_steps)),
        topology=topology,
        noise=noise,
        recovery=recovery,
        fix_noise=fix_noise,
        fix_recovery=fix_recovery,
        leak=leak,
    )


# -- the logits tables --------------------------------------------------------------------------
def _good_input(num_parents: int, num_options: int):
    """`Bool[K, ..., K]` (one axis per parent): every parent chose option 0."""
    shape = (num_options,) * num_parents
    good = np.ones(shape, bool)
    for axis in range(num_parents):
        index = np.arange(num_options).reshape([-1 if a == axis else 1 for a in range(num_parents)])
        good = good & (index == 0)
    return jnp.asarray(good)


def _row(num_options: int, p_good, p_main, main):
    """Probabilities over K options, `[*main.shape, K]`: `p_good` on option 0,
    `(1 - p_good) * p_main` on the bad option `main`, the rest of the bad mass spread evenly
    over the other bad options."""
    main = jnp.asarray(main)
    shape = main.shape + (num_options,)
    options = jnp.arange(num_options).reshape((1,) * main.ndim + (num_options,))
    if num_options == 2:
        return jnp.broadcast_to(jnp.where(options == 0, p_good, 1.0 - p_good), shape)
    rest = (1.0 - p_good) * (1.0 - p_main) / (num_options - 2)
    main_mass = (1.0 - p_good) * p_main
    return jnp.where(options == 0, p_good, jnp.where(options == main[..., None], main_mass, rest))


def _behaviour(num_options, good_input, main, noise, recovery):
    """Probabilities `[*K_parents, K]`: on a good input the good option w.p. 1 - noise
    (errors spread evenly); on a bad input the good option w.p. recovery, the error `main`
    (per parent configuration) w.p. (1 - recovery)(1 - noise)."""
    even = (num_options - 2) / (num_options - 1) if num_options > 2 else 0.0
    on_good = _row(
        num_options, jnp.asarray(1.0 - noise), jnp.asarray(1.0 - even), jnp.ones_like(main)
    )
    on_bad = _row(num_options, jnp.asarray(recovery), jnp.asarray(1.0 - noise), main)
    return jnp.where(good_input[..., None], on_good, on_bad)


def _log(p):
    return jnp.log(p).astype(jnp.float32)  # log 0 = -inf: an impossible option


def _params(scm: SCM) -> Float[Array, " 5"]:
    """The behaviour parameters as data, so that one compiled function serves every noise
    level of a topology: noise, recovery, fix_noise, fix_recovery, leak."""
    return jnp.asarray(
        [scm.noise, scm.recovery, scm.fix_noise, scm.fix_recovery, scm.leak], jnp.float32
    )


def _shape(scm: SCM) -> tuple:
    """What the compiled functions depend on: the topology and K (not the probabilities)."""
    return (scm.parents, scm.num_options)


def _step_tables(shape: tuple, params, key: PRNGKeyArray, i: int) -> dict:
    """Every table step i may use, for one case: factual, fix, corrupted, and the
    deterministic culprit pair, each `[*K_parents, K]` log-probabilities."""
    parents, k = shape
    noise, recovery, fix_noise, fix_recovery, leak = (params[j] for j in range(5))
    num_parents = len(parents[i])
    key_main, key_bad = jr.split(key)
    main = jr.randint(key_main, (k,) * num_parents, 1, k)  # the error a bad input propagates to
    good_input = _good_input(num_parents, k)
    corrupt_to = jr.randint(key_bad, (), 1, k)  # the error a corrupted step makes
    factual = _behaviour(k, good_input, main, noise, recovery)
    fix = _behaviour(k, good_input, main, fix_noise, fix_recovery)
    corrupted_good = _row(k, leak, 1.0 - noise, corrupt_to)
    corrupted = jnp.where(
        good_input[..., None], jnp.broadcast_to(corrupted_good, factual.shape), factual
    )
    options = jnp.arange(k)
    shape = (k,) * num_parents + (k,)
    always_bad = jnp.broadcast_to(jnp.where(options == 0, 0.0, 1.0 / (k - 1)), shape)
    always_good = jnp.broadcast_to(jnp.where(options == 0, 1.0, 0.0), shape)
    return dict(
        factual=_log(factual),
        fix=_log(fix),
        corrupted=_log(corrupted),
        always_bad=_log(always_bad),
        always_good=_log(always_good),
    )


def _case_tables(shape: tuple, params, key: PRNGKeyArray):
    return [_step_tables(shape, params, jr.fold_in(key, i), i) for i in range(len(shape[0]))]


def _final_critical(shape: tuple):
    n = len(shape[0])
    return jnp.zeros(n, jnp.float32).at[n - 1].set(1.0)


def clean_case(shape: tuple, params, key: PRNGKeyArray) -> SCMCase:
    """One case of the clean pipeline: every step [factual, fix]; success iff the last
    step is good."""
    tables = _case_tables(shape, params, key)
    logits = tuple(jnp.stack([t["factual"], t["fix"]]) for t in tables)
    return SCMCase(logits, _final_critical(shape), jnp.asarray(RULE_ALL, jnp.int32))


def injected_case(shape: tuple, params, key: PRNGKeyArray, step) -> SCMCase:
    """The case `clean_case(shape, params, key)` with step `step` corrupted: its factual
    variant is the corrupted implementation and its fix is the original factual one."""
    tables = _case_tables(shape, params, key)
    logits = tuple(
        jnp.where(
            step == i,
            jnp.stack([t["corrupted"], t["factual"]]),
            jnp.stack([t["factual"], t["fix"]]),
        )
        for i, t in enumerate(tables)
    )
    return SCMCase(logits, _final_critical(shape), jnp.asarray(RULE_ALL, jnp.int32))


def culprit_case(
    shape: tuple, params, key: PRNGKeyArray, culprits: Int[Array, " m"], rule
) -> SCMCase:
    """A multi-culprit case: every culprit [always bad, always good], the other steps
    [factual, fix]; the score is `rule` over the culprits."""
    tables = _case_tables(shape, params, key)
    is_culprit = jnp.zeros(len(shape[0]), bool).at[culprits].set(True)
    logits = tuple(
        jnp.where(
            is_culprit[i],
            jnp.stack([t["always_bad"], t["always_good"]]),
            jnp.stack([t["factual"], t["fix"]]),
        )
        for i, t in enumerate(tables)
    )
    return SCMCase(logits, is_culprit.astype(jnp.float32), jnp.asarray(rule, jnp.int32))


# -- controlled injection ---------------------------------------------------------------------
class InjectedFailures(eqx.Module):
    """Failures with a golden culprit, made by controlled injection (`inject_errors`).

    - `scm`: the `SCM`; `pipeline` is `scm.pipeline`.
    - `cases`: `SCMCase` with a leading axis F.
    - `worlds`: a `World` with keys `[F, 1]`: each run's recorded noise
      (`bj.recorded_worlds(noise_key, candidate_ids)`).
    - `culprit`: `Int[Array, "F"]`, the golden label: the injected step, which is the
      earliest step whose fix alone repairs the run.
    - `candidate_ids`: `Int[Array, "F"]`, each run's id among the candidates drawn.
    - `num_candidates`: clean runs drawn; `num_successful`: how many of them succeeded
      (errors are injected only into these); `num_still_successful`: injections after which
      the run still succeeded; `num_repaired_earlier`: injections that failed but an earlier
      step's fix alone repaired; `num_failures` = kept runs.
    """

    scm: SCM
    cases: SCMCase
    worlds: World
    culprit: Int[Array, " F"]
    candidate_ids: Int[Array, " F"]
    num_candidates: int = eqx.field(static=True)
    num_successful: int = eqx.field(static=True)
    num_still_successful: int = eqx.field(static=True)
    num_repaired_earlier: int = eqx.field(static=True)

    @property
    def pipeline(self):
        return self.scm.pipeline

    @property
    def num_failures(self) -> int:
        return int(self.culprit.shape[0])

    @property
    def rejection_rate(self) -> float:
        """The share of injected successful runs that were not kept (still successful, or
        repaired by an earlier step's fix alone)."""
        return (self.num_successful - self.num_failures) / self.num_successful

    @property
    def culprit_agent(self) -> np.ndarray:
        """The agent of each golden culprit."""
        return np.asarray(self.scm.agents)[np.asarray(self.culprit)]

    def summary(self) -> str:
        return (
            f"{self.num_failures} failures kept from {self.num_candidates} clean runs: "
            f"{self.num_successful} succeeded and received an error; "
            f"{self.num_still_successful} still succeeded, {self.num_repaired_earlier} were "
            f"repaired by an earlier step's fix alone (rejection rate {self.rejection_rate:.3f})"
        )


def _check_steps(steps, num_steps: int, name: str) -> tuple[int, ...]:
    if steps is None:
        return tuple(range(num_steps))
    if isinstance(steps, (int, np.integer)) and not isinstance(steps, bool):
        steps = (steps,)
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or not steps:
        raise TypeError(
            f"`{name}` must be None, a step index or a non-empty sequence of them, got {steps!r}"
        )
    out = []
    for s in steps:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
            raise TypeError(f"`{name}` must hold step indices (ints), got {s!r}")
        if not 0 <= s < num_steps:
            raise ValueError(
                f"`{name}` holds step index {int(s)}, beyond this pipeline's {num_steps} steps "
                f"(indices 0..{num_steps - 1})"
            )
        out.append(int(s))
    if len(set(out)) != len(out):
        raise ValueError(f"`{name}` lists a step twice: {out}")
    return tuple(out)


_SCREEN: dict = {}


def _screen_function(scm: SCM):
    """Compiled: for a batch of candidate ids, the clean score, the injected step, the
    injected run's score with no fix and with each step's fix alone, and the injected cases."""
    shape = _shape(scm)
    if shape in _SCREEN:
        return _SCREEN[shape]
    pipeline = scm.pipeline
    n = scm.num_steps
    structure = discover(pipeline, clean_case(shape, _params(scm), jr.key(0)))
    players = tuple(range(n))
    fixes = (1,) * n
    masks = jnp.concatenate([jnp.zeros((1, n), bool), jnp.eye(n, dtype=bool)])

    def one(params, key_tables, key_steps, key_noise, allowed, candidate):
        case_key = jr.fold_in(key_tables, candidate)
        world = World(key=world_key(key_noise, candidate, 0))
        step = allowed[jr.randint(jr.fold_in(key_steps, candidate), (), 0, allowed.shape[0])]
        clean = run_score(
            pipeline, structure, clean_case(shape, params, case_key), world, factual_plan(structure)
        )
        injected = injected_case(shape, params, case_key, step)
        scores = mask_values(pipeline, structure, injected, world, players, fixes, masks)
        return clean, step, scores, injected

    function = jax.jit(jax.vmap(one, in_axes=(None, None, None, None, None, 0)))
    _SCREEN[shape] = function
    return function


_BUILD: dict = {}


def _culprit_function(scm: SCM):
    """Compiled: the multi-culprit cases of a batch of case ids."""
    shape = _shape(scm)
    if shape not in _BUILD:

        def one(params, key, case_id, culprits, rule):
            return culprit_case(shape, params, jr.fold_in(key, case_id), culprits, rule)

        _BUILD[shape] = jax.jit(jax.vmap(one, in_axes=(None, None, 0, 0, None)))
    return _BUILD[shape]


def _recorded(key_noise, ids) -> World:
    keys = jax.vmap(lambda f: world_key(key_noise, f, 0))(jnp.asarray(ids))
    return World(key=keys[:, None])


def inject_errors(
    key,
    scm: SCM,
    num_failures: int,
    *,
    steps=None,
    batch_size: int = 1024,
    max_candidates: int | None = None,
) -> InjectedFailures:
    """Failures with golden culprits, by controlled injection into successful runs.

    Candidate run c (c = 0, 1, 2, ...) has its own tables and recorded noise (world 0 of
    candidate c under the noise key) and an injection step k drawn uniformly from `steps`.
    It is kept when the clean run succeeds, the run with step k corrupted fails, and no step
    before k repairs it by its fix alone (step k's fix always does: it restores the clean
    run). Candidates are screened in batches of `batch_size` until `num_failures` are kept;
    the kept runs are the first ones in candidate order, so a seed gives the same failures.

    **Arguments:**
    - `key`: an int seed or a typed key (split into table, step and noise keys).
    - `scm`: the pipeline (`make_scm`).
    - `num_failures`: how many failures to keep, >= 1.
    - `steps`: the steps an error may be injected at (indices), default every step.
    - `batch_size`: candidates screened per compiled call.
    - `max_candidates`: give up after this many candidates (default `max(100_000,
      200 * num_failures)`).

    **Returns:** an `InjectedFailures` (with the counts behind its rejection rate).

    **Raises:** `ValueError` naming the argument for a step index beyond n, a non-positive
    count; `ValueError` when no candidate run succeeded (nothing to inject into) or too few
    injections were kept within `max_candidates`.

    ```python
    scm = make_scm(0, num_steps=6)
    failures = inject_errors(0, scm, 200)
    print(failures.summary())
    ```
    """
    if not isinstance(scm, SCM):
        raise TypeError(
            f"`scm` must be a blamejax.scm.SCM (see make_scm), got {type(scm).__name__}"
        )
    num_failures = _count(num_failures, "num_failures", 1)
    batch_size = _count(batch_size, "batch_size", 1)
    allowed = _check_steps(steps, scm.num_steps, "steps")
    if max_candidates is None:
        max_candidates = max(100_000, 200 * num_failures)
    max_candidates = _count(max_candidates, "max_candidates", 1)
    key_tables, key_steps, key_noise = jr.split(as_key(key), 3)
    screen = _screen_function(scm)
    n = scm.num_steps
    kept_ids, kept_steps, kept_cases = [], [], []
    num_candidates = num_successful = still = earlier = 0
    start = 0
    while start < max_candidates and len(kept_ids) < num_failures:
        ids = np.arange(start, start + batch_size, dtype=np.int32)
        clean, step, scores, cases = screen(
            _params(scm), key_tables, key_steps, key_noise, jnp.asarray(allowed, jnp.int32), ids
        )
        clean, step, scores = np.asarray(clean), np.asarray(step), np.asarray(scores)
        success = clean >= 0.5
        fails = scores[:, 0] < 0.5
        repairs = scores[:, 1:] >= 0.5  # [B, n]: step j's fix alone repairs
        if np.any(success & fails & ~repairs[np.arange(len(ids)), step]):
            raise RuntimeError(
                "internal error: the injected step's fix did not restore the clean run"
            )
        earliest = np.where(repairs.any(axis=1), repairs.argmax(axis=1), n)
        keep = success & fails & (earliest == step)
        need = num_failures - len(kept_ids)
        cut = len(ids)
        if keep.sum() >= need:
            cut = int(np.flatnonzero(keep)[need - 1]) + 1
        cut = min(cut, max_candidates - start)
        sl = slice(0, cut)
        num_candidates += cut
        num_successful += int(success[sl].sum())
        still += int((success & ~fails)[sl].sum())
        earlier += int((success & fails & (earliest < step))[sl].sum())
        chosen = np.flatnonzero(keep[sl])
        kept_ids.extend(ids[chosen].tolist())
        kept_steps.extend(step[chosen].tolist())
        kept_cases.append(jax.tree_util.tree_map(lambda x: np.asarray(x)[chosen], cases))
        start += batch_size
    if num_successful == 0:
        raise ValueError(
            f"none of the {num_candidates} clean runs succeeded, so there are zero successful "
            "runs to inject an error into; lower `noise`, raise `recovery`, use fewer steps, "
            "or raise `max_candidates`"
        )
    if len(kept_ids) < num_failures:
        raise ValueError(
            f"only {len(kept_ids)} of the {num_failures} failures requested were kept from "
            f"{num_candidates} clean runs ({num_successful} successful; {still} still succeeded "
            f"after the injection, {earlier} were repaired earlier); raise `max_candidates` or "
            "lower `leak` and `recovery`"
        )
    ids = np.asarray(kept_ids, np.int32)
    culprit = np.asarray(kept_steps, np.int32)
    cases = jax.tree_util.tree_map(lambda *xs: jnp.asarray(np.concatenate(xs)), *kept_cases)
    return InjectedFailures(
        scm=scm,
        cases=cases,
        worlds=_recorded(key_noise, ids),
        culprit=jnp.asarray(culprit),
        candidate_ids=jnp.asarray(ids),
        num_candidates=num_candidates,
        num_successful=num_successful,
        num_still_successful=still,
        num_repaired_earlier=earlier,
    )


# -- multi-culprit cases ------------------------------------------------------------------------
class MultiCulpritCases(eqx.Module):
    """Failures with several culprits and analytic Shapley values (`multi_culprit_cases`).

    - `scm`, `cases` (`SCMCase`, leading axis F), `worlds` (`[F, 1]`, recorded noise).
    - `culprits`: `Int[Array, "F m"]`, the culprit steps of each case (sorted).
    - `kind`: `"conjunctive"` (every culprit is needed for the failure: fixing any one
      repairs) or `"disjunctive"` (any one culprit suffices: all must be fixed).
    - `analytic_shapley`: `Float[Array, "F n"]`, 1/m on the culprits, 0 elsewhere (exact by
      construction, under any noise); they add up to the total repair, 1.
    """

    scm: SCM
    cases: SCMCase
    worlds: World
    culprits: Int[Array, "F m"]
    kind: str = eqx.field(static=True)
    analytic_shapley: Float[Array, "F n"]

    @property
    def pipeline(self):
        return self.scm.pipeline

    @property
    def num_failures(self) -> int:
        return int(self.culprits.shape[0])


def multi_culprit_cases(
    key,
    scm: SCM,
    num_cases: int,
    *,
    num_culprits: int = 2,
    kind: str = "conjunctive",
    culprits=None,
) -> MultiCulpritCases:
    """Failures with `num_culprits` culprits whose Shapley values are known in closed form.

    Each culprit is corrupted outright (its factual variant never outputs the good option)
    and its fix always outputs it, whatever its input; the other steps keep their stochastic
    factual and fix variants. The score reads only the culprits: with `kind="conjunctive"`
    the run succeeds when any culprit is good (it failed because all were bad, so fixing any
    one repairs it); with `"disjunctive"` it succeeds only when every culprit is good (any
    bad one fails it). The game is then a unanimity game (disjunctive) or its dual
    (conjunctive) on the culprits, and every culprit's Shapley value is 1/m, every other
    step's 0, under every world.

    **Arguments:**
    - `key`: an int seed or a typed key (tables, culprits and noise).
    - `scm`: the pipeline (`make_scm`).
    - `num_cases`: F >= 1.
    - `num_culprits`: m, 1 <= m <= n (drawn without replacement per case), unless
      `culprits` is given.
    - `kind`: `"conjunctive"` or `"disjunctive"`.
    - `culprits`: optional fixed culprit step indices, the same for every case.

    **Returns:** a `MultiCulpritCases`.

    **Raises:** `ValueError` naming the argument: an unknown kind, m out of range, a culprit
    index beyond n.

    ```python
    cases = multi_culprit_cases(0, make_scm(0, 8), 100, num_culprits=2, kind="disjunctive")
    result = bj.exact_blame(cases.pipeline, cases.cases, cases.worlds)
    # result.shapley equals cases.analytic_shapley: 0.5 on both culprits, 0 elsewhere
    ```
    """
    if not isinstance(scm, SCM):
        raise TypeError(
            f"`scm` must be a blamejax.scm.SCM (see make_scm), got {type(scm).__name__}"
        )
    num_cases = _count(num_cases, "num_cases", 1)
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}, got {kind!r}")
    n = scm.num_steps
    key_tables, key_culprits, key_noise = jr.split(as_key(key), 3)
    if culprits is not None:
        fixed = tuple(sorted(_check_steps(culprits, n, "culprits")))
        chosen = np.tile(np.asarray(fixed, np.int32), (num_cases, 1))
    else:
        m = _count(num_culprits, "num_culprits", 1)
        if m > n:
            raise ValueError(f"`num_culprits` = {m} is more than the pipeline's {n} steps")
        draw = jax.vmap(lambda c: jr.permutation(jr.fold_in(key_culprits, c), n)[:m])
        chosen = np.sort(np.asarray(draw(jnp.arange(num_cases))), axis=1).astype(np.int32)
    m = chosen.shape[1]
    rule = RULE_ANY if kind == "conjunctive" else RULE_ALL
    ids = np.arange(num_cases, dtype=np.int32)
    cases = _culprit_function(scm)(
        _params(scm), key_tables, ids, jnp.asarray(chosen), jnp.asarray(rule, jnp.int32)
    )
    analytic = np.zeros((num_cases, n), np.float32)
    np.put_along_axis(analytic, chosen, np.float32(1.0 / m), axis=1)
    return MultiCulpritCases(
        scm=scm,
        cases=cases,
        worlds=_recorded(key_noise, ids),
        culprits=jnp.asarray(chosen),
        kind=kind,
        analytic_shapley=jnp.asarray(analytic),
    )
