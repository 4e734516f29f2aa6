"""The server's key file (tinker_emulator/workshop_server/keys.py): readable by its owner only from the first
byte written, whatever the umask, and never written through a link planted where it is staged."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tinker_emulator.workshop_server import keys


def test_the_key_file_is_0600_from_its_first_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a permissive umask and chmod/fchmod doing nothing, only a file created 0600 (before
    its first byte) ends up 0600: one made world-readable and narrowed afterwards stays 0644."""
    monkeypatch.setattr(os, "chmod", lambda *args, **kwargs: None)
    monkeypatch.setattr(os, "fchmod", lambda *args, **kwargs: None)
    old = os.umask(0o022)
    try:
        made = keys.load_or_create(tmp_path, 3)
    finally:
        os.umask(old)
    saved = tmp_path / keys.KEYS_FILE
    assert json.loads(saved.read_text())["keys"] == made and len(made) == 3
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert not (tmp_path / "keys.tmp").exists()


def test_a_link_planted_as_the_staging_file_is_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("not the keys")
    data = tmp_path / "data"
    data.mkdir()
    (data / "keys.tmp").symlink_to(outside)
    made = keys.load_or_create(data, 2)
    assert outside.read_text() == "not the keys"
    assert json.loads((data / keys.KEYS_FILE).read_text())["keys"] == made
    assert stat.S_IMODE((data / keys.KEYS_FILE).stat().st_mode) == 0o600


def test_saved_keys_are_kept_and_topped_up(tmp_path: Path) -> None:
    first = keys.load_or_create(tmp_path, 1)
    assert keys.load_or_create(tmp_path, 1) == first
    more = keys.load_or_create(tmp_path, 3)
    assert more[:1] == first and len(set(more)) == 3
