"""Run unmodified Tinker scripts on the local backend: ``tinker.ServiceClient`` becomes
``LocalServiceClient`` (and ``tinker.RestClient`` ``LocalRestClient``) wherever a script can reach it,
``tinker.SamplingClient.from_sampler_handle``
finds local samplers, and a Tinker model name that maps to a local model also loads that model's
tokenizer through ``transformers.AutoTokenizer.from_pretrained`` (which tinker-cookbook's
``get_tokenizer`` calls), offline. A Tinker program names Tinker's models, which are never local:
here they run on a stand-in, ``$GEMLAB_LOCAL_MODEL`` (default ``gemlab/tiny-chat``), announced in
one line, where gemlab's own commands refuse a model that is not here."""

from __future__ import annotations

import importlib
import importlib.util
import os
import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tinker
from transformers import AutoTokenizer

from tinker_emulator.models import (
    MODEL_ENV,
    TINY_CHAT,
    UnknownModelError,
    load_tokenizer,
    looks_like_path,
    model_descriptions,
    resolve_model_name,
)
from tinker_emulator.rest_client import LocalRestClient
from tinker_emulator.sampling_client import LocalSamplingClient
from tinker_emulator.service_client import LocalServiceClient

_TARGETS = (
    ("tinker", "ServiceClient"),
    ("tinker.lib.public_interfaces", "ServiceClient"),
    ("tinker.lib.public_interfaces.service_client", "ServiceClient"),
)
_REST_TARGETS = (
    ("tinker", "RestClient"),
    ("tinker.lib.public_interfaces", "RestClient"),
    ("tinker.lib.public_interfaces.rest_client", "RestClient"),
)
USAGE = (
    "usage: python -m tinker_emulator [--import MODULE ...] SCRIPT [ARGS...]\n"
    "       python -m tinker_emulator [--import MODULE ...] -m MODULE [ARGS...]\n\n"
    "Runs a Tinker script (or module, as python -m does) in this process, with tinker.ServiceClient\n"
    "replaced by tinker_emulator.LocalServiceClient. Tinker model names the backend lacks map to\n"
    "$GEMLAB_LOCAL_MODEL (default gemlab/tiny-chat), for the clients and for AutoTokenizer.from_pretrained.\n"
    "--import MODULE imports MODULE first (gemlab.envs registers gemlab's offline envs with GEM);\n"
    "see docs/local-backend.md."
)


def local_tokenizer_for(name: Any) -> Any | None:
    """The local tokenizer a Tinker model name maps to, or ``None`` for anything else (a folder,
    a name the backend does not map), which ``from_pretrained`` then loads as usual."""
    if not isinstance(name, str) or looks_like_path(name):
        return None
    if name not in model_descriptions() and ("/" not in name or name.startswith("gemlab/")):
        return None
    try:
        return load_tokenizer(resolve_model_name(name))
    except UnknownModelError:
        return None


def _auto_tokenizer_patch() -> tuple[Any, str, Any]:
    original = AutoTokenizer.__dict__["from_pretrained"]

    def from_pretrained(cls: Any, pretrained_model_name_or_path: Any, *args: Any, **kwargs: Any) -> Any:
        local = local_tokenizer_for(pretrained_model_name_or_path)
        if local is not None:
            return local
        return original.__func__(cls, pretrained_model_name_or_path, *args, **kwargs)

    return AutoTokenizer, "from_pretrained", classmethod(from_pretrained)


def patch_tinker() -> Callable[[], None]:
    """Point ``tinker.ServiceClient`` (and the modules it is re-exported from) at
    ``LocalServiceClient``, ``tinker.SamplingClient.from_sampler_handle`` at local samplers, and
    ``AutoTokenizer.from_pretrained`` of mapped Tinker model names at local tokenizers, and
    ``$GEMLAB_LOCAL_MODEL`` (the stand-in Tinker model names run on) to ``gemlab/tiny-chat`` unless
    it is set; returns a function that undoes it all. Handy in a notebook too."""
    replacements: list[tuple[Any, str, Any]] = [
        (importlib.import_module(m), name, LocalServiceClient) for m, name in _TARGETS
    ]
    replacements += [(importlib.import_module(module), name, LocalRestClient) for module, name in _REST_TARGETS]
    replacements.append(
        (tinker.SamplingClient, "from_sampler_handle", staticmethod(LocalSamplingClient.from_sampler_handle))
    )
    replacements.append(_auto_tokenizer_patch())
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in replacements]
    for owner, name, value in replacements:
        setattr(owner, name, value)
    stand_in = os.environ.get(MODEL_ENV)
    os.environ.setdefault(MODEL_ENV, TINY_CHAT)

    def undo() -> None:
        for owner, name, original in saved:
            setattr(owner, name, original)
        if stand_in is None:
            os.environ.pop(MODEL_ENV, None)

    return undo


def _module_found(module: str) -> bool:
    """Whether ``module`` can be imported with the working directory on the path (as ``python -m``
    has it); the directory stays on the path only when it is."""
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found and added:
        sys.path.remove(os.getcwd())
    return found


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m tinker_emulator [--import MODULE ...] SCRIPT [ARGS...]`` or ``-m MODULE [ARGS...]``:
    run it as ``__main__`` on the local backend, after importing each ``--import`` module."""
    args = list(sys.argv[1:] if argv is None else argv)
    imports = []
    while args[:1] == ["--import"] and len(args) > 2:
        if not _module_found(args[1]):  # refused before anything is patched
            raise SystemExit(f"tinker_emulator: --import {args[1]}: no module named {args[1]!r}")
        imports.append(args[1])
        args = args[2:]
    if not args or args[0] in ("-h", "--help", "--import") or args == ["-m"]:
        print(USAGE)
        raise SystemExit(0 if args[:1] in (["-h"], ["--help"]) else 2)
    if args[0] == "-m":
        module = args[1]
        if not _module_found(module):
            raise SystemExit(f"tinker_emulator: no module named {module!r}")
        patch_tinker()
        for each in imports:  # after the patch: what they take from tinker is the local backend
            importlib.import_module(each)
        sys.argv = [module, *args[2:]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return
    script = Path(args[0])
    if not script.is_file():
        raise SystemExit(f"tinker_emulator: no such script: {script}")
    patch_tinker()
    for each in imports:
        importlib.import_module(each)
    sys.argv = [str(script), *args[1:]]
    sys.path.insert(0, str(script.resolve().parent))
    runpy.run_path(str(script), run_name="__main__")
