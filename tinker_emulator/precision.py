"""The arithmetic the local backend computes in: float32 or bfloat16, chosen when a model loads.

``$GEMLAB_DTYPE`` is ``auto`` (the default), ``float32`` or ``bfloat16``. ``auto`` picks bfloat16
for a model of 50M parameters or more on a CPU whose bfloat16 matmul is at least
``BF16_MIN_SPEEDUP`` (1.5) times as fast as its float32 one, as ``matmul_rate`` measures it once
per process (about a second; never assumed from the CPU's name), and float32 everywhere else: on
a CPU without fast bfloat16 (an AMD EPYC with AVX2 only multiplies bfloat16 at about 1/60 of its
float32 rate), for the tiny models (their passes cost Python overhead, not arithmetic, and their
recorded runs stay bit for bit), and on CUDA and MPS (their recorded runs stay as they are; set
``GEMLAB_DTYPE=bfloat16`` there to choose it).

With bfloat16 the weights of every linear layer (the output layer included, untied from the
input embeddings) are held in bfloat16, cast once when the model loads, and every forward and
backward pass runs under ``torch.autocast``: the same numbers as casting float32 weights at each
call, without the casts (a decoding step of SmolLM2 read 0.5 GB of float32 weights to write 0.25
GB of bfloat16 ones). The input embeddings, the norms, the residual stream, the LoRA adapters,
the AdamW state and the logprobs stay float32. The price is rounding: the sampler's and the
learner's logprobs of the same tokens differ more than in float32 (about 0.03 nats against
1e-6), which ``train/kl_sample_train_v*`` and ``train/logprob_diff_abs`` show.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator
from typing import Any

import torch

DTYPE_ENV = "GEMLAB_DTYPE"
DTYPES = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16}
# bfloat16 is chosen where its matmul is at least this many times as fast as float32's
BF16_MIN_SPEEDUP = 1.5
# A large model, from this size: its passes cost their arithmetic, not their Python overhead. The one
# threshold of the backend: from it a model holds bfloat16 weights where they are fast, shares prompt
# prefixes and takes the plain attention (``prefill.worth_sharing``), decodes through ``decoding.py``
# and gets every core for a pass (``models.LoadedModel.cpu_threads``); the tiny models keep the paths
# their recorded runs were made with.
MIN_PARAMETERS = 50_000_000


def requested_dtype() -> torch.dtype | None:
    """The dtype ``$GEMLAB_DTYPE`` names (``None``: ``auto``, chosen per model)."""
    name = os.environ.get(DTYPE_ENV) or "auto"
    if name not in DTYPES:
        raise ValueError(f"${DTYPE_ENV}={name!r} is not allowed; use one of {', '.join(DTYPES)}")
    return DTYPES[name]


@functools.cache
def bfloat16_speedup() -> float:
    """This CPU's bfloat16 matmul rate over its float32 one, on one core (measured once per process)."""
    return matmul_rate(torch.bfloat16, budget_s=0.5) / matmul_rate(torch.float32, budget_s=0.5)


def weights_dtype(parameters: int, device: torch.device) -> torch.dtype:
    """The dtype a model of ``parameters`` parameters holds its weights in on ``device``."""
    asked = requested_dtype()
    if asked is not None:
        return asked
    if device.type != "cpu" or parameters < MIN_PARAMETERS:
        return torch.float32
    return torch.bfloat16 if bfloat16_speedup() >= BF16_MIN_SPEEDUP else torch.float32


def hold(model: Any, dtype: torch.dtype) -> None:
    """Cast ``model``'s linear layers (weights and biases) to ``dtype`` in place; an output layer
    tied to the input embeddings gets its own copy, so the embeddings stay float32."""
    if dtype == torch.float32:
        return
    output = model.get_output_embeddings()
    if output is not None and output.weight is model.get_input_embeddings().weight:
        output.weight = torch.nn.Parameter(output.weight.detach().clone(), requires_grad=False)
        model.config.tie_word_embeddings = False  # so that nothing ties them again
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.to(dtype)


@contextlib.contextmanager
def autocast(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """Run the block in ``dtype`` on ``device`` (nothing changes for float32)."""
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
