"""Tinker's HTTP API served by ``python -m tinker_emulator.workshop_server``: what it costs and how it holds up.

1. The cost of one sample call: ``--call-turns`` turns of ``--call-width`` concurrent calls (8 tokens
   each, as the laptop preset's), in-process and through the unpatched SDK: wall time per turn, and the
   CPU the calling process spends per call (the SDK's own work, over HTTP; the generation too, in-process).
2. The laptop preset's seconds per step over HTTP (the unpatched SDK against a server process) vs
   in-process (the local backend in this process), steps interleaved in one run; the ratio's target is
   at most 1.15.
3. A simulated workshop: ``--clients`` processes, each running ``--steps`` steps of a small RL loop
   (sample 8 completions, importance-sampling forward_backward, AdamW step) against one server: how
   many finish without an error, each one's seconds per step, the server's memory at start and end.

    PYTHONPATH=$PWD python benchmarks/bench_http.py [--call-turns 30] [--steps 6] [--clients 30] [--client-steps 10]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
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


def call_cost(server: ServerProcess, turns: int, width: int) -> None:
    """``turns`` turns of ``width`` concurrent 8-token sample calls, in-process and over HTTP (the first 3 not
    counted)."""
    import tinker
    from tinker import types

    from gemlab.episodes import sampling_params
    from tinker_emulator import LocalServiceClient

    async def play(client: object, tokenizer: object) -> tuple[float, float]:
        params, me, walls, cpus = sampling_params(tokenizer, 8), psutil.Process(), [], []
        for turn in range(turns + 3):
            prompts = [
                types.ModelInput.from_ints(tokenizer.encode(f"guess {i} {turn} between 1 and 20")) for i in range(width)
            ]
            cpu, wall = sum(me.cpu_times()[:2]), time.perf_counter()
            await asyncio.gather(*[client.sample(prompt=p, num_samples=1, sampling_params=params) for p in prompts])
            if turn >= 3:
                walls.append(time.perf_counter() - wall)
                cpus.append(sum(me.cpu_times()[:2]) - cpu)
        return statistics.median(walls), statistics.median(cpus)

    remote = functools.partial(tinker.ServiceClient, base_url=server.url, api_key=server.keys[0])
    for name, make in (("in-process", LocalServiceClient), ("over HTTP", remote)):
        training = make().create_lora_training_client(base_model="gemlab/tiny", rank=8).result()
        sampler = training.save_weights_and_get_sampling_client().result()
        wall, cpu = asyncio.run(play(sampler, training.get_tokenizer()))
        print(
            f"  {name:11s} median per turn of {width} calls: {1000 * wall:.0f} ms wall, {1000 * cpu:.0f} ms of "
            "this process's CPU "
            f"({1000 * cpu / width:.2f} ms a call)"
        )


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
        print(
            f"  {name:11s} median {statistics.median(values):.3f} s/step (min {min(values):.3f}, max "
            f"{max(values):.3f}, n={len(values)}); "
            f"sampling {sample:.3f} s, update {train:.3f} s"
        )
    ratio = statistics.median(times["over HTTP"]) / statistics.median(times["in-process"])
    per_step = [h / i for h, i in zip(times["over HTTP"], times["in-process"], strict=True)]
    print(
        f"  ratio over HTTP / in-process: {ratio:.3f} (target <= 1.15); step by step: median "
        f"{statistics.median(per_step):.3f}, "
        f"min {min(per_step):.3f}, max {max(per_step):.3f}"
    )


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
    print(
        f"  server RSS: start {start_rss / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB, end "
        f"{rss.memory_info().rss / 2**20:.0f} MiB"
    )
    print(f"  server alive at the end: {server.alive()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--call-turns", type=int, default=30, help="turns of concurrent sample calls timed per side (0: skip)"
    )
    parser.add_argument(
        "--call-width", type=int, default=26, help="sample calls per turn (a laptop-preset turn has 17-32)"
    )
    parser.add_argument("--steps", type=int, default=6, help="laptop-preset steps measured per side")
    parser.add_argument("--clients", type=int, default=30, help="workshop client processes")
    parser.add_argument("--client-steps", type=int, default=10, help="RL steps per workshop client")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the workshop may take")
    parser.add_argument("--skip-laptop", action="store_true")
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with offline_server() as (server, workdir):
        if args.call_turns:
            print(f"one sample call: {args.call_turns} turns of {args.call_width} concurrent calls per side:")
            call_cost(server, args.call_turns, args.call_width)
        if not args.skip_laptop:
            print(f"laptop preset, {args.steps} interleaved steps each (after one warm-up step):")
            laptop_ratio(server, args.steps, workdir)
        print(f"workshop: {args.clients} clients x {args.client_steps} steps:")
        workshop(server, args.clients, args.client_steps, args.timeout, workdir)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
