"""libgomp's waiting threads, set before PyTorch loads.

PyTorch's pip wheels for Linux run their parallel regions on libgomp. Between two regions its
threads spin about 3 ms (300,000 turns) before they sleep, but only 1,000 turns once it manages more
threads than there are cores: as soon as a second worker (the sampler's, beside the learner's) has
threads of its own, on 2 cores. Every small parallel region of a training pass then waits for a
sleeping thread to wake: after one sampling call, a tool step's ``forward_backward`` took 37-40 s
instead of 30-34 s, the helper thread busy 22 s of them instead of 32 (2-core AMD EPYC, captured
datums). ``OMP_WAIT_POLICY=ACTIVE`` with ``GOMP_SPINCOUNT=300000`` keeps the 3 ms spin however many
threads there are: 31 s. libgomp reads them once, when PyTorch loads: they are set only while
PyTorch is not loaded yet, only for a PyTorch that ships libgomp (other OpenMP runtimes read
``ACTIVE`` as spin forever), and never over a user's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

SPIN = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}


def keep_threads_spinning() -> bool:
    """Set ``SPIN`` in this process's environment where it applies (see above); whether it did."""
    if "torch" in sys.modules or any(name in os.environ for name in SPIN):
        return False
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None or not any((Path(spec.origin).parent / "lib").glob("libgomp*.so*")):
        return False
    os.environ.update(SPIN)
    return True
