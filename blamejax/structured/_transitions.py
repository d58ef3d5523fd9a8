"""Transition matrices: a tabulated draw's option in expectation over its noise.

In one world a draw is a map from its parents' options to its own option. Averaged over the
world's Gumbels it becomes a transition matrix `T[parents, c]`:

- interventional (fresh noise): `T = softmax(logits[parents])`;
- counterfactual (the Gumbels' posterior given the observed run, Oberst & Sontag 2019):
  `T[parents, c] = P(argmax(a + g) = c | argmax(b + g) = o)` with `a = logits[parents]`, `b`
  the logits the draw saw in the observed run and `o` its observed option
  (`posterior_transition`, in closed form).

Both are smooth functions of the logits, so blame computed with them has exact gradients.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

BIG = 1e4  # stands for an infinite logit difference (an option impossible in one run only)
CLIP = 60.0  # exp arguments past this give a probability below e^-60: clipped, not overflowed


def prior_transition(table):
    """`softmax` over the last axis; a row with no finite logit gives zeros (no valid
    option, as `hard_argmax`'s -1)."""
    finite = jnp.isfinite(table)
    safe = jnp.where(finite, table, -jnp.inf)
    any_finite = finite.any(-1, keepdims=True)
    probs = jax.nn.softmax(jnp.where(any_finite, safe, 0), axis=-1)
    return jnp.where(any_finite & finite, probs, 0)


def posterior_transition(a, b, o):
    """`P(argmax(a + g) = c | argmax(b + g) = o)` for every option c, with `g` i.i.d.
    Gumbel(0): `[K]` for `a`, `b` `[K]` and the observed option `o` (`b[o]` finite).

    Derivation. Write `Y = b + g`, `d = a - b`, `s` a value of `a + g` relative to
    `M = Y_o = max Y ~ Gumbel(log Z)`, `Z = sum exp(b)`. Given the observation, `Y_k` for
    `k != o` is Gumbel(b_k) truncated below M, independently. Option c wins with
    `a_c + g_c = M + s`, `s` in `(d_o, d_c)`, when every other `a_k + g_k < M + s`; that
    probability is 1 for `d_k <= s` and `F_k(M + s - d_k) / F_k(M)` otherwise. On a piece
    of `s` between consecutive values of `d`, with `U` the options `k != o` with `d_k > s`,
    the integrand is `exp(a_c - M - s) exp(-e^-M (e^-s A_U - B_U))` (`A_U`, `B_U` the sums of
    `exp(a_k)`, `exp(b_k)` over U), whose integral in s is closed form, and
    `E_M exp(-e^-M D) = Z / (Z + D)` (`e^-M Z` is Exp(1)). So

        T[c] = sum over pieces in (d_o, d_c) of exp(a_c) / A_U (H_U(hi) - H_U(lo)),
        T[o] = H_U(d_o),  H_U(s) = Z / (Z + sum_{k in U} (exp(a_k - s) - exp(b_k))).

    No quadrature: exact up to rounding and differentiable in `a` and `b`. An option with
    `a_k = -inf` never wins; one with `b_k = -inf` (impossible in the observed run) keeps its
    prior noise."""
    num = a.shape[-1]
    va, vb = jnp.isfinite(a), jnp.isfinite(b)
    m = jnp.max(jnp.where(vb, b, -jnp.inf))
    m = jnp.where(jnp.isfinite(m), m, 0)
    bs = jnp.where(vb, b - m, 0)
    as_ = jnp.where(va, jnp.minimum(a - m, CLIP), 0)
    eb = jnp.where(vb, jnp.exp(bs), 0)
    ea = jnp.where(va, jnp.exp(as_), 0)
    Z = eb.sum()
    d = jnp.where(va & vb, as_ - bs, jnp.where(va, BIG, -BIG))
    o = jnp.asarray(o, jnp.int32)
    other = jnp.arange(num, dtype=jnp.int32) != o
    candidate = va & other  # the options that can be in U

    def h(s, inside):
        """`H_U(s)` for the options `inside` (`[K]` bool), with `d_k >= s` on them."""
        gap = jnp.where(inside, jnp.clip(d - s, 0, CLIP), 0)
        lift = jnp.where(inside, jnp.minimum(as_ - s, CLIP), 0)
        term = jnp.where(vb, eb * jnp.expm1(gap), jnp.exp(lift))
        return Z / (Z + jnp.where(inside, term, 0).sum())

    d_o = d[o]
    p = jnp.sort(d)
    lo, hi = p[:-1], p[1:]  # K - 1 pieces
    inside = candidate[None, :] & (d[None, :] >= hi[:, None])  # [K-1, K]
    gain = jax.vmap(h)(hi, inside) - jax.vmap(h)(lo, inside)  # [K-1]
    total_a = jnp.where(inside, ea[None, :], 0).sum(1)
    active = (lo >= d_o) & (hi > lo) & (total_a > 0)
    share = (
        jnp.where(active[:, None] & inside, ea[None, :], 0) / jnp.where(active, total_a, 1)[:, None]
    )
    probs = (share * gain[:, None]).sum(0)
    stay = jnp.where(va[o], h(d_o, candidate & (d >= d_o)), 0)
    return jnp.where(other, probs, stay)


def posterior_table(table, b, o):
    """`posterior_transition` for every row of `table` (`[..., K]`); rows with no finite
    logit give zeros."""
    shape = table.shape
    rows = table.reshape(-1, shape[-1])
    out = jax.vmap(posterior_transition, in_axes=(0, None, None))(rows, b, o)
    any_finite = jnp.isfinite(rows).any(-1, keepdims=True)
    return jnp.where(any_finite, out, 0).reshape(shape)


def expected_site_maps(structure, graph, logits, observed=None) -> tuple:
    """Every site's transition tensor `[V, *K_parents, K]` (in place of `site_maps`' maps):
    `prior_transition` of its table, or, given `observed` (`Int[Array, "sites"]`, the
    observed run's options), the posterior transition given that the site chose
    `observed[site]` from the factual row of its observed parents. Sites whose tables share
    a shape are computed together (one `vmap`), so the program does not grow with n."""
    dtype = jnp.result_type(float)
    del structure  # the sites' order is the logits' order
    groups: dict = {}
    for s, table in enumerate(logits):
        groups.setdefault((table.shape, len(graph.parents[s])), []).append(s)
    out: list = [None] * len(logits)
    for (_shape, num_parents), sites in groups.items():
        tables = jnp.stack([logits[s].astype(dtype) for s in sites])  # [G, V, *K_p, K]
        if observed is None:
            trans = prior_transition(tables)
        else:
            index = np.asarray(sites)
            parents = (
                jnp.stack([jnp.stack([observed[p] for p in graph.parents[s]]) for s in sites])
                if num_parents
                else jnp.zeros((len(sites), 0), jnp.int32)
            )
            rows = jnp.arange(len(sites))
            seen = tables[(rows, 0) + tuple(parents[:, k] for k in range(num_parents))]
            trans = jax.vmap(posterior_table)(tables, seen, observed[index])
        for g, s in enumerate(sites):
            out[s] = trans[g]
    return tuple(out)


def observed_logits(graph, logits, observed):
    """The logit of each site's observed option in the observed run (`[sites]`): -inf
    means the observation is impossible."""
    return jnp.stack(
        [
            table[0][tuple(observed[p] for p in graph.parents[s])][observed[s]]
            for s, table in enumerate(logits)
        ]
    )
