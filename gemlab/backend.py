"""Choose where training runs: real Tinker or gemlab's in-process local backend.

Both give an object with Tinker's ``ServiceClient`` interface, so nothing downstream knows which.
"""

from __future__ import annotations

import os
import sys
from typing import Any


class BackendError(RuntimeError):
    """The requested backend cannot be used here."""


def resolve_backend(backend: str = "auto") -> str:
    """``"tinker"`` or ``"local"``: ``auto`` picks Tinker only when ``TINKER_API_KEY`` is set."""
    if backend == "auto":
        return "tinker" if os.environ.get("TINKER_API_KEY") else "local"
    if backend not in ("local", "tinker"):
        raise ValueError(f"Unknown backend {backend!r}. Known backends: 'auto', 'local', 'tinker'")
    return backend


def get_service_client(backend: str = "auto", **kwargs: Any) -> Any:
    """A Tinker ``ServiceClient`` (real) or ``tinker_emulator.LocalServiceClient`` (in-process)."""
    if resolve_backend(backend) == "local":
        # lazy: real Tinker runs never load the emulator (PEFT, transformers)
        from tinker_emulator import LocalServiceClient

        return LocalServiceClient(**kwargs)
    if not (os.environ.get("TINKER_API_KEY") or kwargs.get("api_key")):
        raise BackendError(
            "backend='tinker' needs a Tinker API key: set TINKER_API_KEY. "
            "Without one, use backend='local' (gemlab's in-process backend on PyTorch, no key or network needed)."
        )
    import tinker

    return tinker.ServiceClient(**kwargs)


def tinker_served_models() -> list[Any]:
    """The models the Tinker server at ``TINKER_BASE_URL`` serves (its ``SupportedModel`` list),
    asked through ``RestClient``, which needs no session (the SDK deprecates
    ``ServiceClient.get_server_capabilities``)."""
    import tinker

    return tinker.RestClient().get_server_capabilities().result().supported_models


def served_models(service_client: Any) -> list[Any]:
    """The models a backend serves: Tinker's server is asked (``tinker_served_models``); gemlab's
    local service client, and any other stand-in, answers itself."""
    import tinker

    local = sys.modules.get("tinker_emulator.service_client")  # a local client exists only once it is imported
    if isinstance(service_client, tinker.ServiceClient) and not (
        local and isinstance(service_client, local.LocalServiceClient)
    ):
        return tinker_served_models()
    return service_client.get_server_capabilities().supported_models

