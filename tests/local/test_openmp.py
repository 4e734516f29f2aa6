"""How PyTorch's OpenMP threads wait is set before PyTorch loads, only where it applies (tinker_emulator/openmp.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOW = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')}))"


def _environment_after(code: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    clean["PYTHONPATH"] = os.pathsep.join([str(ROOT), clean.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", f"{code}; {SHOW}"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ships_libgomp() -> bool:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    return any((Path(spec.origin).parent / "lib").glob("libgomp*.so*"))


@pytest.mark.skipif(not _ships_libgomp(), reason="this PyTorch does not run on libgomp")
def test_importing_gemlab_keeps_libgomp_threads_spinning_before_torch_loads():
    assert _environment_after("import gemlab") == {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}
    assert _environment_after("import tinker_emulator") == {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}


def test_a_users_own_setting_and_an_already_loaded_torch_are_left_alone():
    assert _environment_after("import gemlab", OMP_WAIT_POLICY="PASSIVE") == {
        "OMP_WAIT_POLICY": "PASSIVE",
        "GOMP_SPINCOUNT": None,
    }
    assert _environment_after("import torch, gemlab") == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}
