"""``max_minutes``: ``run()`` stops at a step boundary when the next step (and the final evaluation)
would not fit, says so in a line and in the step's row, and running again resumes. The clock is
fake (20 s a look), so nothing here depends on how fast the machine is: a laptop step of 16
transitions takes well under the 20 s that would change the outcome."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from gemlab import make_config
from gemlab.trainer import STOPPED_FOR_TIME, Trainer

SMALL = dict(batch_size=16, num_env=4, save_every=0, eval_games=4)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each look at the clock is 20 s after the one before: run() looks at its start and after each step."""
    ticks = itertools.count(0.0, 20.0)
    monkeypatch.setattr(Trainer, "clock", staticmethod(lambda: next(ticks)))
    monkeypatch.delenv("TINKER_API_KEY", raising=False)


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_max_minutes_stops_at_a_step_boundary_says_so_and_resumes(
    tmp_path: Path, fake_clock: None, capsys: pytest.CaptureFixture
) -> None:
    config = make_config("laptop", **SMALL, max_steps=6, max_minutes=1, log_dir=str(tmp_path), run_name="r")
    with Trainer(config) as trainer:  # at 20, 40 s the next step fits in 60 s; at 60 s it does not
        trainer.run()
        assert trainer.step_index == 3
        assert trainer.stopped_for_time.startswith(
            "max_minutes=1: stopped after 3 of 6 steps, 1.0 minutes used (the next step takes about "
        )
        assert trainer.stopped_for_time.endswith("); run it again to resume")
    out = capsys.readouterr().out
    assert "max_minutes=1: stopped after 3 of 6 steps" in out
    assert " to go at this step's pace (5 steps x " in out  # said after the first step
    assert [row.get(STOPPED_FOR_TIME) for row in _rows(tmp_path / "r")] == [None, None, 1.0]
    with Trainer(config) as again:  # resumes from the checkpoint run() saved, with a budget of its own
        assert again.step_index == 3
        again.run()
        assert again.step_index == 6 and again.stopped_for_time is None  # the last step ends the run anyway
    assert [row["step"] for row in _rows(tmp_path / "r")] == [0, 1, 2, 3, 4, 5]


def test_the_final_evaluation_is_kept_time_for_and_played(tmp_path: Path, fake_clock: None) -> None:
    """With eval_every, stopping between evaluations plays the evaluation after the last step, so the
    run's curve ends at its final weights; the budget held back that evaluation's measured time."""
    config = make_config(
        "laptop", **SMALL, max_steps=8, max_minutes=1, eval_every=5, log_dir=str(tmp_path), run_name="r"
    )
    with Trainer(config, progress=False) as trainer:
        trainer.run()
        assert trainer.step_index == 3
    rows = _rows(tmp_path / "r")
    assert "eval/base_success" in rows[0] and "eval/success" not in rows[1]
    assert rows[2][STOPPED_FOR_TIME] == 1.0 and "eval/success" in rows[2] and "time/eval" in rows[2]


def test_without_max_minutes_the_run_goes_to_max_steps(tmp_path: Path, fake_clock: None) -> None:
    config = make_config("laptop", **SMALL, max_steps=4, log_dir=str(tmp_path), run_name="r")
    with Trainer(config, progress=False) as trainer:
        trainer.run()
        assert trainer.step_index == 4 and trainer.stopped_for_time is None


def test_max_minutes_is_a_positive_number_from_python_and_the_command_line() -> None:
    from gemlab.config import config_from_argv

    assert config_from_argv(["preset=laptop", "max_minutes=20"]).max_minutes == 20
    assert config_from_argv(["preset=laptop", "max_minutes=None"]).max_minutes is None
    with pytest.raises(ValueError, match="max_minutes must be a positive number, got -5"):
        make_config("laptop", max_minutes=-5)


def test_every_real_model_preset_ends_within_30_minutes() -> None:
    """A real model on a 2-core laptop: ``preset=smollm2-tool``'s 100 steps used to run for about 5 hours."""
    from gemlab.config import LAPTOP, PRESETS

    local = {name: preset for name, preset in PRESETS.items() if preset.get("backend") == "local"}
    real = {name for name, preset in local.items() if preset["model_name"] != LAPTOP["model_name"]}
    assert {"smollm2", "smollm2-tool", "smollm2-guess"} <= real
    for name in real:
        assert make_config(name).max_minutes <= 30, name


def test_the_command_line_estimates_the_duration_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the doctor's calibration for a run that steps as the laptop preset does; else after the first step."""
    from gemlab.cli import duration
    from gemlab.doctor import laptop_step_estimate
    from gemlab.train import estimate, main

    step_s, _ = laptop_step_estimate(make_config("laptop"))
    line = estimate(make_config("laptop", max_minutes=20), 40)
    assert line.startswith(
        f"estimated time: about {duration(60 * step_s)} (60 steps x {step_s:.1f} s, the median laptop step of "
        "the doctor's calibration"
    )
    assert line.endswith("; max_minutes=20 stops it sooner if need be")
    assert laptop_step_estimate(make_config("smollm2")) is None
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert main(["preset=laptop", "max_steps=2", "batch_size=16", "num_env=4", f"log_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "estimated time: said after the first step, at its pace (2 steps to go)" in out
    assert " to go at this step's pace (1 step x " in out
