"""Counterfactual rollouts of a tabular Markov decision process under a new policy.

The question (Oberst & Sontag, ICML 2019): an episode was observed under a behaviour
policy; had the agent followed another policy from the same first state, with the same
luck, what would have happened? With a Gumbel-max structural causal model the "luck" of
step t is the Gumbel noise of the draw of the next state. It is abducted from the
observed transition (action, state, next state) at the same step, independently per step
and per counterfactual sample, and then replayed on the logits of the counterfactual
(action, state). Once the observed episode has ended there is nothing to condition on, and
the next state is drawn with fresh addressed noise (interventional sampling).

This is written as a blamejax pipeline, `mdp_pipeline`: one episode is a chain of draws,
a "policy" draw and a "transition" draw per time step (`slot=t`). The policy step has two
variants: 0 takes the observed (behaviour) action, 1 follows the evaluation policy. The
abducted noise reaches the pipeline through a `World` whose per-site overrides hold it
while the observed episode runs (`valid` true) and fall back to the world's addressed
noise after it ended. `counterfactual_rollouts` builds those worlds inside one compiled
function (the abducted noise of all episodes is never held in memory at once) and runs
the pipeline with the policy step switched to variant 1 (`mdp_policy_plan`).

Why a custom driver rather than `inferred_worlds` + `replay`: those would hold the
abducted noise and the traces of every draw of every run in memory ([E, N, K] per site,
40 sites for a 20-step episode) and abduct the draws after the observed episode ended
only to discard them. The driver computes the same worlds, with the same keys, per batch
of runs; a test checks that both paths give identical episodes. Most of its cost is the
addressed noise of every draw site, computed for each run even where abducted noise
overrides it (static shapes under `vmap`).

The answer assumes the Gumbel-max coupling, which data cannot identify: another coupling
with the same transition probabilities can give other counterfactuals.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .._arguments import check_positive_int
from ..noise import as_key, world_key
from ..pipeline import World, discover, trace_run
from ._episode import (
    POLICY,
    TRANSITION,
    MDPEpisode,
    abducted_transition_noise,
    check_episodes,
    check_tables,
    mdp_pipeline,
    mdp_policy_plan,
)


class CounterfactualRollouts(NamedTuple):
    """Counterfactual episodes, `num_samples` per observed episode.

    Every array has leading axes `[E, N]` (observed episode, counterfactual sample).
    Steps after a counterfactual episode ended hold -1 (states, actions) and 0 (rewards).

    - `states`: `Int[Array, "E N T"]`, the state at the start of step t.
    - `actions`: `Int[Array, "E N T"]`, the evaluation policy's action.
    - `next_states`: `Int[Array, "E N T"]`.
    - `rewards`: `Float[Array, "E N T"]`.
    - `returns`: `Float[Array, "E N"]`, the undiscounted sum of `rewards`.
    """

    states: Int[Array, "E N T"]
    actions: Int[Array, "E N T"]
    next_states: Int[Array, "E N T"]
    rewards: Float[Array, "E N T"]
    returns: Float[Array, "E N"]

    @property
    def running(self) -> Bool[Array, "E N T"]:
        """Where the counterfactual episode is still running."""
        return self.actions >= 0


def counterfactual_rollouts(
    key,
    transition_logits,
    rewards,
    policy_logits,
    observed_actions,
    observed_states,
    observed_next_states,
    num_samples: int,
    *,
    worlds_per_batch: int = 2048,
) -> CounterfactualRollouts:
    """Counterfactual episodes of a tabular MDP under an evaluation policy.

    For each observed episode e and sample n (world ``world_key(key, e, n + 1)``), start
    in the observed first state; at step t take the evaluation policy's action at the
    current counterfactual state; draw the next state by Gumbel-max on
    ``transition_logits[action, state]`` with noise abducted from the observed
    transition at step t while the observed episode runs, and with the world's addressed
    noise after it ended. Where the counterfactual (action, state) equals the observed
    one, the next state equals the observed one. An episode ends at its first non-zero
    reward or after T steps.

    The policy draw uses addressed noise too; for a deterministic policy (one finite logit
    per state) it has no effect.

    **Arguments:**
    - `key`: an int seed or a `jax.random.key`.
    - `transition_logits`: `Float[A, S, S]`, log transition probabilities (``-inf`` for
      impossible transitions), axes (action, state, next state).
    - `rewards`: `Float[A, S, S]`.
    - `policy_logits`: `Float[S, A]`, the evaluation policy's log probabilities.
    - `observed_actions`: `Int[E, T]`, -1 after an observed episode ended (the running
      steps must come first; step 0 must run).
    - `observed_states`, `observed_next_states`: `Int[E, T]` (ignored where the action is -1).
    - `num_samples`: N, counterfactual samples per observed episode.
    - `worlds_per_batch`: how many (episode, sample) runs one compiled batch holds; it
      bounds memory and has no effect on the results. Calls with the same batch size,
      model shape and horizon reuse one compiled function.

    **Returns:** a `CounterfactualRollouts` with leading axes `[E, N]`.

    **Raises:** `ValueError`/`TypeError` naming the argument for wrong shapes, dtypes or
    values, and for an observed transition of probability zero (it cannot be abducted).

    ```python
    import jax.numpy as jnp
    import blamejax as bj

    probs = jnp.array([[[0.5, 0.5], [0.0, 1.0]]])        # one action, two states
    rewards = jnp.array([[[0.0, 1.0], [0.0, 0.0]]])
    out = bj.mdp.counterfactual_rollouts(
        0, jnp.log(probs), rewards, jnp.zeros((2, 1)),
        observed_actions=jnp.array([[0, -1]]), observed_states=jnp.array([[0, -1]]),
        observed_next_states=jnp.array([[1, -1]]), num_samples=3,
    )
    out.returns  # [[1., 1., 1.]]: the same action and state, so the same next state
    ```
    """
    key = as_key(key)
    tables = check_tables(transition_logits, rewards, policy_logits)
    observed = check_episodes(tables[0], observed_actions, observed_states, observed_next_states)
    num_samples = check_positive_int(num_samples, "num_samples")
    worlds_per_batch = check_positive_int(worlds_per_batch, "worlds_per_batch")
    tables = tuple(jnp.asarray(x) for x in tables)
    first = MDPEpisode(*tables, first_state=observed[1][0, 0], observed_actions=observed[0][0])
    structure = discover(mdp_pipeline, first)
    columns = _in_batches(key, tables, observed, structure, num_samples, worlds_per_batch)
    return CounterfactualRollouts(*columns, returns=columns[3].sum(axis=-1))


def _in_batches(key, tables, observed, structure, num_samples: int, worlds_per_batch: int):
    """The rollouts' columns (states, actions, next states, rewards), `[E, N, T]` each.

    Runs are flattened to worlds w = e * N + n and evaluated in batches of one fixed size
    (the last one padded), so that one compiled function serves every batch and every call
    with the same model and horizon, and memory stays bounded."""
    actions, states, next_states = (np.asarray(x) for x in observed)
    num_episodes = actions.shape[0]
    num_worlds = num_episodes * num_samples
    parts = []
    for start in range(0, num_worlds, worlds_per_batch):
        ids = np.minimum(np.arange(start, start + worlds_per_batch), num_worlds - 1)
        episodes, samples = ids // num_samples, ids % num_samples
        parts.append(
            _rollouts_batch(
                key,
                tables,
                jnp.asarray(episodes, jnp.int32),
                jnp.asarray(samples, jnp.int32),
                jnp.asarray(actions[episodes]),
                jnp.asarray(states[episodes]),
                jnp.asarray(next_states[episodes]),
                structure,
            )
        )
    columns = []
    for column in zip(*parts):
        flat = jnp.concatenate(column) if len(column) > 1 else column[0]
        columns.append(flat[:num_worlds].reshape((num_episodes, num_samples) + flat.shape[1:]))
    return columns


@functools.partial(jax.jit, static_argnums=(7,))
def _rollouts_batch(key, tables, episodes, samples, actions, states, next_states, structure):
    """The rollouts of a batch of worlds: world i is sample `samples[i]` of episode
    `episodes[i]`, whose observations are row i of `actions`, `states`, `next_states`."""
    transition_logits, rewards, _ = tables
    plan = mdp_policy_plan(structure)
    horizon = actions.shape[1]
    policy_sites = [structure.site_index(POLICY, t) for t in range(horizon)]
    transition_sites = [structure.site_index(TRANSITION, t) for t in range(horizon)]

    def one_world(episode, sample, obs_actions, obs_states, obs_next_states):
        key_world = world_key(key, episode, sample + 1)
        noise, valid = abducted_transition_noise(
            key_world, transition_logits, obs_actions, obs_states, obs_next_states
        )
        overrides = [None] * len(structure.sites)
        site_valid = [None] * len(structure.sites)
        for t, i in enumerate(transition_sites):
            overrides[i], site_valid[i] = noise[t], valid[t]
        for i in policy_sites:
            overrides[i] = jnp.zeros((structure.sites[i].num_options,), noise.dtype)
            site_valid[i] = jnp.asarray(False)
        world = World(key=key_world, overrides=tuple(overrides), valid=tuple(site_valid))
        case = MDPEpisode(*tables, first_state=obs_states[0], observed_actions=obs_actions)
        choice = trace_run(mdp_pipeline, structure, case, world, plan)["choice"]
        return _trajectory(
            rewards,
            obs_states[0],
            choice[jnp.asarray(policy_sites)],
            choice[jnp.asarray(transition_sites)],
        )

    return jax.vmap(one_world)(episodes, samples, actions, states, next_states)


def _trajectory(rewards, first_state, actions, next_states):
    """States, masked actions/next states and rewards of one run from its draws.

    Up to and including its first non-zero reward a run's states chain (the state of
    step t is the next state of step t - 1), which is all that the mask needs.
    """
    states = jnp.concatenate([first_state[None], next_states[:-1]])
    raw = rewards[actions, states, next_states]
    ended = (raw != 0).astype(jnp.int32)
    running = (jnp.cumsum(ended, dtype=jnp.int32) - ended) == 0
    return (
        jnp.where(running, states, -1),
        jnp.where(running, actions, -1),
        jnp.where(running, next_states, -1),
        jnp.where(running, raw, 0.0),
    )
