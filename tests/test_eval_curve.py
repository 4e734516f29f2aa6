"""The evaluation curve: scored at the base, after the warm-up and at each eval step; printed with
intervals by the command line, logged in metrics.jsonl, not scored again on resume, and plotted
beside the rollouts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import chz
import pandas as pd
import pytest

import gemlab.trainer
from gemlab import Trainer, make_config, plots
from gemlab.eval_curve import Point, describe, eval_points, eval_set_name
from gemlab.train import main

FIXED_SET = "fixed set of game:GuessTheNumber-v0-easy (4 games, sampled)"  # the training env's: 4 turns at most
SMALL = ["preset=laptop", "eval_every=2", "eval_games=4", "warmup_steps=1", "num_env=4", "batch_size=8"]
NUMBER = r"(\d\.\d{3})"
POINT = rf"{NUMBER} \[{NUMBER}, {NUMBER}\]"


def count_evaluations(monkeypatch) -> list[int]:
    """Count the Trainer's plays of the evaluation set (one entry per call)."""
    calls: list[int] = []
    play = gemlab.trainer.evaluate_client

    async def counted(*args, **kwargs):
        calls.append(1)
        return await play(*args, **kwargs)

    monkeypatch.setattr(gemlab.trainer, "evaluate_client", counted)
    return calls


def printed(out: str, label: str) -> list[tuple[float, float, float]]:
    """The (success, low, high) of every line the run printed for the point ``label``, alone on its line."""
    return [tuple(map(float, m)) for m in re.findall(rf"^{re.escape(FIXED_SET)}: {label} {POINT}$", out, flags=re.M)]


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_command_line_prints_each_point_and_the_curve_as_logged_and_plots_it(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    calls = count_evaluations(monkeypatch)
    assert main([*SMALL, "max_steps=2", f"log_dir={tmp_path}", "run_name=r"]) == 0
    out = capsys.readouterr().out.replace("\r", "\n")
    run = tmp_path / "r"
    first, second = rows(run)
    assert len(calls) == 3  # base, after the warm-up, step 2
    for label, prefix, row in (
        ("base", "eval/base_", first),
        ("after warm-up", "eval/warmup_", first),
        ("step 2", "eval/", second),
    ):
        logged = (row[f"{prefix}success"], row[f"{prefix}success_low"], row[f"{prefix}success_high"])
        assert printed(out, label) == [tuple(round(x, 3) for x in logged)], label  # printed once, as logged
        assert 0 <= logged[1] <= logged[0] <= logged[2] <= 1 and logged[2] - logged[1] > 0.3  # 4 games: a wide interval
    chain = rf"^{re.escape(FIXED_SET)}: base {POINT} -> after warm-up {POINT} -> step 2 {POINT}$"
    assert re.search(chain, out, flags=re.M), out[-2000:]
    assert out.strip().splitlines()[-1].startswith("done: 2 steps, rollout success on training problems ")

    ax = plots.plot_learning_curve(run, smoothing=5)  # what learning_curve.png draws
    lines = {line.get_label(): line for line in ax.get_lines()}
    fixed_set = lines[FIXED_SET]
    assert list(fixed_set.get_xdata()) == [0, 2]  # after the warm-up, after 2 steps
    assert list(fixed_set.get_ydata()) == [first["eval/warmup_success"], second["eval/success"]]
    assert "training problems (rollouts), moving average over 5 steps" in lines
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "the base model, before the warm-up" in legend and "its 95% interval (Wilson)" in legend


def test_a_resumed_run_does_not_score_its_start_again(tmp_path, monkeypatch):
    calls = count_evaluations(monkeypatch)
    config = make_config(
        "laptop", log_dir=str(tmp_path), run_name="r", eval_every=1, eval_games=2, max_steps=1, num_env=4, batch_size=8
    )
    with Trainer(config, progress=False) as trainer:
        trainer.run()
    first = rows(tmp_path / "r")[0]
    assert len(calls) == 2 and "eval/base_success" in first  # the base, step 1
    calls.clear()
    with Trainer(chz.replace(config, max_steps=2), progress=False) as trainer:
        assert trainer.step_index == 1
        trainer.run()
    assert len(calls) == 1 and rows(tmp_path / "r")[0] == first  # step 2 only; the base stays as recorded
    assert [p.label for p in eval_points(trainer.history)] == ["base", "step 1", "step 2"]


def test_eval_base_false_and_no_warm_up_score_only_the_steps(tmp_path, monkeypatch):
    calls = count_evaluations(monkeypatch)
    config = make_config(
        "laptop",
        log_dir=str(tmp_path),
        eval_every=1,
        eval_games=2,
        eval_base=False,
        max_steps=1,
        num_env=4,
        batch_size=8,
    )
    with Trainer(config, progress=False) as trainer:
        row = trainer.step()
    assert (
        len(calls) == 1
        and "eval/success" in row
        and not any(key.startswith(("eval/base_", "eval/warmup_")) for key in row)
    )


def test_a_warm_up_of_your_own_is_yours_to_score(tmp_path, monkeypatch):
    calls = count_evaluations(monkeypatch)
    config = make_config(
        "laptop",
        log_dir=str(tmp_path),
        eval_every=1,
        eval_games=2,
        warmup_steps=1,
        max_steps=1,
        num_env=4,
        batch_size=8,
    )
    with Trainer(config, progress=False) as trainer:
        result = trainer.evaluate_start("base")
        trainer.warmup()  # scored after it by the caller, or not at all: never a second time behind its back
        with pytest.raises(ValueError, match="stage must be one of 'base', 'warmup'; got 'later'"):
            trainer.evaluate_start("later")
        row = trainer.step()
        with pytest.raises(RuntimeError, match="past it"):
            trainer.evaluate_start("base")
    assert len(calls) == 2  # the caller's base, then step 1's
    assert row["eval/base_success"] == result.success and "eval/warmup_success" not in row


def test_points_read_from_a_table_skip_missing_cells_and_describe_as_one_line():
    table = pd.DataFrame(
        [
            {"step": 0, "eval/base_success": 0.0, "eval/base_success_low": 0.0, "eval/base_success_high": 0.056},
            {"step": 1},
            {"step": 2, "eval/success": 0.5, "eval/success_low": 0.4, "eval/success_high": 0.6},
        ]
    )  # NaN where a row has no evaluation
    points = eval_points(table)
    assert points == [Point("base", 0, 0.0, 0.0, 0.056), Point("step", 3, 0.5, 0.4, 0.6)]
    assert describe("x", points) == "x: base 0.000 [0.000, 0.056] -> step 3 0.500 [0.400, 0.600]"


@pytest.mark.parametrize(
    "fields, name",
    [
        (
            {"env_id": "rg:sums-1digit-train", "eval_env_id": "rg:sums-1digit-test", "temperature": 1.0},
            "held-out rg:sums-1digit-test (64 problems, sampled)",
        ),
        (
            {"env_id": "game:GuessTheNumber-v0-easy", "eval_env_id": None, "temperature": 0.0},
            "fixed set of game:GuessTheNumber-v0-easy (64 games, greedy)",
        ),
    ],
)
def test_the_evaluation_set_is_named_held_out_only_when_it_is(fields, name):
    assert eval_set_name({**fields, "eval_games": 64}) == name


def test_a_run_without_a_warm_up_starts_its_curve_at_the_base(tmp_path):
    training = {
        "sampler/success_rate": 0.2,
        "sampler/episode_return": 0.1,
        "sampler/token_entropy": 1.0,
        "train/kl_sample_train_v1": 0.0,
        "train/kl_sample_train_v2": 0.0,
    }
    metrics = [
        {"step": 0, **training, "eval/base_success": 0.1, "eval/base_success_low": 0.0, "eval/base_success_high": 0.3},
        {"step": 1, **training, "eval/success": 0.5, "eval/success_low": 0.3, "eval/success_high": 0.7},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in metrics))
    ax = plots.plot_learning_curve(tmp_path)  # no config.json: the set cannot be named
    (fixed_set,) = [line for line in ax.get_lines() if line.get_label() == "fixed evaluation set"]
    assert list(fixed_set.get_xdata()) == [0, 2] and list(fixed_set.get_ydata()) == [0.1, 0.5]
    assert "the base model, before the warm-up" not in [text.get_text() for text in ax.get_legend().get_texts()]
    diagnostics = plots.plot_diagnostics(tmp_path)  # training diagnostics keep to the rollouts
    assert "fixed evaluation set" not in [line.get_label() for line in diagnostics.axes[0].get_lines()]
