"""Tinker's HTTP wire protocol served over the local backend: the official ``tinker`` SDK, unpatched,
trains and samples here.

    python -m gemlab.local.http --port 8000      # prints TINKER_BASE_URL and TINKER_API_KEY

``app.py`` has the routes, ``registry.py`` what the server holds between requests, ``wire.py`` the
protobuf payloads, ``paths.py`` tinker:// paths, ``keys.py`` the keys, ``guard.py`` the key check,
body limit and error shape. See ``docs/workshop-server.md``.
"""

from gemlab.local.http.app import Limits, make_app

__all__ = ["Limits", "make_app"]
