"""Measure the per-notebook costs in ``gemlab/doctor.py``'s ``NOTEBOOK_COSTS``.

    python benchmarks/calibrate_doctor.py 00_backends 01_templates ...   # default: every notebook

For each notebook: time a laptop step (``gemlab.doctor.measure_step_time``) before and after,
execute the notebook at full size (``GEMLAB_QUICK=0``, ``jupyter nbconvert --execute``, outputs
to a temporary folder, never into notebooks/), and print its wall time, the laptop steps the table
counts for it, and the fixed part in seconds at the reference step time:
``fixed = (wall - steps * step) * REFERENCE_STEP_S / step``. Prints the load average with each.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gemlab import doctor

REPO = Path(__file__).resolve().parents[1]


def main(names: list[str]) -> int:
    names = names or list(doctor.NOTEBOOK_COSTS)
    env = {**os.environ, "GEMLAB_QUICK": "0", "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    print("notebook | wall s | step s (before, after) | table steps | fixed s at reference | load (1 min)")
    for name in names:
        before = doctor.measure_step_time(3)[1]
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as out:
            done = subprocess.run(
                [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--output-dir", out,
                 "--ExecutePreprocessor.timeout=1800", str(REPO / "notebooks" / f"{name}.ipynb")],
                env=env, capture_output=True, text=True,
            )  # fmt: skip
        wall = time.perf_counter() - start
        after = doctor.measure_step_time(3)[1]
        if done.returncode:
            print(f"{name}: failed: {done.stderr.strip().splitlines()[-1]}")
            continue
        step = (before + after) / 2
        steps = doctor.NOTEBOOK_COSTS[name][0]
        fixed = (wall - steps * step) * doctor.REFERENCE_STEP_S / step
        print(f"{name} | {wall:.0f} | {step:.2f} ({before:.2f}, {after:.2f}) | {steps} | {fixed:.0f} | {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
