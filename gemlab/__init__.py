"""gemlab: train LLM agents with RL on GEM environments through the Tinker API.

The package follows the pipeline, one module per step:
templates -> envs -> episodes -> returns (ReBN) -> datums -> step -> trainer -> plots.
``gemlab/step.py`` is one training step on one screen (``train_step``); ``examples/gem_loop.py`` is GEM's whole
loop in one file without gemlab.

``import gemlab`` is cheap: each name below is imported from its module when first used (PEP 562),
so ``python -m gemlab.train --help`` and a refused argument never load PyTorch, GEM or the local backend.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import tinker_emulator  # noqa: F401  (sets how PyTorch's threads wait, before anything loads PyTorch: tinker_emulator/openmp.py)

# name -> the module that defines it
_WHERE = {
    "get_service_client": "gemlab.backend",
    "Config": "gemlab.config",
    "make_config": "gemlab.config",
    "policy_gradient_datum": "gemlab.datums",
    "supervised_datum": "gemlab.datums",
    "make_envs": "gemlab.envs",
    "advantages": "gemlab.returns",
    "discounted_returns": "gemlab.returns",
    "rebn": "gemlab.returns",
    "Episode": "gemlab.episodes",
    "Prompting": "gemlab.episodes",
    "RolloutBatch": "gemlab.episodes",
    "Transition": "gemlab.episodes",
    "collect_batch": "gemlab.episodes",
    "collect_episode": "gemlab.episodes",
    "TEMPLATES": "gemlab.templates",
    "get_template": "gemlab.templates",
    "Trainer": "gemlab.trainer",
}

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

if TYPE_CHECKING:
    from gemlab.backend import get_service_client
    from gemlab.config import Config, make_config
    from gemlab.datums import policy_gradient_datum, supervised_datum
    from gemlab.envs import make_envs
    from gemlab.episodes import Episode, Prompting, RolloutBatch, Transition, collect_batch, collect_episode
    from gemlab.returns import advantages, discounted_returns, rebn
    from gemlab.templates import TEMPLATES, get_template
    from gemlab.trainer import Trainer


def __getattr__(name: str) -> Any:
    """Import ``name`` from its module on first use (and keep it here); a submodule's name imports
    it, as ``gemlab.trainer`` worked after a bare ``import gemlab`` when this file imported them all."""
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
    elif not name.startswith("_"):
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise  # the submodule exists and lacks a package
            raise AttributeError(f"module 'gemlab' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'gemlab' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
