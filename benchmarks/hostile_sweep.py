"""A hostile and careless tenant against both servers on 127.0.0.1: oversized heads, compressed
bombs, deep JSON, malformed bodies, Host tricks, over-bound requests, a large legal request with
another key's small one behind it, cancel and SIGTERM; prints one table (category, tried, held,
failed) and the figures issue 45 asks for. Bounded: every wait has a timeout; nothing leaves loopback.

    PYTHONPATH=$PWD python benchmarks/hostile_sweep.py [--fair-datums 32]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx
import numpy as np
import psutil
import zstandard
from tinker.proto import tinker_public_pb2 as pb

from tinker_emulator.workshop_server.process import ServerProcess

RESULTS: dict[str, list[bool]] = defaultdict(list)
NEW_SESSION = {"tags": [], "user_metadata": {}, "sdk_version": "sweep"}


def check(category: str, held: bool, what: str) -> None:
    RESULTS[category].append(held)
    if not held:
        print(f"  FAILED [{category}] {what}", flush=True)


def raw(port: int, data: bytes, chunk: int = 1 << 20, timeout: float = 60) -> tuple[bytes, float]:
    """What the server answers to ``data`` sent as is (stopping when it closes), and the seconds taken."""
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            for start in range(0, len(data), chunk):
                sock.sendall(data[start : start + chunk])
        except OSError:
            pass
        answer = b""
        try:
            while piece := sock.recv(65536):
                answer += piece
        except OSError:
            pass
    return answer, time.perf_counter() - started


def status(answer: bytes) -> int:
    try:
        return int(answer.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def poll_health(url: str, stop: threading.Event, times: list[float]) -> None:
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.get(url)
            times.append(time.perf_counter() - started)
            time.sleep(0.02)


def big_heads(port: int, health: str, host: str, label: str) -> None:
    """Two connections each sending a 100 MiB header while /health is polled."""
    stop, times = threading.Event(), []
    poller = threading.Thread(target=poll_health, args=(health, stop, times), daemon=True)
    poller.start()
    deadline = time.monotonic() + 60
    while not times and time.monotonic() < deadline:  # /health answers before the heads are sent
        time.sleep(0.05)
    polled = len(times)
    head = f"GET / HTTP/1.1\r\nHost: {host}\r\nX-Big: ".encode() + b"a" * (100 * 2**20) + b"\r\n\r\n"
    answers: list[tuple[bytes, float]] = []
    for _ in range(5):  # 5 rounds of two at once, each sending all of its 100 MiB unless cut off
        senders = [threading.Thread(target=lambda: answers.append(raw(port, head))) for _ in range(2)]
        for s in senders:
            s.start()
        for s in senders:
            s.join(120)
    time.sleep(0.5)
    stop.set()
    poller.join(60)
    times = times[polled:]  # those polled while the heads were sent
    for answer, _took in answers:
        check("header size", status(answer) == 431, f"{label}: 100 MiB header answered {answer[:40]!r}")
    check("header size", bool(times) and max(times) < 2.0, f"{label}: health worst {max(times or [0]):.2f} s")
    print(
        f"  {label}: 5 x 2 x 100 MiB headers -> {sorted({status(a) for a, _ in answers})}, answered in median "
        f"{statistics.median(t for _, t in answers):.3f} s, worst {max(t for _, t in answers):.3f} s; "
        f"/health during: median {statistics.median(times or [0]):.3f} s, worst {max(times or [0]):.3f} "
        f"s (n={len(times)})"
    )


def fb_body(model_id: str, datums: int, length: int, target_dtype: int = pb.DTYPE_INT64) -> bytes:
    msg = pb.ForwardBackwardRequest(model_id=model_id, seq_id=1, loss_fn="cross_entropy")
    for i in range(datums):
        datum = msg.data.add()
        datum.model_input.add().encoded_text.tokens = (np.arange(length, dtype=np.int32) % 50 + 1 + i % 7).tobytes()
        targets = (np.arange(length) % 50 + 2).astype(np.int64 if target_dtype == pb.DTYPE_INT64 else np.float32)
        datum.loss_fn_inputs["target_tokens"].CopyFrom(
            pb.Tensor(dense=targets.tobytes(), dtype=target_dtype, shape=[length])
        )
        weights = np.ones(length, np.float32).tobytes()
        datum.loss_fn_inputs["weights"].CopyFrom(pb.Tensor(dense=weights, dtype=pb.DTYPE_FLOAT32, shape=[length]))
    return msg.SerializeToString()


class Tenant:
    """One key's client: a session and a training run of gemlab/tiny-chat."""

    def __init__(self, url: str, key: str):
        self.client = httpx.Client(base_url=url, headers={"X-API-Key": key}, timeout=120)
        self.session = self.client.post("/api/v1/create_session", json=NEW_SESSION).json()["session_id"]
        create = {
            "session_id": self.session,
            "model_seq_id": 0,
            "base_model": "gemlab/tiny-chat",
            "lora_config": {"rank": 8},
        }
        answer = self.client.post("/api/v1/create_model", json=create).json()
        self.model = answer["model_id"]
        self.wait(answer["request_id"])

    def wait(self, request_id: str, timeout: float = 900) -> bytes:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.client.post("/api/v1/retrieve_future", json={"request_id": request_id})
            if b"try_again" not in answer.content:
                return answer.content
        raise TimeoutError(request_id)

    def fb(self, body: bytes, encoding: str | None = None) -> httpx.Response:
        headers = {"content-type": "application/x-protobuf"} | ({"content-encoding": encoding} if encoding else {})
        return self.client.post("/api/v1/forward_backward", content=body, headers=headers)


def rss(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def workshop(fair_datums: int) -> None:
    data = Path(os.environ.get("SWEEP_DIR", "/tmp/hostile-sweep")) / f"data-{os.getpid()}"
    data.parent.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(data, "--keys", "2")
    port = int(server.url.rsplit(":", 1)[1])
    pid = server.process.pid
    try:
        print(f"workshop server {server.url} (pid {pid})", flush=True)
        big_heads(port, f"{server.url}/api/v1/healthz", "127.0.0.1", "workshop")
        alice, bob = Tenant(server.url, server.keys[0]), Tenant(server.url, server.keys[1])
        for _ in range(2):  # warm-up
            alice.wait(alice.fb(fb_body(alice.model, 4, 256)).json()["request_id"])
            bob.wait(bob.fb(fb_body(bob.model, 1, 64)).json()["request_id"])
        baseline = rss(pid)
        print(f"  RSS after warm-up: {baseline:.0f} MiB", flush=True)

        # compressed bodies
        msg = pb.ForwardBackwardRequest(model_id=alice.model, seq_id=1, loss_fn="cross_entropy")
        msg.data.add().model_input.add().encoded_text.tokens = bytes(4 * 16_000_000)
        packed = zstandard.ZstdCompressor().compress(msg.SerializeToString())
        before, started = rss(pid), time.perf_counter()
        answer = alice.fb(packed, "zstd")
        took = time.perf_counter() - started
        check(
            "compressed body",
            answer.status_code == 400,
            f"16M-token zstd datum: {answer.status_code} {answer.text[:100]}",
        )
        print(
            f"  {len(packed)} B zstd -> one 16M-token datum: {answer.status_code} in {took:.2f} s, RSS "
            f"{before:.0f} -> {rss(pid):.0f} MiB: "
            f"{answer.json().get('error', '')[:90]}",
            flush=True,
        )
        bomb = zstandard.ZstdCompressor().compress(bytes(1 << 30))
        started = time.perf_counter()
        answer = alice.fb(bomb, "zstd")
        check("compressed body", answer.status_code == 413, f"1 GiB zstd bomb: {answer.status_code}")
        print(
            f"  {len(bomb)} B zstd expanding to 1 GiB: {answer.status_code} in {time.perf_counter() - started:.2f} s",
            flush=True,
        )
        for encoding in ("gzip", "br"):
            answer = alice.fb(b"\x1f\x8bnot gzip", encoding)
            check("compressed body", 400 <= answer.status_code < 500, f"{encoding}: {answer.status_code}")

        # malformed and over-bound requests
        deep = b'{"tinker_path": ' + b"[" * 5000 + b"]" * 5000 + b"}"
        answer = alice.client.post("/api/v1/weights_info", content=deep, headers={"content-type": "application/json"})
        check("malformed", answer.status_code == 400, f"5000-deep JSON: {answer.status_code}")
        check(
            "malformed",
            alice.fb(fb_body(alice.model, 1, 8, pb.DTYPE_FLOAT32)).status_code == 400,
            "float target_tokens",
        )
        check("malformed", alice.fb(fb_body(alice.model, 1, 4096)).status_code == 400, "datum over the context")
        check(
            "bounds",
            alice.fb(fb_body(alice.model, 129, 2048)).status_code == 400,
            "forward_backward over --max-train-tokens",
        )
        sample = {"base_model": "gemlab/tiny-chat", "prompt": {"chunks": [{"type": "encoded_text",
            "tokens": [1] * 1000}]},
                  "num_samples": 64, "sampling_params": {"max_tokens": 40}}  # fmt: skip
        check(
            "bounds",
            alice.client.post("/api/v1/asample", json=sample).status_code == 400,
            "sample over --max-sample-tokens",
        )
        head = (f"POST /api/v1/forward_backward HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {server.keys[0]}\r\n"
                "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nZZ\r\nbad\r\n")  # fmt: skip
        answer, _ = raw(port, head.encode())
        check("malformed", status(answer) == 400, f"malformed chunked body: {answer[:40]!r}")
        answer = alice.client.post("/api/v1/weights_info", json={"tinker_path": "tinker://nope/weights/x"})
        check("paths", str(data) not in answer.text and "/root" not in answer.text, f"error text: {answer.text[:120]}")

        # fairness: bob's small request behind alice's large legal one
        units = -(-fair_datums * 2048 // 4096)  # the server's default --unit-tokens
        large_started = time.monotonic()
        large = alice.fb(fb_body(alice.model, fair_datums, 2048))
        time.sleep(1.0)
        started = time.perf_counter()
        small = bob.fb(fb_body(bob.model, 1, 64))
        bob.wait(small.json()["request_id"])
        waited = time.perf_counter() - started
        small_done = time.monotonic()
        alice.wait(large.json()["request_id"])
        large_done = time.monotonic()
        unit_s = (large_done - large_started) / units  # this machine's time per unit, at its load now
        check(
            "fairness",
            small_done < large_done and waited < 2.5 * unit_s,
            f"small waited {waited:.2f} s, a unit {unit_s:.2f} s",
        )
        print(
            f"  fairness: bob's 64-token forward_backward behind alice's {fair_datums} x 2,048 tokens "
            f"answered in {waited:.2f} s; "
            f"alice's finished {large_done - small_done:.1f} s later ({units} units, {unit_s:.2f} s each "
            "on average)",
            flush=True,
        )

        # cancel: the running request stops at its next unit
        large = alice.fb(fb_body(alice.model, fair_datums, 2048))
        time.sleep(1.0)
        alice.client.post("/api/v1/cancel_future", json={"request_id": large.json()["request_id"]})
        started = time.perf_counter()
        small = alice.fb(fb_body(alice.model, 1, 64))  # same key: queued behind the cancelled one
        alice.wait(small.json()["request_id"])
        waited = time.perf_counter() - started
        check(
            "cancel",
            waited < 2.5 * unit_s,
            f"after cancel, same key's next request waited {waited:.2f} s, a unit {unit_s:.2f} s",
        )
        print(
            f"  cancel_future of {fair_datums} x 2,048 tokens: the same key's next request answered in "
            f"{waited:.2f} s "
            f"(the whole request: {units * unit_s:.1f} s)",
            flush=True,
        )

        heavy = rss(pid)
        time.sleep(2)
        after = rss(pid)
        held = after <= 1.2 * baseline
        check("memory", held, f"RSS {baseline:.0f} -> {after:.0f} MiB")
        print(
            f"  RSS: after warm-up {baseline:.0f} MiB, after the heavy requests {heavy:.0f} MiB, 2 s later "
            f"{after:.0f} MiB "
            f"({after / baseline:.2f}x)",
            flush=True,
        )

        # SIGTERM with a long queue
        for _ in range(4):
            alice.fb(fb_body(alice.model, fair_datums, 2048))
        time.sleep(1.0)
        started = time.perf_counter()
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        took = time.perf_counter() - started
        check("shutdown", server.process.poll() is not None and took < 5.0, f"SIGTERM took {took:.1f} s")
        staged = list(data.rglob(".gemlab-staging-*"))
        check("shutdown", not staged, f"staging folders left: {staged}")
        print(f"  SIGTERM with {4 * fair_datums} datums queued: exited in {took:.2f} s", flush=True)
    finally:
        server.stop()


def endpoint() -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen([sys.executable, "-m", "gemlab.openai_endpoint", "--model", "gemlab/tiny", "--port",
        str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the endpoint did not start")
            time.sleep(0.5)
        print(f"OpenAI endpoint on port {port}", flush=True)
        big_heads(port, f"http://127.0.0.1:{port}/health", "127.0.0.1", "endpoint")
        for head, allowed in [
            ("Host: 127.0.0.1:99999", False),
            ("Host: 127.0.0.1\r\nHost: evil.example.com", False),
            ("Host: evil.example.com", False),
            ("Host: 127.0.0.1:8000", True),
        ]:
            answer, _ = raw(port, f"GET /v1/models HTTP/1.1\r\n{head}\r\nConnection: close\r\n\r\n".encode())
            check("host", (status(answer) == 200) == allowed, f"{head!r}: {answer[:40]!r}")
        answer, _ = raw(
            port, b"GET http://evil.example.com/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        check("host", status(answer) == 400, f"absolute-form URI: {answer[:40]!r}")
        answer = httpx.post(
            f"http://127.0.0.1:{port}/generate", json={"input_ids": [1, 2], "sampling_params": []}, timeout=60
        )
        check("malformed", answer.status_code == 400, f"/generate sampling_params []: {answer.status_code}")
        deep = b"[" * 5000 + b"]" * 5000
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", content=deep, timeout=60)
        check("malformed", answer.status_code == 400, f"endpoint 5000-deep JSON: {answer.status_code}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        check("malformed", b"Traceback" not in err, "endpoint log has a traceback")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--fair-datums", type=int, default=128, help="datums of 2,048 tokens in the large request (128: the bound)"
    )
    args = parser.parse_args()
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "?",
    )
    print(
        f"CPU: {cpu}, {os.cpu_count()} cores; uptime: "
        f"{subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}"
    )
    workshop(args.fair_datums)
    endpoint()
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print("\n| category | tried | held | failed |\n|---|---|---|---|")
    for category, outcomes in RESULTS.items():
        print(f"| {category} | {len(outcomes)} | {sum(outcomes)} | {len(outcomes) - sum(outcomes)} |")


if __name__ == "__main__":
    main()
