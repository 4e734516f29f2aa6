"""Measure each notebook's full-size run and record it in ``gemlab/notebook_costs.json``, from which
``gemlab.doctor`` derives its per-notebook costs (``NOTEBOOK_COSTS``).

    python benchmarks/calibrate_doctor.py                      # every notebook in notebooks/
    python benchmarks/calibrate_doctor.py 09_decoupled_rl:91   # one; :N = the laptop RL steps it trains
    python benchmarks/calibrate_doctor.py --memory-only 10_smollm2   # its peak memory only, times kept

For each notebook: time a laptop step (``gemlab.doctor.measure_step_time``) before and after,
execute the notebook at full size (``GEMLAB_QUICK=0``, ``jupyter nbconvert --execute``, outputs
to a temporary folder, never into notebooks/), print its wall time, the laptop steps it trains
(``:N``, else as recorded before, else 0) and the fixed part in seconds at the reference step time
(``fixed = (wall - steps * step) * REFERENCE_STEP_S / step``), and record the measurement with the
notebook's full-size constants (``doctor.full_sizes``), the date and the load average. Every run
also records ``peak_gb``: the peak resident memory of the largest process it ran (the kernel: the
servers of notebook 09 run inside it), as Linux accounts it (``wait4``), with
``peak_date``. ``--memory-only`` runs the notebooks for that alone and keeps the recorded times
(a notebook whose time was measured another way, or a machine too busy to time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gemlab import doctor

REPO = Path(__file__).resolve().parents[1]


def execute(notebook: Path, env: dict[str, str]) -> tuple[float, float, str | None]:
    """Run ``notebook`` at full size: (wall seconds, peak GB of its largest process, the last line
    of its error output when it failed, else ``None``)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--output-dir", out,
             "--ExecutePreprocessor.timeout=1800", str(notebook)],
            env=env, stdout=subprocess.DEVNULL, stderr=errors, text=True,
        )  # fmt: skip
        _, status, usage = os.wait4(process.pid, 0)  # its usage covers the kernel it started and waited for
        process.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        failed = (errors.read().strip().splitlines() or ["no output"])[-1] if process.returncode else None
    return time.perf_counter() - start, usage.ru_maxrss * 1024 / 1e9, failed  # ru_maxrss: KiB on Linux


def main(args: list[str]) -> int:
    memory_only = "--memory-only" in args
    args = [arg for arg in args if arg != "--memory-only"]
    recorded = doctor.read_measurements()
    wanted = dict(arg.partition(":")[::2] for arg in args) or {
        path.stem: "" for path in sorted(doctor.NOTEBOOKS.glob("*.ipynb"))
    }
    env = {
        **os.environ,
        "GEMLAB_QUICK": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    print(
        "notebook | peak GB"
        if memory_only
        else "notebook | wall s | step s (before, after) | steps | fixed s at reference | load (1 min) | peak GB"
    )
    for name, steps_arg in wanted.items():
        notebook = doctor.NOTEBOOKS / f"{name}.ipynb"
        if not notebook.is_file():
            print(f"{name}: no such notebook in {doctor.NOTEBOOKS}")
            continue
        if steps_arg and not steps_arg.isdigit():
            print(f"{name}:{steps_arg}: after ':' give the laptop RL steps it trains, a whole number")
            continue
        if memory_only and name not in recorded:
            print(
                f"{name}: no recorded times to keep; measure it in full first: python "
                f"benchmarks/calibrate_doctor.py {name}"
            )
            continue
        steps = int(steps_arg) if steps_arg else recorded.get(name, {}).get("steps", 0)
        before = 0.0 if memory_only else doctor.measure_step_time(3)[1]
        wall, peak, failed = execute(notebook, env)
        if failed:
            print(f"{name}: failed: {failed}")
            continue
        peak_record = {"peak_gb": round(peak, 2), "peak_date": time.strftime("%Y-%m-%d")}
        if memory_only:
            print(f"{name} | {peak:.2f}", flush=True)
            recorded[name] = {**recorded[name], **peak_record}
        else:
            after = doctor.measure_step_time(3)[1]
            step = (before + after) / 2
            fixed = (wall - steps * step) * doctor.REFERENCE_STEP_S / step
            load = os.getloadavg()[0]
            print(
                f"{name} | {wall:.0f} | {step:.2f} ({before:.2f}, {after:.2f}) | {steps} | {fixed:.0f} | "
                f"{load:.1f} | {peak:.2f}",
                flush=True,
            )
            note = {"note": recorded[name]["note"]} if recorded.get(name, {}).get("note") else {}
            recorded[name] = {
                "wall_s": round(wall, 1), "step_s": [round(before, 3), round(after, 3)], "steps": steps,
                "load": round(load, 1),
                "date": time.strftime("%Y-%m-%d"), "sizes": doctor.full_sizes(notebook), **peak_record, **note,
            }  # fmt: skip
        doctor.MEASURED_FILE.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
