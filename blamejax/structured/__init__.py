"""Exact blame by structure: for a tabulated pipeline (every draw a table over its parents'
options, the score a table over a few draws' options), Shapley and Banzhaf values from the
game's multilinear extension, a forward recursion over the options, in O(n^2 K^(w+1)) per
failure and world instead of O(n 2^n) (w: the frontier's width; 1 for a chain).
"""

from ._chain import chain_maps as chain_maps
from ._expected_chain import chain_expected_arrays as chain_expected_arrays
from ._graph import Graph as Graph
from ._graph import factor_tables as factor_tables
from ._graph import find_graph as find_graph
from ._graph import read_tables as read_tables
from ._graph import score_table as score_table
from ._graph import site_logits as site_logits
from ._multilinear import Elimination as Elimination
from ._multilinear import SiteOp as SiteOp
from ._multilinear import direct_runs as direct_runs
from ._multilinear import elimination as elimination
from ._multilinear import extension as extension
from ._multilinear import quadrature as quadrature
from ._multilinear import reachable as reachable
from ._multilinear import site_maps as site_maps
from ._plan import structured_plan as structured_plan
from ._transitions import expected_site_maps as expected_site_maps
from ._transitions import observed_logits as observed_logits
from ._transitions import posterior_transition as posterior_transition
from ._transitions import prior_transition as prior_transition
from ._world_blame import WorldBlame as WorldBlame
from ._world_blame import world_blame as world_blame
