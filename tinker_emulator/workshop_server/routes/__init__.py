"""Tinker's HTTP API (``/api/v1/...``, as the installed SDK calls it), one router per concern:
``sessions`` (client set-up), ``training`` (training runs), ``sampling``, ``results`` (the
futures every queued request answers with) and ``runs`` (the RestClient's checkpoints and runs)."""

from tinker_emulator.workshop_server.routes import results, runs, sampling, sessions, training

ROUTERS = (sessions.router, training.router, sampling.router, results.router, runs.router)

__all__ = ["ROUTERS"]
