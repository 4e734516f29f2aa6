"""A run folder's bookkeeping: one owner at a time, files that are never half-written, and resume.

A run folder (``<log_dir>/<run_name>/``) holds ``config.json``, ``metrics.jsonl`` (one row per
step), ``checkpoints.jsonl`` (one line per saved checkpoint), ``warmup.jsonl``,
``config_changes.jsonl`` and, on the local backend, the checkpoints themselves under
``checkpoints/``. This module is the only code that knows these names:

- ``RunFolder``: everything a ``Trainer`` does to its folder (lock, config check, resume, the
  checkpoint index, the metrics log, pruning); every deletion goes through ``RunFolder._delete``;
- ``read_run``: the one reader of a run folder (config, metrics, checkpoints), for plots, the lab,
  the studies and the benchmarks.

It keeps the folder consistent when runs crash, are killed, or are started twice:

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
import shutil
import socket
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

import chz
import pandas as pd

from gemlab.config import CONFIG_FILE, Config, check_run_name, upgrade_saved_config

METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
CONFIG_CHANGES_FILE = "config_changes.jsonl"
LOCK_FILE = ".lock"
WARMUP_FILE = "warmup.jsonl"
LOCAL_CHECKPOINTS_DIR = "checkpoints"  # the local backend's root when the Trainer makes the client

# Fields that may differ on resume without changing what is being trained.
RESUMABLE_FIELDS = frozenset({"max_steps", "save_every", "log_dir", "run_name", "wandb_project", "allow_config_change"})
# Fields whose change makes the saved weights unusable: never accepted on resume.
WEIGHT_FIELDS = frozenset({"model_name", "lora_rank"})


class RunFolderError(ValueError):
    """The run folder cannot be used as asked; the message says why and what to do instead."""


def run_dir_for(log_dir: str, run_name: str) -> Path:
    """``log_dir/run_name``, refusing names that would leave ``log_dir`` (``..``, ``/``)."""
    try:
        check_run_name(run_name)
    except ValueError as error:
        raise RunFolderError(str(error)) from None
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


# ----- the folder a Trainer owns -------------------------------------------------------------
class RunFolder:
    """One run's folder as a ``Trainer`` uses it: ``open`` (create and lock), ``check_config``,
    ``resume``, ``log`` each step, ``add_checkpoint``, ``close``. Nothing here trains."""

    def __init__(self, log_dir: str, run_name: str) -> None:
        self.path = run_dir_for(log_dir, run_name)
        self.checkpoints: list[dict[str, Any]] = []  # the index, oldest first, as on disk
        self._lock = RunLock(self.path)
        self._created: Path | None = None  # the outermost folder ``open`` made, if any

    @property
    def local_checkpoints(self) -> Path:
        """Where the local backend keeps this run's checkpoints."""
        return self.path / LOCAL_CHECKPOINTS_DIR

    def open(self) -> None:
        """Create the folder if needed and lock it (refused while another Trainer holds it)."""
        self._created = next((p for p in reversed((self.path, *self.path.parents)) if not p.exists()), None)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()

    def abandon(self) -> None:
        """Unlock, and remove what ``open`` created: bad input leaves no files."""
        self._lock.release()
        if self._created is not None:
            self._delete(self._created)

    def close(self) -> None:
        """Let the next process in."""
        self._lock.release()

    def check_config(self, config: Config) -> dict[str, list[Any]]:
        """Compare ``config`` with the saved one before anything is written; refuse a silent change.
        Returns the accepted changes (``allow_config_change``), field -> [old, new]."""
        path = self.path / CONFIG_FILE
        if not path.exists():
            return {}
        try:
            saved = upgrade_saved_config(json.loads(path.read_text()))
        except (ValueError, AttributeError) as error:
            raise RunFolderError(f"{path} is damaged ({error}); delete it to reuse this run folder with the new config") from None
        # a field the saved config lacks was added to gemlab after the run started: it had the default
        changes = config_changes({**chz.asdict(Config()), **saved}, chz.asdict(config))
        if not changes:
            return {}
        described = describe_changes(changes)
        fixed = sorted(set(changes) & WEIGHT_FIELDS)
        if fixed:
            raise RunFolderError(
                f"run {self.path} was trained with a different {' and '.join(fixed)} ({described}); its checkpoints "
                "cannot continue with it: choose a new run_name"
            )
        if not config.allow_config_change:
            raise RunFolderError(
                f"run {self.path} was started with a different config ({described}); to keep both, choose a new "
                "run_name; to continue this run with the new values, add allow_config_change=true"
            )
        return {key: list(pair) for key, pair in changes.items()}

    def save_config(self, config: Config, changes: dict[str, list[Any]], step: int) -> None:
        """Write ``config.json`` (after the accepted ``changes`` are logged at ``step``)."""
        if changes:
            append_row(self.path / CONFIG_CHANGES_FILE, {"step": step, "changes": changes})
        atomic_write_text(self.path / CONFIG_FILE, json.dumps(chz.asdict(config), indent=2))

    def resume(self, load: Callable[[str], None]) -> tuple[int, list[dict[str, Any]]]:
        """Load the newest intact checkpoint with ``load(state_path)``; cut metrics and index back
        to it (atomically) and prune what no index line names. Returns (step, metrics rows)."""
        for staging in self.path.glob(".*.tmp-*"):  # a killed atomic_write_text's leftovers
            self._delete(staging)
        metrics, index = read_rows(self.path / METRICS_FILE), read_rows(self.path / CHECKPOINTS_FILE)
        for problem in metrics.problems + index.problems:
            warnings.warn(problem, stacklevel=3)
        step = 0
        for line in resume_candidates(index.rows, intact_steps(metrics.rows)):
            try:
                load(line["state_path"])
            except Exception as error:  # a deleted or truncated checkpoint: fall back to the one before
                warnings.warn(
                    f"checkpoint at step {line['step']} ({line['state_path']}) cannot be loaded ({str(error)[:200]}); "
                    "falling back to the one before",
                    stacklevel=3,
                )
                continue
            step = int(line["step"])
            break
        if step == 0 and (metrics.rows or index.rows):
            warnings.warn(f"no usable checkpoint in {self.path}: starting again from step 0", stacklevel=3)
        if step > 0:
            print(f"resuming {self.path.name} from step {step}", file=sys.stderr)
        self.checkpoints = resume_candidates(index.rows, step)[::-1]
        atomic_write_text(self.path / METRICS_FILE, rows_text(metrics.rows[:step]))
        atomic_write_text(self.path / CHECKPOINTS_FILE, rows_text(self.checkpoints))
        self.prune()
        return step, metrics.rows[:step]

    def log(self, metrics: dict[str, float]) -> None:
        """Append one step's metrics row."""
        append_row(self.path / METRICS_FILE, metrics)

    def log_warmup(self, losses: list[float]) -> None:
        """Write the warm-up's loss per step."""
        atomic_write_text(self.path / WARMUP_FILE, rows_text([{"warmup_step": i, "loss": loss} for i, loss in enumerate(losses)]))

    def add_checkpoint(self, name: str, step: int, state_path: str) -> None:
        """Record a saved checkpoint in the index (after the backend confirmed the save)."""
        line = {"name": name, "step": step, "state_path": state_path}
        append_row(self.path / CHECKPOINTS_FILE, line)
        self.checkpoints.append(line)

    def prune(self) -> int:
        """Delete local checkpoint folders that no index line names (steps rolled back, a save cut
        by a kill), staging leftovers and sampler snapshots. Returns how many folders went."""
        root = self.local_checkpoints
        if not root.is_dir():
            return 0
        from gemlab.local.checkpoints import SCHEME, folder_of  # lazy: real Tinker runs never load the emulator

        named = [line["state_path"] for line in self.checkpoints]
        keep = {folder_of(path, root) if path.startswith(SCHEME) else Path(path) for path in named}
        keep = {path.resolve() for path in keep}
        removed = 0
        for run in (p for p in root.iterdir() if p.is_dir()):
            for kind in (p for p in run.iterdir() if p.is_dir()):
                for folder in kind.iterdir():
                    if folder.is_dir() and folder.resolve() not in keep:
                        self._delete(folder)
                        removed += 1
                if not any(kind.iterdir()):
                    kind.rmdir()
            if not any(run.iterdir()):
                run.rmdir()
        return removed

    def _delete(self, path: Path) -> None:
        """The one place a run folder loses files: only what gemlab wrote (named by the callers above)."""
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


# ----- the one reader of run folders ------------------------------------------------------------
@dataclass
class SavedRun:
    """One run folder as read from disk: its settings, its metrics, its checkpoints."""

    path: Path
    config: dict
    metrics: pd.DataFrame
    checkpoints: list[dict] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def steps_done(self) -> int:
        return len(self.metrics)

    @property
    def status(self) -> str:
        """``finished``, ``stopped`` (a checkpoint before ``max_steps``) or ``no checkpoint``."""
        if not self.checkpoints:
            return "no checkpoint"
        last = int(self.checkpoints[-1]["step"])
        return "finished" if last >= int(self.config.get("max_steps", 0)) else f"stopped at {last}"


def is_run_folder(path: str | Path) -> bool:
    """A folder holding a run's ``config.json`` and at least one line of ``metrics.jsonl``."""
    metrics = Path(path) / METRICS_FILE
    return (Path(path) / CONFIG_FILE).is_file() and metrics.is_file() and metrics.stat().st_size > 0


def read_metrics(path: str | Path) -> pd.DataFrame:
    """A run's metrics, one row per step, from its folder or its ``metrics.jsonl``."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"no metrics at {path}: has this run done a step yet?")
    return pd.DataFrame(read_rows(path).rows)


def read_run(path: str | Path) -> SavedRun:
    """Read one run folder: its config (under today's field names; settings a run predates take
    their default, which is what it trained with), its metrics and its checkpoint index."""
    path = Path(path)
    saved = upgrade_saved_config(json.loads((path / CONFIG_FILE).read_text()))
    config = {**chz.asdict(Config()), **saved}
    return SavedRun(path=path, config=config, metrics=read_metrics(path), checkpoints=read_rows(path / CHECKPOINTS_FILE).rows)
