"""Saved weights on disk: where they go, what a folder holds, and how paths resolve.

A path the local backend returns looks like Tinker's with its own scheme:
``local://<run_id>/<kind>/<name>``, where kind is ``weights`` (``save_state``: LoRA weights and
optimizer state), ``sampler_weights`` (``save_weights_for_sampler``) or ``external``
(``save_weights_external``). It names the folder ``<root>/<run_id>/<kind>/<name>``, with root
``$GEMLAB_LOCAL_DIR`` (default ``~/.cache/gemlab/local``) unless the ``LocalServiceClient`` was
given another. Wherever a path is taken, a plain folder path works too. A folder holds:

- ``adapter_model.safetensors`` and ``adapter_config.json``: the LoRA weights in PEFT's format
  (``PeftModel.from_pretrained`` loads them onto the same base model);
- ``gemlab.json``: base model, LoRA settings, seed and step count;
- ``optimizer.pt``: AdamW's state (``save_state`` only).
"""

from __future__ import annotations

import errno
import json
import os
import re
import itertools
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

SCHEME = "local://"
ROOT_ENV = "GEMLAB_LOCAL_DIR"
KINDS = ("weights", "sampler_weights", "external")
WEIGHTS_FILE = "adapter_model.safetensors"
META_FILE = "gemlab.json"
OPTIMIZER_FILE = "optimizer.pt"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

# Roots of the runs this process created, so their paths resolve whichever client asks, and
# what each run is (base model, LoRA settings, user metadata), for the rest client.
_run_roots: dict[str, Path] = {}
_run_info: dict[str, dict[str, Any]] = {}


def default_root() -> Path:
    """``$GEMLAB_LOCAL_DIR``, else ``~/.cache/gemlab/local``."""
    return Path(os.environ.get(ROOT_ENV) or Path.home() / ".cache" / "gemlab" / "local").expanduser()


_run_numbers = itertools.count(1)


def new_run_id() -> str:
    """A fresh run id, unique on this machine and numbered in the order this process made them."""
    return f"run-{uuid.uuid4().hex[:8]}-{next(_run_numbers)}"


def register_run(run_id: str, root: Path, info: dict[str, Any] | None = None) -> None:
    """Remember that ``run_id``'s checkpoints live under ``root`` (and, when given, what it is)."""
    _run_roots[run_id] = root
    if info is not None:
        _run_info[run_id] = info


def run_folder(run_id: str, root: Path | None = None) -> Path:
    """The folder holding run ``run_id``'s checkpoints."""
    return _run_roots.get(run_id, root or default_root()) / run_id


def run_info(run_id: str) -> dict[str, Any] | None:
    """What this process registered about run ``run_id``, if it created it."""
    return _run_info.get(run_id)


def checkpoint_path(run_id: str, kind: str, name: str) -> str:
    """The ``local://`` path of checkpoint ``name`` of ``kind`` in run ``run_id``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"Checkpoint name {name!r} is not allowed: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return f"{SCHEME}{run_id}/{kind}/{name}"


def folder_of(path: str, root: Path | None = None) -> Path:
    """The folder a checkpoint path names, whether or not it exists yet."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"A checkpoint path must be a non-empty string, got {path!r}")
    if path.startswith("tinker://"):
        raise ValueError(
            f"{path!r} is a checkpoint on Tinker's servers; the local backend cannot read it. "
            f"Local checkpoints look like '{SCHEME}<run_id>/weights/<name>' or are folder paths."
        )
    if path.startswith(SCHEME):
        relative = path[len(SCHEME) :]
        run_id = relative.split("/", 1)[0]
        return _run_roots.get(run_id, root or default_root()) / relative
    return Path(path).expanduser()


def resolve(path: str, root: Path | None = None) -> Path:
    """The folder of saved weights that ``path`` names; raises if there are none."""
    folder = folder_of(path, root)
    if not (folder / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(
            f"No saved weights at {path!r} (looked in {folder}). Paths come from save_state, "
            f"save_weights_for_sampler or save_weights_external, as '{SCHEME}<run_id>/<kind>/<name>' "
            f"under {root or default_root()}, or are folders holding {WEIGHTS_FILE}."
        )
    return folder


@dataclass
class Checkpoint:
    """What a checkpoint folder holds."""

    weights: dict[str, torch.Tensor]
    meta: dict[str, Any]
    optimizer: dict[str, Any] | None


def save(
    folder: Path,
    weights: dict[str, torch.Tensor],
    meta: dict[str, Any],
    adapter_config: Any,
    optimizer: dict[str, Any] | None = None,
    overwrite: bool = True,
) -> None:
    """Write a checkpoint folder (atomically: a crash leaves the old one or none)."""
    if folder.exists() and not overwrite:
        raise FileExistsError(f"A checkpoint already exists at {folder}; pass overwrite=True to replace it")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        save_file(weights, staging / WEIGHTS_FILE)
        adapter_config.save_pretrained(staging)  # PEFT's adapter_config.json
        (staging / META_FILE).write_text(json.dumps(meta, indent=2))
        if optimizer is not None:
            try:
                torch.save(optimizer, staging / OPTIMIZER_FILE)
            except RuntimeError as error:  # torch reports a failed write (a full disk) as a C++ RuntimeError
                full = shutil.disk_usage(staging).free < 1 << 20
                raise OSError(errno.ENOSPC if full else errno.EIO, os.strerror(errno.ENOSPC if full else errno.EIO), str(folder)) from error
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_meta(folder: Path) -> dict[str, Any]:
    """The ``gemlab.json`` of the checkpoint in ``folder``: base model, LoRA settings, seed."""
    meta_file = folder / META_FILE
    if not meta_file.is_file():
        raise FileNotFoundError(f"{folder} holds LoRA weights but no {META_FILE}; it was not saved by gemlab.local")
    return json.loads(meta_file.read_text())


def load(folder: Path) -> Checkpoint:
    """Read the checkpoint in ``folder`` (from ``resolve``)."""
    optimizer_file = folder / OPTIMIZER_FILE
    optimizer = None
    if optimizer_file.is_file():
        try:
            # map to the CPU: a run saved on a GPU resumes on a laptop (the optimizer moves its state
            # to its parameters' device when it loads it)
            optimizer = torch.load(optimizer_file, weights_only=True, map_location="cpu")
        except Exception as error:  # torch's message advises weights_only=False: never for a damaged file
            raise ValueError(f"{optimizer_file} is damaged and cannot be read ({type(error).__name__})") from None
    return Checkpoint(weights=load_file(folder / WEIGHTS_FILE), meta=load_meta(folder), optimizer=optimizer)


def copy(folder: Path, destination: Path) -> None:
    """Copy a checkpoint folder to ``destination`` (``ServiceClient.copy_weights``)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(folder, destination)
