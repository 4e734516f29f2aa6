"""examples/gem_loop.py (GEM's loop in one file, no gemlab import) computes what ``Trainer`` computes.

Both run as processes on the local backend with one thread, the same config and seed. Agreement
is exact (``==`` on floats): the two make the same envs, send the same requests with the same
seeds in the same batches, build the same datums and take the same optimizer steps, so every
number comes out of identical float operations. Only gemlab's extra metrics (drop counts, time,
staleness, Adam's own metrics) are left out of the comparison, since the example does not compute them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = dict(batch_size=32, num_env=8, max_steps=3)



def _run(args: list[str], tmp_path: Path) -> None:
    env = {
        **os.environ,
        "GEMLAB_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "TINKER_API_KEY": "",
        "GEMLAB_LOCAL_DIR": str(tmp_path / "local"),
    }
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]


def test_reference_loop_metrics_equal_the_trainers(tmp_path: Path) -> None:
    shared = [f"{key}={value}" for key, value in SHARED.items()]
    _run(["-m", "gemlab.train", "preset=laptop", *shared, f"log_dir={tmp_path}", "run_name=trainer"], tmp_path)
    example = tmp_path / "example.jsonl"
    laptop = ["model_name=gemlab/tiny", "learning_rate=0.002", "max_tokens=8"]  # the laptop preset's values
    _run(
        ["-m", "tinker_emulator", "examples/gem_loop.py", *laptop, *shared, "save_every=0", f"metrics={example}"],
        tmp_path,
    )
    trainer = [json.loads(line) for line in (tmp_path / "trainer" / "metrics.jsonl").read_text().splitlines()]
    loop = [json.loads(line) for line in example.read_text().splitlines()]
    assert len(loop) == len(trainer) == SHARED["max_steps"]
    for ours, theirs in zip(trainer, loop, strict=True):
        assert "train/loss:sum" in theirs and "sampler/success_rate" in theirs
        assert {key: ours[key] for key in theirs} == theirs


def test_reference_loop_imports_no_gemlab() -> None:
    source = (ROOT / "examples" / "gem_loop.py").read_text()
    imports = [line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert {name.split(".")[0] for name in imports} <= {"asyncio", "json", "random", "sys", "gem", "numpy", "tinker"}
