"""How the endpoint meets a 10 MB request (issue 20): seconds to refuse it, ``/health`` latency
while it is refused, and the server's RSS before and after.

    PYTHONPATH=$PWD python benchmarks/bench_endpoint.py [--repeats 5]

The server runs in its own process (``python -m gemlab.openai_endpoint --model gemlab/tiny``) so its RSS
is its own; each repeat sends one 10 MB chat message (over the 4 MiB body limit), one 3.9 MB
message (under the body limit, over the context by characters) and one 300k-character message
(tokenized, then refused by its token count), while a thread polls ``/health`` every 20 ms.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx

MODEL = "gemlab/tiny"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def refuse_while_polling(base: str, characters: int) -> tuple[int, float, list[float]]:
    """(status, seconds to the answer, /health latencies during it)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "ab " * (characters // 3)}]}
    result: list[tuple[int, float]] = []

    def send() -> None:
        start = time.perf_counter()
        status = httpx.post(base + "/v1/chat/completions", json=body, timeout=300).status_code
        result.append((status, time.perf_counter() - start))

    sender = threading.Thread(target=send)
    latencies = []
    with httpx.Client(timeout=30) as client:
        sender.start()
        while sender.is_alive():
            start = time.perf_counter()
            client.get(base + "/health")
            latencies.append(time.perf_counter() - start)
            time.sleep(0.02)
    sender.join()
    return result[0][0], result[0][1], latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    server = subprocess.Popen(
        [sys.executable, "-m", "gemlab.openai_endpoint", "--model", MODEL, "--port", str(port)],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        httpx.post(
            base + "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=60,
        )
        before = rss_mb(server.pid)
        print(f"server RSS after one normal request: {before:.0f} MB")
        print(
            f"{'request':<34} {'status':>6} {'refused in (s, median [min, max])':>36} {'/health max (s)':>16} "
            f"{'polls':>6}"
        )
        for label, characters in (
            ("10 MB (over the 4 MiB body limit)", 10_000_000),
            ("3.9 MB (over context by chars)", 3_900_000),
            ("300k chars (tokenized)", 300_000),
        ):
            runs = [refuse_while_polling(base, characters) for _ in range(args.repeats)]
            times = [t for _, t, _ in runs]
            worst = max(max(lat) for _, _, lat in runs)
            statuses = sorted({s for s, _, _ in runs})
            print(
                f"{label:<34} {statuses!s:>6} {statistics.median(times):>12.3f} [{min(times):.3f}, "
                f"{max(times):.3f}] {worst:>16.3f} {sum(len(lat) for _, _, lat in runs):>6}"
            )
        print(
            f"server RSS after {3 * args.repeats} refused requests: {rss_mb(server.pid):.0f} MB (before: "
            f"{before:.0f} MB)"
        )
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
