"""What gemlab's sandbox adds to each run of GEM's python tool: ``print(1)`` run ``--runs`` times by
GEM's ``run_python`` alone and through gemlab's supervisor, in each mode this machine has
(``none`` always; ``bwrap`` where bubblewrap works), interleaved so that a change in load hits all
alike. Prints the median and the spread (min-max) of each, the CPU and the load average before
and after. GEM alone runs whatever ``python`` PATH gives (a pyenv shim, say), the supervisor runs
this interpreter. Not a test: timings depend on the machine and its load.

    python benchmarks/bench_tool_sandbox.py --runs 20
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from gem.utils.sandbox import run_python

from gemlab import tool_sandbox


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    modes = ["none"] + ([] if tool_sandbox._bwrap_problem() else ["bwrap"])
    settings = [(mode, sandboxed) for mode in modes for sandboxed in (False, True)]
    seconds: dict[tuple[str, bool], list[float]] = {setting: [] for setting in settings}
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load before: {os.getloadavg()}")
    print(tool_sandbox.describe_sandbox())
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)  # GEM makes its temp folder in "."
        for _ in range(runs):
            for mode, sandboxed in settings:
                start = time.perf_counter()
                with tool_sandbox.sandbox_in_force(5) if sandboxed else contextlib.nullcontext():
                    ran, stdout, stderr = run_python("print(1)", mode)
                seconds[(mode, sandboxed)].append(time.perf_counter() - start)
                assert (ran, stdout) == (True, "1\n"), stderr
    for (mode, sandboxed), times in seconds.items():
        label = f"{mode}, {'gemlab sandbox' if sandboxed else 'GEM alone'}"
        print(f"{label:24s} median {statistics.median(times) * 1000:6.0f} ms  (min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}; {runs} runs)")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
