"""Memory, said as memory: whether an exception means the process ran out of it, how much this
process may use, and what a run needs (its model's measured peak).

Out of memory reaches Python in several shapes: ``MemoryError`` (NumPy's ``_ArrayMemoryError``
too, e.g. while a GGUF file is dequantized), PyTorch's ``RuntimeError`` from its CPU allocator
("DefaultCPUAllocator: can't allocate memory"), ``torch.OutOfMemoryError`` on a GPU, and
``OSError`` ENOMEM; ``is_out_of_memory`` (the emulator's, ``tinker_emulator.memory``) knows them all,
also when they are the cause of another.
"""

from __future__ import annotations

import resource
from pathlib import Path

from gemlab.model_names import SMOLLM2, TINY
from tinker_emulator.memory import is_out_of_memory

__all__ = ["FREE_MEMORY", "RUN_PEAKS_GB", "is_out_of_memory", "out_of_memory", "run_need", "usable_gb"]

# The peak resident memory of one run from the command line, by base model, as measured (the
# notebooks' own peaks are in gemlab/notebook_costs.json, beside their times).
RUN_PEAKS_GB: dict[str, tuple[float, str]] = {
    TINY: (1.2, "preset=laptop peaked at 1.15 GB, 10 steps and the plots"),
    SMOLLM2: (3.1, "preset=smollm2 peaked at 2.8-3.1 GB, research/notes/smollm2.md"),
}
CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")
FREE_MEMORY = "close other programs (or raise the memory limit)"


def usable_gb() -> tuple[float, str] | None:
    """How much memory this process may use, and what sets it: the tightest of the memory
    available now, the address-space limit (``ulimit -v``) and the cgroup's ``memory.max``."""
    found: list[tuple[float, str]] = []
    try:
        import psutil

        found.append((psutil.virtual_memory().available / 1e9, "available now"))
    except ImportError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        found.append((soft / 1e9, "ulimit -v, which counts address space reserved, not only memory used"))
    try:
        text = CGROUP_LIMIT.read_text().strip()
    except OSError:
        text = "max"
    if text.isdigit():
        found.append((int(text) / 1e9, "the cgroup's memory.max"))
    return min(found) if found else None


def run_need(model_name: str) -> str:
    """What a run of ``model_name`` needs, from its measured peak, in words."""
    if model_name in RUN_PEAKS_GB:
        peak, source = RUN_PEAKS_GB[model_name]
        return f"a {model_name} run needs about {peak:.1f} GB ({source})"
    known = "; ".join(f"{name}: {peak:.1f} GB" for name, (peak, _) in RUN_PEAKS_GB.items())
    return f"{model_name}'s need was not measured (measured peaks: {known}; a larger model or batch needs more)"


def out_of_memory(model_name: str, where: str) -> str:
    """``out of memory <where>: <what the run needs>; <what this process may use>``, in one line."""
    usable = usable_gb()
    here = f"; this process may use {usable[0]:.1f} GB ({usable[1]})" if usable else ""
    return f"out of memory {where}: {run_need(model_name)}{here}"
