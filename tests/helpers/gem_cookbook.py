"""GEM's cookbook adapter, unchanged: ``examples/train_tinker/tinker_cookbook_adapter.py`` and
``tinker_cookbook_train.py`` from https://github.com/axon-rl/gem (commit 4069f2f8d45f5047ac13221f7c90c8b19927d43a;
last changed upstream in b39bd0e40c40fc5eccbe68ea7b9897e64dbcb085 and 148dba4cd62cb56aed139fa21dab237511d297ed),
copied byte for byte into tests/fixtures/gem/ (Apache 2.0, GEM's LICENSE.txt beside them).

The train script imports the adapter relatively (``from .tinker_cookbook_adapter import ...``), so it
runs as GEM's README runs it, ``python -m examples.train_tinker.tinker_cookbook_train``, from a folder
holding the two files as ``examples/train_tinker/`` (``as_upstream_package``)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gem"
UPSTREAM_BLOBS = {  # git blob ids of the files at axon-rl/gem 4069f2f
    "tinker_cookbook_adapter.py": "623fcfc8a17d7fe96b28d7fae857005656609b98",
    "tinker_cookbook_train.py": "6d7aadf6a2a5f103822dcfeadc78b50d1ba16658",
}
MODULE = "examples.train_tinker.tinker_cookbook_train"


def git_blob_id(path: Path) -> str:
    """What ``git hash-object`` prints for ``path``."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def as_upstream_package(root: Path) -> Path:
    """Copy the two files to ``root/examples/train_tinker/`` (their place in GEM's repository); returns ``root``."""
    package = root / "examples" / "train_tinker"
    package.mkdir(parents=True)
    for name in UPSTREAM_BLOBS:
        shutil.copyfile(FIXTURES / name, package / name)
    return root


def train_args(env_id: str, model: str, log: Path) -> list[str]:
    """The script's own flags for a tiny run: 2 groups of 2 envs, 2 batches (0.1.0 has no max_steps), short actions."""
    return [
        f"model_name={model}", f"env_id={env_id}", "group_size=2", "groups_per_batch=2", "n_batches=2",
        "max_tokens=16", "lora_rank=8", f"log_path={log}",
    ]
