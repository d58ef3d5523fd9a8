"""The estimators: exact blame over every coalition, Monte Carlo Shapley with anytime
intervals, and batch blame over a test set.
"""

from .._checks import NotAFailureWarning as NotAFailureWarning
from ._batch import blame_batch as blame_batch
from ._batch_checks import NOISE_MODES as NOISE_MODES
from ._checkpoint import CheckpointError as CheckpointError
from ._exact import exact_blame as exact_blame
from ._mc import mc_shapley as mc_shapley
from ._permutation import MCEstimate as MCEstimate
from ._permutation import mc_shapley_fixed as mc_shapley_fixed
from ._prefixes import scored_prefixes as scored_prefixes
from ._results import BatchResult as BatchResult
from ._results import ExactResult as ExactResult
from ._results import MCHistory as MCHistory
from ._results import MCResult as MCResult
