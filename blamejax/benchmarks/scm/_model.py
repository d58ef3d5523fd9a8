"""Synthetic structural causal models whose culprit is known: the random pipelines and the
per-case probability tables their failures are built from.

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
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ...noise import as_key

TOPOLOGIES = ("chain", "dag")
"""The topologies `make_scm` builds: a chain of steps, or a random DAG."""
KINDS = ("conjunctive", "disjunctive")
"""The kinds of multi-culprit failures: every culprit needed for the failure, or any one
culprit enough."""
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
        """The number of agents the steps belong to."""
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


def count_of(value, name: str, minimum: int) -> int:
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
    # doctest: slow (compiles the injection screen, about 10 s)
    import blamejax as bj
    from blamejax.benchmarks import scm
    model = scm.make_scm(0, num_steps=6, num_options=4, noise=0.1)
    failures = scm.inject_errors(1, model, num_failures=50)
    result = bj.exact_blame(model.pipeline, failures.cases, failures.worlds)
    ```
    """
    num_steps = count_of(num_steps, "num_steps", 1)
    num_options = count_of(num_options, "num_options", 2)
    if topology not in TOPOLOGIES:
        raise ValueError(f"`topology` must be one of {TOPOLOGIES}, got {topology!r}")
    extra_parent = _probability(extra_parent, "extra_parent", 0.0, 1.0, high_open=False)
    top = (num_options - 1) / num_options
    noise = _probability(noise, "noise", 0.0, top)
    fix_noise = _probability(fix_noise, "fix_noise", 0.0, top)
    recovery = _probability(recovery, "recovery", 0.0, 1.0)
    fix_recovery = _probability(fix_recovery, "fix_recovery", 0.0, 1.0)
    leak = _probability(leak, "leak", 0.0, 1.0)
    steps_per_agent = count_of(steps_per_agent, "steps_per_agent", 1)
    key = as_key(key)
    parents = [()] + [(i - 1,) for i in range(1, num_steps)]
    if topology == "dag":
        for i in range(2, num_steps):
            key_coin, key_pick = jr.split(jr.fold_in(key, i))
            if bool(jr.bernoulli(key_coin, jnp.float32(extra_parent))):  # float32: either mode
                parents[i] = (int(jr.randint(key_pick, (), 0, i - 1, jnp.int32)), i - 1)
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
    options = jnp.arange(num_options, dtype=main.dtype).reshape((1,) * main.ndim + (num_options,))
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


def params_of(scm: SCM) -> Float[Array, " 5"]:
    """The behaviour parameters as data, so that one compiled function serves every noise
    level of a topology: noise, recovery, fix_noise, fix_recovery, leak."""
    return jnp.asarray(
        [scm.noise, scm.recovery, scm.fix_noise, scm.fix_recovery, scm.leak], jnp.float32
    )


def shape_of(scm: SCM) -> tuple:
    """What the compiled functions depend on: the topology and K (not the probabilities)."""
    return (scm.parents, scm.num_options)


def _step_tables(shape: tuple, params, key: PRNGKeyArray, i: int) -> dict:
    """Every table step i may use, for one case: factual, fix, corrupted, and the
    deterministic culprit pair, each `[*K_parents, K]` log-probabilities."""
    parents, k = shape
    noise, recovery, fix_noise, fix_recovery, leak = (params[j] for j in range(5))
    num_parents = len(parents[i])
    key_main, key_bad = jr.split(key)
    main = jr.randint(
        key_main, (k,) * num_parents, 1, k, jnp.int32
    )  # the error a bad input propagates to
    good_input = _good_input(num_parents, k)
    corrupt_to = jr.randint(key_bad, (), 1, k, jnp.int32)  # the error a corrupted step makes
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
