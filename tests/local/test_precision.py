"""bfloat16: chosen where it is measured fast, its weights held in bfloat16 (the numbers of casting
float32 weights at every call, without the casts), adapters and optimizer state in float32."""

from __future__ import annotations

import math

import pytest
import torch
from tinker import types

from gemlab import Trainer, make_config
from tinker_emulator import TINY, LocalServiceClient, lora, models, precision
from tinker_emulator.models import LoadedModel, load_tokenizer
from tinker_emulator.precision import requested_dtype, weights_dtype

SMOLLM2_PARAMETERS = 134_515_008
CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_auto_picks_bfloat16_only_where_measured_fast_on_a_large_model_on_a_cpu(monkeypatch):
    monkeypatch.delenv("GEMLAB_DTYPE", raising=False)
    monkeypatch.setattr(precision, "bfloat16_speedup", lambda: 1.49)
    assert weights_dtype(SMOLLM2_PARAMETERS, CPU) == torch.float32
    monkeypatch.setattr(precision, "bfloat16_speedup", lambda: 1.5)
    assert weights_dtype(SMOLLM2_PARAMETERS, CPU) == torch.bfloat16
    assert weights_dtype(400_000, CPU) == torch.float32  # the tiny models
    assert weights_dtype(SMOLLM2_PARAMETERS, CUDA) == torch.float32
    monkeypatch.setenv("GEMLAB_DTYPE", "float32")
    assert weights_dtype(SMOLLM2_PARAMETERS, CPU) == torch.float32
    monkeypatch.setenv("GEMLAB_DTYPE", "bfloat16")
    monkeypatch.setattr(precision, "bfloat16_speedup", lambda: 0.02)
    assert weights_dtype(400_000, CPU) == torch.bfloat16  # asked for: as asked


def test_held_bfloat16_weights_compute_what_autocast_computes_from_float32_weights():
    """Bit for bit, with a LoRA adapter on every layer (its input not sent through float32 on the
    way, which changes nothing either); the output layer gets its own copy (the embeddings stay
    float32), and the adapter stays float32."""
    from gemlab.tiny.model import build_tiny_model

    tokenizer = load_tokenizer(TINY)
    loaded = []
    for hold in (False, True):
        model = build_tiny_model(seed=0, pretrained=True).requires_grad_(False)
        if hold:
            precision.hold(model, torch.bfloat16)
        loaded.append(LoadedModel(name=TINY, model=model, tokenizer=tokenizer, device=CPU, dtype=torch.bfloat16))
    held = loaded[1].model
    assert held.lm_head.weight.dtype == torch.bfloat16 and held.get_input_embeddings().weight.dtype == torch.float32
    ids = torch.tensor([tokenizer.encode("Guess a number between 1 and 10. \\boxed{5}")])
    logits = []
    for lm in loaded:
        name = lora.add_adapter(lm, lora.LoraSpec(rank=4), seed=0, prefix="t")
        for p in lora.parameters(lm, name):
            assert p.dtype == torch.float32
            torch.nn.init.normal_(p, std=0.05, generator=torch.Generator().manual_seed(p.numel()))
        with lora.active(lm, name) as model:
            logits.append(model(input_ids=ids).logits.float())
    assert torch.equal(logits[0], logits[1])
    for module in loaded[0].peft.modules():  # PEFT's own round trip of the input through float32
        if hasattr(module, "cast_input_dtype_enabled"):
            module.cast_input_dtype_enabled = True
    with lora.active(loaded[0], name) as model:
        assert torch.equal(model(input_ids=ids).logits.float(), logits[0])


def _learner_logprobs(training, tokens):
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )
    return training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_torch()


def test_bfloat16_rounds_the_learners_logprobs_and_a_step_keeps_float32_adapters_and_optimizer(tmp_path, monkeypatch):
    # Whether a bfloat16 sampler and learner then disagree more than float32 ones depends on the CPU
    # (0.03 nats with native bfloat16; an AVX2-only CPU rounds both alike, ~1e-6): not asserted here.
    training = (
        LocalServiceClient(root=str(tmp_path)).create_lora_training_client(base_model=TINY, rank=8, seed=0).result()
    )
    tokens = training.get_tokenizer().encode("Guess a number between 1 and 10. \\boxed{5}")
    fp32 = _learner_logprobs(training, tokens)
    monkeypatch.setenv("GEMLAB_DTYPE", "bfloat16")
    monkeypatch.setattr(models, "_models", {})  # the models load again, in bfloat16
    trainer = Trainer(make_config("laptop", log_dir=str(tmp_path), run_name="bf16", max_steps=1), progress=False)
    try:
        metrics = trainer.step()
        learner = trainer.training_client
        assert learner._model.dtype == torch.bfloat16
        difference = (_learner_logprobs(learner, tokens) - fp32).abs().max().item()
        assert 1e-3 < difference < 1.0  # bfloat16 keeps 8 bits of mantissa; float32 would agree to ~1e-6
        assert {p.dtype for p in learner._params} == {torch.float32}
        state = [t for s in learner._optimizer.state.values() for t in s.values() if t.ndim]
        assert state and {t.dtype for t in state} == {torch.float32}
    finally:
        trainer.close()
    assert math.isfinite(metrics["train/kl_sample_train_v1"]) and math.isfinite(metrics["train/logprob_diff_abs"])


def test_unknown_dtype_says_what_is_allowed(monkeypatch):
    monkeypatch.setenv("GEMLAB_DTYPE", "float16")
    with pytest.raises(ValueError, match="auto, float32, bfloat16"):
        requested_dtype()
