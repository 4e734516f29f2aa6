"""``init_state``: a new ``gemlab.atropos`` run starts from saved weights (a warm-up's, say) rather
than a fresh LoRA; a path with no weights, or weights of another model, is refused in one line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tinker import types
from transformers import AutoTokenizer

from gemlab.atropos.config import AtroposConfig
from gemlab.atropos.trainer import AtroposTrainer
from tinker_emulator import TINY, TINY_CHAT, LocalServiceClient
from tinker_emulator.checkpoints import folder_of
from tinker_emulator.models import model_source

TOKENS = [1, 5, 9, 14, 3, 7, 2, 11]


def datum() -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={
            "target_tokens": TOKENS[1:],
            "weights": [1.0] * (len(TOKENS) - 1),
            "logprobs": [-1.0] * (len(TOKENS) - 1),
            "advantages": [1.0] * (len(TOKENS) - 1),
        },
    )


def logprobs(client) -> list[float]:
    out = client.forward([datum()], "cross_entropy").result()
    return out.loss_fn_outputs[0]["logprobs"].tolist()


def test_a_run_starts_from_the_saved_weights_and_refuses_bad_ones(tmp_path: Path) -> None:
    service = LocalServiceClient(device="cpu", root=tmp_path / "saved")
    trained = service.create_lora_training_client(base_model=TINY_CHAT, rank=4, seed=0).result()
    trained.forward_backward([datum()], "importance_sampling").result()
    trained.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    path = trained.save_state("warm").result().path
    fresh = service.create_lora_training_client(base_model=TINY_CHAT, rank=4, seed=0).result()
    assert logprobs(fresh) != pytest.approx(logprobs(trained), abs=1e-4)  # the step moved the weights

    # another process sees only the folder: hand it that, to a service client rooted elsewhere
    other = LocalServiceClient(device="cpu", root=tmp_path / "other")
    trainer = AtroposTrainer(
        AtroposConfig(model_name=TINY_CHAT, lora_rank=4, log_dir=str(tmp_path)), other, say=lambda _: None
    )
    started = asyncio.run(trainer.start_from(str(folder_of(path))))
    assert logprobs(started) == pytest.approx(logprobs(trained), abs=1e-6)

    with pytest.raises(ValueError, match=r"init_state='.*nowhere'.*No saved weights"):
        asyncio.run(trainer.start_from(str(tmp_path / "nowhere")))
    smaller = AtroposTrainer(
        AtroposConfig(model_name=TINY, lora_rank=4, log_dir=str(tmp_path)), other, say=lambda _: None
    )
    with pytest.raises(ValueError, match="was trained on"):
        asyncio.run(smaller.start_from(str(folder_of(path))))


class Client:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def get_tokenizer(self):
        return self.tokenizer


def test_environments_get_a_tokenizer_folder_where_the_model_has_none(tmp_path: Path) -> None:
    """SmolLM2 loads from gguf: its package folder has no tokenizer files for atroposlib's
    ``AutoTokenizer.from_pretrained``, so the trainer saves one in its run folder and names that."""
    tokenizer = AutoTokenizer.from_pretrained(model_source(TINY_CHAT)[0])
    trainer = AtroposTrainer(AtroposConfig(model_name=TINY_CHAT, log_dir=str(tmp_path)), None, say=lambda _: None)
    trainer.training_client = Client(tokenizer)
    assert trainer.tokenizer_folder() == str(model_source(TINY_CHAT)[0])  # the model's own folder has the files
    tokenizer.name_or_path = str(tmp_path / "a-gguf-package")
    folder = trainer.tokenizer_folder()
    assert Path(folder) == trainer.run_dir / "tokenizer"
    assert (
        AutoTokenizer.from_pretrained(folder)("Calculate 3 + 4.")["input_ids"]
        == tokenizer("Calculate 3 + 4.")["input_ids"]
    )
