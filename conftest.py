"""Repository-wide pytest setup.

Notebook kernels started by ``pytest --nbmake notebooks/`` inherit this process's environment, so
setting ``GEMLAB_QUICK=1`` here makes every notebook use its small sizes under test. Set it to
anything else (``GEMLAB_QUICK=0 pytest --nbmake notebooks/``) to execute them at full size.
"""

import os

import pytest

os.environ.setdefault("GEMLAB_QUICK", "1")

# A notebook's kernel is another process, out of reach of pyproject's filterwarnings, and it inherits
# this environment: while nbmake runs a notebook, a DeprecationWarning or FutureWarning attributed to
# the notebook's own cells (module __main__) is an error there, as one attributed to gemlab is here.
NOTEBOOK_WARNINGS = "error::DeprecationWarning:__main__,error::FutureWarning:__main__"


def pytest_collection_modifyitems(config, items):
    """Mark the notebooks (nbmake) and the browser tests ``slow``, so ``-m "not slow"`` leaves them
    out; and run the browser tests last: Playwright's sync API keeps an event loop on the main
    thread for the whole session, so a test calling ``asyncio.run`` after them would fail."""
    for item in items:
        path = item.nodeid.replace("\\", "/")
        if path.endswith(".ipynb") or "tests/browser/" in path:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: "tests/browser/" in item.nodeid.replace("\\", "/"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Run a notebook (nbmake) with ``NOTEBOOK_WARNINGS`` added to the kernel's ``PYTHONWARNINGS``."""
    if item.path.suffix != ".ipynb":
        return (yield)
    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, (before, NOTEBOOK_WARNINGS)))  # the last entry wins
    try:
        return (yield)
    finally:
        if before is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = before
