"""MDP rollouts: `counterfactual_rollouts` checks its inputs and batches its runs, on a small made-up MDP.

The check of the rollouts themselves, against the published sepsis counterfactual of
Oberst & Sontag (2019), is in test_sepsis.py.
"""

import numpy as np
import pytest

import blamejax as bj

# -- bad input (a small made-up MDP: always runs) ----------------------------------------


def _tiny():
    probs = np.array([[[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 1.0]]] * 2)
    with np.errstate(divide="ignore"):
        logits = np.log(probs)
    rewards = np.zeros((2, 3, 3))
    rewards[:, :, 2] = 1.0
    rewards[:, 2, 2] = 0.0
    policy = np.log(np.array([[0.5, 0.5]] * 3))
    actions = np.array([[0, 1], [1, -1]])
    states = np.array([[0, 1], [1, -1]])
    nexts = np.array([[1, 1], [2, -1]])
    return dict(
        transition_logits=logits,
        rewards=rewards,
        policy_logits=policy,
        observed_actions=actions,
        observed_states=states,
        observed_next_states=nexts,
    )


def test_tiny_mdp_is_valid():
    """The made-up MDP itself passes the checks, so each bad-input test below fails for
    the reason it names."""
    from blamejax.mdp._episode import check_episodes, check_tables

    args = list(_tiny().values())
    tables = check_tables(*args[:3])
    observed = check_episodes(tables[0], *args[3:])
    assert [x.shape for x in tables] == [(2, 3, 3), (2, 3, 3), (3, 2)]
    assert [x.shape for x in observed] == [(2, 2)] * 3


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("transition_logits", np.zeros((3, 3)), r"`transition_logits` must have shape \[A, S, S\]"),
        (
            "transition_logits",
            np.zeros((2, 3, 4)),
            r"`transition_logits` must have shape \[A, S, S\]",
        ),
        ("rewards", np.zeros((2, 3)), r"`rewards` must have the shape of `transition_logits`"),
        ("policy_logits", np.zeros((2, 3)), r"`policy_logits` must have shape \[S, A\] = \[3, 2\]"),
        ("observed_actions", np.array([0, 1]), r"`observed_actions` must have shape \[E, T\]"),
        ("observed_states", np.zeros((2, 3), int), r"must share one shape \[E, T\]"),
        ("observed_next_states", np.zeros((1, 2), int), r"must share one shape \[E, T\]"),
        (
            "observed_actions",
            np.array([[0, 2], [1, -1]]),
            r"`observed_actions` must lie in \[0, 2\)",
        ),
        ("observed_actions", np.array([[-1, 0], [1, -1]]), r"`observed_actions\[0, 0\]` is -1"),
        ("observed_states", np.array([[0, 3], [1, -1]]), r"`observed_states` must lie in \[0, 3\)"),
        (
            "observed_next_states",
            np.array([[2, 1], [2, -1]]),
            r"episode 0, step 0: the observed transition",
        ),
        (
            "transition_logits",
            np.full((2, 3, 3), -np.inf),
            r"`transition_logits\[0, 0\]` is -inf everywhere",
        ),
        (
            "observed_states",
            np.array([[0.5, 1], [1, -1]]),
            r"`observed_states` must hold whole numbers",
        ),
    ],
)
def test_bad_input(name, value, match):
    args = _tiny()
    args[name] = value
    with pytest.raises(ValueError, match=match):
        bj.mdp.counterfactual_rollouts(0, num_samples=2, **args)


def test_bad_num_samples():
    with pytest.raises(ValueError, match=r"`num_samples` must be a positive int, got 0"):
        bj.mdp.counterfactual_rollouts(0, num_samples=0, **_tiny())
    with pytest.raises(TypeError, match=r"`rewards` must be a floating-point array"):
        bj.mdp.counterfactual_rollouts(
            0, num_samples=1, **{**_tiny(), "rewards": np.zeros((2, 3, 3), int)}
        )


def test_batch_size_has_no_effect_on_the_rollouts():
    """`worlds_per_batch` bounds memory only: batches of 3 runs (the last one padded) give the
    episodes of one batch holding every run, bit for bit."""
    args = _tiny()
    one = bj.mdp.counterfactual_rollouts(0, **args, num_samples=5)
    batched = bj.mdp.counterfactual_rollouts(0, **args, num_samples=5, worlds_per_batch=3)
    assert one.states.shape == (2, 5, 2)
    for name in one._fields:
        np.testing.assert_array_equal(np.asarray(getattr(batched, name)), getattr(one, name))
