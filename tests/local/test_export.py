"""``python -m tinker_emulator.export`` (run here through its ``main``) writes a local model as a
Hugging Face folder that loads offline and computes what the preset computes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from gemlab.tiny import registry


def test_export_writes_a_folder_that_matches_the_preset(tmp_path: Path, monkeypatch, training):
    """Also after a training client has put LoRA layers into the shared model (``training``)."""
    from tinker_emulator import export as module

    folder = tmp_path / "tiny-hf"
    monkeypatch.setenv("GEMLAB_LOCAL_MODEL", "gemlab/tiny-chat")
    monkeypatch.setattr(sys, "argv", ["export", "Qwen/Qwen3-4B-Instruct-2507", str(folder)])  # its stand-in
    module.main()
    assert not any("lora" in key for key in load_file(folder / "model.safetensors"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    reference = registry.build(registry.TINY_CHAT)
    text = "<|im_start|>user\nGuess my number.<|im_end|>\n<|im_start|>assistant\n<think>\n</think>\n\n"
    ids = torch.tensor([tokenizer.encode(text)])
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits)
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False).startswith("<|im_start|>")


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, monkeypatch):
    from tinker_emulator import export as module

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    for args, message in [
        (
            ["gemlab/tiny", str(tmp_path / "full")],
            f"tinker_emulator.export: {tmp_path / 'full'} is not empty; choose a new folder",
        ),
        (
            ["tiny", str(tmp_path / "other")],
            "tinker_emulator.export: Unknown model 'tiny': not a local model. Available: gemlab/tiny, ",
        ),
    ]:
        monkeypatch.setattr(sys, "argv", ["export", *args])
        try:
            module.main()
        except SystemExit as exc:
            assert str(exc.code).startswith(message), exc.code
            assert "\n" not in str(exc.code)
        else:
            raise AssertionError("no error")
    assert not (tmp_path / "other").exists() and os.listdir(tmp_path / "full") == ["keep.txt"]
