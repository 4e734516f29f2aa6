"""What the first cell of every notebook sets up, in one call.

```python
from gemlab.notebook import data_folder, preset_for, setup

QUICK, BACKEND = setup()
PRESET = preset_for(BACKEND)
DATA = data_folder("runs")
```
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from gemlab.backend import resolve_backend, tinker_served_models
from gemlab.config import LAPTOP

QUICK_ENV = "GEMLAB_QUICK"


class Setup(NamedTuple):
    """``quick``: ``$GEMLAB_QUICK=1`` (the test suite sets it), so every notebook shrinks its sizes;
    ``backend``: ``"tinker"`` when ``TINKER_API_KEY`` is set, else ``"local"``."""

    quick: bool
    backend: str


def setup() -> Setup:
    """Read quick mode and the backend (library log noise is handled where gemlab imports gem)."""
    return Setup(quick=os.environ.get(QUICK_ENV) == "1", backend=resolve_backend("auto"))


def preset_for(backend: str) -> str:
    """The preset a notebook trains with on ``backend``: ``"laptop"`` wherever its model
    (gemlab/tiny) is served, which is the local backend and a Tinker server that lists it (gemlab's,
    ``python -m tinker_emulator.workshop_server``); ``"gem"``, GEM's defaults, on Tinker's own models (the server
    is asked without opening a session)."""
    if resolve_backend(backend) == "local":
        return "laptop"
    return "laptop" if any(model.model_name == LAPTOP["model_name"] for model in tinker_served_models()) else "gem"


def data_folder(name: str) -> Path | None:
    """``data/<name>`` of the repository, from a notebook started in the repository or in
    ``notebooks/``; ``None`` when neither has it."""
    return next((path for path in (Path("data") / name, Path("../data") / name) if path.exists()), None)
