"""Exact attributions from a value table: brute force and the Shapley axioms."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blamejax as bj

attribute = bj.attribute  # compiled once per table length (and `interactions`)


def brute_force(v, n):
    """Textbook definitions, in float64 Python loops."""
    phi, banzhaf, inter = np.zeros(n), np.zeros(n), np.zeros((n, n))
    for i in range(n):
        for S in range(1 << n):
            if S >> i & 1:
                continue
            s = bin(S).count("1")
            w = math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n)
            phi[i] += w * (v[S | 1 << i] - v[S])
            banzhaf[i] += (v[S | 1 << i] - v[S]) / 2 ** (n - 1)
    for i, j in itertools.permutations(range(n), 2):
        for S in range(1 << n):
            if S >> i & 1 or S >> j & 1:
                continue
            s = bin(S).count("1")
            w = math.factorial(s) * math.factorial(n - s - 2) / math.factorial(n - 1)
            inter[i, j] += w * (v[S | 1 << i | 1 << j] - v[S | 1 << i] - v[S | 1 << j] + v[S])
    return phi, banzhaf, inter


@pytest.mark.parametrize("n", range(1, 9))
def test_equals_brute_force_float64(n):
    with jax.enable_x64(True):
        for seed in range(3):
            v = np.random.default_rng([n, seed]).normal(size=1 << n)
            out = attribute(jnp.asarray(v, jnp.float64), interactions=True)
            phi, banzhaf, inter = brute_force(v, n)
            np.testing.assert_allclose(out.shapley, phi, rtol=0, atol=1e-12)
            np.testing.assert_allclose(out.banzhaf, banzhaf, rtol=0, atol=1e-12)
            np.testing.assert_allclose(out.interactions, inter, rtol=0, atol=1e-12)
            bits = 1 << np.arange(n)
            np.testing.assert_allclose(out.fix_alone, v[bits] - v[0], atol=1e-12)
            np.testing.assert_allclose(
                out.leave_one_out, v[-1] - v[(1 << n) - 1 - bits], atol=1e-12
            )


def _swap(S, i, j):
    bi, bj_ = S >> i & 1, S >> j & 1
    return S & ~(1 << i) & ~(1 << j) | bj_ << i | bi << j


@pytest.mark.parametrize("n", range(1, 11))
def test_axioms(n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        v = rng.normal(size=1 << n)
        w = rng.normal(size=1 << n)
        phi = np.asarray(attribute(jnp.asarray(v, jnp.float32), interactions=False).shapley)
        # efficiency
        np.testing.assert_allclose(phi.sum(), v[-1] - v[0], atol=1e-5)
        # linearity
        a, b = rng.normal(size=2)
        mix = np.asarray(
            attribute(jnp.asarray(a * v + b * w, jnp.float32), interactions=False).shapley
        )
        phi_w = np.asarray(attribute(jnp.asarray(w, jnp.float32), interactions=False).shapley)
        np.testing.assert_allclose(mix, a * phi + b * phi_w, atol=1e-5)
        if n >= 2:
            # symmetry: make steps i and j interchangeable
            i, j = rng.choice(n, 2, replace=False)
            sym = np.array([v[S] + v[_swap(S, i, j)] for S in range(1 << n)])
            phi_s = np.asarray(attribute(jnp.asarray(sym, jnp.float32), interactions=False).shapley)
            assert abs(phi_s[i] - phi_s[j]) < 1e-5
            assert abs(phi_s[i]) > 1e-3  # not a trivial instance
            # null player: v does not depend on step k
            k = int(rng.integers(n))
            null = np.array([v[S & ~(1 << k)] for S in range(1 << n)])
            phi_n = np.asarray(
                attribute(jnp.asarray(null, jnp.float32), interactions=False).shapley
            )
            assert abs(phi_n[k]) < 1e-6
            assert np.abs(phi_n).max() > 1e-3


@pytest.fixture
def split_from(monkeypatch):
    """Set the size from which the reduction splits the steps in two halves. `attribute` is
    compiled once per table length and reads the setting while tracing, so its compiled
    programs are dropped whenever the setting changes, and again after the test."""

    def set_split_from(value):
        monkeypatch.setattr(bj.reduction._shapley, "_SPLIT_FROM", value)
        attribute.clear_cache()

    yield set_split_from
    monkeypatch.undo()
    attribute.clear_cache()


@pytest.mark.parametrize("n", range(2, 9))
def test_split_reduction_equals_brute_force_float64(n, split_from):
    """The two-halves reduction used from n = 18 on, forced at small n."""
    split_from(2)
    with jax.enable_x64(True):
        for seed in range(3):
            v = np.random.default_rng([n, seed, 7]).normal(size=1 << n)
            out = attribute(jnp.asarray(v, jnp.float64), interactions=False)
            phi, banzhaf, _ = brute_force(v, n)
            np.testing.assert_allclose(out.shapley, phi, rtol=0, atol=1e-12)
            np.testing.assert_allclose(out.banzhaf, banzhaf, rtol=0, atol=1e-12)


def test_split_reduction_equals_divide_and_conquer_at_n18(split_from):
    v = np.random.default_rng(18).normal(size=1 << 18)
    with jax.enable_x64(True):
        split_from(18)
        split = np.asarray(attribute(jnp.asarray(v), interactions=False).shapley)
        split_from(99)
        pairwise = np.asarray(attribute(jnp.asarray(v), interactions=False).shapley)
    np.testing.assert_allclose(split, pairwise, rtol=0, atol=1e-12)
    assert not np.array_equal(split, pairwise)  # two programs, not one compiled twice


@pytest.mark.parametrize("n", [12, 16, 20, pytest.param(24, marks=pytest.mark.slow)])
def test_float32_close_to_float64(n):
    """Pairwise grouping (and, from n = 18, the two-halves split) keeps float32 within
    1e-6 of float64 on non-trivial tables."""
    v = np.random.default_rng(n).uniform(size=1 << n)
    phi32 = np.asarray(attribute(jnp.asarray(v, jnp.float32), interactions=False).shapley)
    with jax.enable_x64(True):
        phi64 = np.asarray(
            attribute(jnp.asarray(v.astype(np.float32), jnp.float64), interactions=False).shapley
        )
    assert np.unique(np.round(phi64, 9)).size == n  # distinct values
    np.testing.assert_allclose(phi32, phi64, rtol=0, atol=1e-6)


def test_weights_are_exact():
    w = bj.reduction._shapley.shapley_weights(30)
    assert (
        w[0] == 1 / 30
        and abs(w.sum() * 30 - sum(1 / math.comb(29, s) for s in range(30)) * 1) < 1e-12
    )
    assert np.all(w > 0)


def test_bad_length():
    with pytest.raises(ValueError, match="length 2\\*\\*n"):
        bj.attribute(jnp.zeros(6))
