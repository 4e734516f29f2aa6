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

A save is written into a staging folder beside its target (``.gemlab-staging-<token>-<name>``,
hidden, so no listing takes it for a checkpoint) and renamed into place once whole; a process
killed mid-save leaves that staging folder, which ``recover`` finishes (whole, target missing)
or removes (anything else). A full disk is reported as ``DiskFull`` (``OSError`` ENOSPC).
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import re
import shutil
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
# What a checkpoint name or run id may be: a file name on any disk (200 characters leave room for
# the staging prefix within the 255 a file name may have) that no path trick can change.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
NAME_RULE = "1-200 letters, digits, '.', '_' and '-', starting with a letter or digit"
STAGING_PREFIX = ".gemlab-staging-"
_STAGING = re.compile(re.escape(STAGING_PREFIX) + r"[0-9a-f]{12}-(?P<name>.+)")
COMPLETE_FILE = ".complete"  # the last file written into a staging folder: the save is whole
logger = logging.getLogger("tinker_emulator")

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


def brief(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to about ``limit`` characters (a client may send a name of any length)."""
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[: limit - 20]}... ({len(shown)} characters)"


def checkpoint_path(run_id: str, kind: str, name: str) -> str:
    """The ``local://`` path of checkpoint ``name`` of ``kind`` in run ``run_id``."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"Checkpoint name {brief(name)} is not allowed: use {NAME_RULE}")
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


class DiskFull(OSError):
    """A save that found the disk full (``errno.ENOSPC``); nothing of it was left behind."""


def save(
    folder: Path,
    weights: dict[str, torch.Tensor],
    meta: dict[str, Any],
    adapter_config: Any,
    optimizer: dict[str, Any] | None = None,
    overwrite: bool = True,
) -> None:
    """Write a checkpoint folder atomically: a crash leaves the old one (or none) and at most a
    staging folder that ``recover`` finishes or removes; a full disk raises ``DiskFull``."""
    if folder.exists() and not overwrite:
        raise FileExistsError(f"A checkpoint already exists at {folder}; pass overwrite=True to replace it")
    staging = folder.parent / f"{STAGING_PREFIX}{uuid.uuid4().hex[:12]}-{folder.name}"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        save_file(weights, staging / WEIGHTS_FILE)
        adapter_config.save_pretrained(staging)  # PEFT's adapter_config.json
        (staging / META_FILE).write_text(json.dumps(meta, indent=2))
        if optimizer is not None:
            torch.save(optimizer, staging / OPTIMIZER_FILE)
        (staging / COMPLETE_FILE).touch()  # last: a restart may finish this save
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
        (folder / COMPLETE_FILE).unlink()
    except Exception as error:
        full = disk_full(error, folder.parent)
        if full is None:
            raise
        raise full from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)


_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how safetensors' (Rust) I/O errors name their errno


def disk_full(error: BaseException, where: Path) -> DiskFull | None:
    """``DiskFull`` when ``error``, raised writing under ``where``, means the disk is full: an
    ``OSError`` ENOSPC or EDQUOT, safetensors' ``SafetensorError`` naming one, or torch's
    ``RuntimeError`` (a failed write in its C++ serializer, e.g. "unexpected pos") with under 1 MiB
    free; ``None`` for any other error."""
    code = error.errno if isinstance(error, OSError) else None
    found = _OS_ERROR.search(str(error)) if code is None else None
    code = int(found.group(1)) if found else code
    if code is None and isinstance(error, RuntimeError):
        code = errno.ENOSPC if shutil.disk_usage(where).free < 1 << 20 else None
    if code not in (errno.ENOSPC, errno.EDQUOT):
        return None
    return DiskFull(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({where}): the checkpoint was not saved")


def staged_name(folder_name: str) -> str | None:
    """The checkpoint a folder named ``folder_name`` was staging, if ``save`` named it; else ``None``."""
    match = _STAGING.fullmatch(folder_name)
    return match["name"] if match else None


def recover(root: Path) -> list[Path]:
    """Finish or remove the staging folders that saves killed mid-way left under ``root``
    (``<root>/<run>/<kind>/``): a whole one (``COMPLETE_FILE`` written) whose checkpoint is
    missing becomes that checkpoint, any other is removed. Only folders named as ``save`` names
    its staging are touched. Not for a root another live process may be saving into."""
    finished = []
    for staging in sorted(root.glob(f"*/*/{STAGING_PREFIX}*")):
        name = staged_name(staging.name)
        if name is None or staging.is_symlink() or not staging.is_dir() or staging.parent.name not in KINDS:
            continue
        target = staging.with_name(name)
        if (staging / COMPLETE_FILE).is_file() and NAME.fullmatch(name) and not target.exists():
            staging.rename(target)
            (target / COMPLETE_FILE).unlink()
            finished.append(target)
            logger.warning(f"tinker_emulator: finished the save of {target} that a stopped process left")
        else:
            shutil.rmtree(staging)
            logger.warning(f"tinker_emulator: removed {staging}, an unfinished save that a stopped process left")
    return finished


def load_meta(folder: Path) -> dict[str, Any]:
    """The ``gemlab.json`` of the checkpoint in ``folder``: base model, LoRA settings, seed."""
    meta_file = folder / META_FILE
    if not meta_file.is_file():
        raise FileNotFoundError(f"{folder} holds LoRA weights but no {META_FILE}; it was not saved by tinker_emulator")
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
