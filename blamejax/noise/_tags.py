"""The address tags: the one list of constants that keep blamejax's random streams apart.

A tag is folded into a key (`fold_in(key, TAG)`) to open a family of random numbers that no
other family reaches. Every tag the package folds in is named here, once; a new stream gets
its tag here, distinct from all of these (tests/test_messages.py checks it). The values are
part of every result's noise: changing one changes the numbers.
"""

from __future__ import annotations

# Tags folded into a world's or a failure's key (the families of draws inside it):

GUMBEL_TAG = 0x47554D42  # "GUMB"
"""The Gumbel noise of every draw site of a world (`gumbel_at`, `gumbel_sites`)."""

UNIFORM_TAG = 0x554E4946  # "UNIF"
"""Uniform draws at an address (`uniform_at`)."""

FRESH_TAG = 0x46524553  # "FRES"
"""The fresh noise streams of re-draws inside a world (`fresh_key`, `do_resample`)."""

ABDUCT_TAG = 0x41424455  # "ABDU"
"""The posterior noise abducted from observed choices (`abduction_key`, `inferred_worlds`)."""

TEXT_TAG = 0x54455854  # "TEXT"
"""The seeds of free-text steps (`text_key`, `bj.scorers.text_seed`)."""

PERM_TAG = 0x5045524D  # "PERM"
"""The random step orders of Monte Carlo Shapley, folded into a failure's key (`order_seed`)."""

# Tags folded into a root key (the streams of one call, beside the cases' keys):

VISIT_TAG = 0x0BDE
"""`blame_batch`'s order of visiting the failures (`jax.random.permutation(fold_in(key, VISIT_TAG), F)`)."""

INFERRED_TAG = 0xABD
"""The root key of `blame_batch`'s inferred worlds (`fold_in(key, INFERRED_TAG)`)."""

BATCH_MC_TAG = 0
"""The root of `blame_batch`'s Monte Carlo orders: failure i's key is `fold_in(fold_in(key, 0), i)`."""

RUNS_MC_TAG = 1
"""The key `bj.traces.blame_runs` hands to `mc_shapley` (`fold_in(key, 1)`)."""

FIT_SPLIT_TAG = 0xF17
"""The train/test split of the failures in `bj.demos`' fitting demo."""

NOISE_SHARING_TAG = 0x5EED
"""The random orders of `bj.demos`' noise-sharing comparison."""

TAGS = {name: value for name, value in sorted(globals().items()) if name.endswith("_TAG")}
"""Every tag above, by name (what the distinctness test reads)."""
