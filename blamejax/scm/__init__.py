"""Moved: the synthetic-SCM benchmark is `blamejax.benchmarks.scm` now, beside the Who&When
benchmark. Every name of it still works from here (`bj.scm.make_scm`, ...)."""

from ..benchmarks.scm import CREDIT_METHODS as CREDIT_METHODS
from ..benchmarks.scm import KINDS as KINDS
from ..benchmarks.scm import METHODS as METHODS
from ..benchmarks.scm import SCM as SCM
from ..benchmarks.scm import TOPOLOGIES as TOPOLOGIES
from ..benchmarks.scm import InjectedFailures as InjectedFailures
from ..benchmarks.scm import MethodComparison as MethodComparison
from ..benchmarks.scm import MultiCulpritCases as MultiCulpritCases
from ..benchmarks.scm import SCMCase as SCMCase
from ..benchmarks.scm import agent_hits as agent_hits
from ..benchmarks.scm import compare_methods as compare_methods
from ..benchmarks.scm import culprit_hits as culprit_hits
from ..benchmarks.scm import inject_errors as inject_errors
from ..benchmarks.scm import make_scm as make_scm
from ..benchmarks.scm import method_label as method_label
from ..benchmarks.scm import multi_culprit_benchmark as multi_culprit_benchmark
from ..benchmarks.scm import multi_culprit_cases as multi_culprit_cases
from ..benchmarks.scm import proportion as proportion
from ..benchmarks.scm import results_markdown as results_markdown
from ..benchmarks.scm import single_culprit_benchmark as single_culprit_benchmark
from ..benchmarks.scm import split_error as split_error
from ..benchmarks.scm import step_hits as step_hits
from ..benchmarks.scm import top_step as top_step
