"""The model names the emulator's code, docs and users name: the catalogue's tiny models it serves
by default (``catalogue/``) and SmolLM2, and the catalogue's index. Names only, with no model import: importing
them loads neither PyTorch nor transformers (``gemlab.model_names`` imports them so; ``models.py`` loads)."""

from pathlib import Path

# {name: {"folder": folder beside this file, "description": one line}}; gemlab.tiny.registry writes it
CATALOGUE_FILE = Path(__file__).resolve().parent / "catalogue" / "models.json"

TINY = "gemlab/tiny"
TINY_RANDOM = "gemlab/tiny-random"
TINY_CHAT = "gemlab/tiny-chat"  # the stand-in a Tinker model name runs on by default
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
