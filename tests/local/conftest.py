"""Shared fixtures: one local service client (tiny preset, CPU) with its checkpoints in a
temporary folder, a fresh training run per test, a chat prompt, and tinker-cookbook 0.6.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cookbook import installed_cookbook
from tests.helpers.local import CHAT
from tinker_emulator import TINY, LocalServiceClient
from tinker_emulator.models import load_tokenizer


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> LocalServiceClient:
    return LocalServiceClient(device="cpu", root=tmp_path_factory.mktemp("gemlab-local"))


@pytest.fixture
def training(service: LocalServiceClient):
    """A fresh rank-8 LoRA run on the tiny preset, seed 0."""
    return service.create_lora_training_client(base_model=TINY, rank=8, seed=0).result()


@pytest.fixture(scope="session")
def prompt() -> list[int]:
    return load_tokenizer(TINY).encode(CHAT)


@pytest.fixture(scope="session")
def cookbook() -> Path:
    """The installed tinker_cookbook package folder (installed on first use; skips if pip cannot)."""
    return installed_cookbook()
