"""The trainer's side of atroposlib's trajectory API (``run-api``): register, pull ``/batch``, and
start a ``run-api`` of its own when asked.

``run-api`` keeps everything in memory: restarted, it has forgotten the trainer, and ``/batch``
answers ``{"status": "error", "message": "Trainer not registered..."}``. ``ApiClient.batch``
then registers again (saying so in one line) and goes on; an API that does not answer is retried.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx


class ApiError(RuntimeError):
    """``run-api`` could not be reached or answered something unusable; the message says which."""


class ApiClient:
    """One trainer registered with the ``run-api`` at ``url``; ``registration`` is what
    ``/register`` takes (batch size in sequences, longest sequence, steps, starting step)."""

    def __init__(self, url: str, registration: dict[str, Any], *, say: Callable[[str], None] = print) -> None:
        self.url = url.rstrip("/")
        self.registration = registration
        self.say = say
        self.registrations = 0  # how many times this trainer registered (more than 1: the API restarted)
        self._http = httpx.AsyncClient(base_url=self.url, timeout=30)

    async def register(self) -> None:
        """``POST /register``: the API starts handing batches to this trainer."""
        answer = await self._call("POST", "/register", json=self.registration)
        if "uuid" not in answer:
            raise ApiError(f"run-api at {self.url} answered /register without a uuid: {str(answer)[:200]}")
        self.registrations += 1

    async def register_when_up(self, *, poll_seconds: float, timeout: float) -> None:
        """``register``, waiting up to ``timeout`` seconds for an API that is not up yet (one line)."""
        deadline = time.monotonic() + timeout
        said = False
        while True:
            try:
                return await self.register()
            except ApiError as error:
                if time.monotonic() > deadline:
                    raise
                if not said:
                    self.say(f"gemlab.atropos: {error}; waiting for it")
                    said = True
            await asyncio.sleep(poll_seconds)

    async def batch(self) -> list[Any] | None:
        """``GET /batch``: the next batch's scored groups, or None while there is none yet."""
        answer = await self._call("GET", "/batch")
        if answer.get("status") == "error":  # a restarted API has forgotten this trainer
            self.say(
                f"gemlab.atropos: run-api at {self.url} does not know this trainer ({answer.get('message')}); "
                "registering again"
            )
            await self.register()
            answer = await self._call("GET", "/batch")
        batch = answer.get("batch")
        if batch is not None and not isinstance(batch, list):
            raise ApiError(f"run-api at {self.url} answered /batch with {type(batch).__name__}, not a list of groups")
        return batch or None

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise ApiError(f"run-api at {self.url} is not answering ({type(error).__name__})") from None
        if response.status_code != 200:
            raise ApiError(f"run-api at {self.url} answered {path} with {response.status_code}: {response.text[:200]}")
        try:
            answer = response.json()
        except ValueError:
            raise ApiError(f"run-api at {self.url} answered {path} with something that is not JSON") from None
        if not isinstance(answer, dict):
            raise ApiError(f"run-api at {self.url} answered {path} with a JSON {type(answer).__name__}, not an object")
        return answer

    async def close(self) -> None:
        await self._http.aclose()


def start_api(host: str, port: int, *, timeout: float = 60.0) -> subprocess.Popen:
    """atroposlib's ``run-api`` as a child process on ``host:port``, once it answers ``GET /``."""
    try:
        import atroposlib  # noqa: F401  (only to say what is missing before starting anything)
    except ImportError:
        raise ApiError(
            "start_api=true needs atroposlib: pip install atroposlib (or point api_url at a running run-api)"
        ) from None
    command = [sys.executable, "-m", "atroposlib.cli.run_api", "--host", host, "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = (process.stderr.read() if process.stderr else "").strip().splitlines()
            raise ApiError(
                f"run-api could not start on {host}:{port}: "
                f"{error[-1] if error else f'exit status {process.returncode}'}"
            )
        try:
            if httpx.get(f"http://{host}:{port}/", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_api(process)
    raise ApiError(f"run-api did not answer on {host}:{port} within {timeout:.0f} s")


def stop_api(process: subprocess.Popen) -> None:
    """End a ``run-api`` this trainer started (and only that one)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_for(api: ApiClient, *, poll_seconds: float, timeout: float, say: Callable[[str], None]) -> list[Any]:
    """The next batch from ``api``, polling every ``poll_seconds``; an API that stops answering is
    retried (one line when it fails, one when it is back). ``ApiError`` after ``timeout`` seconds
    without a batch."""
    deadline = time.monotonic() + timeout
    down: str | None = None
    while True:
        try:
            batch = await api.batch()
            if down is not None:
                say(f"gemlab.atropos: run-api at {api.url} answers again")
                down = None
            if batch is not None:
                return batch
        except ApiError as error:
            if down is None:
                say(f"gemlab.atropos: {error}; retrying")
            down = str(error)
        if time.monotonic() > deadline:
            raise ApiError(
                down or f"no batch from run-api at {api.url} in {timeout:.0f} s: are environments posting to it?"
            )
        await asyncio.sleep(poll_seconds)
