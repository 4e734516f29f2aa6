"""The tiny model zoo: a 0.4M-parameter Llama and its tokenizer (``model.py``, the tokenizer's
file in ``assets/``), its pretraining (``pretrain.py``), and the one registry of what each model
is (``registry.py``), stored as Hugging Face folders in the Tinker emulator's catalogue
(``tinker_emulator/catalogue/``), which loads them by name."""

from gemlab.tiny.registry import TINY, TINY_CHAT, TINY_GUESS20, TINY_MODELS, TINY_PRODUCTS, TINY_RANDOM, TINY_SUMS

__all__ = ["TINY", "TINY_CHAT", "TINY_GUESS20", "TINY_MODELS", "TINY_PRODUCTS", "TINY_RANDOM", "TINY_SUMS"]
