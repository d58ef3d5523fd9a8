"""Benchmarks of attribution methods: failures whose culprit is known, the methods side by
side on them, and how often each names it.

- `scm`: synthetic causal models whose culprit is known by construction (injected errors,
  and multi-culprit cases with analytic Shapley values); blamejax's estimators beside the
  simpler rules (fix-alone, leave-one-out, first and last differing step, the point of
  commitment, a random guess).
- `whowhen`: real multi-agent runs with golden labels (Who&When), blamejax's answer beside
  the offline baselines.

Both state a method's accuracy the same way: a hit rate with its Wilson score interval
(`proportion`). They were `bj.scm` and part of `bj.traces`, whose names still work.
"""

from . import scm as scm
from . import whowhen as whowhen
from ._rates import proportion as proportion
from ._rates import rate_interval as rate_interval
