"""The tiny model zoo: a 0.4M-parameter Llama and its tokenizer (``model.py``), its pretraining
(``pretrain.py``), and the one registry of its names (``registry.py``), stored as Hugging Face
folders in ``assets/`` that the Tinker emulator (``tinker_emulator``) loads by name."""

from gemlab.tiny.registry import TINY, TINY_CHAT, TINY_GUESS20, TINY_MODELS, TINY_PRODUCTS, TINY_RANDOM, TINY_SUMS

__all__ = ["TINY", "TINY_CHAT", "TINY_GUESS20", "TINY_MODELS", "TINY_PRODUCTS", "TINY_RANDOM", "TINY_SUMS"]
