"""The whole loop on the local backend: metrics, checkpoints, resume, and clean failures."""

import io
import json
import random
import subprocess
import sys

import pytest

from gemlab import Trainer, make_config
from gemlab.config import config_from_argv

SMALL = dict(max_steps=2, batch_size=16, num_env=4, max_tokens=8, warmup_steps=2)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_two_steps_then_resume(tmp_path):
    config = make_config("laptop", log_dir=str(tmp_path), run_name="run", **SMALL)
    trainer = Trainer(config, progress=False)
    history = trainer.run()
    trainer.close()
    run_dir = tmp_path / "run"
    metrics = _lines(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1] == [h["step"] for h in history]
    for m in metrics:
        assert m["train/num_transitions"] == 16
        assert 0.0 <= m["sampler/success_rate"] <= 1.0
        assert m["sampler/num_episodes"] >= 16 / 4  # each episode has at most 4 turns
        assert abs(m["train/kl_sample_train_v1"]) < 1e-3  # sampler and learner share weights
    checkpoints = _lines(run_dir / "checkpoints.jsonl")
    assert checkpoints[-1]["step"] == 2 and checkpoints[-1]["state_path"]
    assert json.loads((run_dir / "config.json").read_text())["batch_size"] == 16
    warmup = _lines(run_dir / "warmup.jsonl")
    assert len(warmup) == 2 and all(row["loss"] > 0 for row in warmup)

    resumed = Trainer(
        make_config("laptop", log_dir=str(tmp_path), run_name="run", **{**SMALL, "max_steps": 3}), progress=False
    )
    assert resumed.step_index == 2
    assert resumed.step()["step"] == 2
    resumed.close()
    assert [m["step"] for m in _lines(run_dir / "metrics.jsonl")] == [0, 1, 2]


def test_warmup_now_returns_its_losses_and_advances_a_given_bar(tmp_path):
    from tqdm import tqdm

    trainer = Trainer(make_config("laptop", log_dir=str(tmp_path), run_name="warm", **SMALL), progress=False)
    with tqdm(total=SMALL["warmup_steps"], file=io.StringIO()) as bar:
        losses = trainer.warmup(progress=bar)
        assert bar.n == SMALL["warmup_steps"]
    assert losses == [row["loss"] for row in _lines(tmp_path / "warm" / "warmup.jsonl")]
    assert len(losses) == 2 and all(loss > 0 for loss in losses)
    trainer.step()  # the first step does not warm up again
    with pytest.raises(RuntimeError, match="the warm-up runs once"):
        trainer.warmup()
    trainer.close()


def test_same_seed_same_episodes(tmp_path):
    runs = []
    for name in ("a", "b"):
        trainer = Trainer(make_config("laptop", log_dir=str(tmp_path), run_name=name, **SMALL), progress=False)
        trainer.step()
        runs.append([[t.act_tokens for t in e.transitions] for e in trainer.last_batch.episodes])
        trainer.close()
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["env_id=game:GuessTheNumber-v0"],
            "Unknown GEM env id 'game:GuessTheNumber-v0'. Closest registered ids: game:GuessTheNumber-v0-",
        ),
        (["template=qwen3"], "template must be one of 'qwen3_game'"),
        (["gamma=1.5"], r"gamma must be in \[0.0, 1.0\], got 1.5"),
        (["batch_size=0"], "batch_size must be a positive number, got 0"),
        (["backend=tinker"], "needs a Tinker API key: set TINKER_API_KEY. Without one, use backend='local'"),
    ],
)
def test_bad_input_fails_cleanly_and_writes_nothing(tmp_path, argv, message, monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    log_dir = tmp_path / "runs"
    with pytest.raises(Exception, match=message):
        Trainer(config_from_argv(["preset=laptop", f"log_dir={log_dir}", *argv]), progress=False)
    assert not log_dir.exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "arg, message",
    [("gamma=1.5", "gamma must be in [0.0, 1.0], got 1.5"), ("env_id=game:Wordle", "Unknown GEM env id 'game:Wordle'")],
)
def test_command_line_reports_bad_value_in_one_line(tmp_path, arg, message):
    result = subprocess.run(
        [sys.executable, "-m", "gemlab.train", "preset=laptop", arg, f"log_dir={tmp_path / 'runs'}"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_laptop_preset_learns(laptop_run):
    """Issue 5's promise in small: the default local setup wins visibly more after 40 steps (the
    session's shared run, tests/conftest.py). (The full 3-seed measurement is
    research/experiments/bench_learning.py; this only guards the recipe.)"""
    success = [row["sampler/success_rate"] for row in laptop_run.rows]
    first, last = sum(success[:5]) / 5, sum(success[-5:]) / 5
    assert last > first + 0.1, f"success {first:.2f} -> {last:.2f}"


def test_astep_on_a_foreign_loop_after_step_with_sampling_ahead(tmp_path):
    """``asyncio.run(trainer.astep())`` after a sync ``step()`` (each call a new event loop, as
    Jupyter's differs from the Trainer's), with a sampler running ahead: it continues the run."""
    import asyncio

    config = make_config(
        "laptop",
        log_dir=str(tmp_path),
        run_name="ahead",
        batch_size=16,
        num_env=4,
        max_tokens=8,
        max_staleness=1,
        save_every=-1,
    )
    with Trainer(config, progress=False) as trainer:
        assert trainer.step()["step"] == 0
        assert asyncio.run(trainer.astep())["step"] == 1
        assert asyncio.run(trainer.astep())["step"] == 2
        assert trainer.step()["step"] == 3
    assert [m["step"] for m in _lines(tmp_path / "ahead" / "metrics.jsonl")] == [0, 1, 2, 3]


def test_context_manager_closes_and_unlocks(tmp_path):
    config = make_config("laptop", log_dir=str(tmp_path), run_name="ctx", **{**SMALL, "warmup_steps": 0})
    with Trainer(config, progress=False) as trainer:
        trainer.step()
        trainer.save_checkpoint()
    again = Trainer(config, progress=False)  # refused if the first still held the folder
    assert again.step_index == 1
    again.close()


def test_astep_cancelled_from_a_foreign_loop_leaves_a_consistent_trainer(tmp_path):
    """Cancelling ``await trainer.astep()`` (what Ctrl-C does to a notebook cell) waits until the
    step has rolled back (cancelled while sampling) or finished (while updating); either way the
    counter, history and metrics file agree and the next step goes on."""
    import asyncio

    config = make_config("laptop", log_dir=str(tmp_path), run_name="cancel", **{**SMALL, "warmup_steps": 0})

    async def cancel_soon(trainer):
        task = asyncio.ensure_future(trainer.astep())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with Trainer(config, progress=False) as trainer:
        asyncio.run(cancel_soon(trainer))
        assert trainer.consistent
        assert trainer.step_index == len(trainer.history) == len(_lines(trainer.run_dir / "metrics.jsonl"))
        assert trainer.step()["step"] == trainer.step_index - 1


def test_warmup_data_is_the_seeds_not_what_ran_before(tmp_path):
    """The scripted warm-up answers come from GEM's global ``random``: the warm-up reseeds it, so an
    evaluation (or anything else) played before it cannot change what the model is warmed up on."""
    losses = []
    for name, noise in (("quiet", 0), ("after-noise", 1000)):
        trainer = Trainer(make_config("laptop", log_dir=str(tmp_path), run_name=name, **SMALL), progress=False)
        for _ in range(noise):
            random.random()
        trainer.warmup()
        trainer.close()
        losses.append(_lines(tmp_path / name / "warmup.jsonl"))
    assert losses[0] == losses[1]


@pytest.mark.parametrize(
    "schedule, multipliers",
    [
        ("constant", [1.0, 1.0, 1.0, 1.0]),
        ("linear", [1.0, 0.75, 0.5, 0.25]),
        ("cosine", [1.0, 0.8535534, 0.5, 0.1464466]),
    ],
)
def test_the_learner_is_sent_the_scheduled_learning_rate(tmp_path, schedule, multipliers):
    config = make_config(
        "laptop", log_dir=str(tmp_path), run_name=schedule, lr_schedule=schedule, **{**SMALL, "max_steps": 4}
    )
    with Trainer(config, progress=False) as trainer:
        sent = [trainer.step()["train/learning_rate:mean"] for _ in range(4)]
    assert sent == pytest.approx([config.learning_rate * m for m in multipliers], rel=1e-6)


def test_a_conversation_step_trains_each_episode_as_one_datum_and_samples_from_its_kept_turns(tmp_path):
    """``chat_turns`` on GuessTheNumber: every later turn's prompt extends the last prompt and action,
    so the sampler starts each later turn from the episode's kept keys and values, and the learner
    gets one datum per episode; the logprob gap stays float rounding."""
    from tinker_emulator import TINY
    from tinker_emulator.futures import SAMPLING
    from tinker_emulator.models import choose_device, load_model

    config = make_config(
        "laptop",
        log_dir=str(tmp_path),
        run_name="turns",
        template="chat_turns",
        env_wrappers="",
        max_steps=1,
        batch_size=16,
        num_env=4,
    )
    turns = load_model(TINY, choose_device(), role=SAMPLING).turns  # the copy the Trainer samples from
    hits = turns.hits
    trainer = Trainer(config, progress=False)
    try:
        metrics = trainer.step()
    finally:
        trainer.close()
    later_turns = round(metrics["sampler/num_episodes"] * (metrics["sampler/num_turns_per_episode"] - 1))
    assert later_turns > 0 and turns.hits - hits == later_turns
    assert metrics["train/num_datums"] < metrics["train/num_transitions"] == 16
    assert abs(metrics["train/kl_sample_train_v1"]) < 1e-4
