"""The browser tests find Debian's Chromium, install it as root, or skip with a reason."""

from pathlib import Path

from tests.browser import jupyterlab


def test_missing_chromium_without_root_gives_a_one_line_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(jupyterlab, "CHROMIUM", tmp_path / "chromium")
    monkeypatch.setattr(jupyterlab.os, "geteuid", lambda: 1000)
    path, why = jupyterlab.find_chromium()
    assert path is None and "apt-get install -y chromium" in why and "\n" not in why


def test_present_chromium_is_used_as_is(monkeypatch, tmp_path):
    browser = tmp_path / "chromium"
    browser.write_text("")
    monkeypatch.setattr(jupyterlab, "CHROMIUM", browser)
    monkeypatch.setattr(
        jupyterlab.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("apt-get ran"))
    )
    assert jupyterlab.find_chromium() == (Path(browser), "")
