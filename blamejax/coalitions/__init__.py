"""Coalitions: the score of every subset of the players' fixes in one world (prefix-shared
nested `vmap`), of arbitrary masks, and the last-step baseline.
"""

from ..pipeline import coalition_plan as coalition_plan
from ..pipeline import mask_plan as mask_plan
from ._tables import coalition_values as coalition_values
from ._tables import count_step_evaluations as count_step_evaluations
from ._tables import explain_nan_score as explain_nan_score
from ._tables import last_step_blame as last_step_blame
from ._tables import mask_values as mask_values
