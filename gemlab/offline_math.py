"""GEM's math env on word problems made on this machine, so GEM's math examples run offline.

GEM's ``math:*`` ids (``math:Math12K``, ``math:DeepScaleR40K``, ...) are its ``MathEnv`` on a data
set it loads from the Hugging Face hub. ``MathEnv`` also takes the data set itself (its ``dataset``
argument, which GEM's ``tinker_train.py`` uses to share the first env's questions with the rest), so
``WordProblemMathEnv`` is ``MathEnv`` given grade-school word problems with integer answers from
reasoning-gym's ``gsm_symbolic`` generator (GSM8K problems as templates with fresh numbers; GEM
installs reasoning-gym for its ``rg:*`` envs), made from ``data_seed`` and held in memory. Grading,
shuffling and the tool wrappers are GEM's. ``gemlab.env_variants`` registers it as ``math:GSMSymbolic``.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import reasoning_gym
from datasets import Dataset
from gem.envs.math_env import MathEnv

INTEGER = re.compile(r"-?[0-9]+")


def word_problems(size: int = 10_000, seed: int = 0) -> Dataset:
    """``size`` word problems, the same for the same ``seed``, in ``MathEnv``'s columns:
    ``problem`` (the question) and ``answer`` (an integer, as text). The generator's rare
    non-integer answers (one template of ~85 makes some: 14 in 10,000) are left out."""
    generated = reasoning_gym.create_dataset("gsm_symbolic", size=2 * size, seed=seed)
    items = list(itertools.islice((item for item in generated if INTEGER.fullmatch(item["answer"])), size))
    return Dataset.from_dict(
        {"problem": [item["question"] for item in items], "answer": [item["answer"] for item in items]}
    )


class WordProblemMathEnv(MathEnv):
    """``MathEnv`` on ``word_problems(size, data_seed)`` unless given a ``dataset``; ``seed`` and the
    other arguments are ``MathEnv``'s (``seed`` shuffles the order, ``use_mp`` picks how answers are graded)."""

    def __init__(self, dataset: Dataset | None = None, size: int = 10_000, data_seed: int = 0, **kwargs: Any) -> None:
        super().__init__(dataset=word_problems(size, data_seed) if dataset is None else dataset, **kwargs)
