"""The Who&When benchmark: how often a method names the decisive agent and the decisive step
of failed multi-agent runs with golden labels, beside offline baselines.

The runs come from `bj.traces` (`load_runs` reads a blamejax trace or Who&When's own logs);
a method's answers are `Prediction`s, scored by `evaluate` under the rules stated in
docs/traces.md; `whowhen_report` is the table of `python -m blamejax whowhen PATH`.

```python
import blamejax as bj
from blamejax.benchmarks import whowhen
from blamejax.traces import Run, Step

runs = [Run(run="r0", steps=(Step("s0", agent="A"), Step("s1", agent="B")), passed=False,
            decisive_agent="B", decisive_step=1)]
rows = whowhen.baselines(runs)                 # random, first step, last step, most frequent agent
print(whowhen.evaluation_table(rows))
```
"""

from ._baselines import baseline_predictions as baseline_predictions
from ._baselines import baselines as baselines
from ._baselines import random_baseline as random_baseline
from ._evaluate import Evaluation as Evaluation
from ._evaluate import Prediction as Prediction
from ._evaluate import Score as Score
from ._evaluate import check_predictions as check_predictions
from ._evaluate import constant_predictions as constant_predictions
from ._evaluate import evaluate as evaluate
from ._evaluate import load_predictions as load_predictions
from ._method import blame_predictions as blame_predictions
from ._report import evaluation_table as evaluation_table
from ._report import whowhen_report as whowhen_report
