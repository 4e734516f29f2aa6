"""gemlab.studies.held_out_runs: a recorded SmolLM2 seed's held-out curve, and means over seeds."""

import json
import math

import chz
import pytest

from gemlab.config import make_config
from gemlab.studies.held_out_runs import mean_interval, recorded_seeds


def record_seed(
    folder, seed: int, warmup: float, evals: dict[int, float], final: tuple[int, float] | None = None
) -> None:
    """A seed folder as the SmolLM2 benchmark writes it: evals maps a metrics row's step to its eval/success."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(chz.asdict(make_config("smollm2", seed=seed))))
    rows = [{"step": step, "sampler/success_rate": 0.5} for step in range(max(evals) + 1)]
    for step, success in evals.items():
        rows[step] |= {"eval/success": success, "eval/success_low": success - 0.1, "eval/success_high": success + 0.1}
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    record = {"seed": seed, "warmup": {"success": warmup, "interval95": [warmup - 0.05, warmup + 0.05]}}
    if final is not None:
        step, success = final
        record["final"] = {"step": step, "eval/success": success, "eval/success_low": 0.0, "eval/success_high": 1.0}
    (folder / "eval.json").write_text(json.dumps(record))


def test_a_seed_curve_starts_at_the_warmup_counts_rl_steps_and_ends_at_the_final_evaluation(tmp_path):
    record_seed(tmp_path / "seed1", 1, 0.1, {9: 0.5, 19: 0.7}, final=(23, 0.8))
    record_seed(tmp_path / "seed0", 0, 0.05, {9: 0.4})
    (tmp_path / "seed2").mkdir()  # a seed still running: no eval.json yet
    (first, curve0), (second, curve1) = recorded_seeds(tmp_path)
    assert (first["seed"], second["seed"]) == (0, 1)
    assert curve0 == [(0, 0.05, 0.0, pytest.approx(0.1)), (10, 0.4, pytest.approx(0.3), 0.5)]
    assert [point[:2] for point in curve1] == [(0, 0.1), (10, 0.5), (20, 0.7), (23, 0.8)]


def test_the_mean_interval_over_seeds_is_students_t():
    mean, low, high = mean_interval([0.5, 0.7, 0.9])
    assert mean == pytest.approx(0.7) and high - mean == pytest.approx(4.302653 * 0.2 / math.sqrt(3), rel=1e-6)
    assert mean - low == pytest.approx(high - mean)
    assert mean_interval([0.6, 0.6]) == (0.6, 0.6, 0.6)
    single = mean_interval([0.3])
    assert single[0] == 0.3 and math.isnan(single[1]) and math.isnan(single[2])
