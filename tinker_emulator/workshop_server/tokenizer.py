"""Tokenizers offline: the served model's tokenizer saved where ``transformers`` looks for a hub name.

``AutoTokenizer.from_pretrained("Qwen/Qwen3-4B-Instruct-2507")`` (what the SDK's ``get_tokenizer`` and
tinker-cookbook call) reads ``$HF_HOME/hub/models--Qwen--Qwen3-4B-Instruct-2507/snapshots/<rev>/``
when ``HF_HUB_OFFLINE=1``. This writes the tokenizer of the local model that name maps to there,
once, so the client needs neither the hub nor gemlab.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tinker_emulator.models import build_model, load_tokenizer, resolve_model_name
from tinker_emulator.workshop_server import served

REVISION = "gemlab-local"


def hub_cache() -> Path:
    """``huggingface_hub``'s cache folder (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def install_tokenizer(name: str, cache: Path | None = None) -> Path:
    """Save the tokenizer that model ``name`` is served with as hub model ``name``; its snapshot folder."""
    if name.count("/") != 1:
        raise ValueError(f"{name!r} is not a hub model name: expected 'org/model'")
    local = resolve_model_name(name, served.stand_in())
    tokenizer = load_tokenizer(local)
    repo = (cache or hub_cache()) / f"models--{name.replace('/', '--')}"
    commit = hashlib.sha1(f"{REVISION}:{name}".encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(snapshot)
    build_model(local).config.save_pretrained(snapshot)  # AutoTokenizer reads the model type from it
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
