"""What the first cell of every notebook sets up, in one call.

```python
from gemlab.notebook import data_folder, setup

QUICK, BACKEND = setup()
DATA = data_folder("runs")
```
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from gemlab.backend import resolve_backend

QUICK_ENV = "GEMLAB_QUICK"


class Setup(NamedTuple):
    """``quick``: ``$GEMLAB_QUICK=1`` (the test suite sets it), so every notebook shrinks its sizes;
    ``backend``: ``"tinker"`` when ``TINKER_API_KEY`` is set, else ``"local"``."""

    quick: bool
    backend: str


def setup() -> Setup:
    """Read quick mode and the backend (library log noise is handled where gemlab imports gem)."""
    return Setup(quick=os.environ.get(QUICK_ENV) == "1", backend=resolve_backend("auto"))


def data_folder(name: str) -> Path | None:
    """``data/<name>`` of the repository, from a notebook started in the repository or in
    ``notebooks/``; ``None`` when neither has it."""
    return next((path for path in (Path("data") / name, Path("../data") / name) if path.exists()), None)
