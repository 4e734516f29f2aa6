"""The workshop server in its own process for tests (``ServerProcess``, from
``tinker_emulator.workshop_server.process``), and ``run_client``: a client program that must succeed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tinker_emulator.workshop_server.process import ServerProcess

__all__ = ["ROOT", "ServerProcess", "run_client"]

ROOT = Path(__file__).resolve().parents[2]  # the repository


def run_client(server: ServerProcess, args: list[str], cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """``python ARGS`` against ``server``; it must succeed."""
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=server.env(**env), cwd=cwd, timeout=timeout)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:], server.log.read_text()[-2000:])
    return done
