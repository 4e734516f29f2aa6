"""Memory: whether an exception means the process ran out of it (``is_out_of_memory``), and
memory handed back to the system after large requests (``trim``). A large ``forward_backward`` body is
decompressed, parsed and turned into token lists and tensors, most of it small Python and numpy
objects that glibc's malloc keeps in its arenas once freed: the process's RSS stays at its peak
(issue 45: 549 MB idle, 2,073 MB after heavy requests, for good). ``malloc_trim`` returns the free
pages; elsewhere than glibc it is a no-op."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools

LARGE_TOKENS = 8192  # a forward_backward of this many tokens or more is followed by a trim
ALLOCATOR_WORDS = ("can't allocate memory", "cannot allocate memory", "out of memory")


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def trim() -> None:
    """Return the free memory of glibc's heaps to the system (a few ms; off the event loop)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


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
