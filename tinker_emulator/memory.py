"""Memory handed back to the system after large requests. A large ``forward_backward`` body is
decompressed, parsed and turned into token lists and tensors, most of it small Python and numpy
objects that glibc's malloc keeps in its arenas once freed: the process's RSS stays at its peak
(issue 45: 549 MB idle, 2,073 MB after heavy requests, for good). ``malloc_trim`` returns the free
pages; elsewhere than glibc it is a no-op."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

LARGE_TOKENS = 8192  # a forward_backward of this many tokens or more is followed by a trim


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
