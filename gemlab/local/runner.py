"""Run unmodified Tinker scripts on the local backend: ``tinker.ServiceClient`` becomes
``LocalServiceClient`` wherever a script can reach it."""

from __future__ import annotations

import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

_TARGETS = (
    ("tinker", "ServiceClient"),
    ("tinker.lib.public_interfaces", "ServiceClient"),
    ("tinker.lib.public_interfaces.service_client", "ServiceClient"),
)


def patch_tinker() -> Callable[[], None]:
    """Point ``tinker.ServiceClient`` (and the modules it is re-exported from) at
    ``LocalServiceClient``; returns a function that undoes it. Handy in a notebook too."""
    import importlib

    from gemlab.local.service import LocalServiceClient

    saved = []
    for module_name, attribute in _TARGETS:
        module = importlib.import_module(module_name)
        saved.append((module, attribute, getattr(module, attribute)))
        setattr(module, attribute, LocalServiceClient)

    def undo() -> None:
        for module, attribute, original in saved:
            setattr(module, attribute, original)

    return undo


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m gemlab.local SCRIPT [ARGS...]``: run SCRIPT as ``__main__`` on the local backend."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(
            "usage: python -m gemlab.local SCRIPT [ARGS...]\n\n"
            "Runs a Tinker script in this process, with tinker.ServiceClient replaced by\n"
            "gemlab.local.LocalServiceClient. Tinker model names the backend lacks map to\n"
            "$GEMLAB_LOCAL_MODEL (default gemlab/tiny); see docs/local-backend.md."
        )
        raise SystemExit(0 if args else 2)
    script = Path(args[0])
    if not script.is_file():
        raise SystemExit(f"gemlab.local: no such script: {script}")
    patch_tinker()
    sys.argv = [str(script), *args[1:]]
    sys.path.insert(0, str(script.resolve().parent))
    runpy.run_path(str(script), run_name="__main__")
