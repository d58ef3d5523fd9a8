"""The luck: addressed Gumbel noise. Every random number is a pure function of its address
(root key, world, step, draw slot, option), so switching one step to its fix never shifts
another step's noise.

The noise does not depend on the precision mode: every Gumbel and uniform is drawn in float32
(32 random bits, as `jax.random` draws it in float32) and cast to the default float dtype, so
the same seed and case ids give the same worlds with and without `jax_enable_x64`, the
Gumbels equal and the posterior (abducted) ones equal up to rounding.

The address tags (`GUMBEL_TAG`, `PERM_TAG`, ...) that keep the streams apart are listed once,
in `blamejax/noise/_tags.py`, and exported here.
"""

from ._gumbel import abduct_gumbels as abduct_gumbels
from ._gumbel import abduction_key as abduction_key
from ._gumbel import as_key as as_key
from ._gumbel import fold_in as fold_in
from ._gumbel import fresh_key as fresh_key
from ._gumbel import gumbel_at as gumbel_at
from ._gumbel import gumbel_max as gumbel_max
from ._gumbel import gumbel_sites as gumbel_sites
from ._gumbel import stable_hash as stable_hash
from ._gumbel import text_key as text_key
from ._gumbel import uniform_at as uniform_at
from ._gumbel import world_key as world_key
from ._tags import ABDUCT_TAG as ABDUCT_TAG
from ._tags import BATCH_MC_TAG as BATCH_MC_TAG
from ._tags import FIT_SPLIT_TAG as FIT_SPLIT_TAG
from ._tags import FRESH_TAG as FRESH_TAG
from ._tags import GUMBEL_TAG as GUMBEL_TAG
from ._tags import INFERRED_TAG as INFERRED_TAG
from ._tags import NOISE_SHARING_TAG as NOISE_SHARING_TAG
from ._tags import PERM_TAG as PERM_TAG
from ._tags import RUNS_MC_TAG as RUNS_MC_TAG
from ._tags import TAGS as TAGS
from ._tags import TEXT_TAG as TEXT_TAG
from ._tags import UNIFORM_TAG as UNIFORM_TAG
from ._tags import VISIT_TAG as VISIT_TAG
