"""The policy-gradient loss is a run setting: chosen on the command line, named in the outputs."""

from __future__ import annotations

import json

from gemlab.train import main


def test_the_command_line_trains_with_ppo_and_says_so(tmp_path, capsys):
    args = [
        "preset=laptop",
        "loss_fn=ppo",
        "loss_fn_config.clip_low_threshold=0.7",
        "max_steps=2",
        "batch_size=8",
        "num_env=4",
    ]
    assert main([*args, f"log_dir={tmp_path}", "run_name=ppo"]) == 0
    out = capsys.readouterr().out
    assert "loss: ppo clip_low_threshold=0.7" in out
    assert "2 steps with the ppo loss" in out
    run = tmp_path / "ppo"
    config = json.loads((run / "config.json").read_text())
    assert config["loss_fn"] == "ppo" and config["loss_fn_config"] == {"clip_low_threshold": 0.7}
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all("train/loss:sum" in row for row in rows)
    assert (run / "diagnostics.png").stat().st_size > 0
