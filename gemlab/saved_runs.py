"""The one reader of saved runs: a run folder's file names, ``read_rows`` (a ``.jsonl`` file, naming
the file and line of anything damaged) and ``read_run`` (config, metrics and checkpoint index, as
``SavedRun``), for plots, the lab, the studies and the benchmarks. ``gemlab.run_folder`` writes run
folders and reads them back through this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gemlab.config import CONFIG_FILE, read_saved_config

METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
CONFIG_CHANGES_FILE = "config_changes.jsonl"
WARMUP_FILE = "warmup.jsonl"
LOCAL_CHECKPOINTS_DIR = "checkpoints"  # the local backend's root when the Trainer makes the client


class RunFolderError(ValueError):
    """The run folder cannot be used as asked; the message says why and what to do instead."""


# ----- reading .jsonl rows ------------------------------------------------------------------
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


def saved_config(path: str | Path, *, remedy: str = "repair it or move the folder aside") -> dict[str, Any]:
    """``read_saved_config`` (a run's ``config.json`` or its folder) for the code that uses run
    folders: a damaged file raises ``RunFolderError`` in one line that names the file and ``remedy``."""
    try:
        return read_saved_config(path)
    except ValueError as error:
        raise RunFolderError(f"{error}; {remedy}") from None


def read_run(path: str | Path) -> SavedRun:
    """Read one run folder: its config (under today's field names; settings a run predates take
    their default, which is what it trained with), its metrics and its checkpoint index."""
    path = Path(path)
    return SavedRun(
        path=path,
        config=saved_config(path / CONFIG_FILE),
        metrics=read_metrics(path),
        checkpoints=read_rows(path / CHECKPOINTS_FILE).rows,
    )
