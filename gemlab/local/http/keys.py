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
        staging = path.with_suffix(".tmp")
        staging.write_text(json.dumps({"keys": keys}, indent=2))
        os.chmod(staging, 0o600)
        staging.replace(path)
    return keys


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
