"""From runs to blame (`_blame.py`: cases, pipeline and estimators) and its read-out in the
terms of a multi-agent run (`_readout.py`: who, when, the earliest repair)."""

from ._blame import blame_runs as blame_runs
from ._blame import group_runs as group_runs
from ._readout import readout as readout
