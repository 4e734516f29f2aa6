"""Every notebook, run top to bottom in JupyterLab in a real Chromium, in quick mode.

Fails on what an attendee would see as broken: an error output, "Error displaying widget", a
widget shown as plain text, a cell that never ran, a cell stuck at [*], an output too long or a
page too large, TeX or Markdown that did not render, an output wider than its area
(``Notebook.problems``; ``tests/browser/test_jupyterlab.py`` shows each check failing). Saves one full-page screenshot
per notebook in
``screenshot_dir``, beside the notebook as the browser saved it, outputs included
(``NAME.browser.json``). Notebook 02's game widget is also played: type a guess, press Enter, and the
page must change. Notebooks are discovered, so new ones are covered when they land.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.jupyterlab import KNOWN_DEFECTS, REPO, JupyterLab, unexpected

NOTEBOOKS = sorted(path.name for path in (REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_clean_in_the_browser(name: str, lab: JupyterLab, page: Any, screenshot_dir: Path) -> None:
    start = time.monotonic()
    notebook = lab.open(page, name)
    try:
        notebook.run_all(timeout_s=600 if lab.quick else 1800)
        if name.startswith("02_"):
            play_the_game(page, notebook, screenshot_dir / "02_episodes-after-guess.png")
            check_narrow_window(page, notebook, screenshot_dir / "02_episodes-narrow.png")
        problems = notebook.problems()
    finally:  # a screenshot of what went wrong, too
        shot = notebook.screenshot(screenshot_dir / name.replace(".ipynb", ".png"))
        # as saved by the browser, outputs included; not *.ipynb, which pytest --nbmake would collect
        shutil.copy(lab.root / notebook.path, screenshot_dir / name.replace(".ipynb", ".browser.json"))
        print(f"{name}: {time.monotonic() - start:.0f} s in the browser; screenshot {shot}")
    fixed = [defect for defect in KNOWN_DEFECTS.get(name, []) if not any(defect in problem for problem in problems)]
    assert fixed == [], f"{name}: fixed, remove from KNOWN_DEFECTS in tests/browser/jupyterlab.py: {fixed}"
    problems = unexpected(name, problems)
    assert problems == [], f"{name} as seen in the browser:\n" + "\n".join(problems)


def play_the_game(page: Any, notebook: Any, path: Path) -> None:
    """Type a guess into the game widget, press Enter, and check the widget shows the new turn,
    with what the game just said right under the action box (not below the fold); the window as
    the player sees it goes to ``path``."""
    box = notebook.panel.locator(".widget-text input").first
    box.wait_for()
    game = notebook.panel.locator(".jp-OutputArea-output", has=page.locator(".widget-text input"))
    before = game.inner_text()
    box.fill(r"\boxed{5}")
    box.press("Enter")
    page.wait_for_function(
        "([el, before]) => el.innerText !== before", arg=[game.element_handle(), before], timeout=30_000
    )
    after = game.inner_text()
    assert "turn 0" in after and r"\boxed{5}" in after, (
        f"the game widget did not show the guess after Enter:\n{after[:500]}"
    )
    box.scroll_into_view_if_needed()
    below = game.get_by_text("The game says:").bounding_box()["y"] - box.bounding_box()["y"]
    assert below < 200, f"the game's newest words are {below:.0f} px below the action box: under the fold on a laptop"
    page.screenshot(path=str(path))


def check_narrow_window(page: Any, notebook: Any, path: Path) -> None:
    """In a 760-pixel window the episode viewer's columns stack instead of squeezing: every text
    box keeps a readable width (the old table broke words into 5-letter columns)."""
    viewport = page.viewport_size
    page.set_viewport_size({"width": 760, "height": 900})
    try:
        page.wait_for_timeout(500)
        boxes = notebook.panel.locator(".jp-OutputArea-output pre[style*='pre-wrap']")
        widths = boxes.evaluate_all("els => els.filter(e => e.offsetParent).map(e => e.getBoundingClientRect().width)")
        assert widths and min(widths) >= 180, (
            f"episode viewer text boxes squeezed in a narrow window: {sorted(widths)[:5]} px"
        )
        boxes.first.scroll_into_view_if_needed()
        page.screenshot(path=str(path))
    finally:
        page.set_viewport_size(viewport)


BROKEN = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# A deliberately broken notebook"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": ["x = 1"]},
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": ["raise ValueError('broken on purpose')"],
        },
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": ["print('never reached')"],
        },
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}

WIDGET_AS_TEXT = {
    **BROKEN,
    "cells": [
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": 1,
            "source": ["import ipywidgets"],
            "outputs": [
                {
                    "output_type": "execute_result",
                    "execution_count": 1,
                    "metadata": {},
                    "data": {
                        "text/plain": ["IntSlider(value=3)"],
                        "application/vnd.jupyter.widget-view+json": {
                            "model_id": "0123456789abcdef",
                            "version_major": 2,
                            "version_minor": 0,
                        },
                    },
                }
            ],
        }
    ],
}


def test_the_browser_test_catches_an_error_output(lab: JupyterLab, page: Any) -> None:
    path = lab.add_notebook("zz_broken.ipynb", BROKEN)
    notebook = lab.open(page, path)
    notebook.run_all()
    problems = notebook.problems()
    assert any("ValueError: broken on purpose" in p for p in problems), problems
    assert any("never ran" in p for p in problems), problems


def test_the_browser_test_catches_a_widget_whose_model_is_gone(lab: JupyterLab, page: Any) -> None:
    """A saved widget output whose kernel-side model no longer exists (a reopened notebook)."""
    path = lab.add_notebook("zz_stale_widget.ipynb", WIDGET_AS_TEXT)
    notebook = lab.open(page, path)
    problems = notebook.problems()
    assert any("Error displaying widget" in p or "plain text" in p for p in problems), problems


FAILED_CHECK = {
    **BROKEN,
    "cells": [
        {
            "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": ["from gemlab.notebook import exercises\n", "\n",
            "exercises.check_rebn(lambda returns: [g - sum(returns) / len(returns) for g in returns])"],
        }
    ],
}  # fmt: skip


def test_a_failed_exercise_check_is_short_on_the_page_and_still_a_failure(lab: JupyterLab, page: Any) -> None:
    path = lab.add_notebook("zz_failed_check.ipynb", FAILED_CHECK)
    notebook = lab.open(page, path)
    notebook.run_all()
    shown = notebook.cell(0).locator(".jp-OutputArea-output").inner_text()
    assert "rebn: not yet" in shown and "differs from gemlab.returns.rebn" in shown
    assert "Traceback" not in shown and len(shown.splitlines()) < 15, shown
    assert any("CheckFailed" in p for p in notebook.problems())
