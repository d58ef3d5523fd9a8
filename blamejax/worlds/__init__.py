"""The worlds a failure is replayed in: its recorded noise, fresh noise, or noise inferred
(abducted) from the observed choices, or all worlds integrated (`expected_worlds`); replaying cases under them, and how faithfully a
replay reproduces a record.
"""

from ..pipeline import observed_plan as observed_plan
from ._expected import ExpectedWorlds as ExpectedWorlds
from ._expected import expected_worlds as expected_worlds
from ._fidelity import ReplayFidelity as ReplayFidelity
from ._fidelity import replay_fidelity as replay_fidelity
from ._replay import replay as replay
from ._worlds import fresh_worlds as fresh_worlds
from ._worlds import inferred_worlds as inferred_worlds
from ._worlds import recorded_worlds as recorded_worlds
