"""Atropos's layout as three processes: atroposlib's ``run-api``, an environment started as its own
process (examples/atropos_guess_env.py serve, unmodified atroposlib) and ``python -m gemlab.atropos``
on the local backend's tiny chat model. A malformed and an oversized item reach ``/batch``: they
are refused in one line and the run goes on. The trainer is killed (SIGKILL) after its second
step and started again: it resumes, and the run folder ends with every step once, in order."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tinker_emulator import TINY_CHAT
from tinker_emulator.models import model_source

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "atropos_guess_env.py"
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_until(check, timeout: float, what: str, *processes: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for process in processes:
            assert process.poll() is None, f"{process.args[:3]} ended with {process.returncode} before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.2)


def test_run_api_an_environment_process_and_the_trainer_killed_and_resumed(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    api_port, serve_port = free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"
    tokenizer = str(model_source(TINY_CHAT)[0])
    trainer_args = [
        sys.executable,
        "-m",
        "gemlab.atropos",
        f"api_url={api}",
        f"serve_port={serve_port}",
        "batch_size=4",
        "max_steps=3",
        "max_token_len=256",
        "learning_rate=2e-3",
        f"log_dir={tmp_path}",
        "run_name=guess",
        "batch_timeout=300",
        "poll_seconds=0.2",
    ]
    environment_args = [
        sys.executable,
        str(EXAMPLE),
        "serve",
        "--env.rollout_server_url",
        api,
        "--openai.base_url",
        f"http://127.0.0.1:{serve_port}/v1",
        "--openai.server_type",
        "sglang",
        "--openai.model_name",
        TINY_CHAT,
        "--openai.api_key",
        "local",
        "--openai.tokenizer_name",
        tokenizer,
        "--env.tokenizer_name",
        tokenizer,
        "--env.group_size",
        "2",
        "--env.ensure_scores_are_not_same",
        "false",
        "--slurm",
        "false",
    ]
    metrics = tmp_path / "guess" / "metrics.jsonl"
    started: list[subprocess.Popen] = []

    def start(args: list[str], log: str) -> subprocess.Popen:
        with open(tmp_path / log, "w") as out:  # the child keeps its own copy of the file
            process = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
        started.append(process)
        return process

    try:
        run_api = start(
            [sys.executable, "-m", "atroposlib.cli.run_api", "--host", "127.0.0.1", "--port", str(api_port)], "api.log"
        )
        first = start(trainer_args, "trainer1.log")
        environment = start(environment_args, "env.log")
        wait_until(
            lambda: httpx.get(f"{api}/info", timeout=2).json()["batch_size"] == 4 if _answers(api) else False,
            300,
            "registration",
            run_api,
            first,
        )
        tokens = list(range(1, 9))
        # no inference_logprobs
        malformed = {"tokens": [tokens] * 4, "masks": [[-100] * 4 + tokens[4:]] * 4, "scores": [1.0, 0.0, 1.0, 0.0]}
        long = list(range(1, 301))
        oversized = {
            **malformed,
            "tokens": [long] * 4,
            "masks": [[-100] + long[1:]] * 4,
            "inference_logprobs": [[-0.5] * 300] * 4,
        }
        for item in (malformed, oversized):
            assert httpx.post(f"{api}/scored_data", json=item, timeout=10).status_code == 200
        wait_until(lambda: len(rows(metrics)) >= 2, 300, "second step", first, environment)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        second = start(trainer_args, "trainer2.log")
        assert second.wait(timeout=300) == 0, (tmp_path / "trainer2.log").read_text()[-2000:]
    finally:
        for process in reversed(started):
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
    first_log, second_log = (tmp_path / "trainer1.log").read_text(), (tmp_path / "trainer2.log").read_text()
    refused = [line for line in first_log.splitlines() if "a /batch item was refused" in line]
    assert any("inference_logprobs" in line for line in refused) and any(
        "longer than max_token_len=256" in line for line in refused
    ), first_log
    assert "Traceback" not in first_log + second_log
    assert "resuming guess from step" in second_log
    steps = rows(metrics)
    assert [row["step"] for row in steps] == [0, 1, 2]  # every step once, in order, through the kill
    assert sum(row["atropos/groups_refused"] for row in steps) >= 2
    assert all(row["sampler/num_episodes"] >= 2 and row["tokens/sampled"] > 0 for row in steps)
    assert (tmp_path / "guess" / "learning_curve.png").is_file()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_signals_sent_again_while_the_trainer_stops_change_nothing(tmp_path: Path) -> None:
    """SIGTERM, then more while the trainer is stopping (an impatient Ctrl-C): the stop line for the first,
    at most one answer to the repeats, no traceback, exit 143, and the run-api it started is gone."""
    api_port = free_port()
    trainer = subprocess.Popen(
        [sys.executable, "-m", "gemlab.atropos", f"api_url=http://127.0.0.1:{api_port}", f"serve_port={free_port()}",
         "start_api=true", f"log_dir={tmp_path}", "run_name=stop", "batch_timeout=300", "poll_seconds=0.2"],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        assert trainer.stdout is not None
        for line in trainer.stdout:
            if "serving" in line:  # registered with run-api and waiting for the first batch
                break
        for _ in range(20):
            if trainer.poll() is not None:
                break
            trainer.send_signal(signal.SIGTERM)
            time.sleep(0.05)
        out, _ = trainer.communicate(timeout=120)
    finally:
        if trainer.poll() is None:
            trainer.kill()
    assert trainer.returncode == 143, out
    assert "Traceback" not in out and "Error" not in out, out
    assert "gemlab.atropos: SIGTERM: stopped before the first step; nothing to save" in out, out
    assert out.count("still stopping") <= 1, out  # a repeat is answered once, not once per signal
    assert not _answers(f"http://127.0.0.1:{api_port}"), "the run-api it started is still up"
