"""gemlab.studies.async_runs: run summaries, settings read from saved configs, paired contrasts."""

import json
import math

import pytest

from gemlab.studies.async_runs import SYNC, Setting, contrasts, saved_runs, summarize, time_to


def history(successes: list[float], seconds_per_step: float = 2.0) -> list[dict[str, float]]:
    return [
        {"sampler/success_rate": s, "time/sample_start": i * seconds_per_step,
        "time/train_end": (i + 1) * seconds_per_step,
         "train/logprob_diff_abs": 0.0, "async/staleness_mean": 0.0}
        for i, s in enumerate(successes)
    ]  # fmt: skip


def test_time_to_a_target_needs_a_five_step_average():
    # one lucky step at 1.0 does not count; the mean of steps 3-7 is 0.9 at step 7 (ends at 16 s)
    runs = history([0.0, 1.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert time_to(runs, 0.9) == pytest.approx(16.0)
    assert time_to(history([0.5] * 20), 0.9) is None
    summary = summarize(runs)
    assert summary["per_step"] == pytest.approx(2.0) and summary["final"] == pytest.approx(6.5 / 9)


def result(final: float, per_step: float) -> dict[str, float]:
    return {"final": final, "per_step": per_step}


def test_each_asynchronous_setting_is_paired_with_the_synchronous_run_of_its_seed():
    is1, ppo1 = Setting(1, "importance_sampling"), Setting(1, "ppo")
    results = {
        SYNC: {0: result(0.9, 2.0), 1: result(0.8, 2.0), 2: result(0.7, 4.0)},
        is1: {0: result(0.8, 1.0), 1: result(0.6, 1.0), 2: result(0.7, 2.0)},
        # seed 3 has no pair
        ppo1: {0: result(0.9, 1.0), 1: result(0.8, 2.0), 2: result(0.7, 2.0), 3: result(0.1, 1.0)},
    }
    table = contrasts(results).set_index(["treatment", "control"])
    assert list(table.index) == [(is1.label, "synchronous"), (ppo1.label, "synchronous"), (ppo1.label, is1.label)]
    row = table.loc[(is1.label, "synchronous")]
    assert row["seeds"] == 3 and row["final success difference"] == pytest.approx(-0.1)
    assert row["s/step ratio"] == pytest.approx(0.5)  # every seed took half the time per step
    # geometric mean of 1/2, 1, 1/2
    assert table.loc[(ppo1.label, "synchronous")]["s/step ratio"] == pytest.approx(2 ** (-2 / 3))
    assert table.loc[(ppo1.label, is1.label)]["final success difference"] == pytest.approx(0.1)
    assert all(table["Holm"] >= table["p"]) and not math.isnan(row["low"])


def test_saved_runs_are_filed_by_their_config_not_their_folder_name(tmp_path):
    for name, k, loss, seed in [
        ("a", 0, "importance_sampling", 3),
        ("b", 2, "ppo", 3),
        ("staleness2-seed0", 2, "importance_sampling", 0),
    ]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"max_staleness": k, "loss_fn": loss, "seed": seed}))
        (tmp_path / name / "metrics.jsonl").write_text(json.dumps(history([0.5])[0] | {"step": 0}) + "\n")
    (tmp_path / "notes").mkdir()  # not a run: left alone
    runs = saved_runs(tmp_path)
    assert runs == {
        SYNC: {3: tmp_path / "a"},
        Setting(2, "importance_sampling"): {0: tmp_path / "staleness2-seed0"},
        Setting(2, "ppo"): {3: tmp_path / "b"},
    }
