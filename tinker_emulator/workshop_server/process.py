"""The workshop server in a process of its own, for programs that play its attendees on this machine
(the tests and the benchmarks): ``ServerProcess`` starts ``python -m tinker_emulator.workshop_server``
on a free port with its own data folder, reads the address and keys it prints, gives a client's
environment, and stops it; ``offline_server`` adds a working folder with gemlab/tiny's tokenizer
installed, for clients that run offline."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinker_emulator.model_names import TINY

ROOT = Path(__file__).resolve().parents[2]  # the folder that holds tinker_emulator (and gemlab)


class ServerProcess:
    def __init__(self, data_dir: Path, *args: str, timeout: float = 120.0):
        self.data_dir = data_dir
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.setdefault("GEMLAB_THREADS", "1")
        self.log = data_dir.parent / f"{data_dir.name}-server.log"
        self._out = self.log.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tinker_emulator.workshop_server",
                "--port",
                "0",
                "--data-dir",
                str(data_dir),
                *args,
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=data_dir.parent,
        )
        deadline = time.monotonic() + timeout
        while True:
            text = self.log.read_text()
            if "TINKER_API_KEY=" in text:
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start: {text[-2000:]}")
            time.sleep(0.2)
        lines = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("export ")]
        self.url, self.keys = lines[0], lines[1:]

    def env(self, key: int = 0, **extra: str) -> dict[str, str]:
        """The environment of a client of this server (plain tinker; gemlab on the path only for
        the commands that are gemlab's)."""
        env = {
            **os.environ,
            "TINKER_BASE_URL": self.url,
            "TINKER_API_KEY": self.keys[key],
            "HF_HUB_OFFLINE": "1",
            **extra,
        }
        env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
        env.pop("GEMLAB_LOCAL_MODEL", None)
        env.setdefault("GEMLAB_THREADS", "1")
        return env

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._out.close()


@contextlib.contextmanager
def offline_server(*args: str) -> Iterator[tuple[ServerProcess, Path]]:
    """For the benchmarks: a server and its clients' working folder, a temporary one made the
    current folder (from the repo root the name gemlab/tiny would be read as the folder
    gemlab/tiny/), with gemlab/tiny's tokenizer installed there for clients that run offline."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        hf_home = workdir / "hf"
        subprocess.run([sys.executable, "-m", "tinker_emulator.workshop_server", "tokenizer", TINY], check=True,
                       capture_output=True, env={**os.environ, "HF_HOME": str(hf_home),
                       "PYTHONPATH": str(ROOT)})  # fmt: skip
        os.environ.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
        _hub_reads_environment_again(hf_home)
        os.chdir(workdir)
        server = ServerProcess(workdir / "data", *args)
        try:
            yield server, workdir
        finally:
            server.stop()


def _hub_reads_environment_again(hf_home: Path) -> None:
    """huggingface_hub reads HF_HOME and HF_HUB_OFFLINE once, at import (which importing the
    emulator already did): set what it read, so that this process's own clients (the benchmark's
    in-process trainer over HTTP) find the installed tokenizer offline."""
    constants: Any = sys.modules.get("huggingface_hub.constants")  # a module, its names set below
    if constants is not None:
        constants.HF_HOME = str(hf_home)
        constants.HF_HUB_CACHE = str(hf_home / "hub")
        constants.HF_HUB_OFFLINE = True
