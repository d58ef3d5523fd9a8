"""From runs to blame (`_blame.py`: cases, pipeline and estimators) and its read-out in the
terms of a multi-agent run (`_readout.py`: who, when, the earliest repair)."""
