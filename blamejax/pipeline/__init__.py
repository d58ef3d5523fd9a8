"""Writing a pipeline and running one plan of it: the context a pipeline draws through
(`ctx.choose`, `ctx.deterministic`), the plans that say what each step does in a run, the
structure found by tracing the pipeline once, and single runs, scores and traces.
"""

from ._context import Choice as Choice
from ._context import Context as Context
from ._context import Hard as Hard
from ._context import Relaxed as Relaxed
from ._context import World as World
from ._context import check_choose_args as check_choose_args
from ._context import world_noise as world_noise
from ._draws import hard_argmax as hard_argmax
from ._plans import Plan as Plan
from ._plans import StepPlan as StepPlan
from ._plans import ValuePlan as ValuePlan
from ._plans import factual_plan as factual_plan
from ._run import plan_values as plan_values
from ._run import run_score as run_score
from ._run import trace_run as trace_run
from ._structure import Site as Site
from ._structure import Structure as Structure
from ._structure import ValueSite as ValueSite
from ._structure import check_finite_logits as check_finite_logits
from ._structure import discover as discover
from ._structure import discover_batch as discover_batch
from ._structure import one_case as one_case
