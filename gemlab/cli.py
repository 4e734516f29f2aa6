"""What every command line shares, in the standard library only: ``run`` answers running out of
memory in one line, wherever it happens, the loading of PyTorch and GEM included, and
``address_space_short`` refuses an address-space limit too small to load them, before trying.

Below about 1.25 GB of address space (``ulimit -v``) a run used to die while importing, with a
traceback of 14-59 lines ending in ``MemoryError`` or ``ImportError: ... failed to map segment from
shared object``; at 400 MB PyTorch's C++ can even abort (``std::bad_alloc``), which no Python handler
sees. This module imports nothing that could fail that way, so it can still speak.
"""

from __future__ import annotations

import errno
import resource
import sys
from collections.abc import Callable

#: The address space (``ulimit -v``) that loading PyTorch, GEM and the local backend needs, in GB: below
#: about 1.25 GB the import died (issue 55); on this project's 2-core EPYC it passed at 0.8-1.1 GB or
#: failed there depending on what was loaded before, so this is the figure the refusal uses.
LOAD_ADDRESS_SPACE_GB = 1.25

#: The words an out-of-memory failure carries when it is not a ``MemoryError``: the dynamic loader
#: (``failed to map segment from shared object``), ``strerror(ENOMEM)``, PyTorch's CPU allocator.
MEMORY_WORDS = ("failed to map segment", "cannot allocate memory", "can't allocate memory", "out of memory")


def ran_out_of_memory(error: BaseException | None) -> bool:
    """Whether ``error`` (or one it was raised from) says memory ran out, as the import of a
    package or an allocation says it; standard library only."""
    for _ in range(10):
        if error is None:
            return False
        if isinstance(error, MemoryError) or (isinstance(error, OSError) and error.errno == errno.ENOMEM):
            return True
        if isinstance(error, (ImportError, OSError, RuntimeError)) and any(
            words in str(error).lower() for words in MEMORY_WORDS
        ):
            return True
        error = error.__cause__ or error.__context__
    return False


def address_space_short(need: str = "") -> str | None:
    """One line (without the program's name) refusing an address-space limit (``ulimit -v``) under
    ``LOAD_ADDRESS_SPACE_GB``, which loading PyTorch could not survive (``need``: what the work needs
    beyond, in words); None when there is no such limit or it is enough."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft >= LOAD_ADDRESS_SPACE_GB * 1e9:
        return None
    beyond = f"; {need}" if need else ""
    return (
        f"out of memory before loading: this process may use {soft / 1e9:.1f} GB of address space (ulimit -v), "
        f"and loading PyTorch, GEM and the local backend needs about {LOAD_ADDRESS_SPACE_GB} GB{beyond}; "
        "raise the limit, then rerun"
    )


def memory_line(prog: str) -> str:
    """The one line for running out of memory outside a run's own handling (while loading): what
    this process may use, when that can still be read, and what to do."""
    try:
        from gemlab.memory import FREE_MEMORY as free
        from gemlab.memory import usable_gb

        usable = usable_gb()
    except Exception:  # psutil (or anything) cannot load without memory either: say less
        free, usable = "close other programs (or raise the memory limit)", None
    here = f"; this process may use {usable[0]:.1f} GB ({usable[1]})" if usable else ""
    packages = f"PyTorch, GEM and the local backend need about {LOAD_ADDRESS_SPACE_GB} GB of address space"
    return f"{prog}: out of memory while loading its packages ({packages}){here}; {free}, then rerun"


def duration(seconds: float) -> str:
    """``45 s`` under 90 seconds, else ``12 min``."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def run(prog: str, main: Callable[[], int]) -> int:
    """``main()``'s exit status; running out of memory anywhere in it is one line and status 1."""
    try:
        return main()
    except Exception as error:
        if not ran_out_of_memory(error):
            raise
        print(memory_line(prog), file=sys.stderr)
        return 1
