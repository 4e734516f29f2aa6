"""Fixtures shared by test modules under tests/.

- ``laptop_run``: one 40-step run of the laptop preset per session (tests/helpers/laptop_run.py),
  so the learning check and the reproducibility check train it once between them.
"""

from __future__ import annotations

import pytest

from tests.helpers.laptop_run import LaptopRun, train_laptop_run


@pytest.fixture(scope="session")
def laptop_run(tmp_path_factory: pytest.TempPathFactory) -> LaptopRun:
    """The laptop preset's metrics over 40 steps (seed 0), trained on first use."""
    return train_laptop_run(tmp_path_factory.mktemp("laptop"), "shared")
