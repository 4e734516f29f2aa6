"""The one registry of the model names gemlab's code uses: the tiny models the Tinker emulator
carries in its catalogue (``gemlab.tiny.registry`` says what each one is), SmolLM2, and Tinker's
default. Names only, with no model import, so that ``config`` and the roles can name a model
without loading one. The names the emulator's own code uses are defined there
(``tinker_emulator.model_names``, as light) and imported here."""

from tinker_emulator.model_names import SMOLLM2, TINY, TINY_CHAT, TINY_RANDOM

TINY_GUESS20 = "gemlab/tiny-guess20"
TINY_PRODUCTS = "gemlab/tiny-products"
TINY_SUMS = "gemlab/tiny-sums"
QWEN3_4B_INSTRUCT = "Qwen/Qwen3-4B-Instruct-2507"  # Tinker's model in GEM's example; Config's default

__all__ = [
    "QWEN3_4B_INSTRUCT",
    "SMOLLM2",
    "TINY",
    "TINY_CHAT",
    "TINY_GUESS20",
    "TINY_PRODUCTS",
    "TINY_RANDOM",
    "TINY_SUMS",
]
