"""``gemlab.notebook.viewer`` gathers the views for the notebooks: every ``viewer.NAME`` a notebook
uses is there, and is the view from the module named for what it shows (no copy)."""

import json
import re
from pathlib import Path

from gemlab.notebook import viewer

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def names_used_by_notebooks() -> set[str]:
    used = set()
    for path in NOTEBOOKS.glob("*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                used |= set(re.findall(r"\bviewer\.(\w+)", "".join(cell["source"])))
    return used


def test_every_view_a_notebook_uses_is_in_viewer():
    used = names_used_by_notebooks()
    assert {"episode_html", "LiveMetrics", "render_tokens"} <= used  # the notebooks were read
    assert used <= set(viewer.__all__), f"missing from gemlab.notebook.viewer: {sorted(used - set(viewer.__all__))}"


def test_viewer_holds_each_view_of_its_own_module():
    for name in viewer.__all__:
        view = getattr(viewer, name)
        assert view.__module__.startswith("gemlab.notebook.") and view.__module__ != viewer.__name__, name
