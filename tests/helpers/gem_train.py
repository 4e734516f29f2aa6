"""GEM's ``examples/train_tinker/tinker_train.py``, unchanged (``tests/fixtures/gem/``): where it is,
the flags that make it small, and its printed metrics read back."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "gem" / "tinker_train.py"
UPSTREAM_BLOB = "985d91c8057092539afd16acce2615845268387f"  # git blob id of the file at axon-rl/gem 4069f2f
MODEL = "Qwen/Qwen3-8B-Base"  # the script's default model_name
# Its own flags: GEM's game with its game template, 2 steps of 8 transitions, short actions, and a
# state checkpoint at step 1 (checkpoints.jsonl).
ARGS = [
    "env_id=game:GuessTheNumber-v0-easy", "template=qwen3_game", "num_env=4", "batch_size=8",
    "max_tokens=16", "max_steps=2", "lora_rank=8", "save_every=1",
]
ENV = {"WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}  # no wandb account, no hub
_METRIC = re.compile(r"'([^']+)': (?:np\.float64\()?(-?[0-9.]+(?:e[-+]?[0-9]+)?|nan)")


def script_is_upstreams() -> bool:
    """Whether the copy is still GEM's file byte for byte (git's blob hash of it)."""
    data = SCRIPT.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == UPSTREAM_BLOB


def step_metrics(stdout: str) -> list[dict[str, float]]:
    """The metrics dict the script pretty-prints after each step, one per step."""
    blocks = re.findall(r"^\{'.*?\}$", stdout, flags=re.MULTILINE | re.DOTALL)
    return [{key: float(value) for key, value in _METRIC.findall(block)} for block in blocks]
