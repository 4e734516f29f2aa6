"""A run folder's bookkeeping: one owner at a time, files that are never half-written, and resume.

A run folder (``<log_dir>/<run_name>/``) holds ``config.json``, ``metrics.jsonl`` (one row per
step), ``checkpoints.jsonl`` (one line per saved checkpoint), ``checkpoint_records/`` (per
checkpoint: its index line and, for the newest two, a copy of the metrics rows up to it),
``warmup.jsonl``, ``config_changes.jsonl``, the marker ``.gemlab-run`` (this folder is gemlab's,
and the checkpoint names gemlab asked the backend to save here) and, on the local backend, the
checkpoints themselves under ``checkpoints/``. This module is the one writer of run folders, and
``gemlab.saved_runs`` their one reader (``read_run``, ``read_rows``, the names of the files a reader
opens); no other code knows these names:

- ``RunFolder``: everything a ``Trainer`` does to its folder (lock, config check, resume, the
  checkpoint index, the metrics log, pruning); it deletes only what it recorded writing;
- ``export_run``: a finished run's record kept elsewhere (``data/runs/<name>``), for figures and tables.

It keeps the folder consistent when runs crash, are killed, are started twice, or meet damage:

- gemlab writes only into a folder that is new, empty, marked ``.gemlab-run`` or an older gemlab
  run (``config.json``); anything else is refused in one line. It deletes only what it recorded
  writing (checkpoint folders it named, its own staging files and records), never anything else;
- a damaged or missing ``metrics.jsonl`` or ``checkpoints.jsonl`` never restarts a run that has an
  intact checkpoint: the index is rebuilt from the records and the metrics come from the
  checkpoint's copy; when that cannot work, resume refuses in one line and changes nothing. A
  damaged file that resume rewrites is first kept as ``<name>.damaged-N``;
- ``RunLock``: an exclusive lock (``flock``) held while a ``Trainer`` is open; a second process
  (or a second ``Trainer`` in the same process) is refused with the holder's process id;
- ``atomic_write_text`` / ``append_row``: whole files are replaced by write-then-rename, rows
  are appended and flushed, so a kill leaves the old file or the new one, never a mix;
- ``config_changes``: what differs between a run's saved config and a new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import chz

from gemlab.config import CONFIG_FILE, Config, check_run_name, plain_number
from gemlab.saved_runs import (
    CHECKPOINTS_FILE,
    CONFIG_CHANGES_FILE,
    LOCAL_CHECKPOINTS_DIR,
    METRICS_FILE,
    WARMUP_FILE,
    Rows,
    RunFolderError,
    read_rows,
    saved_config,
)

LOCK_FILE = ".lock"
MARKER_FILE = ".gemlab-run"  # this folder is a gemlab run; lists the checkpoint names gemlab saved here
RECORDS_DIR = "checkpoint_records"  # <name>.jsonl per checkpoint: its index line, then the metrics rows up to it
RECORD_COPIES = 2  # the newest records carry a copy of the metrics rows (older ones only their line)
# the files gemlab replaces by write-then-rename: only their staging leftovers are ever cleaned up
WRITTEN_FILES = (CONFIG_FILE, METRICS_FILE, CHECKPOINTS_FILE, WARMUP_FILE, MARKER_FILE)

# Fields that may differ on resume without changing what is being trained.
RESUMABLE_FIELDS = frozenset(
    {
        "max_steps",
        "max_minutes",
        "save_every",
        "keep_checkpoints",
        "log_dir",
        "run_name",
        "wandb_project",
        "allow_config_change",
    }
    | {"eval_every", "eval_env_id", "eval_games", "eval_base"}  # what is measured during the run, not what is trained
)
# Fields whose change makes the saved weights unusable: never accepted on resume.
WEIGHT_FIELDS = frozenset({"model_name", "lora_rank"})


def os_reason(error: OSError) -> str:
    """``Permission denied: /x`` from an ``OSError``, without the errno noise; one raised with a
    message of its own (``FileNotFoundError("... Install it with: ...")``) is that message."""
    return (
        f"{error.strerror or str(error) or error.__class__.__name__}{f': {error.filename}' if error.filename else ''}"
    )


def run_dir_for(log_dir: str, run_name: str) -> Path:
    """``log_dir/run_name``, refusing names that would leave ``log_dir`` (``..``, ``/``)."""
    try:
        check_run_name(run_name)
    except ValueError as error:
        raise RunFolderError(str(error)) from None
    return Path(log_dir) / run_name


# ----- files that are never half-written ----------------------------------------------------
def staging_prefix(name: str) -> str:
    """How the name of ``atomic_write_text``'s half-written copy of the file ``name`` begins."""
    return f".{name}.tmp-"


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` by write-then-rename: a kill leaves the old file or the new one."""
    staging = path.with_name(f"{staging_prefix(path.name)}{os.getpid()}")
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


# ----- one owner at a time ------------------------------------------------------------------
class RunLock:
    """An exclusive lock on a run folder, held from ``acquire`` until ``release`` (or process exit)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        self._file: TextIO | None = None

    def acquire(self) -> None:
        """Take the lock, or raise ``RunFolderError`` naming the process that holds it."""
        try:
            handle = open(self.path, "a+")
        except OSError as error:
            raise RunFolderError(
                f"cannot lock run folder {self.path.parent} ({os_reason(error)}); choose another log_dir or run_name"
            ) from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "{}"
            handle.close()
            raise RunFolderError(self._busy_message(holder)) from None
        handle.seek(0)
        handle.truncate()
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "argv": sys.argv,
        }
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
        who = (
            "this process (another Trainer: call its .close())"
            if owner.get("pid") == os.getpid()
            else f"process {owner.get('pid', '?')}"
        )
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


def config_changes(saved: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Fields whose value differs between a saved config and a new one, ignoring ``RESUMABLE_FIELDS``."""
    keys = (set(saved) | set(new)) - RESUMABLE_FIELDS
    return {key: (saved.get(key), new.get(key)) for key in sorted(keys) if saved.get(key) != new.get(key)}


def describe_changes(changes: dict[str, tuple[Any, Any]]) -> str:
    """``lr 0.002 -> 0.001, seed 0 -> 1``."""
    return ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changes.items())


# ----- the folder a Trainer owns -------------------------------------------------------------
@dataclass
class _Found:
    """What resume found on disk: readable lines, checkpoint candidates by step, damage."""

    metrics: Rows
    index: Rows
    candidates: dict[int, dict[str, Any]]  # step -> index line, from the index and the records
    copies: dict[int, list[dict[str, Any]]]  # step -> the metrics rows a record carries
    problems: list[str]


class RunFolder:
    """One run's folder as a ``Trainer`` uses it: ``open`` (refuse a foreign folder, create, lock),
    ``check_config``, ``resume``, ``log`` each step, ``will_save`` + ``add_checkpoint``, ``close``.
    Nothing here trains. ``keep_checkpoints`` > 0 keeps only that many local checkpoints."""

    def __init__(self, log_dir: str, run_name: str, keep_checkpoints: int = 0) -> None:
        self.path = run_dir_for(log_dir, run_name)
        self.keep_checkpoints = keep_checkpoints
        self.checkpoints: list[dict[str, Any]] = []  # the index, oldest first, as on disk
        self._lock = RunLock(self.path)
        self._created: Path | None = None  # the outermost folder ``open`` made, if any
        self._owned: list[str] = []  # checkpoint names gemlab asked the backend to save here
        self._dropped_at: int | None = None  # the step after which ``drop_checkpoints`` removed them all

    @property
    def local_checkpoints(self) -> Path:
        """Where the local backend keeps this run's checkpoints."""
        return self.path / LOCAL_CHECKPOINTS_DIR

    def open(self) -> None:
        """Refuse a folder that is not a gemlab run, create it if needed, lock it (refused while
        another Trainer holds it) and mark it as gemlab's."""
        self._refuse_foreign()
        self._created = next((p for p in reversed((self.path, *self.path.parents)) if not p.exists()), None)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise RunFolderError(
                f"cannot create run folder {self.path} ({os_reason(error)}); choose another log_dir"
            ) from None
        self._lock.acquire()
        try:
            self._owned = self._read_marker()
            self._write_marker()
        except OSError as error:
            self._lock.release()
            raise RunFolderError(
                f"cannot write to run folder {self.path} ({os_reason(error)}); choose another log_dir"
            ) from None

    def _refuse_foreign(self) -> None:
        """One line if ``path`` exists and is not a gemlab run (nor empty): gemlab never adopts it."""
        if not self.path.exists() and not self.path.is_symlink():
            return
        if not self.path.is_dir():
            raise RunFolderError(f"{self.path} exists and is not a folder; choose another run_name or log_dir")
        if (self.path / MARKER_FILE).is_file() or (self.path / CONFIG_FILE).is_file():
            return  # a gemlab run (one made before the marker existed holds config.json)
        try:
            held = [p for p in self.path.iterdir() if p.name not in (LOCK_FILE, MARKER_FILE) and not _staged(p)]
        except OSError as error:
            raise RunFolderError(f"cannot read {self.path} ({os_reason(error)}); choose another log_dir") from None
        foreign = sorted(p.name for p in held)
        if foreign:
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise RunFolderError(
                f"{self.path} exists and is not a gemlab run folder (it holds {shown}); gemlab writes only into new or "
                "empty folders and its own runs: choose another run_name or log_dir"
            )

    def _read_marker(self) -> list[str]:
        path = self.path / MARKER_FILE
        try:
            marker = json.loads(path.read_text()) if path.is_file() else {}
            names, self._dropped_at = marker.get("checkpoint_names", []), marker.get("checkpoints_dropped_at")
        except (ValueError, AttributeError):
            warnings.warn(f"{path} is damaged; only the checkpoints its index names count as gemlab's", stacklevel=4)
            names = []
        # a run made before the marker existed: the checkpoints its index named are gemlab's
        recorded = [line.get("name") for line in read_rows(self.path / CHECKPOINTS_FILE).rows]
        return list(dict.fromkeys(n for n in [*names, *recorded] if isinstance(n, str)))

    def _write_marker(self) -> None:
        marker = {"gemlab_run": 1, "checkpoint_names": self._owned}
        if self._dropped_at is not None:
            marker["checkpoints_dropped_at"] = self._dropped_at
        atomic_write_text(self.path / MARKER_FILE, json.dumps(marker, indent=1))

    def abandon(self) -> None:
        """Unlock, and remove what ``open`` created: bad input leaves no files."""
        self._lock.release()
        if self._created is not None:
            shutil.rmtree(self._created, ignore_errors=True)  # made by this call: nothing of anyone else's in it

    def close(self) -> None:
        """Let the next process in."""
        self._lock.release()

    def check_config(self, config: Config) -> dict[str, list[Any]]:
        """Compare ``config`` with the saved one before anything is written; refuse a silent change.
        Returns the accepted changes (``allow_config_change``), field -> [old, new]."""
        path = self.path / CONFIG_FILE
        if not path.exists():
            return {}
        changes = config_changes(saved_config(path, remedy="repair it or choose another run_name"), chz.asdict(config))
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
        atomic_write_text(self.path / CONFIG_FILE, json.dumps(chz.asdict(config), indent=2, default=plain_number))

    # ----- resume ------------------------------------------------------------------------
    def resume(self, load: Callable[[str], None]) -> tuple[int, list[dict[str, Any]]]:
        """Load the newest intact checkpoint with ``load(state_path)``; cut metrics and index back
        to it (atomically, keeping a damaged file as ``<name>.damaged-N``) and prune the checkpoint
        folders gemlab saved that no index line names. Returns (step, metrics rows).

        Refuses (``RunFolderError``, nothing changed) when checkpoints exist but none can be used."""
        self._remove_staging()
        found = self._find()
        for problem in found.problems:
            warnings.warn(problem, stacklevel=3)
        step, history, failures = 0, [], []
        intact = intact_steps(found.metrics.rows)
        for candidate in sorted(found.candidates, reverse=True):
            line = found.candidates[candidate]
            rows = found.metrics.rows[:candidate] if intact >= candidate else found.copies.get(candidate)
            if rows is None:
                failures.append(f"step {candidate}: the metrics rows up to it are damaged and no copy of them was kept")
                continue
            try:
                load(line["state_path"])
            except Exception as error:  # a deleted or truncated checkpoint: fall back to the one before
                reason = f"checkpoint at step {candidate} ({line['state_path']}) cannot be loaded ({str(error)[:200]})"
                warnings.warn(f"{reason}; falling back to the one before", stacklevel=3)
                failures.append(reason)
                continue
            step, history = candidate, rows
            break
        if step == 0 and self._dropped_at is not None:
            raise RunFolderError(
                f"run {self.path} finished at step {self._dropped_at} and its checkpoints were removed, so "
                "it cannot go on; "
                "to train again, choose a new run_name (this folder is kept as it is)"
            )
        if step == 0 and (found.candidates or found.index.problems):
            damage = "; ".join((failures or found.index.problems)[:3])
            raise RunFolderError(
                f"cannot resume {self.path}: {damage}; nothing was changed. Repair the damage named above, or start "
                "again from step 0 on purpose with a new run_name (this folder is kept as it is)"
            )
        if step > 0:
            recovered = " (metrics from the checkpoint's copy)" if intact < step else ""
            print(f"resuming {self.path.name} from step {step}{recovered}", file=sys.stderr)
        self.checkpoints = [found.candidates[s] for s in sorted(found.candidates) if s <= step]
        self._rewrite(METRICS_FILE, found.metrics, rows_text(history))
        self._rewrite(CHECKPOINTS_FILE, found.index, rows_text(self.checkpoints))
        self.prune()
        return step, history

    def _find(self) -> _Found:
        """Read the metrics, the index and the records; collect every usable checkpoint line."""
        metrics, index = read_rows(self.path / METRICS_FILE), read_rows(self.path / CHECKPOINTS_FILE)
        problems = metrics.problems + index.problems
        candidates: dict[int, dict[str, Any]] = {}
        copies: dict[int, list[dict[str, Any]]] = {}
        for number, line in enumerate(index.rows, start=1):
            if _valid_line(line):
                candidates[line["step"]] = line
            else:
                problems.append(
                    f"{self.path / CHECKPOINTS_FILE}: entry {number} has no step or state_path "
                    f"({json.dumps(line)[:80]}); skipped"
                )
        records = self.path / RECORDS_DIR
        for file in sorted(records.glob("*.jsonl")) if records.is_dir() else []:
            record = read_rows(file)
            if record.problems or not record.rows or not _valid_line(record.rows[0]):
                problems.append(f"checkpoint record {file} is damaged; skipped")
                continue
            line, rows = record.rows[0], record.rows[1:]
            candidates.setdefault(line["step"], line)
            if len(rows) == line["step"] and intact_steps(rows) == line["step"]:
                copies[line["step"]] = rows
        return _Found(metrics, index, candidates, copies, problems)

    def _rewrite(self, name: str, read: Rows, text: str) -> None:
        """Replace ``name`` with ``text``; a damaged file is first kept as ``<name>.damaged-N``."""
        path = self.path / name
        # e.g. rows repeated by an old restart
        out_of_order = name == METRICS_FILE and intact_steps(read.rows) < len(read.rows)
        if (read.problems or out_of_order) and path.exists():
            number = 1 + sum(1 for _ in self.path.glob(f"{name}.damaged-*"))
            kept = path.with_name(f"{name}.damaged-{number}")
            shutil.copyfile(path, kept)
            warnings.warn(
                f"{path} was damaged: kept as {kept.name}, rewritten from what could be recovered", stacklevel=4
            )
        atomic_write_text(path, text)

    # ----- each step ---------------------------------------------------------------------
    def log(self, metrics: dict[str, float]) -> None:
        """Append one step's metrics row."""
        append_row(self.path / METRICS_FILE, metrics)

    def log_warmup(self, losses: list[float]) -> None:
        """Write the warm-up's loss per step."""
        atomic_write_text(
            self.path / WARMUP_FILE, rows_text([{"warmup_step": i, "loss": loss} for i, loss in enumerate(losses)])
        )

    def will_save(self, name: str) -> None:
        """Record that gemlab is about to save checkpoint ``name`` here (before the backend writes
        it), so a save cut by a kill is known to be gemlab's and can be cleaned up."""
        if name not in self._owned:
            self._owned.append(name)
            self._write_marker()

    def add_checkpoint(self, name: str, step: int, state_path: str, history: list[dict[str, Any]]) -> None:
        """Record a saved checkpoint (after the backend confirmed the save): its record with a copy
        of the metrics rows up to it (``history``), then its index line; then keep the newest
        ``keep_checkpoints``."""
        line = {"name": name, "step": step, "state_path": state_path}
        records = self.path / RECORDS_DIR
        records.mkdir(exist_ok=True)
        atomic_write_text(records / f"{name}.jsonl", rows_text([line, *history[:step]]))
        append_row(self.path / CHECKPOINTS_FILE, line)
        self.checkpoints.append(line)
        for older in self.checkpoints[-RECORD_COPIES - 1 : -RECORD_COPIES]:  # older records keep only their line
            if (records / f"{older['name']}.jsonl").is_file():
                atomic_write_text(records / f"{older['name']}.jsonl", rows_text([older]))
        local = [line for line in self.checkpoints if line["state_path"].startswith("local://")]
        if self.keep_checkpoints > 0 and len(local) > self.keep_checkpoints:
            dropped = {id(line) for line in local[: len(local) - self.keep_checkpoints]}
            self.checkpoints = [line for line in self.checkpoints if id(line) not in dropped]
            atomic_write_text(self.path / CHECKPOINTS_FILE, rows_text(self.checkpoints))
            self.prune()

    def drop_checkpoints(self, step: int) -> None:
        """Remove every checkpoint gemlab saved here, with its records and the index, once the run
        is finished at ``step`` (the studies keep only config and metrics). The marker remembers
        it, so a later Trainer on this folder is refused instead of starting over."""
        self._dropped_at = step
        self._write_marker()
        self.checkpoints = []
        self.prune()
        (self.path / CHECKPOINTS_FILE).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            (self.path / RECORDS_DIR).rmdir()  # only if nothing but gemlab's records was in it
        with contextlib.suppress(OSError):
            self.local_checkpoints.rmdir()

    # ----- clean-up: only what gemlab recorded -------------------------------------------
    def prune(self) -> int:
        """Delete the checkpoints gemlab saved here that the index no longer names (steps rolled
        back, a save cut by a kill, beyond ``keep_checkpoints``), with their records and staging
        folders. Anything gemlab did not record stays. Returns how many checkpoint folders went."""
        kept = {line["name"] for line in self.checkpoints}
        records = self.path / RECORDS_DIR
        for name in self._owned:
            if name not in kept:
                (records / f"{name}.jsonl").unlink(missing_ok=True)
        root = self.local_checkpoints
        if not root.is_dir():
            return 0
        # lazy: real Tinker runs never load the emulator
        from tinker_emulator.checkpoints import SCHEME, folder_of, staged_name

        named = [line["state_path"] for line in self.checkpoints]
        keep = {(folder_of(path, root) if path.startswith(SCHEME) else Path(path)).resolve() for path in named}
        owned = set(self._owned)
        removed = 0
        for weights in root.glob("*/weights"):
            cleaned = False
            for folder in list(weights.iterdir()):
                staging = staged_name(folder.name) in owned
                if (
                    folder.is_dir()
                    and not folder.is_symlink()
                    and (staging or (folder.name in owned and folder.resolve() not in keep))
                ):
                    shutil.rmtree(folder, ignore_errors=True)
                    removed += not staging
                    cleaned = True
            for empty in (weights, weights.parent) if cleaned else ():  # rmdir removes only empty folders
                with contextlib.suppress(OSError):
                    empty.rmdir()
        return removed

    def _remove_staging(self) -> None:
        """Remove what a killed ``atomic_write_text`` left of gemlab's own files."""
        for name in WRITTEN_FILES:
            for staging in self.path.glob(f"{staging_prefix(name)}*"):
                staging.unlink(missing_ok=True)
        for staging in self.path.glob(f"{RECORDS_DIR}/{staging_prefix('*.jsonl')}*"):
            staging.unlink(missing_ok=True)


def export_run(
    run_dir: Path, target: Path, *, config: Config | None = None, extra: dict[str, str] | None = None
) -> None:
    """Keep a finished run's record (config, metrics, warm-up; no checkpoints) in ``target``, e.g.
    ``data/runs/<name>``, for figures and tables. Under ``target``'s lock, written by
    write-then-rename; ``config`` replaces the saved config (say, with ``log_dir`` pointing at
    ``target``'s parent), ``extra`` adds files by name. ``target`` may be new or an earlier export;
    a folder holding anything else is refused, and nothing is ever deleted."""
    target.mkdir(parents=True, exist_ok=True)
    allowed = {CONFIG_FILE, METRICS_FILE, WARMUP_FILE, LOCK_FILE, *(extra or {})}
    foreign = sorted(p.name for p in target.iterdir() if p.name not in allowed and not p.name.startswith("."))
    if foreign:
        raise RunFolderError(
            f"{target} holds files that are not a saved run's ({', '.join(foreign[:3])}); choose another folder"
        )
    lock = RunLock(target)
    lock.acquire()
    try:
        texts = {
            name: (run_dir / name).read_text()
            for name in (CONFIG_FILE, METRICS_FILE, WARMUP_FILE)
            if (run_dir / name).exists()
        }
        if config is not None:
            texts[CONFIG_FILE] = json.dumps(chz.asdict(config), indent=2)
        for name, text in {**texts, **(extra or {})}.items():
            atomic_write_text(target / name, text)
    finally:
        lock.release()


def _valid_line(line: dict[str, Any]) -> bool:
    """An index line a resume can use: a positive integer step and a state path."""
    step = line.get("step")
    return (
        isinstance(step, int)
        and not isinstance(step, bool)
        and step > 0
        and isinstance(line.get("state_path"), str)
        and bool(line["state_path"])
    )


def _staged(path: Path) -> bool:
    """Whether ``path`` is one of gemlab's own files being written (``atomic_write_text``'s staging
    name): another runner opening the folder at that moment writes its marker so."""
    return any(path.name.startswith(staging_prefix(name)) for name in WRITTEN_FILES)
