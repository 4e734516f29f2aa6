"""The server's API keys: made once, kept in the data folder, checked on every request.

A key looks like Tinker's (``tml-`` then 40 random hex digits), so the SDK accepts it. Each key
is one tenant: its checkpoints live in their own folder and no other key can list, read or
delete them. ``--keys N`` makes N keys (one per workshop attendee); by default there is one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

KEYS_FILE = "keys.json"


def tenant_of(key: str) -> str:
    """A short stable name for ``key``'s tenant (its folder name); the key itself is never stored twice."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def load_or_create(data_dir: Path, count: int) -> list[str]:
    """The keys saved in ``data_dir``, topped up to ``count`` new ones if fewer are saved."""
    path = data_dir / KEYS_FILE
    keys: list[str] = json.loads(path.read_text())["keys"] if path.is_file() else []
    if len(keys) < count:
        keys += [f"tml-{secrets.token_hex(20)}" for _ in range(count - len(keys))]
        data_dir.mkdir(parents=True, exist_ok=True)
        _write_private(path, json.dumps({"keys": keys}, indent=2))
    return keys


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, readable by this user only from its first byte: the staging
    file is made new with mode 0600 whatever the umask (a stale one of ours is dropped first, and a
    link planted under its name is never followed), then renamed into place."""
    staging = path.with_suffix(".tmp")
    staging.unlink(missing_ok=True)
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    os.fchmod(fd, 0o600)  # the umask may narrow O_CREAT's mode (never widen it); this pins it
    with os.fdopen(fd, "w") as file:
        file.write(text)
    staging.replace(path)


class KeyRing:
    """Which keys the server accepts, and the tenant each one is."""

    def __init__(self, keys: list[str]):
        self._tenants = {key: tenant_of(key) for key in keys}

    def tenant(self, key: str | None) -> str | None:
        """The tenant of ``key``, or ``None`` when the server does not know it (compared in constant time)."""
        if not key:
            return None
        for known, tenant in self._tenants.items():
            if hmac.compare_digest(known.encode(), key.encode()):
                return tenant
        return None
