"""Writing a pipeline and running one plan of it: the context a pipeline draws through
(`ctx.choose`, `ctx.deterministic`), the plans that say what each step does in a run, the
structure found by tracing the pipeline once, and single runs, scores and traces.
"""

from ._choice import Choice as Choice
from ._choice import check_choose_args as check_choose_args
from ._context import Context as Context
from ._context import World as World
from ._context import world_noise as world_noise
from ._draws import hard_argmax as hard_argmax
from ._modes import Hard as Hard
from ._modes import Relaxed as Relaxed
from ._plans import DOWNSTREAM as DOWNSTREAM
from ._plans import Plan as Plan
from ._plans import StepPlan as StepPlan
from ._plans import ValuePlan as ValuePlan
from ._plans import after_step as after_step
from ._plans import coalition_plan as coalition_plan
from ._plans import downstream_plan as downstream_plan
from ._plans import factual_plan as factual_plan
from ._plans import full_plan as full_plan
from ._plans import mask_plan as mask_plan
from ._plans import observed_plan as observed_plan
from ._plans import scalar_index as scalar_index
from ._plans import set_step as set_step
from ._plans import stack_plans as stack_plans
from ._plans import start_of as start_of
from ._plans import step_of_site as step_of_site
from ._run import plan_values as plan_values
from ._run import run_score as run_score
from ._run import trace_arrays as trace_arrays
from ._run import trace_run as trace_run
from ._structure import Site as Site
from ._structure import Structure as Structure
from ._structure import ValueSite as ValueSite
from ._structure import check_finite_logits as check_finite_logits
from ._structure import discover as discover
from ._structure import discover_batch as discover_batch
from ._structure import one_case as one_case
