"""GEM's Tinker README examples, typed as the README types them, run offline through GEM's unmodified
``tinker_train.py`` under ``python -m tinker_emulator`` (sizes made small, the hub's math data sets
replaced by ``math:GSMSymbolic``, made on this machine by gemlab/offline_math.py).

Each run must finish two steps and print finite metrics for both; the printed episodes must show the
env, template and wrappers the command names. The python-tool example cannot show a tool call: the
stand-in policy (gemlab/tiny-chat) never writes code. It shows that GEM's tool wrapper and
``concat_chat`` are in the path (the prompt is a chat carrying the tool's instructions);
tests/test_offline_math.py runs the tool on code through the same wrappers.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemlab.env_ids import OFFLINE_MATH
from tests.helpers import gem_train

# GEM's README (examples/train_tinker/README.md, "Using Tinker"), word for word, plus the script's default env
# (rg:simple_equations, also the README's reasoning-gym example for tinker-cookbook).
README = {
    "math": "model_name=Qwen/Qwen3-8B-Base env_id=math:DeepScaleR40K num_env=128 max_tokens=8192",
    "math_python_tool": "env_id=math:Math12K num_env=128 max_tokens=2048 template=no "
    "model_name=meta-llama/Llama-3.1-8B-Instruct "
    "env_wrappers=python_tool_no_int_reward_last_line_error,concat_chat gamma=1",
    "sudoku": "model_name=Qwen/Qwen3-8B-Base num_env=64 env_id=game:Sudoku-v0-easy max_tokens=1024 "
    "template=qwen3_game model_name=Qwen/Qwen3-8B-Base env_wrappers=concat",
    "simple_equations": "env_id=rg:simple_equations model_name=Qwen/Qwen3-8B-Base",
}
SMALL = {"num_env": "4", "max_tokens": "32"}  # replaced where the command sets them
EXTRA = ["batch_size=4", "max_steps=2"]  # the script's defaults are 128 transitions a step, 200 steps
OFFLINE = {"math:DeepScaleR40K": OFFLINE_MATH, "math:Math12K": OFFLINE_MATH}  # hub data sets -> made here
METRICS = {
    "step",
    "sampler/episode_return",
    "sampler/num_episodes",
    "sampler/token_entropy",
    "train/kl_sample_train_v1",
    "train/loss:sum",
}
# what each run's printed episodes must show: its env's text, its template's or its wrappers'
SHOWN = {
    "math": ["<|im_start|>user\nQuestion: ", "Give the result as your final answer"],
    "math_python_tool": [
        "<|im_start|>user\n",
        "wrapped within <python>...</python> tags",
        "Return your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant",
    ],
    "sudoku": ["Make valid actions to win.\nObservation: You are playing A simple version of Sudoku."],
    "simple_equations": ["<|im_start|>user\nQuestion: "],
}


def small_offline(command: str) -> list[str]:
    """The README's arguments with small sizes, the offline math env, and the step counts of ``EXTRA``."""
    args = []
    for arg in command.split():
        key, value = arg.split("=", 1)
        args.append(f"{key}={SMALL.get(key, OFFLINE.get(value, value))}")
    return args + EXTRA


def run_example(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """``python -m tinker_emulator --import gemlab.envs tinker_train.py ARGS`` with no hub, no wandb and no Tinker key,
    in ``tmp_path``
    (GEM's script writes ./tinker_output); it must succeed."""
    environment = {
        **os.environ,
        **gem_train.ENV,
        "TINKER_API_KEY": "",
        "GEMLAB_LOCAL_DIR": str(tmp_path / "checkpoints"),
    }
    environment.pop("GEMLAB_LOCAL_MODEL", None)
    done = subprocess.run(
        # gemlab's envs registered first (math:GSMSymbolic): the emulator, its own package, imports no gemlab
        [sys.executable, "-m", "tinker_emulator", "--import", "gemlab.envs", str(gem_train.SCRIPT), *args],
        capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_the_commands_are_made_small_and_offline() -> None:
    assert small_offline(README["math_python_tool"]) == [
        f"env_id={OFFLINE_MATH}",
        "num_env=4",
        "max_tokens=32",
        "template=no",
        "model_name=meta-llama/Llama-3.1-8B-Instruct",
        "env_wrappers=python_tool_no_int_reward_last_line_error,concat_chat",
        "gamma=1",
        "batch_size=4",
        "max_steps=2",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(README))
def test_readme_example_runs_offline(example: str, tmp_path: Path) -> None:
    assert gem_train.script_is_upstreams(), "tests/fixtures/gem/tinker_train.py differs from GEM's file"
    done = run_example(small_offline(README[example]), tmp_path)
    steps = gem_train.step_metrics(done.stdout)
    assert [row["step"] for row in steps] == [0, 1]
    for row in steps:
        assert METRICS <= set(row), sorted(METRICS - set(row))
        assert all(math.isfinite(value) for value in row.values()), row
        assert row["sampler/num_episodes"] >= 4
    for text in SHOWN[example]:
        assert text in done.stdout, text
    model = "meta-llama/Llama-3.1-8B-Instruct" if example == "math_python_tool" else gem_train.MODEL
    assert f"{model} is not available locally; using gemlab/tiny-chat" in done.stderr
