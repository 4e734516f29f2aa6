"""The notebooks' one preamble call: quick mode and the backend from the environment, data folders
from the repository root or notebooks/."""

from pathlib import Path
from types import SimpleNamespace

import tinker
from tinker import types

from gemlab.notebook import data_folder, preset_for, setup


def test_setup_reads_quick_mode_and_the_backend(monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.setenv("GEMLAB_QUICK", "1")
    assert setup() == (True, "local")
    monkeypatch.setenv("GEMLAB_QUICK", "0")
    monkeypatch.setenv("TINKER_API_KEY", "tml-dummy")
    quick, backend = setup()
    assert (quick, backend) == (False, "tinker")


def test_the_preset_follows_the_models_the_backend_serves(monkeypatch):
    """Local: the laptop preset. Tinker: the laptop preset where the server lists gemlab/tiny (gemlab's
    server), GEM's defaults where it does not (Tinker's own models)."""
    assert preset_for("local") == "laptop"
    for served, preset in ((["Qwen/Qwen3-4B-Instruct-2507"], "gem"), (["gemlab/tiny-chat", "gemlab/tiny"], "laptop")):
        answer = types.GetServerCapabilitiesResponse(
            supported_models=[types.SupportedModel(model_name=name) for name in served]
        )
        rest = SimpleNamespace(get_server_capabilities=lambda answer=answer: SimpleNamespace(result=lambda: answer))
        monkeypatch.setattr(tinker, "RestClient", lambda: rest)  # noqa: B023  # used in this iteration
        assert preset_for("tinker") == preset


def test_data_folder_is_found_from_the_root_or_notebooks(tmp_path, monkeypatch):
    (tmp_path / "data" / "runs").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path)
    assert data_folder("runs") == Path("data/runs")
    monkeypatch.chdir(tmp_path / "notebooks")
    assert data_folder("runs") == Path("../data/runs")
    assert data_folder("figures") is None
