"""Tinker's checkpoint paths on the wire, the local backend's folders on disk.

The SDK speaks ``tinker://<run_id>/<kind>/<name>`` (kind ``weights``, ``sampler_weights`` or
``external_weights``); the local backend writes ``local://<run_id>/<kind>/<name>`` under its root.
Each tenant has its own root, and a tinker path resolves only inside the caller's root, so a
key can never reach another key's checkpoints, whatever path it sends. Every client string that
names something on disk (run id, checkpoint name) must match one rule, ``checkpoints.NAME``
(letters, digits, '.', '_', '-', at most 200): what it allows, not a list of what it refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinker_emulator.checkpoints import NAME, NAME_RULE, SCHEME, WEIGHTS_FILE, brief, load_meta

TINKER = "tinker://"
# Tinker's path segment -> the local backend's folder kind
KINDS = {"weights": "weights", "sampler_weights": "sampler_weights", "external_weights": "external"}
_SEGMENT = NAME  # a run id or checkpoint name: the one rule for a client string that becomes a folder


class CheckpointNotFound(LookupError):
    """A tinker path that names nothing this caller owns."""


def split(tinker_path: Any) -> tuple[str, str, str]:
    """``(run_id, local kind, name)`` of a ``tinker://run/kind/name`` path; ``ValueError`` otherwise."""
    parts = (
        tinker_path[len(TINKER) :].split("/") if isinstance(tinker_path, str) and tinker_path.startswith(TINKER) else []
    )
    if len(parts) != 3 or parts[1] not in KINDS or not all(_SEGMENT.fullmatch(p) for p in (parts[0], parts[2])):
        raise ValueError(
            f"{brief(tinker_path)} is not a checkpoint path: expected tinker://<run_id>/<{'|'.join(KINDS)}>/<name>, "
            f"run id and name each {NAME_RULE}"
        )
    return parts[0], KINDS[parts[1]], parts[2]


def folder(tinker_path: Any, root: Path) -> Path:
    """The saved checkpoint folder that ``tinker_path`` names under ``root`` (the caller's own)."""
    run_id, kind, name = split(tinker_path)
    found = root / run_id / kind / name
    if not (found / WEIGHTS_FILE).is_file():
        raise CheckpointNotFound(f"No checkpoint at {tinker_path} for this API key")
    return found


def to_tinker(value: Any) -> Any:
    """``value`` with every ``local://`` path in it (nested in dicts and lists) written as a tinker path."""
    if isinstance(value, str) and value.startswith(SCHEME):
        run_id, kind, name = value[len(SCHEME) :].split("/", 2)
        segment = next(s for s, k in KINDS.items() if k == kind)
        return f"{TINKER}{run_id}/{segment}/{name}"
    if isinstance(value, dict):
        return {key: to_tinker(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_tinker(item) for item in value]
    return value


def run_folder(run_id: str, root: Path) -> Path:
    """Run ``run_id``'s folder under ``root``; ``CheckpointNotFound`` if the caller has no such run."""
    if not _SEGMENT.fullmatch(run_id) or not (root / run_id).is_dir():
        raise CheckpointNotFound(f"No training run {brief(run_id)} for this API key")
    return root / run_id


def base_model_of(folder: str | Path) -> str:
    """The base model a saved checkpoint folder was trained from (its metadata says)."""
    return load_meta(Path(folder))["base_model"]
