"""Single-step interventions (Causal Agent Replay): `do_resample`, `do_action`,
`do_observation`, `do_context`, `do_policy` at a step; the contrastive estimator with its
intervals and the point of commitment; CAR's re-draw Shapley game.
"""

from ..pipeline import DOWNSTREAM as DOWNSTREAM
from ..pipeline import full_plan as full_plan
from ..pipeline import stack_plans as stack_plans
from ..pipeline import step_of_site as step_of_site
from ._contrastive import ContrastiveResult as ContrastiveResult
from ._contrastive import contrastive as contrastive
from ._do import do_action as do_action
from ._do import do_context as do_context
from ._do import do_observation as do_observation
from ._do import do_policy as do_policy
from ._do import do_resample as do_resample
from ._resample import ResampleShapley as ResampleShapley
from ._resample import resample_shapley as resample_shapley
