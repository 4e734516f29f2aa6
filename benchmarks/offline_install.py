"""Test the offline install path of docs/workshop.md: a wheelhouse made with ``pip download``,
installed into a fresh venv with ``--no-index --find-links`` and pip's own configuration ignored.

    python benchmarks/offline_install.py                 # a small subset: a few pure-Python packages (seconds)
    python benchmarks/offline_install.py --full          # gemlab itself with torch (minutes, about 350 MB)

Prints what it downloaded, how long the offline install took, and whether the imports work.
With ``--wheelhouse DIR`` it reuses a wheelhouse made before (no download at all). On Linux as
root, the install runs in a network namespace with no network (``unshare -n``), so a package
that was missing from the wheelhouse cannot come from the internet instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUBSET = ["tqdm", "six", "packaging"]  # pure Python, no dependencies of their own worth waiting for


def run(command: list[str], *, offline: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """Run ``command``; offline: without pip's configuration, and without network where possible."""
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PYTHONPATH": ""} if offline else None
    if offline and shutil.which("unshare") and os.name == "posix" and os.geteuid() == 0:
        command = ["unshare", "-n", *command]
    return subprocess.run(command, env=env, check=True, **kwargs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="gemlab with torch, not the small subset")
    parser.add_argument("--wheelhouse", type=Path, help="reuse this wheelhouse instead of downloading")
    args = parser.parse_args()
    packages = ['torch==2.13.0', "-e", str(REPO)] if args.full else SUBSET
    imports = "gemlab, torch, jupyterlab, ipywidgets, tinker, gem" if args.full else "tqdm, six, packaging"
    with tempfile.TemporaryDirectory(prefix="gemlab-offline-") as tmp:
        wheelhouse = args.wheelhouse or Path(tmp) / "wheelhouse"
        if args.wheelhouse is None:
            wanted = ["torch==2.13.0", str(REPO), "setuptools>=68", "wheel"] if args.full else SUBSET
            start = time.perf_counter()
            run([sys.executable, "-m", "pip", "download", "-q", "-d", str(wheelhouse), *wanted])
            sdists = [str(p) for p in wheelhouse.glob("*.tar.gz")]
            if sdists:
                run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index", "--find-links",
                    str(wheelhouse),
                     "-w", str(wheelhouse), *sdists], offline=True)  # fmt: skip
            print(f"wheelhouse: {len(list(wheelhouse.iterdir()))} files in {time.perf_counter() - start:.0f} s")
        venv = Path(tmp) / "venv"
        start = time.perf_counter()
        run([sys.executable, "-m", "venv", str(venv)], offline=True)
        python = str(venv / "bin" / "python")
        run(
            [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse), *packages],
            offline=True,
        )
        print(f"offline install into a fresh venv: {time.perf_counter() - start:.0f} s")
        run([python, "-c", f"import {imports}; print('imports ok: {imports}')"], offline=True, cwd=tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
