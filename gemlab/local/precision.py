"""The arithmetic the local backend computes in: float32 (the default) or bfloat16, chosen by
``$GEMLAB_DTYPE``.

``bfloat16`` runs every forward and backward pass, sampling and training alike, under
``torch.autocast``: the matmuls run in bfloat16 while the weights, LoRA adapters, optimizer state
and logprobs stay float32. On CPUs with AVX-512 BF16 (Zen 4, Sapphire Rapids) it makes a pass
about 1.7x faster; the price is rounding, so the sampler's and the learner's logprobs of the same
tokens differ more than in float32, which ``train/kl_sample_train_v*`` shows.
``benchmarks/bench_local.py`` measures both. float32 stays the default so results do not move.
"""

from __future__ import annotations

import contextlib
import os
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
