"""``LocalBackendError``: what the local backend cannot do, because it exists only on Tinker's servers."""

from __future__ import annotations

from typing import NoReturn

from tinker import TinkerError


class LocalBackendError(TinkerError):
    """What the local backend cannot do, because it exists only on Tinker's servers."""


def unavailable(what: str, why: str = "it exists only on Tinker's servers") -> NoReturn:
    """Raise the local backend's error for ``what``."""
    raise LocalBackendError(f"tinker_emulator: {what} is not available on the local backend: {why}")
