"""The hyperparameter lab driven as a person drives it: set widgets, press Run, wait, press Stop."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from gemlab import Trainer
from gemlab.config import Config, make_config
from gemlab.lab import HyperparameterLab
from gemlab.lab.background import eta_seconds
from gemlab.lab.comparison import comparison_figure, find_runs, run_labels, runs_table, wall_seconds
from gemlab.lab.controls import Controls
from gemlab.saved_runs import read_run

DATA_RUNS = Path(__file__).resolve().parents[2] / "data" / "runs"
SMALL = dict(batch_size=8, num_env=4, max_steps=2)


def drive(scenario) -> None:
    """Run an async scenario on a fresh event loop in a thread of its own, as the notebook's loop
    would (pytest's main thread may already run a loop: the browser tests' Playwright)."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, scenario()).result()


def small_lab(tmp_path: Path, **overrides) -> HyperparameterLab:
    return HyperparameterLab(
        make_config("laptop", **{**SMALL, **overrides}), log_dir=tmp_path / "runs", precomputed=[DATA_RUNS]
    )


def lines_per_panel(lab: HyperparameterLab) -> int:
    """How many runs the comparison chart draws (lines in its first panel)."""
    figure = comparison_figure(lab.comparison_runs())
    return len(figure.axes[0].get_lines())


def metrics_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_run_writes_a_run_folder_and_each_run_adds_a_line(tmp_path):
    lab = small_lab(tmp_path)

    async def scenario():
        lab.run_button.click()
        assert lab.run_button.disabled and not lab.stop_button.disabled  # running: Run is off, Stop is on
        await lab.wait()
        assert lines_per_panel(lab) == 1
        lab.controls.widgets["gamma"].value = 0.5
        lab.run_button.click()
        await lab.wait()

    drive(scenario)
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2
    for folder in folders:
        assert len(metrics_rows(folder)) == 2
        assert (folder / "checkpoints.jsonl").exists()
    configs = [json.loads((f / "config.json").read_text()) for f in folders]
    assert [c["gamma"] for c in configs] == [0.9, 0.5]
    assert lines_per_panel(lab) == 2
    assert lab.live_redraws == 4  # one redraw per step of each run
    assert lab.first_point_seconds is not None and lab.first_point_seconds > 0
    assert "gamma" in lab.table.value and "finished" in lab.table.value
    assert "learning_rate" not in lab.table.value  # the same slider value is the same setting
    assert not lab.run_button.disabled and lab.stop_button.disabled


def test_stop_ends_after_a_step_and_leaves_a_resumable_checkpoint(tmp_path):
    lab = small_lab(tmp_path, max_steps=200)

    async def scenario():
        lab.run_button.click()
        while lab.live_redraws < 1:
            await asyncio.sleep(0.05)
        lab.stop_button.click()
        await lab.wait()

    drive(scenario)
    assert lab.last_status == "stopped"
    (run_dir,) = (tmp_path / "runs").iterdir()
    done = len(metrics_rows(run_dir))
    assert 1 <= done < 200
    assert f"stopped after {done} of 200 steps" in lab.status.value and "time to finish" not in lab.status.value
    assert lab._live_steps == done  # the chart shows the last step, however few redraws the budget allowed
    checkpoints = [json.loads(line) for line in (run_dir / "checkpoints.jsonl").read_text().splitlines()]
    assert checkpoints[-1]["step"] == done
    config = Config(**json.loads((run_dir / "config.json").read_text()))
    resumed = Trainer(config, progress=False)
    try:
        assert resumed.step_index == done and len(resumed.history) == done
        resumed.step()
        assert [row["step"] for row in metrics_rows(run_dir)] == list(range(done + 1))
    finally:
        resumed.close()
    assert "stopped at" in lab.table.value


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [("env_id", "", "env id is empty"), ("env_id", "game:NoSuchGame-v0", "Unknown GEM env id")],
)
def test_a_bad_setting_is_refused_in_the_widget_and_writes_nothing(tmp_path, setting, value, message):
    lab = small_lab(tmp_path)
    lab.controls.set(**{setting: value})
    lab.run_button.click()  # refused before any event loop is needed
    assert message in lab.message.value and "b00020" in lab.message.value  # shown in red
    assert lab.task is None and not lab.run_button.disabled
    assert not (tmp_path / "runs").exists()


def test_a_zero_learning_rate_is_refused_with_one_line():
    controls = Controls(make_config("laptop"))
    with pytest.raises(ValueError, match=r"^learning_rate must be a positive number, got 0.0$"):
        controls.config(run_name="x", log_dir="unused", learning_rate=0.0)
    rates = [value for _, value in controls.widgets["learning_rate"].options]  # the slider cannot even reach 0
    assert min(rates) == pytest.approx(1e-6) and 2e-3 in rates and 5e-2 in rates


def test_loss_controls_set_the_config_loss():
    controls = Controls(make_config("laptop"))
    assert controls.widgets["clip_low_threshold"].disabled  # importance_sampling takes no clip
    controls.set(loss_fn="ppo", loss_fn_config={"clip_low_threshold": 0.7})
    assert not controls.widgets["clip_low_threshold"].disabled
    config = controls.config(run_name="x", log_dir="unused")
    assert config.loss_fn == "ppo" and config.loss_fn_config == {"clip_low_threshold": 0.7, "clip_high_threshold": 1.2}
    assert controls.config(run_name="x", log_dir="unused", loss_fn="importance_sampling").loss_fn_config is None


def test_a_preset_runs_its_comparison_one_run_after_another(tmp_path):
    lab = small_lab(tmp_path, max_steps=1)

    async def scenario():
        lab.preset_buttons["ReBN vs none"].click()
        await lab.wait()

    drive(scenario)
    folders = sorted((tmp_path / "runs").iterdir())
    assert [json.loads((f / "config.json").read_text())["advantage"] for f in folders] == ["rebn", "none"]
    assert sorted(run_labels(lab.comparison_runs())) == ["advantage=none", "advantage=rebn"]


def test_watch_plays_a_saved_policy_and_the_last_batch(tmp_path):
    lab = small_lab(tmp_path, max_steps=1)

    async def scenario():
        lab.run_button.click()
        await lab.wait()
        options = lab.watch_picker.options
        assert len(options) == 2 and not any("data" in o for o in options)  # precomputed runs have no weights
        lab.watch_button.click()  # the current run: an episode of its last step
        assert "An episode of step 0" in lab.episode.value
        lab.watch_picker.value = options[1]
        lab.watch_button.click()
        assert "Loading the policy" in lab.episode.value
        await lab.watch_task

    drive(scenario)
    assert "last checkpoint" in lab.episode.value and "turn 0" in lab.episode.value


def test_precomputed_runs_are_labelled_by_the_settings_that_differ():
    runs = [read_run(DATA_RUNS / name) for name in ("rebn-seed0", "none-seed0", "rebn-seed1")]
    assert run_labels(runs) == ["advantage=rebn, seed=0", "advantage=none, seed=0", "advantage=rebn, seed=1"]
    table = runs_table(runs)
    assert list(table["steps"]) == ["100/100"] * 3
    assert list(table["status"]) == ["finished (metrics only)"] * 3  # shipped without weights, but all 100 steps done
    # ReBN learns more
    assert table["final success (last 5 steps)"].iloc[0] > table["final success (last 5 steps)"].iloc[1]
    assert runs[0].config["loss_fn"] == "importance_sampling"  # data/runs predate loss_fn: its default
    same = [read_run(DATA_RUNS / "rebn-seed0"), read_run(DATA_RUNS / "rebn-seed0")]
    assert run_labels(same) == ["rebn-seed0", "rebn-seed0"]
    assert len(find_runs(DATA_RUNS, DATA_RUNS / "missing")) == 6


def test_wall_time_counts_each_session_from_its_start():
    # time/train_end counts from a session's start; a resumed run starts counting again
    resumed = pd.DataFrame({"time/train_end": [5.0, 7.0, 9.0, 3.0, 6.0], "time/step": [1.0] * 5})
    assert wall_seconds(resumed) == 15.0  # 9 s, then 6 s: not the 5 s inside steps
    assert wall_seconds(pd.DataFrame({"time/step": [1.5, 2.5]})) == 4.0  # older runs: the steps' own time


def test_eta_leaves_out_the_first_step():
    assert eta_seconds([], 10) is None
    assert eta_seconds([4.0], 3) == 12.0
    assert eta_seconds([9.0, 1.0, 3.0, 1.0], 10) == 10.0  # median of 1, 3, 1 is 1


def test_a_backend_that_cannot_start_is_reported_in_the_widget(tmp_path, monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    lab = small_lab(tmp_path, backend="tinker")

    async def scenario():
        lab.run_button.click()
        await lab.wait()

    drive(scenario)
    assert lab.last_status == "failed" and "needs a Tinker API key" in lab.message.value
    assert not lab.run_button.disabled and not (tmp_path / "runs").exists()


def test_more_envs_than_transitions_is_a_visible_note_not_a_refusal(tmp_path):
    lab = small_lab(tmp_path, max_steps=1)
    lab.controls.set(num_env=12)  # more envs than the batch of 8 transitions: allowed, but worth knowing

    async def scenario():
        lab.run_button.click()
        assert "num_env=12 &gt; batch_size=8" in lab.message.value
        await lab.wait()

    drive(scenario)
    assert lab.last_status == "finished"


def test_a_failed_step_is_reported_and_what_was_done_is_kept(tmp_path, monkeypatch):
    real_astep = Trainer.astep

    async def astep_failing_at_step_1(self):
        if self.step_index == 1:
            raise RuntimeError("the sampler went away")
        return await real_astep(self)

    monkeypatch.setattr(Trainer, "astep", astep_failing_at_step_1)
    lab = small_lab(tmp_path, max_steps=3)

    async def scenario():
        lab.run_button.click()
        await lab.wait()

    drive(scenario)
    assert lab.last_status == "failed"
    assert "failed at step 1: the sampler went away (checkpoint saved at step 1)" in lab.message.value
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert len(metrics_rows(run_dir)) == 1
    assert json.loads((run_dir / "checkpoints.jsonl").read_text().splitlines()[-1])["step"] == 1
    assert not lab.run_button.disabled and lab.stop_button.disabled
