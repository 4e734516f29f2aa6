"""Where the memory of a ``preset=smollm2`` run goes, and what the C allocator's settings change.

    python research/experiments/memory_smollm2.py                      # the default allocator, then each variant
    python research/experiments/memory_smollm2.py --variants default   # one of them (names below)
    python research/experiments/memory_smollm2.py --preset smollm2-tool --steps 2 --variants default trim

Each variant runs in a fresh process (glibc reads its ``MALLOC_*`` settings at start-up): a
``preset=smollm2`` Trainer is loaded, evaluated once (which builds the sampler), warmed up, then
trained for ``--steps`` RL steps and evaluated again. After each stage it prints the resident set
(RSS), its peak so far (``VmHWM``) and the bytes held by live CPU tensors, so what the allocator
keeps beyond the tensors shows as the difference. The last line per variant gives the peak and
the median RL step time, which the allocator's settings trade against each other. The ``trim`` variant
keeps glibc's defaults and calls ``malloc_trim(0)`` after each stage: what the allocator holds free
and could hand back. Not a test:
figures depend on the machine (and its load, for the times).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

VARIANTS = {
    "default": {},
    "one-arena": {"MALLOC_ARENA_MAX": "1"},  # every thread allocates from one heap
    "mmap-1MB": {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)},  # blocks of 1 MB or more go back to the OS when freed
    "mmap-64KB": {"MALLOC_MMAP_THRESHOLD_": str(1 << 16), "MALLOC_ARENA_MAX": "2"},
    "trim": {},  # glibc's defaults, malloc_trim(0) after each stage (the child's --trim)
}


def _status() -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith(("VmRSS", "VmHWM")))
    return {key: int(value.split()[0]) / 2**20 for key, value in fields.items()}  # kB -> GB


def _tensor_gb() -> float:
    """Bytes of the storages of live CPU tensors (each storage once)."""
    import torch

    storages = {}
    with warnings.catch_warnings():  # isinstance() on some of gc's objects warns (lazy modules)
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
                storage = obj.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values()) / 2**30


def child(preset: str, steps: int, trim: bool) -> None:
    """One run, printing a JSON line per stage (after ``malloc_trim(0)`` with ``trim``)."""
    from tinker_emulator import memory

    def stage(name: str, **extra: float) -> None:
        if trim:
            memory.trim()
        print(json.dumps({"stage": name, **_status(), "tensors_gb": _tensor_gb(), **extra}), flush=True)

    stage("start")
    from gemlab.config import make_config
    from gemlab.evaluate import evaluate_trainer
    from gemlab.trainer import Trainer

    stage("imports")
    config = make_config(preset, log_dir=tempfile.mkdtemp(prefix="gemlab-memory-"), eval_every=0)
    trainer = Trainer(config, progress=False)
    stage("learner loaded")
    evaluate_trainer(trainer)
    stage("base evaluation (sampler built)")
    trainer.warmup()
    stage("warm-up")
    for step in range(steps):
        start = time.perf_counter()
        trainer.step()
        stage(f"RL step {step + 1}", step_s=time.perf_counter() - start)
    evaluate_trainer(trainer)
    stage("evaluation")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=3, help="RL steps after the warm-up")
    parser.add_argument(
        "--preset", default="smollm2", help="the gemlab preset to run (smollm2, smollm2-tool, smollm2-guess)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trim", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.preset, args.steps, args.trim)
        return
    from gemlab.doctor import cpu_name

    print(f"preset={args.preset}; {cpu_name()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    summary = []
    for name in args.variants:
        settings = VARIANTS[name]
        print(f"\n{name}: {' '.join(f'{k}={v}' for k, v in settings.items()) or 'glibc defaults'}")
        print(f"  {'after':34} {'RSS GB':>7} {'peak GB':>8} {'tensors GB':>11}")
        command = [
            sys.executable,
            __file__,
            "--child",
            "--steps",
            str(args.steps),
            "--preset",
            args.preset,
            *(["--trim"] if name == "trim" else []),
        ]
        run = subprocess.Popen(command, env={**os.environ, **settings}, stdout=subprocess.PIPE, text=True)
        rows = []
        for line in run.stdout:
            if line.startswith("{"):
                row = json.loads(line)
                rows.append(row)
                print(
                    f"  {row['stage']:34} {row['VmRSS']:7.2f} {row['VmHWM']:8.2f} {row['tensors_gb']:11.2f}", flush=True
                )
        if run.wait() != 0:
            sys.exit(f"the {name} run failed (exit {run.returncode})")
        times = [row["step_s"] for row in rows if "step_s" in row]
        summary.append((name, rows[-1]["VmHWM"], statistics.median(times) if times else float("nan")))
    print(f"\n{'variant':12} {'peak GB':>8} {'median RL step s':>17}   (load {os.getloadavg()[0]:.1f})")
    for name, peak, step in summary:
        print(f"{name:12} {peak:8.2f} {step:17.1f}")


if __name__ == "__main__":
    main()
