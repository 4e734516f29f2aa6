"""Hugging Face models by name, from the local cache only: is ``org/model`` here, and where.

The local backend never downloads. A name such as ``Qwen/Qwen3-0.6B`` loads when its snapshot is
in the Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
``~/.cache/huggingface/hub``, as ``huggingface_hub`` resolves it) with a config and weights;
otherwise it is not available here (``models.resolve_model_name`` says what is).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def cached_snapshot(name: str) -> Path | None:
    """The cache folder holding ``name``'s config and weights, or ``None`` when it is not
    there (never touches the network)."""
    if name.count("/") != 1 or name.startswith(("/", ".", "~")):
        return None
    return _snapshot(name, cache_dir())


def cached_models() -> list[str]:
    """The ``org/model`` names whose config and weights are in the Hugging Face cache, sorted."""
    folders = Path(cache_dir()).glob("models--*--*")
    names = sorted(folder.name.removeprefix("models--").replace("--", "/", 1) for folder in folders)
    return [name for name in names if cached_snapshot(name) is not None]


def cache_dir() -> str:
    """The hub cache as ``huggingface_hub`` resolves it, read now (its constants are read once,
    at import, so a later change of ``$HF_HOME`` would go unseen)."""
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return os.path.expanduser(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub"))


@functools.lru_cache(maxsize=64)
def _snapshot(name: str, cache_dir: str) -> Path | None:
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(name, cache_dir=cache_dir, local_files_only=True))
    except Exception:  # absent, partial or malformed: huggingface_hub raises several kinds here
        return None
    if (folder / "config.json").is_file() and any((folder / f).is_file() for f in WEIGHT_FILES):
        return folder
    return None
