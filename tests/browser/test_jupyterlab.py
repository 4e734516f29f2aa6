"""The harness itself: each check of ``Notebook.problems`` / ``wait_idle`` fails on a tiny notebook
broken on purpose in the way issue 21 saw the real ones break at full size (a log flood, a page
that keeps growing, a cell stuck at ``[*]``, TeX and Markdown that did not render, a table wider
than its output area, a line of code wider than the editor)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.jupyterlab import MAX_OUTPUT_HEIGHT_PX, MAX_OUTPUT_LINES, JupyterLab, StuckCell


def notebook(*cells: dict[str, Any]) -> dict[str, Any]:
    """An nbformat 4 notebook of ``cells`` with the Python 3 kernel."""
    return {
        "cells": list(cells),
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def code(source: str) -> dict[str, Any]:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": [source]}


def markdown(source: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "metadata": {}, "source": [source]}


# What notebook 09 did: a library logs one INFO line per HTTP request through a root handler.
LOG_FLOOD = notebook(
    code(
        "import logging\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "for i in range(1000):\n"
        "    logging.getLogger('httpx').info(f'HTTP Request: POST http://127.0.0.1:8000/v1/chat/completions {i}')"
    )
)

# A live view that appends instead of replacing: one Output widget that keeps growing (few lines each).
GROWING_PAGE = notebook(
    code(
        "import ipywidgets\n"
        "from IPython.display import HTML, display\n"
        "out = ipywidgets.Output()\n"
        "display(out)\n"
        "for step in range(250):\n"
        "    with out:\n"
        "        display(HTML(f'<div style=\"height: 48px\">step {step}</div>'))"
    )
)

# A cell whose kernel says idle while it still runs (what the browser saw in 06 and, after the
# websocket timed out, in 09): the kernel publishes an idle status, then keeps working.
STUCK = notebook(
    code(
        "import time\n"
        "kernel = get_ipython().kernel\n"
        "kernel.session.send(kernel.iopub_socket, 'status', {'execution_state': 'idle'},\n"
        "                    parent=kernel.get_parent(), ident=kernel._topic('status'))\n"
        "time.sleep(60)"
    )
)

# Notebook 06's LaTeX error (\textbackslash is text-mode only), an unbalanced $, and notebook 01's
# table whose `<|im_start|>` splits a row (GFM splits on | even inside code spans).
BAD_MARKDOWN = notebook(
    markdown("The logprob is $\\log P(n \\mid \\text{prompt}, \\texttt{\\textbackslash boxed\\{})$."),
    markdown("A return $G_t = r_t + \\gamma G_{t+1$ that never closes."),
    markdown(
        "| template | what the model sees |\n|---|---|\n| `qwen3_game` | a user turn, then `<|im_start|>assistant` |"
    ),
    code("print('Run All needs a code cell')"),
)

# A DataFrame of 30 columns: the columns on the right hide behind a horizontal scrollbar.
WIDE_TABLE = notebook(
    code("import pandas as pd\npd.DataFrame({f'column number {i}': [i * 1_000_000] for i in range(30)})")
)


# A line of code longer than the editor is wide: its end hides behind the editor's scrollbar.
WIDE_CODE = notebook(code("total = " + " + ".join(f"{i}" for i in range(120)) + "  # the end of this line is hidden"))


def _problems(lab: JupyterLab, page: Any, name: str, content: dict[str, Any]) -> list[str]:
    nb = lab.open(page, lab.add_notebook(name, content))
    nb.run_all(timeout_s=120)
    return nb.problems()


def test_a_log_flood_is_caught(lab: JupyterLab, page: Any) -> None:
    problems = _problems(lab, page, "zz_log_flood.ipynb", LOG_FLOOD)
    assert any(f"lines of output (at most {MAX_OUTPUT_LINES})" in p for p in problems), problems


def test_a_page_that_keeps_growing_is_caught(lab: JupyterLab, page: Any) -> None:
    problems = _problems(lab, page, "zz_growing_page.ipynb", GROWING_PAGE)
    assert any(f"px tall (at most {MAX_OUTPUT_HEIGHT_PX})" in p for p in problems), problems
    assert not any("lines of output" in p for p in problems), "the growth check, not the line count, must catch this"


def test_a_cell_running_while_the_kernel_is_idle_is_caught(lab: JupyterLab, page: Any) -> None:
    nb = lab.open(page, lab.add_notebook("zz_stuck.ipynb", STUCK))
    with pytest.raises(StuckCell, match=r"code cell 0 still shows \[\*\]"):
        nb.run_all(timeout_s=120)


def test_latex_and_markdown_that_did_not_render_are_caught(lab: JupyterLab, page: Any) -> None:
    problems = "\n".join(_problems(lab, page, "zz_bad_markdown.ipynb", BAD_MARKDOWN))
    assert "markdown cell 0: MathJax error: \\textbackslash" in problems, problems
    assert "markdown cell 1: TeX that was not typeset" in problems, problems
    assert "markdown cell 2: a raw backtick" in problems, problems


def test_an_output_wider_than_its_area_is_caught(lab: JupyterLab, page: Any) -> None:
    problems = _problems(lab, page, "zz_wide_table.ipynb", WIDE_TABLE)
    assert any("cell 0: output wider than its area, behind a horizontal scrollbar" in p for p in problems), problems


def test_a_line_of_code_wider_than_the_editor_is_caught(lab: JupyterLab, page: Any) -> None:
    problems = _problems(lab, page, "zz_wide_code.ipynb", WIDE_CODE)
    assert any("code cell 0: a line of code wider than the editor" in p for p in problems), problems
