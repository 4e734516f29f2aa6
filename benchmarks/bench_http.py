"""Tinker's HTTP API served by ``python -m tinker_emulator.workshop_server``: what it costs and how it holds up.

1. The laptop preset's seconds per step over HTTP (the unpatched SDK against a server process) vs
   in-process (the local backend in this process), steps interleaved in one run; the ratio's target is
   at most 1.15.
2. A simulated workshop: ``--clients`` processes, each running ``--steps`` steps of a small RL loop
   (sample 8 completions, importance-sampling forward_backward, AdamW step) against one server: how
   many finish without an error, each one's seconds per step, the server's memory at start and end.

    PYTHONPATH=$PWD python benchmarks/bench_http.py [--steps 6] [--clients 30] [--client-steps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from gemlab.doctor import cpu_name
from tinker_emulator.workshop_server.process import ServerProcess, offline_server

CLIENT = Path(__file__).with_name("tinker_rl_client.py")  # one attendee's program


def laptop_ratio(server: ServerProcess, steps: int, workdir: Path) -> None:
    """Laptop preset steps, alternating in-process and over HTTP (skipping each one's first step)."""
    import tinker

    from gemlab import Trainer, make_config

    local = Trainer(make_config("laptop", log_dir=str(workdir / "local"), max_steps=steps + 1), progress=False)
    remote_service = tinker.ServiceClient(base_url=server.url, api_key=server.keys[0])
    remote = Trainer(
        make_config("laptop", backend="tinker", log_dir=str(workdir / "http"), max_steps=steps + 1),
        service_client=remote_service,
        progress=False,
    )
    times: dict[str, list[float]] = {"in-process": [], "over HTTP": []}
    phases: dict[str, list[dict[str, float]]] = {"in-process": [], "over HTTP": []}
    for step in range(steps + 1):
        for name, trainer in (("in-process", local), ("over HTTP", remote)):
            start = time.perf_counter()
            metrics = trainer.step()
            if step:
                times[name].append(time.perf_counter() - start)
                phases[name].append(metrics)
    local.close()
    remote.close()
    for name, values in times.items():
        sample = statistics.median(m["time/sample"] for m in phases[name])
        train = statistics.median(m["time/train"] for m in phases[name])
        print(f"  {name:11s} median {statistics.median(values):.3f} s/step (min {min(values):.3f}, max {max(values):.3f}, n={len(values)}); "
              f"sampling {sample:.3f} s, update {train:.3f} s")
    ratio = statistics.median(times["over HTTP"]) / statistics.median(times["in-process"])
    per_step = [h / i for h, i in zip(times["over HTTP"], times["in-process"])]
    print(f"  ratio over HTTP / in-process: {ratio:.3f} (target <= 1.15); step by step: median {statistics.median(per_step):.3f}, "
          f"min {min(per_step):.3f}, max {max(per_step):.3f}")


def workshop(server: ServerProcess, clients: int, steps: int, timeout: float, workdir: Path) -> None:
    """``clients`` processes of ``steps`` RL steps each against ``server``, all at once."""
    rss = psutil.Process(server.process.pid)
    start_rss = rss.memory_info().rss
    started = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, str(CLIENT), str(steps)], env=server.env(), cwd=workdir,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(clients)
    ]
    peak = start_rss
    while any(p.poll() is None for p in procs) and time.perf_counter() - started < timeout:
        peak = max(peak, rss.memory_info().rss)
        time.sleep(1)
    results, failures = [], []
    for p in procs:
        if p.poll() is None:
            p.kill()
        out, err = p.communicate()
        if p.returncode == 0:
            results.append(json.loads(out.strip().splitlines()[-1])["times"])
        else:
            failures.append((p.returncode, err.strip().splitlines()[-1:] if err else []))
    wall = time.perf_counter() - started
    per_client = [statistics.median(t) for t in results]
    print(f"  {len(results)}/{clients} clients finished {steps} steps in {wall:.0f} s; failures: {failures or 'none'}")
    if per_client:
        print(f"  seconds per step per client: median {statistics.median(per_client):.2f}, "
              f"min {min(per_client):.2f}, max {max(per_client):.2f}")
        print(f"  server throughput: {len(results) * steps / wall:.2f} client-steps/s")
    print(f"  server RSS: start {start_rss / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB, end {rss.memory_info().rss / 2**20:.0f} MiB")
    print(f"  server alive at the end: {server.alive()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="laptop-preset steps measured per side")
    parser.add_argument("--clients", type=int, default=30, help="workshop client processes")
    parser.add_argument("--client-steps", type=int, default=10, help="RL steps per workshop client")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the workshop may take")
    parser.add_argument("--skip-laptop", action="store_true")
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with offline_server() as (server, workdir):
        if not args.skip_laptop:
            print(f"laptop preset, {args.steps} interleaved steps each (after one warm-up step):")
            laptop_ratio(server, args.steps, workdir)
        print(f"workshop: {args.clients} clients x {args.client_steps} steps:")
        workshop(server, args.clients, args.client_steps, args.timeout, workdir)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
