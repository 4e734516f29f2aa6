"""Choosing the backend: real Tinker only with a key, else the local backend."""

import pytest

from gemlab.backend import BackendError, get_service_client, resolve_backend


def test_real_tinker_without_key_names_local_backend(monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert resolve_backend("auto") == "local"
    with pytest.raises(BackendError, match="TINKER_API_KEY.*backend='local'"):
        get_service_client("tinker")
    monkeypatch.setenv("TINKER_API_KEY", "tml-dummy")
    assert resolve_backend("auto") == "tinker"
