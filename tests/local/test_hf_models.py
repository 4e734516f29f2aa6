"""A causal LM in the Hugging Face cache loads by its own name, offline, with its own tokenizer and
chat template; a name that is not cached is refused in one line naming what is here, or runs on
a stand-in that the caller named, with one warning line."""

from __future__ import annotations

import logging

import pytest
import torch
from tinker import types
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from gemlab.tiny.model import load_tiny_tokenizer
from tests.helpers.local import rl_datum
from tinker_emulator import LocalServiceClient
from tinker_emulator.hf_models import cached_snapshot
from tinker_emulator.models import TINY_CHAT, UnknownModelError, resolve_model_name

NAME = "acme/mini-chat"
QWEN3_NAME = "acme/qwen3-mini"  # a Qwen-class architecture (q/k norms, explicit head_dim)
MARKER_TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "


def _save_into_hub_cache(cache, name: str, qwen3: bool = False) -> None:
    """A tiny Llama (or Qwen3) and its tokenizer in the hub cache layout: refs/main names the snapshot."""
    commit = "0" * 40
    repo = cache / f"models--{name.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    tokenizer = load_tiny_tokenizer()
    tokenizer.chat_template = MARKER_TEMPLATE
    torch.manual_seed(0)
    config_class, model_class = (Qwen3Config, Qwen3ForCausalLM) if qwen3 else (LlamaConfig, LlamaForCausalLM)
    config = config_class(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
    )
    model_class(config).save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    _save_into_hub_cache(cache, NAME)
    _save_into_hub_cache(cache, QWEN3_NAME, qwen3=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def test_cached_model_loads_by_name_with_its_own_tokenizer(hub_cache, tmp_path):
    assert resolve_model_name(NAME) == NAME
    service = LocalServiceClient(device="cpu", root=tmp_path / "ckpt")
    training = service.create_lora_training_client(base_model=NAME, rank=4, seed=0).result()
    tokenizer = training.get_tokenizer()
    assert tokenizer.chat_template == MARKER_TEMPLATE
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "[user] hi\n[assistant] "
    assert training._model.model.config.hidden_size == 32  # the cached model, not the tiny preset (64 wide)
    prompt = tokenizer.encode(text)
    sampling = training.save_weights_and_get_sampling_client().result()
    response = sampling.sample(
        types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=4, seed=1)
    ).result()
    assert [len(s.tokens) for s in response.sequences] == [4, 4] or all(
        s.stop_reason == "stop" for s in response.sequences
    )
    data = [rl_datum(prompt, s.tokens, s.logprobs, 1.0) for s in response.sequences]
    out = training.forward_backward(data, "importance_sampling").result()
    assert torch.isfinite(torch.tensor(out.metrics["loss:sum"]))


def test_cached_qwen3_trains_by_name(hub_cache, tmp_path):
    service = LocalServiceClient(device="cpu", root=tmp_path / "ckpt")
    training = service.create_lora_training_client(base_model=QWEN3_NAME, rank=4, seed=0).result()
    assert training._model.model.config.model_type == "qwen3"
    adapted = {name.split(".")[-1] for name in training._model.peft.peft_config[training._adapter].target_modules}
    # Tinker adapts the unembedding too
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}
    tokenizer = training.get_tokenizer()
    prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False))
    sampling = training.save_weights_and_get_sampling_client().result()
    response = sampling.sample(
        types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=4, seed=1)
    ).result()
    data = [rl_datum(prompt, s.tokens, s.logprobs, 1.0) for s in response.sequences]
    before = [p.detach().clone() for p in training._params]
    out = training.forward_backward(data, "importance_sampling").result()
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert torch.isfinite(torch.tensor(out.metrics["loss:sum"]))
    assert any(not torch.equal(a, b) for a, b in zip(before, training._params, strict=True))


def test_absent_name_is_refused_naming_what_is_here(hub_cache):
    """Not trained on another model behind the caller's back: refused, with the cache's own models listed."""
    with pytest.raises(UnknownModelError) as refused:
        resolve_model_name("acme/not-downloaded")
    line = str(refused.value)
    assert "\n" not in line and line.startswith(
        "Unknown model 'acme/not-downloaded': not a local model and not in the Hugging Face cache"
    )
    assert f"in the Hugging Face cache ({hub_cache}): {NAME}, {QWEN3_NAME};" in line
    assert (
        "gemlab/tiny-chat" in line and "SmolLM2-135M-Instruct" in line and "path of a Hugging Face model folder" in line
    )


def test_absent_name_runs_on_a_named_stand_in_with_one_line(hub_cache, caplog, monkeypatch):
    with caplog.at_level(logging.WARNING, logger="tinker_emulator"):
        assert resolve_model_name("acme/not-downloaded", stand_in=TINY_CHAT) == TINY_CHAT
        monkeypatch.setenv("GEMLAB_LOCAL_MODEL", TINY_CHAT)
        assert resolve_model_name("acme/not-downloaded") == TINY_CHAT
    lines = [r.getMessage() for r in caplog.records if "acme/not-downloaded" in r.getMessage()]
    assert len(lines) == 1 and "not available locally" in lines[0] and "\n" not in lines[0]


def test_partial_snapshot_without_weights_is_absent(hub_cache):
    repo = hub_cache / "models--acme--config-only"
    (repo / "snapshots" / "1").mkdir(parents=True)
    (repo / "snapshots" / "1" / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("1")
    assert cached_snapshot("acme/config-only") is None
    assert cached_snapshot(NAME) is not None


def test_overlapping_loads_turn_the_bars_off_once_and_back_on_after_the_last():
    """Two loads that overlap (a server's threads, an export): bars stay off until both end, and
    the GGUF reader's bar and transformers' bars are as they were after."""
    from transformers import modeling_gguf_pytorch_utils as gguf_reader
    from transformers.utils import logging as hf_logging

    from tinker_emulator.models import _no_load_bars

    reader_bar = gguf_reader.tqdm
    hf_logging.enable_progress_bar()
    first, second = _no_load_bars(), _no_load_bars()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first load ends while the second still runs
    assert not hf_logging.is_progress_bar_enabled() and gguf_reader.tqdm is not reader_bar
    second.__exit__(None, None, None)
    assert hf_logging.is_progress_bar_enabled() and gguf_reader.tqdm is reader_bar
