"""Tinker's HTTP wire protocol served over the local backend: the official ``tinker`` SDK, unpatched,
trains and samples here.

    python -m tinker_emulator.workshop_server --port 8000      # prints TINKER_BASE_URL and TINKER_API_KEY

``app.py`` assembles the app; ``routes/`` has the routes (one router per concern, module-level
handlers), ``state.py`` what they are handed (the server, the caller's tenant), ``replies.py`` how
they read and answer, ``registry.py`` what the server holds between requests, ``wire.py`` the
protobuf payloads, ``validate.py`` the checks every request passes before anything is allocated
or queued for it, ``served.py`` the model names it serves, ``paths.py`` tinker:// paths, ``keys.py``
the keys, ``gate.py`` the batching of a session's sampling requests, ``guard.py`` the key check, body
limit, read timeout and each key's lane on the workers, ``units.py`` large requests as bounded units of work,
``memory.py`` memory handed back after them, ``errors.py``
the error shape. See ``docs/workshop-server.md``.
"""

from tinker_emulator.workshop_server.app import make_app
from tinker_emulator.workshop_server.state import Limits

__all__ = ["Limits", "make_app"]
