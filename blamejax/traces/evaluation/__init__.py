"""The Who&When evaluation (`_evaluate.py`): how often a method names the decisive agent and
step of labelled runs, beside offline baselines."""
