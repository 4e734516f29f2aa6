"""The one registry of the tiny model zoo: what each ``gemlab/tiny*`` model is and how it is built;
each is stored as an ordinary Hugging Face folder in the Tinker emulator's model catalogue
(``tinker_emulator/catalogue/``), where the emulator loads it by name.

``write_zoo`` writes the folders and the catalogue's ``models.json`` (name -> folder, description)
from ``TINY_MODELS``: gemlab writes into the emulator's catalogue and the emulator reads nothing of
gemlab's, so it stands alone. The names themselves are in ``gemlab.model_names`` (the few the
emulator's code uses, ``TINY``, ``TINY_CHAT``, ``TINY_RANDOM``, defined in ``tinker_emulator.models``).
``python -m gemlab.tiny`` rewrites every folder (after a tokenizer change); ``python -m
gemlab.tiny.pretrain`` retrains a base and rewrites the folders built from it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gemlab.env_ids import GUESS_20, GUESS_EASY, PRODUCTS_1DIGIT, SUMS_1DIGIT
from gemlab.model_names import TINY, TINY_CHAT, TINY_GUESS20, TINY_PRODUCTS, TINY_RANDOM, TINY_SUMS
from tinker_emulator.model_names import CATALOGUE_FILE

# The model code (PyTorch, transformers) loads where a model is built: the names, and --help, answer without it.
if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

INDEX_FILE = CATALOGUE_FILE  # what tinker_emulator reads: {name: {"folder": ..., "description": ...}}
ZOO = INDEX_FILE.parent


@dataclass(frozen=True)
class TinyModel:
    """One model of the zoo: a line saying what it is, the pretrained base whose weights it loads
    (``None``: random weights from seed 0), whether it has Qwen3's other chat markers as single
    tokens, and for a base the env its sloppy teacher plays in ``pretrain.py``."""

    description: str
    weights_from: str | None = None
    chat_markers: bool = False
    teacher_env: str | None = None


TINY_MODELS: dict[str, TinyModel] = {
    TINY: TinyModel(
        "0.4M-parameter Llama pretrained to play GuessTheNumber sloppily (gemlab/tiny); trains in seconds on a CPU",
        weights_from=TINY,
        teacher_env=GUESS_EASY,
    ),
    TINY_RANDOM: TinyModel("the same model before pretraining: random weights, writes noise"),
    TINY_CHAT: TinyModel(
        "gemlab/tiny plus Qwen3's <think>, <tool_call>, ... markers as single tokens (for tinker-cookbook's renderers)",
        weights_from=TINY,
        chat_markers=True,
    ),
    TINY_GUESS20: TinyModel(
        "gemlab/tiny pretrained the same way on GuessTheNumber 1-20 with 20 turns (the gamma study's base)",
        weights_from=TINY_GUESS20,
        teacher_env=GUESS_20,
    ),
    TINY_PRODUCTS: TinyModel(
        "gemlab/tiny pretrained the same way on rg:products with one-digit factors (a single-turn task)",
        weights_from=TINY_PRODUCTS,
        teacher_env=PRODUCTS_1DIGIT,
    ),
    TINY_SUMS: TinyModel(
        "gemlab/tiny pretrained the same way on rg:basic_arithmetic as sums of two one-digit numbers (a "
        "second single-turn task)",
        weights_from=TINY_SUMS,
        teacher_env=SUMS_1DIGIT,
    ),
}
BASES = [name for name, spec in TINY_MODELS.items() if spec.teacher_env]  # the names pretrain.py trains


def folder(name: str) -> Path:
    """The Hugging Face folder of tiny model ``name`` (``gemlab/tiny-chat`` -> ``catalogue/tiny-chat``)."""
    return ZOO / name.split("/", 1)[1]


def weights_file(base: str) -> Path:
    """The pretrained weights of ``base`` (its folder's ``model.safetensors``)."""
    return folder(base) / "model.safetensors"


def build(name: str) -> LlamaForCausalLM:
    """A fresh copy of tiny model ``name``, built from the model code and its base's weights."""
    from gemlab.tiny.model import build_tiny_model

    spec = TINY_MODELS[name]
    weights = weights_file(spec.weights_from) if spec.weights_from else None
    return build_tiny_model(seed=0, weights=weights, chat_markers=spec.chat_markers)


def tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The tokenizer of tiny model ``name``."""
    from gemlab.tiny.model import load_tiny_tokenizer

    return load_tiny_tokenizer(chat_markers=TINY_MODELS[name].chat_markers)


def write_folder(name: str, model: LlamaForCausalLM | None = None) -> Path:
    """Save tiny model ``name`` (``model``, else ``build(name)``) and its tokenizer as a Hugging Face folder."""
    model = build(name) if model is None else model
    target = folder(name)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    tokenizer(name).save_pretrained(target)
    return target


def write_zoo(names: list[str] | None = None) -> None:
    """Rewrite the folders of ``names`` (default: every model, bases first) and ``models.json``."""
    for name in sorted(TINY_MODELS if names is None else names, key=lambda name: name not in BASES):
        write_folder(name)
    index = {name: {"folder": folder(name).name, "description": spec.description} for name, spec in TINY_MODELS.items()}
    INDEX_FILE.write_text(json.dumps(index, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m gemlab.tiny", description="Rewrite the tiny model zoo's Hugging Face folders."
    )
    parser.add_argument("names", nargs="*", help=f"which models (default: all): {', '.join(TINY_MODELS)}")
    names = parser.parse_args().names
    if unknown := sorted(set(names) - set(TINY_MODELS)):
        parser.error(f"unknown tiny model(s) {unknown}; choose from {', '.join(TINY_MODELS)}")
    write_zoo(names or None)
    print(f"wrote {INDEX_FILE.parent}")


if __name__ == "__main__":
    main()
