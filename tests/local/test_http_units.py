"""Bounded, fair work on the workshop server (tinker_emulator/workshop_server/units.py, validate.py): a large
forward_backward runs as units with another key's request between them, ``cancel_future`` stops
the units not yet run, one request's tokens are bounded by a flag the refusal names, and a
forward_backward's sizes are checked from its bytes before anything is decoded."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zstandard
from fastapi.testclient import TestClient
from tinker.proto import tinker_public_pb2 as pb

from tests.helpers.http_app import NEW_SESSION, training_worker_held
from tests.helpers.http_server import ServerProcess, first_line
from tinker_emulator import training_client
from tinker_emulator.futures import TRAINING, get_worker
from tinker_emulator.workshop_server import make_app
from tinker_emulator.workshop_server.state import Limits

KEYS = ["tml-" + "a" * 40, "tml-" + "b" * 40]
PROTOBUF = "application/x-protobuf"


def new_model(client: TestClient, key: str) -> str:
    """A new session's training run of ``gemlab/tiny`` for ``key``: its model id, once built."""
    session = client.post("/api/v1/create_session", json=NEW_SESSION, headers={"X-API-Key": key}).json()["session_id"]
    create = {"session_id": session, "model_seq_id": 0, "base_model": "gemlab/tiny", "lora_config": {"rank": 4}}
    answer = client.post("/api/v1/create_model", json=create, headers={"X-API-Key": key})
    assert answer.status_code == 200, answer.text
    fetched(client, answer.json()["request_id"], key)
    return answer.json()["model_id"]


def fetched(client: TestClient, request_id: str, key: str) -> bytes:
    """The body of a queued request's answer, polled as the SDK polls it."""
    while True:
        answer = client.post("/api/v1/retrieve_future", json={"request_id": request_id}, headers={"X-API-Key": key})
        assert answer.status_code == 200, answer.text
        if b"try_again" not in answer.content:
            return answer.content


def body(model_id: str, datums: int, length: int, target_dtype: int = pb.DTYPE_INT64) -> bytes:
    """A protobuf cross-entropy ``forward_backward`` of ``datums`` datums of ``length`` tokens."""
    msg = pb.ForwardBackwardRequest(model_id=model_id, seq_id=1, loss_fn="cross_entropy")
    for i in range(datums):
        datum = msg.data.add()
        datum.model_input.add().encoded_text.tokens = (np.arange(length, dtype=np.int32) % 50 + i + 1).tobytes()
        targets = np.arange(length) % 50 + 2
        as_bytes = targets.astype(np.int64 if target_dtype == pb.DTYPE_INT64 else np.float32).tobytes()
        datum.loss_fn_inputs["target_tokens"].CopyFrom(pb.Tensor(dense=as_bytes, dtype=target_dtype, shape=[length]))
        weights = np.ones(length, np.float32).tobytes()
        datum.loss_fn_inputs["weights"].CopyFrom(pb.Tensor(dense=weights, dtype=pb.DTYPE_FLOAT32, shape=[length]))
    return msg.SerializeToString()


def post_fb(client: TestClient, key: str, content: bytes, encoding: str | None = None) -> Any:
    headers = {"X-API-Key": key, "content-type": PROTOBUF} | ({"content-encoding": encoding} if encoding else {})
    return client.post("/api/v1/forward_backward", content=content, headers=headers)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The training runs whose forward passes ran, in the training worker's order."""
    ran: list[str] = []
    logprobs = training_client.LocalTrainingClient._logprobs

    def recording(self: Any, model: Any, batch: Any) -> Any:
        ran.append(self.model_id)
        return logprobs(self, model, batch)

    monkeypatch.setattr(training_client.LocalTrainingClient, "_logprobs", recording)
    return ran


def test_a_large_forward_backward_runs_as_units_with_another_keys_request_between(
    tmp_path: Path, recorded: list[str]
) -> None:
    app = make_app(tmp_path, KEYS, Limits(unit_tokens=32), device="cpu")
    with TestClient(app) as client:
        big, small = (new_model(client, key) for key in KEYS)
        runs = [app.state.server.registry.models[m].client.result().model_id for m in (big, small)]
        with training_worker_held():  # nothing runs until both are queued
            large = post_fb(client, KEYS[0], body(big, datums=8, length=16))  # 4 units of 2 datums
            other = post_fb(client, KEYS[1], body(small, datums=1, length=16))
        assert large.status_code == other.status_code == 200, (large.text, other.text)
        output = pb.ForwardBackwardOutput.FromString(fetched(client, large.json()["request_id"], KEYS[0]))
        fetched(client, other.json()["request_id"], KEYS[1])
    # the other key's request ran after the large one's first unit, not after all four
    assert recorded == [runs[0], runs[1], runs[0], runs[0], runs[0]]
    assert len(output.loss_fn_outputs) == 8  # one output per datum, in order, over the units
    losses = [np.frombuffer(o.fields["elementwise_loss"].data, np.float32).sum() for o in output.loss_fn_outputs]
    assert output.metrics["loss:sum"] == pytest.approx(float(sum(losses)), rel=1e-4)


def test_cancel_future_stops_a_forward_backward_at_its_next_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[int] = []
    inside, go_on = threading.Event(), threading.Event()
    logprobs = training_client.LocalTrainingClient._logprobs

    def holding(self: Any, model: Any, batch: Any) -> Any:
        ran.append(len(batch.inputs))
        inside.set()
        go_on.wait(120)  # the first unit runs until the test has cancelled the request
        return logprobs(self, model, batch)

    app = make_app(tmp_path, KEYS, Limits(unit_tokens=16), device="cpu")
    with TestClient(app) as client:
        model = new_model(client, KEYS[0])
        monkeypatch.setattr(training_client.LocalTrainingClient, "_logprobs", holding)
        started = post_fb(client, KEYS[0], body(model, datums=6, length=16))
        assert started.status_code == 200, started.text
        assert inside.wait(60)
        cancelled = client.post("/api/v1/cancel_future", json=started.json(), headers={"X-API-Key": KEYS[0]})
        go_on.set()
        assert cancelled.status_code == 204
        get_worker(TRAINING).drain()
    assert ran == [1]  # the unit running finished; the five after it never ran


def test_a_request_over_the_token_bound_is_refused_naming_the_flag(tmp_path: Path) -> None:
    app = make_app(tmp_path, KEYS, Limits(max_train_tokens=100, max_sample_tokens=100), device="cpu")
    with TestClient(app) as client:
        model = new_model(client, KEYS[0])
        answer = post_fb(client, KEYS[0], body(model, datums=7, length=16))
        assert answer.status_code == 400
        assert answer.json()["error"] == (
            "this forward_backward request has 112 tokens; the server takes at most 100 per request "
            "(its --max-train-tokens): split it into smaller requests"
        )
        sample = {
            "base_model": "gemlab/tiny",
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3, 4]}]},
            "num_samples": 10,
            "sampling_params": {"max_tokens": 8},
        }
        answer = client.post("/api/v1/asample", json=sample, headers={"X-API-Key": KEYS[0]})
        assert answer.status_code == 400 and "has 120 tokens" in answer.json()["error"], answer.text
        assert "--max-sample-tokens" in answer.json()["error"]


def test_float_target_tokens_are_refused(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path, KEYS, device="cpu")) as client:
        model = new_model(client, KEYS[0])
        answer = post_fb(client, KEYS[0], body(model, datums=1, length=8, target_dtype=pb.DTYPE_FLOAT32))
        assert answer.status_code == 400
        assert "target_tokens'] holds floats; target_tokens are token ids" in answer.json()["error"]


def test_a_small_compressed_body_of_a_huge_datum_is_refused_by_its_length_before_decoding(tmp_path: Path) -> None:
    """5 kB of zstd that expand to one datum of 4,000,000 tokens: refused by the token count read
    from the bytes; no token list is ever made of it."""
    with TestClient(make_app(tmp_path, KEYS, device="cpu")) as client:
        model = new_model(client, KEYS[0])
        msg = pb.ForwardBackwardRequest(model_id=model, seq_id=1, loss_fn="cross_entropy")
        msg.data.add().model_input.add().encoded_text.tokens = bytes(4 * 4_000_000)
        packed = zstandard.ZstdCompressor().compress(msg.SerializeToString())
        assert len(packed) < 10_000
        tracemalloc.start()
        try:
            answer = post_fb(client, KEYS[0], packed, encoding="zstd")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 80 * 2**20, f"{peak} bytes allocated"  # its token list alone would be ~150 MB
        assert answer.status_code == 400
        assert answer.json()["error"] == "data[0].model_input has 4000000 tokens; the model's context holds 2048"


# The attendee's program: queues ~30 s of forward_backward units, says so, then waits. It runs in a
# process of its own: once the server is gone, the SDK's threads retry its requests with jitter drawn
# from Python's global random, which GEM's games in later tests of this process draw from too.
QUEUES_WORK = """
import time
import tinker
trainer = tinker.ServiceClient().create_lora_training_client(base_model="gemlab/tiny", rank=4).result()
data = [
    tinker.types.Datum(
        model_input=tinker.types.ModelInput.from_ints(list(range(1, 257))),
        loss_fn_inputs={"target_tokens": list(range(2, 258)), "weights": [1.0] * 256},
    )
    for _ in range(128)
]
futures = [trainer.forward_backward(data, "cross_entropy") for _ in range(8)]
print("queued", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_sigterm_stops_a_server_with_a_long_queue_promptly(tmp_path: Path) -> None:
    """A key queues ~30 s of forward_backward units (generous: the worker would take minutes
    on a loaded machine); SIGTERM cancels what is queued and the process ends (bound 25 s, a
    stop waits only for the unit running)."""
    server = ServerProcess(tmp_path / "data", "--unit-tokens", "256")
    program = None
    try:
        program = subprocess.Popen(
            [sys.executable, "-c", QUEUES_WORK],
            env=server.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert first_line(program) == "queued"
        time.sleep(2)  # the work is queued and running
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=25)
        assert time.monotonic() - started < 25
    finally:
        if program is not None:
            program.kill()
            program.communicate()
        if server.process.poll() is None:
            server.process.kill()


@pytest.mark.slow
def test_the_servers_files_are_its_own_and_a_malformed_chunked_body_is_one_log_line(tmp_path: Path) -> None:
    """Tenant and run folders 0700, checkpoint files 0600 (was 0755 / 0644); a chunked body with
    broken framing leaves one line in the log and no traceback (was: a ClientDisconnect traceback)."""
    server = ServerProcess(tmp_path / "data")
    try:
        saves = (
            "import tinker; tinker.ServiceClient().create_lora_training_client(base_model='gemlab/tiny', "
            "rank=4).result().save_state('first').result()"
        )
        done = subprocess.run(
            [sys.executable, "-c", saves], env=server.env(), capture_output=True, text=True, timeout=300
        )  # the SDK's threads stay there
        assert done.returncode == 0, done.stderr[-3000:]
        tenants = tmp_path / "data" / "tenants"
        folders = [tenants, *[p for p in tenants.rglob("*") if p.is_dir()]]
        files = [p for p in tenants.rglob("*") if p.is_file()]
        assert files and all(p.stat().st_mode & 0o777 == 0o700 for p in folders[1:]), [
            oct(p.stat().st_mode) for p in folders
        ]
        assert all(p.stat().st_mode & 0o777 == 0o600 for p in files), {p.name: oct(p.stat().st_mode) for p in files}

        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        head = (
            f"POST /api/v1/forward_backward HTTP/1.1\r\nHost: {host}\r\nX-API-Key: {server.keys[0]}\r\n"
            "Content-Type: application/x-protobuf\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head.encode() + b"5\r\nhello\r\nZZZ\r\nnot a chunk\r\n")
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        time.sleep(1)
        assert server.alive()
    finally:
        server.stop()
    log = server.log.read_text()
    assert "Traceback" not in log and "ClientDisconnect" not in log, log[-3000:]


def test_memory_is_handed_back_after_a_large_request_and_a_refused_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tinker_emulator import memory

    trims: list[int] = []
    monkeypatch.setattr(memory, "trim", lambda: trims.append(1))
    monkeypatch.setattr(memory, "LARGE_TOKENS", 64)
    with TestClient(make_app(tmp_path, KEYS, device="cpu")) as client:
        model = new_model(client, KEYS[0])
        small = post_fb(client, KEYS[0], body(model, datums=1, length=16))
        fetched(client, small.json()["request_id"], KEYS[0])
        assert trims == []
        large = post_fb(client, KEYS[0], body(model, datums=8, length=16))
        fetched(client, large.json()["request_id"], KEYS[0])
        get_worker(TRAINING).drain()  # the trim is the training worker's job after the units
        assert trims == [1]
        assert post_fb(client, KEYS[0], b"not a protobuf").status_code == 400
        assert trims == [1, 1]
    memory._libc.cache_clear()
    monkeypatch.undo()
    memory.trim()  # the real one runs (glibc here)


def test_a_cancelled_large_request_trims_after_the_unit_that_was_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cancel_future`` while a unit runs: that unit's memory is freed only when it ends, so the
    trim comes after it (trimmed at once, the memory stayed: the sweep's server kept 1.34x its RSS
    after warm-up, 0.90x with the trim after the unit)."""
    from tinker_emulator import memory
    from tinker_emulator.workshop_server import units

    events: list[str] = []
    monkeypatch.setattr(memory, "trim", lambda: events.append("trim"))
    started, release = threading.Event(), threading.Event()

    def unit() -> None:
        started.set()
        release.wait(timeout=60)
        events.append("unit ended")

    worker = get_worker(TRAINING)
    running = worker.submit(unit)
    queued = worker.submit(lambda: events.append("queued unit ran"))
    assert started.wait(timeout=60)

    async def cancel_while_running() -> None:
        task = asyncio.ensure_future(units.gathered([running, queued], large=True))
        await asyncio.sleep(0)  # it awaits the running unit
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancel_while_running())
    finally:
        release.set()
    worker.drain()
    assert events == ["unit ended", "trim"]
