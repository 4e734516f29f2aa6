"""GEMLAB_DTYPE=bfloat16 runs sampling and training in bfloat16, and kl_sample_train shows it."""

from __future__ import annotations

import math

import pytest

from gemlab import Trainer, make_config
from gemlab.local.precision import compute_dtype


def _one_step(tmp_path, name):
    trainer = Trainer(make_config("laptop", log_dir=str(tmp_path), run_name=name, max_steps=1), progress=False)
    try:
        return trainer.step()
    finally:
        trainer.close()


def test_bfloat16_step_logs_a_larger_sampler_learner_difference(tmp_path, monkeypatch):
    fp32 = _one_step(tmp_path, "fp32")
    monkeypatch.setenv("GEMLAB_DTYPE", "bfloat16")
    bf16 = _one_step(tmp_path, "bf16")
    assert math.isfinite(bf16["train/kl_sample_train_v1"])
    assert bf16["train/logprob_diff_abs"] > 10 * fp32["train/logprob_diff_abs"]


def test_unknown_dtype_says_what_is_allowed(monkeypatch):
    monkeypatch.setenv("GEMLAB_DTYPE", "float16")
    with pytest.raises(ValueError, match="float32, bfloat16"):
        compute_dtype()
