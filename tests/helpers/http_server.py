"""A tinker_emulator.workshop_server server in its own process, for tests: free port, its own data folder,
killed at the end; ``env`` is what a client sets (TINKER_BASE_URL, TINKER_API_KEY)."""

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

ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    def __init__(self, data_dir: Path, *args: str, timeout: float = 120.0):
        self.data_dir = data_dir
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        env.setdefault("GEMLAB_THREADS", "1")
        self.log = data_dir.parent / f"{data_dir.name}-server.log"
        self._out = self.log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tinker_emulator.workshop_server", "--port", "0", "--data-dir", str(data_dir), *args],
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
        env = {**os.environ, "TINKER_BASE_URL": self.url, "TINKER_API_KEY": self.keys[key], "HF_HUB_OFFLINE": "1", **extra}
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


def run_client(server: ServerProcess, args: list[str], cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """``python ARGS`` against ``server``; it must succeed."""
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=server.env(**env), cwd=cwd, timeout=timeout)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:], server.log.read_text()[-2000:])
    return done


@contextlib.contextmanager
def offline_server(*args: str) -> Iterator[tuple[ServerProcess, Path]]:
    """For the benchmarks: a server and its clients' working folder, a temporary one made the
    current folder (from the repo root the name gemlab/tiny would be read as the folder
    gemlab/tiny/), with gemlab/tiny's tokenizer installed there for clients that run offline."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        hf_home = workdir / "hf"
        subprocess.run([sys.executable, "-m", "tinker_emulator.workshop_server", "tokenizer", "gemlab/tiny"], check=True,
                       capture_output=True, env={**os.environ, "HF_HOME": str(hf_home), "PYTHONPATH": str(ROOT)})  # fmt: skip
        os.environ.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1")
        os.chdir(workdir)
        server = ServerProcess(workdir / "data", *args)
        try:
            yield server, workdir
        finally:
            server.stop()
