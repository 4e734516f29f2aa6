"""The command line: every bad input is one line saying what is allowed, exit status 2, no files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gemlab.config import Config, make_config
from gemlab.train import main

BAD = [
    (["learnig_rate=0.1"], "unknown key 'learnig_rate'; did you mean 'learning_rate'"),
    (["colour=red"], "unknown key 'colour' (python -m gemlab.train --help lists every key)"),
    (["max_steps"], "expected key=value, got 'max_steps'"),
    (["batch_size=abc"], "batch_size must be an integer, got 'abc'"),
    (["max_steps=2.5"], "max_steps must be an integer, got '2.5'"),
    (["save_every=often"], "save_every must be an integer, got 'often'"),
    (["learning_rate=inf"], "learning_rate must be a positive number, got inf"),
    (["learning_rate=nan"], "learning_rate must be a positive number, got nan"),
    (["learning_rate=-1"], "learning_rate must be a positive number, got -1.0"),
    (["temperature=nan"], "temperature must be a finite number in [0.0, 10.0]; nan is not"),
    (["gamma=nan"], "gamma must be a finite number in [0.0, 1.0]; nan is not"),
    (["seed=-1"], "seed must be in [0, 2147483647], got -1"),
    (["seed=99999999999999999999999"], "seed must be in [0, 2147483647], got 99999999999999999999999"),
    (["num_env=4097"], "num_env=4097 is too large (each step plays at least 4097 episodes, and all 4097 play at once: 20 MB"),
    (["max_staleness=-1"], "max_staleness must be at least 0, got -1"),
    (["keep_checkpoints=-1"], "keep_checkpoints must be at least 0, got -1"),
    (["max_tokens=10000000"], "max_tokens=10000000 is more than gemlab/tiny's context of 2048 tokens; use at most 2048"),
    (["lora_rank=100000"], "LoRA rank 100000 is more than gemlab/tiny's hidden size 128; use a rank of at most 128"),
    (["wandb_project=x"], "wandb_project='x'"),  # wandb missing or not logged in: both name the field
    (["loss_fn=ppo", "loss_fn_config.clip_low_threshold=nan"], "loss_fn_config.clip_low_threshold must be a finite number, got nan"),
    (["loss_fn=dro"], "loss_fn='dro' is refused: with the Trainer's datums it pulls every prompt token"),
    (["loss_fn=stable_reinforce"], "loss_fn='stable_reinforce' is refused: on real Tinker it needs record_stability_info"),
    (["loss_fn_config=3"], "loss_fn_config must be a mapping of names to numbers or None, got '3'"),
    (["allow_config_change=maybe"], "allow_config_change must be true or false, got 'maybe'"),
    (["lora_rank=0"], "lora_rank must be a positive number, got 0"),
    (["preset=big"], "Unknown preset 'big'. Known presets: gem, laptop"),
    (["run_name=../../x"], "run_name '../../x' is not allowed"),
    (["run_name=/tmp/x"], "run_name '/tmp/x' is not allowed"),
    (["num_env=1000000"], "num_env=1000000 is too large (each step plays at least 1000000 episodes"),
    (["batch_size=100000000"], "batch_size=100000000 is too large"),
    (["env_id=math:GSM8K"], "env_id 'math:GSM8K' loads the data set 'axon-rl/GSM-8k' from the Hugging Face hub"),
    (["env_id=qa:HotpotQA"], "env_id 'qa:HotpotQA' loads the data set 'axon-rl/HotpotQA'"),
    (["env_id=game:Wordle"], "Unknown GEM env id 'game:Wordle'"),
    (["env_wrappers=concatt"], "Unknown GEM wrapper(s) 'concatt'"),
    (["model_name=gemlab/other"], "gemlab/other"),
]


@pytest.mark.parametrize("argv, message", BAD)
def test_bad_input_is_one_line_exit_2_and_no_files(tmp_path: Path, capsys, monkeypatch, argv, message) -> None:
    for variable in ("TINKER_API_KEY", "WANDB_MODE", "WANDB_API_KEY"):  # whatever the caller's shell has set
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # wandb reads its login from here: none
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb"))
    log_dir = tmp_path / "runs"
    assert main(["preset=laptop", *argv, f"log_dir={log_dir}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gemlab.train: "), err
    assert message in err
    assert "X_" not in err  # chz's internal names never show
    assert not log_dir.exists()


@pytest.mark.slow
def test_help_lists_every_key_and_exits_0() -> None:
    result = subprocess.run([sys.executable, "-m", "gemlab.train", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("usage: python -m gemlab.train")
    for key in ("learning_rate=4e-05", "save_every=5", "allow_config_change=False", "loss_fn_config.NAME"):
        assert key in result.stdout


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"max_steps": 2.5}, "max_steps must be an integer, got 2.5"),
        ({"batch_size": True}, "batch_size must be an integer, got True"),
        ({"learning_rate": float("inf")}, "learning_rate must be a positive number, got inf"),
        ({"run_name": ".."}, "run_name '..' is not allowed"),
        ({"seed": "0"}, "seed must be an integer, got '0'"),
    ],
)
def test_python_callers_get_the_same_validation(overrides, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        Config(**overrides)


def test_numpy_numbers_are_numbers_and_save_as_json(tmp_path: Path) -> None:
    import json

    import numpy as np

    from gemlab.run_folder import RunFolder

    config = make_config("laptop", batch_size=np.int64(16), num_env=np.int32(8), learning_rate=np.float32(0.01), log_dir=str(tmp_path))
    assert config.batch_size == 16 and type(config.batch_size) is int
    folder = RunFolder(str(tmp_path), "r")
    folder.open()
    folder.save_config(Config(batch_size=np.int64(16), num_env=16, gamma=np.float64(0.5)), {}, 0)
    folder.close()
    assert json.loads((tmp_path / "r" / "config.json").read_text())["batch_size"] == 16


def test_a_misspelled_key_from_python_suggests_the_right_one() -> None:
    with pytest.raises(ValueError, match="unknown key 'max_step'; did you mean 'max_steps'"):
        make_config("laptop", max_step=3)


def test_more_envs_than_transitions_warns() -> None:
    with pytest.warns(UserWarning, match="num_env=64 > batch_size=32"):
        Config(num_env=64, batch_size=32)


def test_summary_compares_the_means_of_the_first_and_last_ten_steps() -> None:
    from gemlab.train import summary

    history = [{"sampler/success_rate": value} for value in [0.0] * 10 + [0.5] * 5 + [1.0] * 10]
    assert summary(history) == "25 steps, rollout success on training problems 0.00 over the first 10 steps -> 1.00 over the last 10 steps"
    short = [{"sampler/success_rate": value} for value in (0.2, 0.4, 0.9)]
    assert summary(short) == "3 steps, rollout success on training problems 0.20 over the first step -> 0.90 over the last step"


def test_last_line_names_every_file_the_run_wrote(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert main(["preset=laptop", "max_steps=2", "batch_size=16", "num_env=4", f"log_dir={tmp_path}", "run_name=r"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("done: 2 steps, rollout success on training problems ")
    written = [p.name for p in (tmp_path / "r").iterdir() if not p.name.startswith(".")]
    assert {"diagnostics.png", "learning_curve.png", "metrics.jsonl", "config.json"} <= set(written)
    for name in written:
        assert name in last
