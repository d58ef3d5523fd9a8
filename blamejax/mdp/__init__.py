"""MDP rollouts: an episode of a Markov decision process as a pipeline, and counterfactual
rollouts of it under noise abducted from an observed episode.
"""

from ._episode import MDPEpisode as MDPEpisode
from ._episode import mdp_pipeline as mdp_pipeline
from ._episode import mdp_policy_plan as mdp_policy_plan
from ._rollouts import CounterfactualRollouts as CounterfactualRollouts
from ._rollouts import counterfactual_rollouts as counterfactual_rollouts
