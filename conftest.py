"""Repository-wide pytest setup.

Notebook kernels started by ``pytest --nbmake notebooks/`` inherit this process's environment, so
setting ``GEMLAB_QUICK=1`` here makes every notebook use its small sizes under test. Set it to
anything else (``GEMLAB_QUICK=0 pytest --nbmake notebooks/``) to execute them at full size.
"""

import os

import pytest

os.environ.setdefault("GEMLAB_QUICK", "1")


def pytest_collection_modifyitems(config, items):
    """Mark the notebooks (nbmake) and the browser tests ``slow``, so ``-m "not slow"`` leaves them
    out; and run the browser tests last: Playwright's sync API keeps an event loop on the main
    thread for the whole session, so a test calling ``asyncio.run`` after them would fail."""
    for item in items:
        path = item.nodeid.replace("\\", "/")
        if path.endswith(".ipynb") or "tests/browser/" in path:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: "tests/browser/" in item.nodeid.replace("\\", "/"))
