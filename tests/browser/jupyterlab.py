"""Drive real notebooks in JupyterLab with Debian's Chromium, through Playwright.

The reusable part of the browser tests. A test gets a running JupyterLab and a Chromium page from
the fixtures in ``tests/browser/conftest.py`` and calls the helpers here::

    def test_my_notebook(lab, page, screenshot_dir):
        nb = lab.open(page, "07_widget_lab.ipynb")      # a fresh copy of notebooks/07_widget_lab.ipynb
        nb.run_all()                                     # Run > Run All Cells, waits until the kernel is idle
        assert nb.problems() == []                       # error outputs, broken or plain-text widgets
        cell = nb.find_cell("interact(")                # a code cell, by a piece of its source
        before = nb.cell_output(cell)
        nb.cell(cell).locator(".widget-slider .noUi-handle").first.focus()
        page.keyboard.press("ArrowRight")                # then drive widgets with Playwright
        nb.wait_for_change(cell, before)                 # the cell's output (text + image bytes) changed
        nb.screenshot(screenshot_dir / "07.png")

What the pieces do:

- :func:`find_chromium` returns ``/usr/bin/chromium``, installing Debian's ``chromium`` package
  with ``apt-get`` when it is missing and we run as root; otherwise it says why not (tests skip
  with that reason). Playwright's own browser download is never used.
- :class:`JupyterLab` starts ``jupyter lab`` on 127.0.0.1 on a free port with token auth and
  throwaway config, data, runtime, settings and workspace dirs. It serves a temporary copy of
  the repository: ``notebooks/`` holds fresh copies of the committed notebooks (outputs are never
  written back), every other top-level entry is a symlink (images copied: Jupyter serves nothing
  through a link out of its root), so ``../data`` works as it does under nbmake. Kernels inherit ``GEMLAB_QUICK=1``
  (quick mode) and ``PYTHONPATH`` = this
  checkout, so they import this worktree's gemlab.
- :class:`Notebook` is one open notebook: ``run_all``, ``problems`` (what a person would see
  as broken), ``cell_output`` / ``wait_for_change`` to check that driving a widget changed the
  page, ``saved_outputs`` (the .ipynb as saved by the browser), and ``screenshot`` (full page).

``problems`` covers errors and broken widgets, and also what made notebook 09 unusable at full
size (issue 21): a cell printing more than ``MAX_OUTPUT_LINES`` lines, a cell's output taller
than ``MAX_OUTPUT_HEIGHT_PX`` or heavier than ``MAX_OUTPUT_NODES`` DOM nodes, a page whose DOM or
JavaScript heap grew past ``MAX_PAGE_NODES`` / ``MAX_HEAP_MB`` while it ran, a MathJax error or
Markdown that did not render (raw ``$...$``, backticks, ``|`` table rows, ``**``), an output
wider than its area (a horizontal scrollbar hiding columns) and a line of code wider than its
editor (at 1400 px with the file browser open, about 120 characters). ``wait_idle`` (so ``run_all``)
raises :class:`StuckCell` when a cell still shows ``[*]`` ``STUCK_AFTER_S`` seconds after the
kernel went idle.

JupyterLab is configured to render every cell (``windowingMode: none``), so locators see the
whole notebook, and not to ask about news or updates (no toast over the page).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
#: The flags the browser tests launch Chromium with (headless, no sandbox as root, no network use).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: JupyterLab user settings written into the throwaway settings dir.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}
#: The ``repr`` of an ipywidget, which is what JupyterLab shows when a widget fails to render.
WIDGET_AS_TEXT = re.compile(
    r"^\s*(VBox|HBox|Box|GridBox|Tab|Accordion|Output|Button|Text|Textarea|IntSlider|FloatSlider|IntRangeSlider|"
    r"FloatLogSlider|Dropdown|ToggleButtons|Checkbox|Label|HTML|HTMLMath|Image|Play|interactive|SelectionSlider|"
    r"RadioButtons|IntText|FloatText|BoundedIntText|BoundedFloatText|Select|SelectMultiple|ToggleButton)\(",
)


#: Limits of one cell's output and of the page (see ``Notebook.problems``). Notebook 09's log flood
#: was 2,625 lines; ten 900-pixel screens of one cell's output is more than anyone reads.
MAX_OUTPUT_LINES = 300
MAX_OUTPUT_HEIGHT_PX = 9000
MAX_OUTPUT_NODES = 5000
MAX_PAGE_NODES = 100_000
MAX_HEAP_MB = 1024
#: A cell still showing ``[*]`` this long after the kernel went idle is stuck (between two cells of
#: Run All the kernel is idle for milliseconds).
STUCK_AFTER_S = 15


#: Defects the harness found when its checks landed (issue 21), left for the notebook round that
#: fixes them: each is a piece of a problem line. A listed defect that no longer shows fails
#: test_notebooks_in_browser.py, so the entry goes when the fix lands.
KNOWN_DEFECTS: dict[str, list[str]] = {}


def unexpected(notebook: str, problems: list[str]) -> list[str]:
    """``problems`` of ``notebook`` (a file name) less its ``KNOWN_DEFECTS``."""
    known = KNOWN_DEFECTS.get(notebook, [])
    return [problem for problem in problems if not any(defect in problem for defect in known)]


class StuckCell(AssertionError):
    """A cell shows ``[*]`` while the kernel has been idle for ``STUCK_AFTER_S`` seconds."""


# What each code cell's output costs the page: lines of text, height, DOM nodes, and every element
# inside an output that scrolls sideways (content wider than the output area).
_OUTPUT_SIZES_JS = """panel => [...panel.querySelectorAll('.jp-CodeCell')].map(cell => {
    const wrapper = cell.querySelector('.jp-Cell-outputWrapper');
    const outputs = [...cell.querySelectorAll('.jp-OutputArea-output')]
        .filter(o => !o.parentElement.closest('.jp-OutputArea-output'));  // not those inside an Output widget
    const sideways = el =>
      ['auto', 'scroll'].includes(getComputedStyle(el).overflowX) && el.scrollWidth > el.clientWidth + 1;
    return {
        lines: outputs.reduce((n, o) => n + o.innerText.split('\\n').filter(line => line.trim()).length, 0),
        height: wrapper ? Math.round(wrapper.getBoundingClientRect().height) : 0,
        nodes: wrapper ? wrapper.getElementsByTagName('*').length : 0,
        wide: outputs.flatMap(o => [o, ...o.querySelectorAll('*')]).filter(sideways)
            .map(e => `${e.scrollWidth} px of content in ${e.clientWidth} px`),
    };
})"""

# Every rendered Markdown (cells and outputs): MathJax's error messages, and its text outside code,
# pre and typeset math (where raw Markdown or TeX would show that something did not render).
_MARKDOWN_JS = """panel => [...panel.querySelectorAll('.jp-Cell')].map(cell => {
    const errors = [...cell.querySelectorAll('mjx-merror')].map(e => e.getAttribute('data-mjx-error') || e.textContent);
    const texts = [...cell.querySelectorAll('.jp-RenderedMarkdown')].map(md => {
        const walker = document.createTreeWalker(md, NodeFilter.SHOW_TEXT);
        let text = '';
        while (walker.nextNode()) {
            const node = walker.currentNode;
            if (!node.parentElement.closest('code, pre, mjx-container, script, style')) text += node.textContent;
            else text += ' ';
        }
        return text;
    });
    return {kind: cell.classList.contains('jp-MarkdownCell') ? 'markdown' : 'code', errors, text: texts.join('\\n')};
})"""
# Each code cell's editor: content width and visible width (a longer line scrolls sideways).
_CODE_WIDTH_JS = """panel => [...panel.querySelectorAll('.jp-CodeCell')].map(cell => {
    const scroller = cell.querySelector('.jp-InputArea-editor .cm-scroller');
    return scroller ? [scroller.scrollWidth, scroller.clientWidth] : [0, 0];
})"""
#: Raw Markdown or TeX left in rendered text: (pattern, what it means).
UNRENDERED = [
    (re.compile(r"\$[^$\n]*[\\^_{}][^$\n]*\$"), "TeX that was not typeset"),
    (re.compile(r"`"), "a raw backtick (a code span that did not render, e.g. a | inside a table cell)"),
    (re.compile(r"^\s*\|.*\|\s*$|\|\s*:?-{3,}", re.M), "a Markdown table that did not render"),
    (re.compile(r"\*\*\S"), "raw ** (bold that did not render)"),
]
#: The page's size: DOM nodes and JavaScript heap (Chromium's ``performance.memory``; bucketed).
_PAGE_SIZE_JS = """() => ({nodes: document.getElementsByTagName('*').length,
    heap: performance.memory ? performance.memory.usedJSHeapSize : 0})"""


# Every code cell's prompt and rendered outputs, read in one call (instead of one per element).
_CELLS_JS = """panel => [...panel.querySelectorAll('.jp-CodeCell')].map(cell => ({
    prompt: (cell.querySelector('.jp-InputPrompt') || {textContent: ''}).textContent,
    outputs: [...cell.querySelectorAll('.jp-OutputArea-output')].map(o => ({
        mime: o.getAttribute('data-mime-type') || '',
        text: o.innerText,
        rendered: !!o.querySelector('.jupyter-widgets, .widget-box, .lm-Widget'),
    })),
}))"""


def find_chromium() -> tuple[Path | None, str]:
    """``(path, "")`` when Debian's Chromium is there (installed now with apt-get if missing and
    we are root), else ``(None, why it is not)``."""
    if CHROMIUM.exists():
        return CHROMIUM, ""
    if os.name != "posix" or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, f"{CHROMIUM} is missing; install Debian's chromium (apt-get install -y chromium, as root)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 and command[1] == "install":
            return None, f"apt-get install -y chromium failed: {done.stderr.strip()[-300:]}"
    return (CHROMIUM, "") if CHROMIUM.exists() else (None, f"apt-get ran but {CHROMIUM} is still missing")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


IMAGES = {".png", ".svg", ".gif", ".jpg", ".jpeg"}


def _mirror(source: Path, target: Path) -> None:
    """``target`` reads as ``source``: a symlink, except that images are copied (with real folders
    down to them). Jupyter serves no file through a symlink leading outside its root, so a
    notebook's ``![...](../data/figures/x.png)`` showed a broken image."""
    if source.is_dir() and not source.is_symlink() and any(p.suffix.lower() in IMAGES for p in source.rglob("*")):
        target.mkdir()
        for entry in source.iterdir():
            _mirror(entry, target / entry.name)
    elif source.suffix.lower() in IMAGES:
        shutil.copy2(source, target)
    else:
        target.symlink_to(source)


class JupyterLab:
    """A JupyterLab server on 127.0.0.1 serving a temporary copy of the repository.

    Use as a context manager; ``url`` is the base URL, ``token`` the auth token, ``root`` the
    served folder (``root / "notebooks"`` holds the notebook copies).
    """

    def __init__(self, repo: Path = REPO, *, quick: bool = True, extra_env: dict[str, str] | None = None) -> None:
        self.repo = Path(repo)
        self.quick = quick
        self.extra_env = dict(extra_env or {})
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.root = Path()
        self.log = Path()

    def __enter__(self) -> JupyterLab:
        self._tmp = tempfile.TemporaryDirectory(prefix="gemlab-lab-")
        base = Path(self._tmp.name)
        self.root = base / "repo"
        self.root.mkdir()
        for entry in self.repo.iterdir():
            if entry.name not in {"notebooks", ".git", "runs", ".ci-venv"}:  # .ci-venv: .ci/run's environment
                _mirror(entry, self.root / entry.name)
        (self.root / "notebooks").mkdir()
        for notebook in sorted((self.repo / "notebooks").glob("*.ipynb")):
            shutil.copy2(notebook, self.root / "notebooks" / notebook.name)
        settings = base / "settings"
        for name, values in LAB_SETTINGS.items():
            path = settings / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(base / "config"),
            "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
            "JUPYTER_DATA_DIR": str(base / "data"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "PYTHONPATH": os.pathsep.join([str(self.repo), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "GEMLAB_QUICK": "1" if self.quick else "0",
            **self.extra_env,
        }
        self.log = base / "jupyterlab.log"
        command = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
            f"--ServerApp.root_dir={self.root}", f"--IdentityProvider.token={self.token}",
            "--ServerApp.port_retries=0", "--ServerApp.open_browser=False", "--LabApp.news_url=",
            f"--LabApp.workspaces_dir={base / 'workspaces'}", f"--LabApp.user_settings_dir={settings}",
            "--LabApp.extension_manager=readonly",
            *(["--allow-root"] if os.name == "posix" and os.geteuid() == 0 else []),
        ]  # fmt: skip
        self._process = subprocess.Popen(
            command, cwd=self.root, env=env, stdout=self.log.open("wb"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"jupyter lab exited with {self._process.returncode}:\n{self.log.read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.__exit__(None, None, None)
        raise RuntimeError(f"jupyter lab did not answer within 120 s:\n{self.log.read_text()[-2000:]}")

    def __exit__(self, *_: Any) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def shutdown_kernels(self) -> None:
        """Shut down every running kernel (each opened notebook starts one), through the REST API."""
        with urllib.request.urlopen(f"{self.url}/api/kernels?token={self.token}", timeout=10) as reply:
            kernels = json.loads(reply.read())
        for kernel in kernels:
            request = urllib.request.Request(
                f"{self.url}/api/kernels/{kernel['id']}?token={self.token}", method="DELETE"
            )
            urllib.request.urlopen(request, timeout=30).close()

    def add_notebook(self, name: str, notebook: dict[str, Any]) -> str:
        """Write ``notebook`` (nbformat JSON) as ``notebooks/<name>`` in the served copy; returns its path."""
        (self.root / "notebooks" / name).write_text(json.dumps(notebook))
        return f"notebooks/{name}"

    def open(self, page: Any, notebook: str, *, timeout_s: float = 120) -> Notebook:
        """Open ``notebook`` (a name in notebooks/ or a path from the served root) and wait until
        its kernel is idle."""
        path = notebook if "/" in notebook else f"notebooks/{notebook}"
        page.goto(f"{self.url}/lab/tree/{path}?token={self.token}&reset", wait_until="domcontentloaded")
        panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").last
        panel.locator(".jp-Cell").first.wait_for(timeout=timeout_s * 1000)
        result = Notebook(page, self, path, panel)
        result.wait_idle(timeout_s)
        return result


@dataclass
class Notebook:
    """One notebook open in the browser (see the module docstring for the workflow)."""

    page: Any
    lab: JupyterLab
    path: str
    panel: Any
    #: The largest page seen while waiting for the kernel: DOM nodes and JavaScript heap in bytes.
    peak_nodes: int = 0
    peak_heap: int = 0

    # ----- running ----------------------------------------------------------------------------
    def kernel_status(self) -> str:
        """The kernel status JupyterLab's status bar shows, lower-cased ("idle", "busy",
        "initializing", "starting", ...)."""
        text = self.page.locator("#jp-main-statusbar").inner_text()
        match = re.search(r"\|\s*([A-Za-z ]+?)\s*(?:\n|$)", text)
        return match.group(1).strip().lower() if match else "unknown"

    def wait_idle(self, timeout_s: float = 120) -> None:
        """Wait until the kernel is idle and no cell is running or queued; meanwhile record the
        page's peak size. Raises ``StuckCell`` when a cell keeps showing ``[*]`` for
        ``STUCK_AFTER_S`` seconds while the kernel is idle."""
        deadline = time.monotonic() + timeout_s
        quiet_since = idle_but_running_since = None
        while time.monotonic() < deadline:
            self._record_page_size()
            idle, running = self.kernel_status() == "idle", self._running_cells()
            if idle and running:
                idle_but_running_since = idle_but_running_since or time.monotonic()
                if time.monotonic() - idle_but_running_since > STUCK_AFTER_S:
                    raise StuckCell(
                        f"{self.path}: code cell {running[0]} still shows [*] {STUCK_AFTER_S} s after the "
                        "kernel went idle"
                    )
            else:
                idle_but_running_since = None
            if not idle or running:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > 1.0:
                return
            self.page.wait_for_timeout(250)
        raise TimeoutError(f"{self.path}: kernel still busy after {timeout_s:.0f} s (status {self.kernel_status()!r})")

    def _running_cells(self) -> list[int]:
        """The indices of the code cells whose prompt shows ``[*]`` (running or queued)."""
        prompts = self.panel.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        return [index for index, text in enumerate(prompts) if "*" in text]

    def _record_page_size(self) -> None:
        size = self.page.evaluate(_PAGE_SIZE_JS)
        self.peak_nodes, self.peak_heap = max(self.peak_nodes, size["nodes"]), max(self.peak_heap, size["heap"])

    def run_all(self, timeout_s: float = 600) -> float:
        """Run > Run All Cells, then wait until every cell has run (or the run stopped at an
        error). Returns the seconds it took."""
        start = time.monotonic()
        self.panel.locator(".jp-Cell").first.click()
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
        # the first code cell gets a prompt of [*] (or a number) once the run started
        self.page.wait_for_function(
            "panel => [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].some(p => "
            "/\\*|\\d/.test(p.textContent))",
            arg=self.panel.element_handle(),
            timeout=60_000,
        )
        self.wait_idle(timeout_s - (time.monotonic() - start))
        return time.monotonic() - start

    # ----- looking ----------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """What a person would see as broken: error outputs (tracebacks), "Error displaying
        widget", widgets rendered as plain text, and code cells that never ran."""
        found = []
        for index, cell in enumerate(self.panel.evaluate(_CELLS_JS)):
            if not re.search(r"\d", cell["prompt"]):
                found.append(f"cell {index}: never ran (prompt {cell['prompt'].strip()!r})")
            for output in cell["outputs"]:
                mime, text = output["mime"], output["text"]
                if "Error displaying widget" in text:
                    found.append(f"cell {index}: {text.strip()[:200]}")
                elif mime == "text/plain" and WIDGET_AS_TEXT.match(text):
                    found.append(f"cell {index}: a widget shown as plain text: {text.strip()[:120]}")
                elif mime == "application/vnd.jupyter.widget-view+json" and not output["rendered"]:
                    found.append(f"cell {index}: an empty widget view")
        for index, cell in enumerate(self.saved_outputs()):
            for output in cell:
                if output.get("output_type") == "error":
                    found.append(f"cell {index}: {output.get('ename')}: {str(output.get('evalue'))[:300]}")
        return found + self.size_problems() + self.render_problems()

    def size_problems(self) -> list[str]:
        """Outputs a person cannot take in, and a page that grew too large for the browser: more
        than ``MAX_OUTPUT_LINES`` lines, ``MAX_OUTPUT_HEIGHT_PX`` pixels or ``MAX_OUTPUT_NODES``
        DOM nodes in one cell; a page past ``MAX_PAGE_NODES`` nodes or ``MAX_HEAP_MB`` of heap."""
        self._record_page_size()
        found = []
        for index, cell in enumerate(self.panel.evaluate(_OUTPUT_SIZES_JS)):
            if cell["lines"] > MAX_OUTPUT_LINES:
                found.append(f"cell {index}: {cell['lines']} lines of output (at most {MAX_OUTPUT_LINES})")
            if cell["height"] > MAX_OUTPUT_HEIGHT_PX:
                found.append(f"cell {index}: output {cell['height']} px tall (at most {MAX_OUTPUT_HEIGHT_PX})")
            if cell["nodes"] > MAX_OUTPUT_NODES:
                found.append(f"cell {index}: output of {cell['nodes']} DOM nodes (at most {MAX_OUTPUT_NODES})")
        if self.peak_nodes > MAX_PAGE_NODES:
            found.append(f"the page grew to {self.peak_nodes} DOM nodes (at most {MAX_PAGE_NODES})")
        if self.peak_heap > MAX_HEAP_MB * 2**20:
            found.append(f"the page's JavaScript heap grew to {self.peak_heap / 2**20:.0f} MB (at most {MAX_HEAP_MB})")
        return found

    def render_problems(self) -> list[str]:
        """What did not render: MathJax errors, raw Markdown or TeX left in rendered text, outputs
        wider than their area and code lines wider than their editor (a horizontal scrollbar hides
        what is on the right)."""
        found = []
        for index, cell in enumerate(self.panel.evaluate(_OUTPUT_SIZES_JS)):
            for wide in cell["wide"][:1]:
                found.append(f"cell {index}: output wider than its area, behind a horizontal scrollbar ({wide})")
        for index, (content, visible) in enumerate(self.panel.evaluate(_CODE_WIDTH_JS)):
            if content > visible + 1:
                found.append(
                    f"code cell {index}: a line of code wider than the editor ({content} px in {visible} px: "
                    "its end is hidden)"
                )
        counts = {"markdown": 0, "code": 0}
        for cell in self.panel.evaluate(_MARKDOWN_JS):
            where = f"{cell['kind']} cell {counts[cell['kind']]}"
            counts[cell["kind"]] += 1
            for error in dict.fromkeys(cell["errors"]):
                found.append(f"{where}: MathJax error: {error[:160]}")
            for pattern, meaning in UNRENDERED:
                match = pattern.search(cell["text"])
                if match:
                    context = cell["text"][max(0, match.start() - 40) : match.end() + 40].replace("\n", " ")
                    found.append(f"{where}: {meaning}: ...{context.strip()}...")
        return found

    def save(self) -> None:
        """Save the notebook (Ctrl+S) and wait until JupyterLab says it is saved."""
        self.panel.locator(".jp-Cell").first.click()
        self.page.keyboard.press("Control+s")
        self.page.wait_for_function(
            "panel => !panel.querySelector('.jp-mod-dirty') && !panel.classList.contains('jp-mod-dirty')",
            arg=self.panel.element_handle(),
            timeout=30_000,
        )
        self.page.wait_for_timeout(300)

    def saved_outputs(self) -> list[list[dict[str, Any]]]:
        """Each code cell's outputs as saved by the browser (saves first)."""
        self.save()
        notebook = json.loads((self.lab.root / self.path).read_text())
        return [cell.get("outputs", []) for cell in notebook["cells"] if cell["cell_type"] == "code"]

    def cell(self, index: int) -> Any:
        """The locator of the ``index``-th code cell (0-based, markdown cells not counted)."""
        return self.panel.locator(".jp-CodeCell").nth(index)

    def find_cell(self, text: str) -> int:
        """The index of the first code cell whose source contains ``text`` (indices shift as a
        notebook is edited; its code does not)."""
        sources = self.panel.locator(".jp-CodeCell .jp-InputArea-editor").all_inner_texts()
        for index, source in enumerate(sources):
            if text in source:
                return index
        raise LookupError(f"{self.path}: no code cell contains {text!r}")

    def cell_output(self, index: int) -> str:
        """A fingerprint of a code cell's rendered output: its text plus every image's source."""
        cell = self.cell(index)
        text = cell.locator(".jp-Cell-outputWrapper").inner_text()
        images = cell.locator(".jp-Cell-outputWrapper img").evaluate_all(
            "imgs => imgs.map(i => i.src.length + ':' + i.src.slice(-64))"
        )
        return text + "\n" + "\n".join(images)

    def wait_for_change(self, index: int, before: str, timeout_s: float = 60) -> str:
        """Wait until code cell ``index``'s output differs from ``before``; returns the new one."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            now = self.cell_output(index)
            if now != before:
                return now
            self.page.wait_for_timeout(250)
        raise TimeoutError(f"{self.path}: the output of code cell {index} did not change within {timeout_s:.0f} s")

    def screenshot(self, path: Path) -> Path:
        """A full-page screenshot of the whole notebook (every cell, not just the viewport)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        inner = self.panel.locator(".jp-WindowedPanel-outer").first
        # Make the notebook's own scroller as tall as its content so a full-page shot has it all.
        height = inner.evaluate("el => el.scrollHeight") + 200 if inner.count() else 2000
        viewport = self.page.viewport_size or {"width": 1400, "height": 900}
        self.page.set_viewport_size({"width": viewport["width"], "height": min(max(height, 900), 30000)})
        self.page.wait_for_timeout(500)
        self.page.screenshot(path=str(path), full_page=True)
        self.page.set_viewport_size(viewport)
        return path
