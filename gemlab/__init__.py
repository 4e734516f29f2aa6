"""gemlab: train LLM agents with RL on GEM environments through the Tinker API.

The package follows the pipeline, one module per step:
templates -> envs -> episodes -> returns (ReBN) -> datums -> step -> trainer -> plots.
``gemlab/step.py`` is one training step on one screen (``train_step``); ``examples/gem_loop.py`` is GEM's whole
loop in one file without gemlab.
"""

from gemlab.backend import get_service_client
from gemlab.config import Config, make_config
from gemlab.datums import policy_gradient_datum, supervised_datum
from gemlab.envs import make_envs
from gemlab.returns import advantages, discounted_returns, rebn
from gemlab.episodes import Episode, Prompting, RolloutBatch, Transition, collect_batch, collect_episode
from gemlab.templates import TEMPLATES, get_template
from gemlab.trainer import Trainer

__all__ = [
    "Config",
    "Episode",
    "Prompting",
    "RolloutBatch",
    "TEMPLATES",
    "Trainer",
    "Transition",
    "advantages",
    "collect_batch",
    "collect_episode",
    "discounted_returns",
    "get_service_client",
    "get_template",
    "make_config",
    "make_envs",
    "policy_gradient_datum",
    "rebn",
    "supervised_datum",
]
