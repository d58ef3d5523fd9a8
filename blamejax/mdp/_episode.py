"""A tabular Markov decision process as a blamejax pipeline, and the abduction of its noise.

`mdp_pipeline` runs one episode (`MDPEpisode`: the model and one observed episode) as a
chain of "policy" and "transition" draws; `mdp_policy_plan` switches its policy step to
the evaluation policy; `abducted_transition_noise` gives the posterior Gumbels of the
observed transitions; `check_tables` and `check_episodes` check a model and a batch of observed
episodes.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ..noise import abduct_gumbels, abduction_key
from ..pipeline import Plan, StepPlan, Structure, factual_plan

POLICY = "policy"
TRANSITION = "transition"


class MDPEpisode(NamedTuple):
    """One case of `mdp_pipeline`: the model and one observed episode.

    - `transition_logits`: `Float[Array, "A S S"]`, axes (action, state, next state);
      ``-inf`` marks an impossible transition.
    - `rewards`: `Float[Array, "A S S"]`, reward of (action, state, next state). An
      episode ends at its first non-zero reward.
    - `policy_logits`: `Float[Array, "S A"]`, the evaluation policy (variant 1).
    - `first_state`: `Int[Array, ""]`, the observed first state.
    - `observed_actions`: `Int[Array, "T"]`, the behaviour actions, -1 after the observed
      episode ended. T is the horizon.
    """

    transition_logits: Float[Array, "A S S"]
    rewards: Float[Array, "A S S"]
    policy_logits: Float[Array, "S A"]
    first_state: Int[Array, ""]
    observed_actions: Int[Array, " T"]


def mdp_pipeline(ctx, episode: MDPEpisode):
    """One episode of a tabular MDP as a blamejax pipeline; the score is the return.

    Each time step t makes two draws: `"policy"` (slot t; variant 0 is the observed
    action, variant 1 the evaluation policy at the current state) and `"transition"`
    (slot t; one variant, logits ``transition_logits[action, state]``). The episode ends
    at its first non-zero reward; later draws still happen (the structure is static) but
    neither move the state nor add reward. Rewards are not discounted.

    After the observed episode ended, variant 0 has nothing to copy and draws uniformly;
    only variant 1 is meaningful there.

    **Arguments:**
    - `ctx`: the blamejax context.
    - `episode`: an `MDPEpisode`.

    **Returns:** the episode's total reward, a float scalar.
    """
    logits = episode.transition_logits
    num_actions = logits.shape[0]
    options = jnp.arange(num_actions, dtype=jnp.int32)
    state = jnp.asarray(episode.first_state, jnp.int32)
    running = jnp.asarray(True)
    total = jnp.zeros((), episode.rewards.dtype)
    for t in range(episode.observed_actions.shape[0]):
        observed = episode.observed_actions[t].astype(jnp.int32)
        behaviour = jnp.where(options == observed, 0.0, -jnp.inf).astype(logits.dtype)
        behaviour = jnp.where(observed >= 0, behaviour, jnp.zeros_like(behaviour))
        policy = jnp.stack([behaviour, episode.policy_logits[state].astype(logits.dtype)])
        action = ctx.choose(POLICY, policy, slot=t).index
        next_state = ctx.choose(TRANSITION, logits[action, state][None], slot=t).index
        reward = jnp.where(running, episode.rewards[action, state, next_state], 0.0)
        total = total + reward
        state = jnp.where(running, next_state, state)
        running = running & (reward == 0)
    return total


def mdp_policy_plan(structure: Structure) -> Plan:
    """The plan of `mdp_pipeline` that follows the evaluation policy (policy variant 1)."""
    plan = factual_plan(structure)
    steps = list(plan.steps)
    policy = structure.step_index(POLICY)
    steps[policy] = StepPlan(variant=np.int32(1), noise=np.int32(-1), forced=np.int32(-1))
    return plan._replace(steps=tuple(steps))


def abducted_transition_noise(
    key: PRNGKeyArray,
    transition_logits: Float[Array, "A S S"],
    observed_actions: Int[Array, " T"],
    observed_states: Int[Array, " T"],
    observed_next_states: Int[Array, " T"],
) -> tuple[Float[Array, "T S"], Bool[Array, " T"]]:
    """The posterior Gumbels of every transition draw of one observed episode, one world.

    Step t's noise is `abduct_gumbels` of the logits the observed transition saw,
    ``transition_logits[a_t, s_t]``, given that ``s_{t+1}`` won, under the key that
    `bj.inferred_worlds` uses for site ("transition", t) of world `key`. Steps after the
    observed episode ended (action -1) get a dummy value and `valid` false.

    **Returns:** `(noise [T, S], valid [T])`.
    """
    num_states = transition_logits.shape[-1]

    def one(t, action, state, next_state):
        observed = action >= 0
        row = transition_logits[jnp.maximum(action, 0), jnp.maximum(state, 0)]
        row = jnp.where(observed, row, jnp.zeros((num_states,), row.dtype))
        site = abduction_key(key, TRANSITION, t)
        next_state = jnp.where(observed, next_state, 0)
        # check_episode_inputs refused impossible transitions eagerly
        return abduct_gumbels(site, row, next_state, check=False), observed

    steps = jnp.arange(observed_actions.shape[0])
    return jax.vmap(one)(steps, observed_actions, observed_states, observed_next_states)


def check_tables(transition_logits, rewards, policy_logits) -> tuple[np.ndarray, ...]:
    """The model checked eagerly: `(transition_logits, rewards, policy_logits)` as NumPy
    arrays of shapes `[A, S, S]`, `[A, S, S]` and `[S, A]`."""
    logits = _float_array(transition_logits, "transition_logits")
    if logits.ndim != 3 or logits.shape[1] != logits.shape[2]:
        raise ValueError(
            "`transition_logits` must have shape [A, S, S] (action, state, next state), "
            f"got shape {logits.shape}"
        )
    num_actions, num_states = logits.shape[0], logits.shape[1]
    if np.isnan(logits).any() or np.isposinf(logits).any():
        raise ValueError("`transition_logits` must be real numbers or -inf, got NaN or +inf")
    dead = np.argwhere(~np.isfinite(logits).any(axis=-1))
    if dead.size:
        a, s = dead[0]
        raise ValueError(
            f"`transition_logits[{a}, {s}]` is -inf everywhere: every (action, state) needs "
            "at least one possible next state"
        )
    reward = _float_array(rewards, "rewards")
    if reward.shape != logits.shape:
        raise ValueError(
            f"`rewards` must have the shape of `transition_logits`, {logits.shape}, got {reward.shape}"
        )
    if not np.isfinite(reward).all():
        raise ValueError("`rewards` must be finite")
    policy = _float_array(policy_logits, "policy_logits")
    if policy.shape != (num_states, num_actions):
        raise ValueError(
            f"`policy_logits` must have shape [S, A] = [{num_states}, {num_actions}], got {policy.shape}"
        )
    if (
        np.isnan(policy).any()
        or np.isposinf(policy).any()
        or not np.isfinite(policy).any(axis=1).all()
    ):
        raise ValueError(
            "`policy_logits` must be real numbers or -inf, with a finite entry in every row"
        )
    return logits, reward, policy


def check_episodes(logits: np.ndarray, actions, states, next_states) -> tuple[Array, ...]:
    """The observed episodes checked eagerly against the checked `transition_logits`
    `logits`: `(actions, states, next_states)` as `Int[Array, "E T"]` int32 arrays, -1 after
    each episode ended."""
    num_actions, num_states = logits.shape[0], logits.shape[1]
    obs = []
    for name, value in (
        ("observed_actions", actions),
        ("observed_states", states),
        ("observed_next_states", next_states),
    ):
        arr = np.asarray(value)
        if not np.issubdtype(arr.dtype, np.integer) and not np.issubdtype(arr.dtype, np.floating):
            raise TypeError(f"`{name}` must be an integer array, got dtype {arr.dtype}")
        if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
            raise ValueError(
                f"`{name}` must have shape [E, T] (episodes, steps), got shape {arr.shape}"
            )
        if not np.array_equal(arr, np.round(arr)):
            raise ValueError(f"`{name}` must hold whole numbers, got non-integer values")
        obs.append(arr.astype(np.int64))
    actions, states, next_states = obs
    if states.shape != actions.shape or next_states.shape != actions.shape:
        raise ValueError(
            "`observed_actions`, `observed_states` and `observed_next_states` must share one "
            f"shape [E, T], got {actions.shape}, {states.shape} and {next_states.shape}"
        )
    if actions.min() < -1 or actions.max() >= num_actions:
        raise ValueError(
            f"`observed_actions` must lie in [0, {num_actions}) or be -1 after an episode ended, "
            f"got values in [{actions.min()}, {actions.max()}]"
        )
    running = actions >= 0
    if not running[:, 0].all():
        raise ValueError(
            f"`observed_actions[{int(np.argmin(running[:, 0]))}, 0]` is -1: every episode must "
            "run at least its first step"
        )
    late = np.argwhere(running[:, 1:] & ~running[:, :-1])
    if late.size:
        raise ValueError(
            f"`observed_actions[{late[0, 0]}]` runs again after a -1 at step {late[0, 1]}: the "
            "running steps of an episode must come first"
        )
    for name, arr in (("observed_states", states), ("observed_next_states", next_states)):
        used = arr[running]
        if used.min() < 0 or used.max() >= num_states:
            raise ValueError(
                f"`{name}` must lie in [0, {num_states}) on running steps, got values in "
                f"[{used.min()}, {used.max()}]"
            )
    a, s, n = (np.where(running, x, 0) for x in (actions, states, next_states))
    impossible = np.argwhere(running & ~np.isfinite(logits[a, s, n]))
    if impossible.size:
        e, t = impossible[0]
        raise ValueError(
            f"episode {e}, step {t}: the observed transition (action {a[e, t]}, state "
            f"{s[e, t]} -> {n[e, t]}) has logit -inf in `transition_logits`, so it cannot have "
            "happened and its noise cannot be abducted"
        )
    return tuple(
        jnp.asarray(np.where(running, x, -1), jnp.int32) for x in (actions, states, next_states)
    )


def _float_array(value, name: str) -> np.ndarray:
    arr = np.asarray(value)
    if not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"`{name}` must be a floating-point array, got dtype {arr.dtype}")
    return arr
