"""Nous Research's tinker-atropos design on gemlab (docs/atropos.md).

``python -m gemlab.atropos`` is a trainer for Atropos environments running as their own
processes: it registers with atroposlib's ``run-api``, pulls ``/batch``, trains on the scored
groups with gemlab's importance-sampling step through any Tinker client, and serves its newest
weights to the environments on gemlab's OpenAI endpoint, in one process.

- ``api``: the ``run-api`` client (register, ``/batch``, start one);
- ``groups``: a ``/batch`` item checked, versioned and turned into episodes;
- ``trainer``: the loop, the endpoint and the run folder;
- ``config``: the command's keys;
- ``loop``: the same design in one process, an environment object collecting through the
  endpoint's ``/generate`` while gemlab trains on what it collected.

Both names are imported from their modules on first use (PEP 562), so ``python -m gemlab.atropos --help``
answers before the trainer, PyTorch and the backends load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gemlab.lazy import lazy_names

# name -> the module that defines it
_WHERE = {"AtroposConfig": "gemlab.atropos.config", "AtroposTrainer": "gemlab.atropos.trainer"}

__all__ = ["AtroposConfig", "AtroposTrainer"]

if TYPE_CHECKING:
    from gemlab.atropos.config import AtroposConfig
    from gemlab.atropos.trainer import AtroposTrainer


__getattr__ = lazy_names(__name__, _WHERE)
