"""Decisions on runs: declared after the fact (`_declare.py`, with its error when nothing
matched in `_nothing.py`), read from the log-probabilities a model call kept
(`_logprobs.py`), or recorded in the user's own code as span attributes (`_record.py`)."""
