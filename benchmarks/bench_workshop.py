"""A long workshop against ``python -m tinker_emulator.workshop_server --keys 30``: memory, step time, fairness.

1. Memory: the server's RSS idle, at its baseline (after one client has loaded the base models and
   left), at its peak while ``--waves`` waves of ``--wave-clients`` clients come, each creating a
   rank-32 training run, training a few RL steps, sampling, saving a checkpoint and a sampler,
   then closing its ServiceClient (ending its session), and after every session has ended.
2. Step time: ``--clients`` (30) clients at once, each ``--client-steps`` RL steps (sample 8
   completions, importance-sampling forward_backward, AdamW step), one key each: seconds per step
   per client.
3. Fairness: one key queues ``--big`` forward_backward requests of 4 x 2,000 tokens; another key
   then sends one of 64 tokens. Its wait is printed beside the bound the server promises (the
   running request plus one per other key ahead of it in the round: here one big request) and
   beside a big request's own time.

    PYTHONPATH=$PWD python benchmarks/bench_workshop.py [--waves 3] [--wave-clients 10] [--clients 30]

Each client is its own process running the unpatched tinker SDK, as in a room.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from gemlab.doctor import cpu_name
from tinker_emulator.workshop_server.process import ServerProcess, offline_server

CLIENT = Path(__file__).with_name("tinker_rl_client.py")  # one attendee's program


def mib(value: float) -> str:
    return f"{value / 2**20:.0f} MiB"


class Watch:
    """The server's RSS, sampled every 0.2 s in a thread: its peak since ``reset``."""

    def __init__(self, pid: int):
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss(self) -> int:
        return self.process.memory_info().rss

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, self.rss())

    def stop(self) -> None:
        self._stop.set()


def run_clients(
    server: ServerProcess, count: int, steps: int, save: bool, workdir: Path, first_key: int = 0
) -> list[list[float]]:
    """``count`` client processes at once (key ``first_key + i``); each one's step times. Exits on a failure."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(CLIENT), str(steps), "save" if save else "-", "32"],
            env=server.env(key=(first_key + i) % len(server.keys)),
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            sys.exit(f"a client failed ({proc.returncode}): {err.strip().splitlines()[-3:]}")
        results.append(json.loads(out.strip().splitlines()[-1])["times"])
    return results


def settle(watch: Watch, seconds: float) -> int:
    """The server's RSS after ``seconds`` (the released adapters are deleted on its workers meanwhile)."""
    time.sleep(seconds)
    return watch.rss()


def memory(server: ServerProcess, watch: Watch, waves: int, per_wave: int, workdir: Path) -> None:
    idle = watch.rss()
    run_clients(server, 1, 1, True, workdir)
    baseline = settle(watch, 3)
    print(f"  server RSS idle {mib(idle)}; baseline (base models loaded, first client gone) {mib(baseline)}")
    watch.peak = baseline
    for wave in range(waves):
        started = time.perf_counter()
        run_clients(server, per_wave, 3, True, workdir, first_key=wave * per_wave)
        print(f"  wave {wave + 1}: {per_wave} clients in {time.perf_counter() - started:.0f} s; "
              f"peak {mib(watch.peak)}, after its sessions ended {mib(settle(watch, 3))}")
    after = settle(watch, 5)
    print(f"  after all {waves * per_wave + 1} sessions ended: {mib(after)} "
          f"({mib(after - baseline)} over baseline; peak was {mib(watch.peak)})")


def step_times(server: ServerProcess, clients: int, steps: int, workdir: Path) -> None:
    started = time.perf_counter()
    results = run_clients(server, clients, steps, False, workdir)
    wall = time.perf_counter() - started
    per_client = sorted(statistics.median(t[1:] or t) for t in results)
    print(f"  {clients} clients x {steps} steps in {wall:.0f} s (start-up included)")
    print(f"  seconds per step per client (median over its steps after the first): median "
          f"{statistics.median(per_client):.2f}, min {per_client[0]:.2f}, max {per_client[-1]:.2f}")


def fairness(server: ServerProcess, big: int) -> None:
    import tinker
    from tinker import types

    def datum(length: int) -> types.Datum:
        tokens = [1 + i % 500 for i in range(length + 1)]
        return types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * length},
        )

    clients = [tinker.ServiceClient(base_url=server.url, api_key=key) for key in server.keys[:2]]
    heavy, light = (c.create_lora_training_client(base_model="gemlab/tiny", rank=32).result() for c in clients)
    large, small = [datum(2000)] * 4, [datum(64)]

    def timed(client, data) -> float:
        start = time.perf_counter()
        client.forward_backward(data, "cross_entropy").result()
        return time.perf_counter() - start

    for client in (heavy, light):
        timed(client, small)  # warm-up
    alone = statistics.median(timed(light, small) for _ in range(3))
    one_big = statistics.median(timed(heavy, large) for _ in range(2))
    queued = [heavy.forward_backward(large, "cross_entropy") for _ in range(big)]
    time.sleep(0.5)  # the big ones reach the server first
    behind = timed(light, small)
    start = time.perf_counter()
    for future in queued:
        future.result()
    rest = time.perf_counter() - start
    print(f"  64 tokens alone: {alone:.2f} s; one big request (4 x 2,000 tokens): {one_big:.2f} s")
    print(f"  64 tokens sent while the other key had {big} big ones queued: {behind:.2f} s "
          f"(bound: the running big one + its own = {one_big + alone:.2f} s; in arrival order it would wait "
          f"for all {big}: ~{big * one_big + alone:.2f} s); the big queue finished {rest:.1f} s after it")
    for client in clients:
        client.close("success").result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waves", type=int, default=3, help="waves of clients in the memory run")
    parser.add_argument("--wave-clients", type=int, default=10, help="clients per wave, at once")
    parser.add_argument("--clients", type=int, default=30, help="clients at once in the step-time run (0: none)")
    parser.add_argument("--client-steps", type=int, default=3, help="RL steps per client in the step-time run")
    parser.add_argument(
        "--big", type=int, default=4, help="big requests queued by one key in the fairness run (0: no fairness run)"
    )
    args = parser.parse_args()
    print(
        f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average at start: "
        f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    with offline_server("--keys", "30") as (server, workdir):
        watch = Watch(server.process.pid)
        try:
            print(
                f"memory: {args.waves} waves of {args.wave_clients} clients (3 RL steps, a checkpoint and a "
                "sampler each, then close):"
            )
            memory(server, watch, args.waves, args.wave_clients, workdir)
            if args.clients:
                print(f"step time: {args.clients} clients at once:")
                step_times(server, args.clients, args.client_steps, workdir)
            if args.big:
                print("fairness: a small forward_backward of one key behind another key's queue:")
                fairness(server, args.big)
            print(f"  server alive at the end: {server.alive()}")
        finally:
            watch.stop()
    print(f"load average at end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
