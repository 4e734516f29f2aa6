"""The pre-flight check: one line per problem, exit 1 when there is one, predictions from the table."""

from __future__ import annotations

import importlib.metadata as metadata

import pytest

from gemlab import doctor


@pytest.fixture
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle machine whose laptop step takes twice the reference time (no training is run)."""
    monkeypatch.setattr(doctor.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    monkeypatch.setattr(doctor, "measure_step_time", lambda steps: (1.0, 2 * doctor.REFERENCE_STEP_S))


def test_a_healthy_machine_exits_0_and_predicts_every_notebook(quiet_machine: None, capsys: pytest.CaptureFixture) -> None:
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
    # training is skipped when the install is broken; a slow step is a problem of its own
    monkeypatch.setattr(doctor.metadata, "version", real_version)
    monkeypatch.setattr(doctor, "measure_step_time", lambda steps: (1.0, 5 * doctor.REFERENCE_STEP_S))
    assert doctor.main([]) == 1
    assert "problem: laptop steps are 5.0x slower than on the reference machine" in capsys.readouterr().out


def test_bad_steps_is_one_line(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        doctor.main(["--steps", "0"])
    assert exit_.value.code == 2
    assert "--steps must be at least 1, got 0" in capsys.readouterr().err


def test_one_real_laptop_step_is_timed() -> None:
    loaded, step_s = doctor.measure_step_time(1)
    assert loaded > 0 and step_s > 0
