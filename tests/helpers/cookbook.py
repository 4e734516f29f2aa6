"""tinker-cookbook 0.6.1 for the tests that run its recipes: installed on first use with
``--no-deps`` (0.6.1 declares ``tml-renderers``, which the package index does not have) next to the
few packages its ``math_rl`` and ``sl_basic`` import; a recipe's logged metrics. Also tinker-cookbook
0.1.0, the version GEM's cookbook adapter fits, in a folder of its own (``cookbook_0_1_0``)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

COOKBOOK = "tinker-cookbook==0.6.1"
IMPORTS = ["datasets", "termcolor", "blobfile", "sympy", "pylatexenc", "math-verify"]
MODEL = "Qwen/Qwen3-4B-Instruct-2507"  # the Tinker model name the recipes are run with
COOKBOOK_0_1_0 = "tinker-cookbook==0.1.0"
# pip --target folder: first on PYTHONPATH, it comes before site-packages and so shadows 0.6.1 there
COOKBOOK_0_1_0_DIR = Path.home() / ".cache" / "gemlab" / "tinker-cookbook-0.1.0"


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], capture_output=True, text=True)


def installed_cookbook() -> Path:
    """The installed tinker_cookbook package folder, installing it first if needed (skips the
    calling test when pip cannot)."""
    try:
        installed = importlib.metadata.version("tinker-cookbook")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != "0.6.1":
        done = _pip("--no-deps", COOKBOOK)
        if done.returncode != 0:
            pytest.skip(f"could not install {COOKBOOK}: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    done = subprocess.run(
        [sys.executable, "-c", "import datasets, termcolor, blobfile, math_verify"], capture_output=True
    )
    if done.returncode != 0:
        installed_imports = _pip(*IMPORTS)
        if installed_imports.returncode != 0:
            pytest.skip(f"could not install what {COOKBOOK} imports: {installed_imports.stderr.strip()[-300:]}")
    spec = subprocess.run(
        [sys.executable, "-c", "import tinker_cookbook, os; print(os.path.dirname(tinker_cookbook.__file__))"],
        capture_output=True,
        text=True,
    )
    return Path(spec.stdout.strip())


def cookbook_0_1_0() -> Path:
    """A folder holding tinker-cookbook 0.1.0 alone (``pip install --no-deps --target``, kept under
    ~/.cache/gemlab): with it first on ``PYTHONPATH`` a process imports 0.1.0 instead of the 0.6.1
    in site-packages, and finds everything else (0.1.0 imports nothing that 0.6.1's fixture does not
    install) in site-packages. Installed on first use; skips the calling test when pip cannot."""
    folder = COOKBOOK_0_1_0_DIR
    if not (folder / "tinker_cookbook").is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = folder.with_name(f"{folder.name}.{os.getpid()}")
        done = _pip("--no-deps", "--target", str(staging), COOKBOOK_0_1_0)
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            pytest.skip(f"could not install {COOKBOOK_0_1_0}: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
        try:
            staging.rename(folder)  # whole or not at all; a concurrent session may have won the race
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    check = (
        "import tinker_cookbook, importlib.metadata as m; print(m.version('tinker-cookbook'), tinker_cookbook.__file__)"
    )
    seen = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(folder)}
    )
    assert seen.stdout.split() == ["0.1.0", str(folder / "tinker_cookbook" / "__init__.py")], seen.stderr[-2000:]
    return folder


def metrics(log: Path) -> list[dict]:
    return [json.loads(line) for line in (log / "metrics.jsonl").read_text().splitlines()]


def math_rl_args(log: Path) -> list[str]:
    """``math_rl``'s small arithmetic run (add ``max_steps=N``), logging into ``log``."""
    return [f"model_name={MODEL}", "env=arithmetic", "group_size=2", "groups_per_batch=2", f"log_path={log}"]


def sl_basic_args(log: Path, cookbook: Path) -> list[str]:
    """``sl_basic`` for 2 steps on the conversations file the cookbook ships (its default data set,
    NoRobots, lives on the hub), logging into ``log``."""
    builder = "dataset_builder"
    return [
        f"model_name={MODEL}",
        f"log_path={log}",
        f"{builder}=tinker_cookbook.supervised.data:FromConversationFileBuilder",
        f"{builder}.file_path={cookbook / 'example_data' / 'conversations.jsonl'}",
        f"{builder}.common_config.model_name_for_tokenizer={MODEL}",
        f"{builder}.common_config.renderer_name=qwen3_instruct",
        f"{builder}.common_config.batch_size=4",
        f"{builder}.common_config.max_length=256",
        "max_steps=2",
    ]
