"""Synthetic-SCM benchmarks: random pipelines whose culprit is known, and the attribution
methods side by side on them.

```python
import blamejax as bj
from blamejax import scm

model = scm.make_scm(0, num_steps=8)                      # a random chain, K = 4 options
failures = scm.inject_errors(1, model, num_failures=500)  # golden culprits by injection
print(failures.summary())                                 # counts and rejection rate
result = bj.exact_blame(model.pipeline, failures.cases, failures.worlds)
report = scm.single_culprit_benchmark(2, model, 500)      # every method, with intervals
print(scm.results_markdown([report]))
```
"""

from ._attribution_bench import agent_hits as agent_hits
from ._attribution_bench import compare_methods as compare_methods
from ._attribution_bench import culprit_hits as culprit_hits
from ._attribution_bench import proportion as proportion
from ._attribution_bench import split_error as split_error
from ._attribution_bench import step_hits as step_hits
from ._attribution_methods import CREDIT_METHODS as CREDIT_METHODS
from ._attribution_methods import METHODS as METHODS
from ._attribution_methods import MethodComparison as MethodComparison
from ._attribution_methods import method_label as method_label
from ._attribution_methods import top_step as top_step
from ._attribution_report import multi_culprit_benchmark as multi_culprit_benchmark
from ._attribution_report import results_markdown as results_markdown
from ._attribution_report import single_culprit_benchmark as single_culprit_benchmark
from ._scm import KINDS as KINDS
from ._scm import SCM as SCM
from ._scm import TOPOLOGIES as TOPOLOGIES
from ._scm import SCMCase as SCMCase
from ._scm import make_scm as make_scm
from ._scm_culprits import MultiCulpritCases as MultiCulpritCases
from ._scm_culprits import multi_culprit_cases as multi_culprit_cases
from ._scm_inject import InjectedFailures as InjectedFailures
from ._scm_inject import inject_errors as inject_errors
