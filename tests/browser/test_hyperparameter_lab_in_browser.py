"""Notebook 07 in a real browser: move a slider, press Run, see the live chart redraw and the run
join the comparison table. Screenshots go to the harness's screenshot folder."""

from __future__ import annotations

import re
import time

from tests.browser.jupyterlab import unexpected


def test_the_lab_trains_from_the_browser(lab, page, screenshot_dir):
    nb = lab.open(page, "07_hyperparameter_lab.ipynb")
    nb.run_all()
    assert unexpected("07_hyperparameter_lab.ipynb", nb.problems()) == []
    widget = nb.cell(nb.find_cell("HyperparameterLab(config"))  # the cell that displays the lab
    rows_before = widget.locator("table.gemlab-runs tbody tr").count()
    assert rows_before >= 2  # the notebook's own quick preset run (ReBN vs none) is in the table
    nb.screenshot(screenshot_dir / "07_hyperparameter_lab-before.png")

    # move sliders with the keyboard, as a person would: the learning rate up from 2e-3 to 5e-2
    # (four notches of its 1-2-5 scale: a run that collapses) and the steps one notch up
    rate = widget.locator(".widget-slider", has=page.locator("label", has_text=re.compile(r"^learning rate$")))
    assert rate.locator(".widget-readout").inner_text() == "0.002"
    rate.locator(".noUi-handle").focus()
    for _ in range(4):
        page.keyboard.press("ArrowRight")
    assert rate.locator(".widget-readout").inner_text() == "0.05"
    steps = widget.locator(".widget-slider", has=page.locator("label", has_text=re.compile(r"^steps$")))
    before = steps.locator(".widget-readout").inner_text()
    steps.locator(".noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    after = steps.locator(".widget-readout").inner_text()
    assert int(after) == int(before) + 1

    live = widget.locator("img").first
    first_src = live.get_attribute("src")
    run = widget.locator("button", has_text=re.compile(r"^\s*Run\s*$"))
    run.click()
    seen = [first_src]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # sample the live chart until the run has done its last step
        src = live.get_attribute("src")
        if src != seen[-1]:
            seen.append(src)
        if f"after {after} of {after} steps" in widget.inner_text() and run.is_enabled():
            break
        page.wait_for_timeout(100)
    assert len(seen) - 1 >= 2, (
        f"the live chart should redraw at least twice during the run; it changed {len(seen) - 1} time(s)"
    )
    status = widget.inner_text()
    assert f"finished after {after} of {after} steps" in status and "time to finish" not in status, status[:600]

    table_rows = widget.locator("table.gemlab-runs tbody tr")
    page.wait_for_function(
        "([el, n]) => el.querySelectorAll('table.gemlab-runs tbody tr').length > n",
        arg=[widget.element_handle(), rows_before],
        timeout=30_000,
    )
    assert table_rows.count() == rows_before + 1
    assert f"{after}/{after}" in table_rows.last.inner_text() and "0.05" in table_rows.last.inner_text()
    widget.locator("button", has_text="Play an episode").click()  # the current run's last step, in the episode viewer
    widget.get_by_text(f"An episode of step {int(after) - 1}").wait_for(timeout=30_000)
    nb.panel.locator(".jp-WindowedPanel-outer").first.evaluate("el => { el.scrollTop = 0; }")  # clicking scrolled it
    nb.screenshot(screenshot_dir / "07_hyperparameter_lab-after-run.png")
    assert unexpected("07_hyperparameter_lab.ipynb", nb.problems()) == []
