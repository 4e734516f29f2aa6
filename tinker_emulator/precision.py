"""The arithmetic the local backend computes in: float32 (the default) or bfloat16, chosen by
``$GEMLAB_DTYPE``.

``bfloat16`` runs every forward and backward pass, sampling and training alike, under
``torch.autocast``: the matmuls run in bfloat16 while the weights, LoRA adapters, optimizer state
and logprobs stay float32. On CPUs with fast bfloat16 matmuls (Zen 4's AVX-512 BF16, Sapphire
Rapids' AMX) it makes a pass about 1.7x faster; elsewhere it is slower (an Intel Xeon with
AVX-512 BF16 but no AMX: half the float32 rate; an AMD EPYC with AVX2 only: about 1/60).
``matmul_rate`` measures the ratio (``python -m gemlab.doctor`` prints it) and
``benchmarks/bench_local.py`` whole passes. The price is rounding: with native bfloat16 the
sampler's and the learner's logprobs of the same tokens differ more than in float32 (about 0.03
nats), which ``train/kl_sample_train_v*`` shows; an AVX2-only CPU rounds both alike (about 1e-6).
float32 stays the default so results do not move.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import torch

DTYPE_ENV = "GEMLAB_DTYPE"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def compute_dtype() -> torch.dtype:
    """The dtype ``$GEMLAB_DTYPE`` names (read at each call, so a notebook can switch it)."""
    name = os.environ.get(DTYPE_ENV) or "float32"
    if name not in DTYPES:
        raise ValueError(f"${DTYPE_ENV}={name!r} is not allowed; use one of {', '.join(DTYPES)}")
    return DTYPES[name]


@contextlib.contextmanager
def autocast(device: torch.device) -> Iterator[None]:
    """Run the block in the chosen dtype on ``device`` (nothing changes for float32)."""
    dtype = compute_dtype()
    if dtype == torch.float32:
        yield
        return
    with torch.autocast(device.type, dtype=dtype):
        yield


def matmul_rate(dtype: torch.dtype = torch.float32, size: int = 2048, budget_s: float = 2.0) -> float:
    """FLOP per CPU-second of one thread multiplying square matrices of ``dtype``: the best of up to
    ten products within about ``budget_s`` CPU-seconds (CPU time, so that time the scheduler gives
    to other processes does not count against it). The matrices are ``size`` square, or smaller
    where one product of the next size up would take over half the budget: bfloat16 without
    hardware support runs at ~1 GFLOP/s."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        n = 256
        while True:
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            start = time.thread_time()
            torch.mm(a, b)
            if n >= size or 8 * (time.thread_time() - start) > budget_s / 2:  # doubling n: 8x the work
                break
            n *= 2
        best, spent = float("inf"), 0.0
        for _ in range(10):
            start = time.thread_time()
            torch.mm(a, b)
            elapsed = time.thread_time() - start
            best, spent = min(best, elapsed), spent + elapsed
            if spent > budget_s:
                break
    finally:
        torch.set_num_threads(threads)
    return 2 * n**3 / best
