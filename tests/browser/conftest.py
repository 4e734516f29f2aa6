"""Fixtures for browser tests: Debian's Chromium through Playwright, one JupyterLab per session.

- ``lab``: a :class:`~tests.browser.jupyterlab.JupyterLab` serving a temporary copy of the
  repository (session-wide: the server starts once), in quick mode unless ``GEMLAB_QUICK=0``
  (``GEMLAB_QUICK=0 pytest tests/browser`` runs every notebook at full size).
- ``page``: a fresh Chromium page (1400 x 900, its own browser context) per test.
- ``screenshot_dir``: where tests save screenshots, ``tests/browser/screenshots/`` (gitignored),
  or ``$GEMLAB_SCREENSHOTS`` when set.

The tests skip with one line saying why when Playwright or Chromium is missing and cannot be
installed (Chromium is installed with apt-get when running as root; see ``find_chromium``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyterlab import CHROMIUM_ARGS, JupyterLab, find_chromium


@pytest.fixture(scope="session")
def chromium() -> Path:
    """The path of Debian's Chromium (installed if missing and possible), or skip."""
    path, why = find_chromium()
    if path is None:
        pytest.skip(why)
    return path


@pytest.fixture(scope="session")
def browser(chromium: Path) -> Iterator[Any]:
    """One headless Chromium for the session, with a fresh user-data dir."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is missing: pip install -e '.[test]'")
    with tempfile.TemporaryDirectory(prefix="gemlab-chromium-") as profile, sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=str(chromium),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1400, "height": 900},
        )
        yield context
        context.close()


@pytest.fixture(scope="session")
def lab(browser: Any) -> Iterator[JupyterLab]:
    """A JupyterLab serving a temporary copy of the repository, kernels in quick mode."""
    with JupyterLab(quick=os.environ.get("GEMLAB_QUICK", "1") == "1") as server:
        yield server


@pytest.fixture
def page(browser: Any, lab: JupyterLab) -> Iterator[Any]:
    """A new page (tab) of the session's Chromium, closed after the test with its kernels."""
    tab = browser.new_page()
    tab.set_default_timeout(60_000)
    yield tab
    tab.close()
    lab.shutdown_kernels()


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    """The folder screenshots go to (printed at the end of the session)."""
    folder = Path(os.environ.get("GEMLAB_SCREENSHOTS", Path(__file__).parent / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
