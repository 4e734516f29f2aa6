"""Memory: whether an exception means the process ran out of it (``is_out_of_memory``), glibc's
allocator held to a local run's needs (``hold_down_allocator``), and memory handed back to the
system after large requests (``trim``) and around a large model's training pass (``handed_back``).
A large ``forward_backward`` body is decompressed, parsed and turned into token lists and tensors,
most of it small Python and numpy objects that glibc's malloc keeps in its arenas once freed: the
process's RSS stays at its peak (issue 45: 549 MB idle, 2,073 MB after heavy requests, for good).
``malloc_trim`` returns the free pages; elsewhere than glibc it is a no-op."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import os
from collections.abc import Iterator

LARGE_TOKENS = 8192  # a forward_backward of this many tokens or more is followed by a trim
ALLOCATOR_WORDS = ("can't allocate memory", "cannot allocate memory", "out of memory")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # glibc's mallopt parameters (malloc.h)
ARENAS = 2
MMAP_THRESHOLD = 8 << 20
TRIM_THRESHOLD = 256 << 20
#: glibc's own settings: a user who gives any of them keeps the allocator as they set it.
ALLOCATOR_ENV = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


@functools.cache
def hold_down_allocator() -> bool:
    """Two malloc arenas; blocks of ``MMAP_THRESHOLD`` (8 MiB) or more mapped on their own, so that
    freeing one hands it back to the system; up to ``TRIM_THRESHOLD`` (256 MiB) of free memory kept
    at a heap's top for the next pass. True where glibc took the settings. Called before the
    workers' threads start (``LocalServiceClient``): by default glibc gives each thread a heap of its
    own (up to 8 per core) and keeps what a pass freed there, so a SmolLM2 tool run's resident
    memory grew to 6.8 GB after two RL steps (4.4 GB with two arenas and a 1 MiB threshold, same
    steps, same process; research/notes/tool-use.md). But a threshold of 1 MiB mapped and zeroed
    every activation afresh: 14 million page faults in one ``forward_backward`` of a tool step, 16 of
    its 63 CPU seconds in the kernel; at 8 MiB and with logits computed in blocks under it
    (``scoring.HEAD_BLOCK_FLOATS``) the same pass took 1 s in the kernel and 3.24 GB against 3.17.
    A user who sets ``MALLOC_ARENA_MAX`` or another of glibc's ``MALLOC_*`` variables keeps their
    own; elsewhere than glibc this does nothing."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt") or any(name in os.environ for name in ALLOCATOR_ENV):
        return False
    settings = ((M_ARENA_MAX, ARENAS), (M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return all([bool(libc.mallopt(name, value)) for name, value in settings])  # a list: every setting is tried


def trim() -> None:
    """Return the free memory of glibc's heaps to the system (a few ms; off the event loop)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@contextlib.contextmanager
def handed_back(large: bool) -> Iterator[None]:
    """Trim before and after the block when ``large``. The sampler and the learner allocate from
    different heaps, so without it each keeps its own freed peak and the two add up: a
    ``smollm2-tool`` run (two evaluations, the warm-up, two RL steps) peaked at 6.67 GB resident,
    5.03 GB with a trim before and after each ``forward_backward``, its steps within 3% of the time
    (research/notes/tool-use.md). A trim costs milliseconds; the tiny models skip it."""
    if large:
        trim()
    try:
        yield
    finally:
        if large:
            trim()


def is_out_of_memory(error: BaseException | None) -> bool:
    """Whether ``error``, or an exception it was raised from, says that memory ran out."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, MemoryError):
            return True
        if isinstance(error, OSError) and error.errno == errno.ENOMEM:
            return True
        if isinstance(error, RuntimeError) and any(words in str(error).lower() for words in ALLOCATOR_WORDS):
            return True  # PyTorch's allocators (CPU and CUDA) raise RuntimeError or its subclass OutOfMemoryError
        error = error.__cause__ or error.__context__
        seen += 1
    return False
