"""The synthetic-SCM benchmark: random pipelines whose culprit is known, and the attribution
methods side by side on them.

```python
# doctest: slow (compiles every method of the benchmark, about 30 s)
import blamejax as bj
from blamejax.benchmarks import scm

model = scm.make_scm(0, num_steps=6)                     # a random chain, K = 4 options
failures = scm.inject_errors(1, model, num_failures=50)  # golden culprits by injection
print(failures.summary())                                # counts and rejection rate
result = bj.exact_blame(model.pipeline, failures.cases, failures.worlds)
report = scm.single_culprit_benchmark(2, model, 50, num_rollouts=20)  # every method, with intervals
print(scm.results_markdown([report]))
```
"""

from .._rates import proportion as proportion
from ._compare import compare_methods as compare_methods
from ._culprits import MultiCulpritCases as MultiCulpritCases
from ._culprits import multi_culprit_cases as multi_culprit_cases
from ._inject import InjectedFailures as InjectedFailures
from ._inject import inject_errors as inject_errors
from ._methods import CREDIT_METHODS as CREDIT_METHODS
from ._methods import METHODS as METHODS
from ._methods import MethodComparison as MethodComparison
from ._methods import method_label as method_label
from ._methods import top_step as top_step
from ._metrics import agent_hits as agent_hits
from ._metrics import culprit_hits as culprit_hits
from ._metrics import split_error as split_error
from ._metrics import step_hits as step_hits
from ._model import KINDS as KINDS
from ._model import SCM as SCM
from ._model import TOPOLOGIES as TOPOLOGIES
from ._model import SCMCase as SCMCase
from ._model import make_scm as make_scm
from ._report import multi_culprit_benchmark as multi_culprit_benchmark
from ._report import results_markdown as results_markdown
from ._report import single_culprit_benchmark as single_culprit_benchmark
