"""A run folder's bookkeeping: one owner at a time, files that are never half-written, and resume.

A run folder (``<log_dir>/<run_name>/``) holds ``config.json``, ``metrics.jsonl`` (one row per
step), ``checkpoints.jsonl`` (one line per saved checkpoint) and, on the local backend, the
checkpoints themselves under ``checkpoints/``. This module keeps that folder consistent when
runs crash, are killed, or are started twice:

- ``RunLock``: an exclusive lock (``flock``) held while a ``Trainer`` is open; a second process
  (or a second ``Trainer`` in the same process) is refused with the holder's process id;
- ``atomic_write_text`` / ``append_row``: whole files are replaced by write-then-rename, rows
  are appended and flushed, so a kill leaves the old file or the new one, never a mix;
- ``read_rows``: reads a ``.jsonl`` file and names the file and line of anything damaged;
- ``resume_candidates``: which checkpoints a resume may use (newest first), given which metrics
  rows are intact;
- ``config_changes``: what differs between a run's saved config and a new one.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
CONFIG_CHANGES_FILE = "config_changes.jsonl"
LOCK_FILE = ".lock"
LOCAL_CHECKPOINTS_DIR = "checkpoints"  # the local backend's root when the Trainer makes the client

# Fields that may differ on resume without changing what is being trained.
RESUMABLE_FIELDS = frozenset({"max_steps", "save_every", "log_dir", "run_name", "wandb_project", "allow_config_change"})
# Fields whose change makes the saved weights unusable: never accepted on resume.
WEIGHT_FIELDS = frozenset({"model_name", "lora_rank"})
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")


class RunFolderError(ValueError):
    """The run folder cannot be used as asked; the message says why and what to do instead."""


def run_dir_for(log_dir: str, run_name: str) -> Path:
    """``log_dir/run_name``, refusing names that would leave ``log_dir`` (``..``, ``/``)."""
    if not _RUN_NAME.fullmatch(run_name) or run_name in (".", ".."):
        raise RunFolderError(
            f"run_name {run_name!r} is not allowed: use letters, digits and . _ = + - (no '/' or '..'), "
            "starting with a letter or digit"
        )
    return Path(log_dir) / run_name


# ----- files that are never half-written ----------------------------------------------------
def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` by write-then-rename: a kill leaves the old file or the new one."""
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(staging, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(staging, path)


def rows_text(rows: list[dict[str, Any]]) -> str:
    """Rows as ``.jsonl`` text."""
    return "".join(json.dumps(row) + "\n" for row in rows)


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one ``.jsonl`` row and flush it to disk (a kill can at worst cut this one line)."""
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


@dataclass
class Rows:
    """The readable rows of a ``.jsonl`` file, and a description of each damaged line."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    first_bad_line: int | None = None  # 1-based


def read_rows(path: Path) -> Rows:
    """Every readable row of ``path`` (none if it is missing); damaged lines named by file and line."""
    result = Rows()
    if not path.exists():
        return result
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
        except ValueError as error:
            result.problems.append(f"{path} line {number} is damaged ({error.__class__.__name__}: {str(error)[:60]})")
            result.first_bad_line = result.first_bad_line or number
            continue
        if result.first_bad_line is None:
            result.rows.append(row)
    return result


# ----- one owner at a time ------------------------------------------------------------------
class RunLock:
    """An exclusive lock on a run folder, held from ``acquire`` until ``release`` (or process exit)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        self._file: TextIO | None = None

    def acquire(self) -> None:
        """Take the lock, or raise ``RunFolderError`` naming the process that holds it."""
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "{}"
            handle.close()
            raise RunFolderError(self._busy_message(holder)) from None
        handle.seek(0)
        handle.truncate()
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv}
        handle.write(json.dumps(owner))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        """Let the next process in."""
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def _busy_message(self, holder: str) -> str:
        try:
            owner = json.loads(holder)
        except ValueError:
            owner = {}
        who = "this process (another Trainer: call its .close())" if owner.get("pid") == os.getpid() else f"process {owner.get('pid', '?')}"
        command = " ".join(owner.get("argv", [])[-4:])
        return (
            f"run folder {self.path.parent} is in use by {who} on {owner.get('host', '?')} since "
            f"{owner.get('since', '?')}{f' ({command})' if command else ''}; wait for it to finish, stop it, "
            "or choose another run_name"
        )


# ----- resume ------------------------------------------------------------------------------
def intact_steps(rows: list[dict[str, Any]]) -> int:
    """How many metrics rows, from step 0, are in order with none missing or repeated."""
    count = 0
    for row in rows:
        if row.get("step") != count:
            break
        count += 1
    return count


def resume_candidates(checkpoints: list[dict[str, Any]], intact: int) -> list[dict[str, Any]]:
    """Checkpoints a resume may start from, newest first: one per step, none past the intact metrics."""
    by_step: dict[int, dict[str, Any]] = {}
    for line in checkpoints:
        if isinstance(line.get("step"), int) and line.get("state_path") and 0 < line["step"] <= intact:
            by_step[line["step"]] = line
    return [by_step[step] for step in sorted(by_step, reverse=True)]


def config_changes(saved: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Fields whose value differs between a saved config and a new one, ignoring ``RESUMABLE_FIELDS``."""
    keys = (set(saved) | set(new)) - RESUMABLE_FIELDS
    return {key: (saved.get(key), new.get(key)) for key in sorted(keys) if saved.get(key) != new.get(key)}


def describe_changes(changes: dict[str, tuple[Any, Any]]) -> str:
    """``lr 0.002 -> 0.001, seed 0 -> 1``."""
    return ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items())


# ----- disk ---------------------------------------------------------------------------------
def remove_staging_files(run_dir: Path) -> None:
    """Delete the half-written files a killed ``atomic_write_text`` left (the lock says none is live)."""
    for staging in run_dir.glob(".*.tmp-*"):
        staging.unlink(missing_ok=True)


def prune_local_checkpoints(root: Path, keep: set[Path]) -> int:
    """Under a local-backend root inside a run folder, delete checkpoint folders no index line
    names (steps rolled back, a save cut by a kill), staging leftovers and sampler snapshots.
    Returns how many folders went."""
    removed = 0
    if not root.is_dir():
        return 0
    keep = {path.resolve() for path in keep}
    for run in root.iterdir():
        if not run.is_dir():
            continue
        for kind in run.iterdir():
            if not kind.is_dir():
                continue
            for folder in kind.iterdir():
                if folder.is_dir() and folder.resolve() not in keep:
                    shutil.rmtree(folder, ignore_errors=True)
                    removed += 1
            if not any(kind.iterdir()):
                kind.rmdir()
        if not any(run.iterdir()):
            run.rmdir()
    return removed
