"""The reduction: a coalition table to Shapley values, Banzhaf, fix-alone, leave-one-out and
pairwise interactions, computed without a dense 2^n x n matrix.
"""

from ._sampling import SamplingVariance as SamplingVariance
from ._sampling import sampling_variance as sampling_variance
from ._shapley import Attribution as Attribution
from ._shapley import attribute as attribute
from ._shapley import interaction_weights as interaction_weights
from ._shapley import marginal_size_sums as marginal_size_sums
from ._shapley import shapley_weights as shapley_weights
