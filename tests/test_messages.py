"""Messages a first-time user reads: they name the mistake, say what to do, and point at the
user's own line.

- a tabulated step called without `given=` hears that `given=` is missing;
- Python lists as case leaves are named by their path, without a list of every scalar;
- warnings are attributed to the caller's line, not to a line inside blamejax;
- the noise-address tags of `bj.noise` are distinct.
"""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import blamejax as bj


# -- a table over parents without `given=` -----------------------------------------------------
def _forgot_given(ctx, case):
    a = ctx.choose("a", case["a"])
    b = ctx.choose("b", case["b"])  # a [V, K_parent, K] table: given=a is missing
    return b.take(case["score"]) + 0.0 * a.take(case["score"][:3])


def test_table_without_given_says_given_is_missing():
    cases = dict(
        a=np.zeros((1, 2, 3), np.float32),
        b=np.zeros((1, 2, 3, 4), np.float32),
        score=np.zeros((1, 4), np.float32),
    )
    with pytest.raises(ValueError) as info:
        bj.exact_blame(_forgot_given, cases, bj.recorded_worlds(0, range(1)))
    message = str(info.value)
    assert "logits of step 'b' must have shape [V, K]" in message  # the shape error is kept
    assert "got shape (2, 3, 4)" in message
    assert "`given=`" in message  # and the hint names what is missing
    assert "[V, K_parent, K]" in message


def test_table_with_too_few_parents_says_so():
    def pipeline(ctx, case):
        a = ctx.choose("a", case["a"])
        return ctx.choose("b", case["b"], given=a).take(case["score"])

    cases = dict(
        a=np.zeros((1, 2, 3), np.float32),
        b=np.zeros((1, 2, 3, 3, 4), np.float32),
        score=np.zeros((1, 4), np.float32),
    )
    with pytest.raises(ValueError, match=r"2 parent axes.*`given=` names 1"):
        bj.discover(pipeline, {k: v[0] for k, v in cases.items()})


# -- Python lists as case leaves ---------------------------------------------------------------
def _one_step(ctx, case):
    return ctx.choose("a", case["a"]).take(jnp.ones((2,), jnp.float32))


@pytest.mark.parametrize(
    "call",
    [
        lambda cases: bj.exact_blame(_one_step, cases, bj.recorded_worlds(0, range(2))),
        lambda cases: bj.replay(_one_step, cases, bj.recorded_worlds(0, range(2))),
        lambda cases: bj.blame_batch(_one_step, cases, 0),
    ],
    ids=["exact_blame", "replay", "blame_batch"],
)
def test_python_list_leaf_is_named_by_its_path(call):
    cases = {"a": [[[0.0, 1.0], [2.0, 3.0]], [[0.0, 1.0], [2.0, 3.0]]]}
    with pytest.raises(TypeError) as info:
        call(cases)
    message = str(info.value)
    assert (
        "`cases` leaf ['a'] is a Python list; convert it with np.asarray / jnp.asarray" in message
    )
    assert "()" not in message  # no list of the scalars' shapes


def test_python_list_as_the_whole_cases_and_tuple_leaves():
    with pytest.raises(TypeError, match=r"`cases` is a Python list; convert it with np.asarray"):
        bj.replay(_one_step, [[0.0, 1.0], [2.0, 3.0]], bj.recorded_worlds(0, range(2)))
    cases = {"a": np.zeros((2, 2, 2), np.float32), "b": {"c": (1.0, 2.0)}}
    with pytest.raises(TypeError, match=r"`cases` leaf \['b'\]\['c'\] is a Python tuple"):
        bj.replay(_one_step, cases, bj.recorded_worlds(0, range(2)))


def test_a_list_of_arrays_is_still_a_pytree():
    """A list of arrays that each have the case axis is a pytree like any other."""
    cases = {"a": [np.zeros((2, 2, 2), np.float32)]}
    pipeline = lambda ctx, case: _one_step(ctx, {"a": case["a"][0]})  # noqa: E731
    out = bj.replay(pipeline, cases, bj.recorded_worlds(0, range(2)))
    assert out["score"].shape == (2, 1)


# -- warnings point at the user's line ---------------------------------------------------------
def _always_passes(ctx, case):
    a = ctx.choose("a", case["a"])
    b = ctx.choose("b", case["b"])
    return a.take(jnp.ones((2,), jnp.float32)) * b.take(jnp.ones((2,), jnp.float32))


PASSING = dict(a=np.zeros((1, 2, 2), np.float32), b=np.zeros((1, 2, 2), np.float32))


@pytest.mark.parametrize(
    "estimator",
    [
        lambda: bj.exact_blame(_always_passes, PASSING, bj.recorded_worlds(0, range(1))),
        lambda: bj.mc_shapley(
            _always_passes, PASSING, bj.recorded_worlds(0, range(1)), key=0, max_evaluations=200
        ),
    ],
    ids=["exact_blame", "mc_shapley"],
)
def test_not_a_failure_warning_points_at_the_callers_line(estimator):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator()
    found = [w for w in caught if issubclass(w.category, bj.estimators.NotAFailureWarning)]
    assert found, [str(w.message) for w in caught]
    assert found[0].filename == __file__, found[0].filename


def test_user_stacklevel_counts_the_frames_inside_the_package():
    from blamejax._checks import user_stacklevel

    assert user_stacklevel() == 1  # called from outside the package: this very frame


def test_noise_tags_are_distinct():
    """No two random streams of the package share a tag, so no two families of draws meet."""
    tags = bj.noise.TAGS
    assert len(tags) >= 12
    assert len(set(tags.values())) == len(tags), tags
