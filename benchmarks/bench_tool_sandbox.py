"""What one call of GEM's python tool costs through gemlab's sandbox: ``print(123*45)`` as one tool
step (``python_tool_env``, the training path) ``--runs`` times in each mode this machine has
(``none`` always; ``bwrap`` where bubblewrap works), and GEM's ``run_python`` alone beside it (which
runs whatever ``python`` PATH gives, unconfined in "none"; in a venv GEM's own bwrap command fails),
interleaved so that a change in load hits all alike. Prints the minimum (the figure to compare:
the least the machine's other work added) and the median of each, the CPU and the load average
before and after. Not a test: timings depend on the machine and its load.

    PYTHONPATH=$PWD python benchmarks/bench_tool_sandbox.py --runs 20
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gem.utils.sandbox import run_python

from gemlab import tool_sandbox

CODE = "print(123*45)"


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def tool_step(mode: str) -> Callable[[], str]:
    os.environ[tool_sandbox.MODE_VARIABLE] = mode
    env = tool_sandbox.python_tool_env(tool_sandbox._Question(), timeout=5, max_tool_uses=10**9)
    env.reset()

    def call() -> str:
        os.environ[tool_sandbox.MODE_VARIABLE] = mode
        return str(env.step(f"```python\n{CODE}\n```")[0])

    return call


def gem_alone(mode: str) -> Callable[[], str]:
    return lambda: "Code execution result: " + "".join(run_python(CODE, mode)[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    runs = parser.parse_args().runs
    modes = ["none"] + ([] if tool_sandbox._bwrap_problem() else ["bwrap"])
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)  # GEM makes its temp folder in "."
        calls = {(mode, "gemlab sandbox, one tool step"): tool_step(mode) for mode in modes}
        calls |= {(mode, "GEM alone, run_python"): gem_alone(mode) for mode in modes}
        for mode in modes:
            os.environ[tool_sandbox.MODE_VARIABLE] = mode
            print(tool_sandbox.describe_sandbox())
        seconds: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
        works = {key: "5535" in call() for key, call in calls.items()}  # and warms each up
        for _ in range(runs):
            for key, call in calls.items():
                if works[key]:
                    start = time.perf_counter()
                    call()
                    seconds[key].append(time.perf_counter() - start)
    for (mode, label), times in seconds.items():
        if not times:
            print(f"{mode:5s} {label:30s} fails here")
            continue
        print(
            f"{mode:5s} {label:30s} min {min(times) * 1000:5.0f} ms  median "
            f"{statistics.median(times) * 1000:5.0f} ms  ({runs} runs)"
        )
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
