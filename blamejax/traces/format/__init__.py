"""The trace format: the rules one record follows (`_check.py`) and the Python data of a run,
its reading, writing and validation (`_format.py`). Every other room of `traces` builds on it."""
