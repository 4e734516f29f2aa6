"""tinker-cookbook 0.6.1's own recipes run unmodified under ``python -m tinker_emulator -m ...`` with a
Tinker model name, offline: ``math_rl`` (env=arithmetic, its default loss, then a resume) and
``sl_basic`` (the cookbook is installed by the ``cookbook`` fixture, tests/helpers/cookbook.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cookbook import MODEL, math_rl_args, metrics, sl_basic_args

NOTICE = f"tinker_emulator: {MODEL} is not available locally; using gemlab/tiny-chat instead"
pytestmark = pytest.mark.slow  # installs the cookbook, then runs its recipes in subprocesses


def run_local(module: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GEMLAB_LOCAL_DIR": str(tmp_path / "checkpoints"), "HF_HUB_OFFLINE": "1"}
    env.pop("TINKER_API_KEY", None)
    env.pop("GEMLAB_LOCAL_MODEL", None)
    env.setdefault("GEMLAB_THREADS", "1")
    done = subprocess.run(
        [sys.executable, "-m", "tinker_emulator", "-m", module, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])
    return done


def test_math_rl_with_its_default_loss_then_resumed(cookbook: Path, tmp_path: Path):
    log = tmp_path / "math_rl"
    args = math_rl_args(log)
    first = run_local("tinker_cookbook.recipes.math_rl.train", [*args, "max_steps=2"], tmp_path)
    assert json.loads((log / "config.json").read_text())["loss_fn"] == "stable_reinforce"  # the recipe's default
    assert first.stderr.count(NOTICE) == 1  # one notice for tokenizer and training client together
    trained = [row for row in metrics(log) if "optim/lr" in row]
    assert [row["step"] for row in trained] == [0, 1]
    saved = [json.loads(line) for line in (log / "checkpoints.jsonl").read_text().splitlines()]
    state_path = saved[-1]["state_path"]
    assert state_path.startswith("local://") and saved[-1]["batch"] == 2

    resumed = run_local(
        "tinker_cookbook.recipes.math_rl.train", [*args, "max_steps=3", "behavior_if_log_dir_exists=resume"], tmp_path
    )
    logs = resumed.stdout + resumed.stderr
    assert f"Resumed training from {state_path}" in logs
    assert [row["step"] for row in metrics(log) if "optim/lr" in row] == [0, 1, 2]
    final = json.loads((log / "checkpoints.jsonl").read_text().splitlines()[-1])
    assert final["batch"] == 3 and final["state_path"] != state_path


def test_sl_basic_on_the_cookbooks_example_conversations(cookbook: Path, tmp_path: Path):
    """sl_basic's default data set (NoRobots) lives on the hub; the recipe's own command line swaps
    in the conversations file the cookbook ships, as its source suggests."""
    log = tmp_path / "sl_basic"
    run_local("tinker_cookbook.recipes.sl_basic", sl_basic_args(log, cookbook), tmp_path)
    steps = [row for row in metrics(log) if "train_mean_nll" in row]
    assert [row["step"] for row in steps] == [0, 1]
    # gemlab/tiny knows only GuessTheNumber: general chat text costs it about 21 nats a token
    assert all(math.isfinite(row["train_mean_nll"]) and row["train_mean_nll"] > 0 for row in steps)
    final = json.loads((log / "checkpoints.jsonl").read_text().splitlines()[-1])
    run_id, kind, name = final["sampler_path"][len("local://") :].split("/")
    assert (tmp_path / "checkpoints" / run_id / kind / name / "adapter_model.safetensors").is_file()
