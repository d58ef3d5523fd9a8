"""The luck: addressed Gumbel noise. Every random number is a pure function of its address
(root key, world, step, draw slot, option), so switching one step to its fix never shifts
another step's noise.
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
from ._gumbel import uniform_at as uniform_at
from ._gumbel import world_key as world_key
