"""The workshop server in its own process for tests (``ServerProcess``, from
``tinker_emulator.workshop_server.process``), and ``run_client``: a client program that must succeed."""

from __future__ import annotations

import selectors
import subprocess
import sys
from pathlib import Path

from tinker_emulator.workshop_server.process import ServerProcess

__all__ = ["ROOT", "ServerProcess", "first_line", "run_client"]

ROOT = Path(__file__).resolve().parents[2]  # the repository


def run_client(
    server: ServerProcess, args: list[str], cwd: Path, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess:
    """``python ARGS`` against ``server``; it must succeed."""
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=server.env(**env), cwd=cwd, timeout=timeout
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:], server.log.read_text()[-2000:])
    return done


def first_line(process: subprocess.Popen, timeout: float = 300) -> str:
    """The next line ``process`` prints (text mode, flushed), or a failure after ``timeout`` seconds
    or at its exit, with what it wrote to stderr: a child that hangs must not hang the suite."""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout)
    line = process.stdout.readline() if ready else ""
    if not line:
        process.kill()
        _, errors = process.communicate()
        raise AssertionError(
            f"no line from the child in {timeout:.0f} s (exit {process.returncode}): {(errors or '')[-3000:]}"
        )
    return line.strip()
