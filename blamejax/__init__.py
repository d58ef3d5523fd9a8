"""blamejax: which step of a failed stochastic pipeline is to blame, by counterfactual replay."""

from . import demos as demos
from ._evaluate import coalition_values as coalition_values
from ._evaluate import count_step_evaluations as count_step_evaluations
from ._evaluate import mask_plan as mask_plan
from ._evaluate import mask_values as mask_values
from ._evaluate import plan_values as plan_values
from ._evaluate import run_score as run_score
from ._evaluate import trace_run as trace_run
from ._exact import ExactResult as ExactResult
from ._exact import exact_blame as exact_blame
from ._exact import resolve_players as resolve_players
from ._noise import abduct_gumbels as abduct_gumbels
from ._noise import gumbel_at as gumbel_at
from ._noise import gumbel_max as gumbel_max
from ._noise import stable_hash as stable_hash
from ._noise import uniform_at as uniform_at
from ._noise import world_key as world_key
from ._pipeline import Choice as Choice
from ._pipeline import Context as Context
from ._pipeline import Hard as Hard
from ._pipeline import Plan as Plan
from ._pipeline import Relaxed as Relaxed
from ._pipeline import StepPlan as StepPlan
from ._pipeline import ValuePlan as ValuePlan
from ._pipeline import World as World
from ._pipeline import factual_plan as factual_plan
from ._pipeline import world_noise as world_noise
from ._replay import replay as replay
from ._shapley import Attribution as Attribution
from ._shapley import attribute as attribute
from ._structure import Structure as Structure
from ._structure import discover as discover
from ._worlds import fresh_worlds as fresh_worlds
from ._worlds import inferred_worlds as inferred_worlds
from ._worlds import observed_plan as observed_plan
from ._worlds import recorded_worlds as recorded_worlds

__version__ = "0.1.0"
