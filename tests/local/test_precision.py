"""GEMLAB_DTYPE=bfloat16 runs the passes in bfloat16: the learner's logprobs are rounded, a step still trains."""

from __future__ import annotations

import math

import pytest

from tinker import types

from gemlab import Trainer, make_config
from tinker_emulator import TINY, LocalServiceClient
from tinker_emulator.precision import compute_dtype


def _learner_logprobs(training, tokens):
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )
    return training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_torch()


def test_bfloat16_rounds_the_learners_logprobs_and_a_step_still_logs_a_finite_kl(tmp_path, monkeypatch):
    # Whether a bfloat16 sampler and learner then disagree more than float32 ones depends on the CPU
    # (0.03 nats with native bfloat16; an AVX2-only CPU rounds both alike, ~1e-6): not asserted here.
    training = LocalServiceClient(root=str(tmp_path)).create_lora_training_client(base_model=TINY, rank=8, seed=0).result()
    tokens = training.get_tokenizer().encode("Guess a number between 1 and 10. \\boxed{5}")
    fp32 = _learner_logprobs(training, tokens)
    monkeypatch.setenv("GEMLAB_DTYPE", "bfloat16")
    difference = (_learner_logprobs(training, tokens) - fp32).abs().max().item()
    assert 1e-3 < difference < 1.0  # bfloat16 keeps 8 bits of mantissa; float32 would agree to ~1e-6
    trainer = Trainer(make_config("laptop", log_dir=str(tmp_path), run_name="bf16", max_steps=1), progress=False)
    try:
        metrics = trainer.step()
    finally:
        trainer.close()
    assert math.isfinite(metrics["train/kl_sample_train_v1"]) and math.isfinite(metrics["train/logprob_diff_abs"])


def test_unknown_dtype_says_what_is_allowed(monkeypatch):
    monkeypatch.setenv("GEMLAB_DTYPE", "float16")
    with pytest.raises(ValueError, match="float32, bfloat16"):
        compute_dtype()
