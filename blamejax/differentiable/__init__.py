"""Differentiable blame: Shapley values in relaxed mode as a function of the fixes' logits,
and fitting fixes with optax.
"""

from ._fit import FitResult as FitResult
from ._fit import batch_mean_shapley as batch_mean_shapley
from ._fit import fit_fixes as fit_fixes
from ._fit import shapley_values as shapley_values
from ._fit import total_repair as total_repair
