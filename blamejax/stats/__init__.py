"""Statistics: the options the anytime estimators share (`Schedule`, `Interval`), confidence radii (Hoeffding, empirical Bernstein, normal), looks fixed in
advance with their error levels, stopping rules, binomial intervals, and intervals of a
batch mean across failures.
"""

from ._across_failures import FIXED_SAMPLE_METHOD as FIXED_SAMPLE_METHOD
from ._across_failures import INTERVAL_RULES as INTERVAL_RULES
from ._across_failures import BatchIntervals as BatchIntervals
from ._across_failures import batch_intervals as batch_intervals
from ._across_failures import checkpoint_interval as checkpoint_interval
from ._across_failures import clip_interval as clip_interval
from ._across_failures import look_interval as look_interval
from ._across_failures import student_t_interval as student_t_interval
from ._across_failures import top_separated_at as top_separated_at
from ._anytime import RULES as RULES
from ._anytime import bernstein_radius as bernstein_radius
from ._anytime import checkpoint_delta as checkpoint_delta
from ._anytime import checkpoints as checkpoints
from ._anytime import confidence_radius as confidence_radius
from ._anytime import hoeffding_radius as hoeffding_radius
from ._anytime import look_delta as look_delta
from ._anytime import normal_radius as normal_radius
from ._anytime import ranking_separated as ranking_separated
from ._anytime import top1_separated as top1_separated
from ._anytime import widths_below as widths_below
from ._binomial import newcombe_interval as newcombe_interval
from ._binomial import point_of_commitment as point_of_commitment
from ._binomial import wilson_interval as wilson_interval
from ._options import KINDS as KINDS
from ._options import Interval as Interval
from ._options import Schedule as Schedule
from ._options import looks as looks
