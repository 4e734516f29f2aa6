"""LoRA adapters (PEFT) on a shared base model: one adapter per training run and per sampling
snapshot, switched in before each piece of work.

Every adapter of a base model copy lives in one ``PeftModel``; only that copy's worker thread
touches it, and it activates the adapter it needs before each forward pass, so many clients
share one copy of the base weights (one copy for training runs, one for samplers). ``train_attn`` targets the attention
projections, ``train_mlp`` the
MLP projections and ``train_unembed`` the output layer (``lm_head``), as Tinker's flags do.
The scale is ``LORA_ALPHA / rank``; A starts Kaiming-uniform (from the seed), B at zero, so a
new adapter leaves the model's outputs unchanged. Adapters are float32 whatever the base weights
are held in; on bfloat16 weights (``precision.py``) PEFT creates them in bfloat16 first, so A's
first values are rounded to bfloat16.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from peft.tuners.lora import LoraLayer

from tinker_emulator import precision
from tinker_emulator.models import LoadedModel

LORA_ALPHA = 32
# PEFT's notes that do not apply here (adapters are never merged or exported with their base
# embeddings), and a deprecation inside PEFT itself.
_QUIET = (
    "Model has `tie_word_embeddings=True`",
    "Setting `save_embedding_layers`",
    "Adapter name .* should not be contained in the prefix",
    "`is_gradient_checkpointing` is deprecated",
)


def _quiet_peft() -> None:
    """Filter ``_QUIET`` by message where no filter does yet (``warnings.catch_warnings`` is not
    thread-safe, and this runs on the worker thread; adding filters again would reset the
    once-only warnings already shown)."""
    present = {f[1].pattern for f in warnings.filters if f[0] == "ignore" and f[1] is not None}
    for message in _QUIET:
        if message not in present:
            warnings.filterwarnings("ignore", message=message)


_ATTN_WORDS = ("attn", "attention")
_MLP_WORDS = ("mlp", "feed_forward", "ffn")


@dataclass(frozen=True)
class LoraSpec:
    """What a training run adapts: Tinker's ``rank``, ``train_mlp``, ``train_attn``, ``train_unembed``."""

    rank: int = 32
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"LoRA rank must be a positive integer, got {self.rank!r}")
        if not (self.train_mlp or self.train_attn or self.train_unembed):
            raise ValueError("At least one of train_mlp, train_attn or train_unembed must be True")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def target_modules(model: Any, spec: LoraSpec) -> list[str]:
    """Names of the linear layers ``spec`` adapts, found by where they sit in the model (also
    once other adapters have wrapped them)."""
    from transformers.pytorch_utils import Conv1D

    unembed = model.get_output_embeddings()
    names = []
    for name, module in model.named_modules():
        parts = name.lower().split(".")
        if "base_layer" in parts or any(part.startswith("lora_") for part in parts):
            continue  # the insides of a layer another adapter already wraps
        if module is unembed:
            if spec.train_unembed:
                names.append(name)
            continue
        if not isinstance(module, (torch.nn.Linear, Conv1D, LoraLayer)):
            continue
        if spec.train_attn and any(word in part for part in parts for word in _ATTN_WORDS):
            names.append(name)
        elif spec.train_mlp and any(word in part for part in parts for word in _MLP_WORDS):
            names.append(name)
    if not names:
        raise ValueError(f"No layers of {type(model).__name__} match {spec}; nothing to train")
    return names


def peft_config(lm: LoadedModel, spec: LoraSpec) -> LoraConfig:
    """The PEFT configuration of ``spec`` on ``lm``; a rank beyond the model's width is refused."""
    width = getattr(lm.model.config, "hidden_size", None)
    if width and spec.rank > width:
        raise ValueError(
            f"LoRA rank {spec.rank} is more than {lm.name}'s hidden size {width}; use a rank of at most {width}"
        )
    return LoraConfig(
        r=spec.rank,
        lora_alpha=LORA_ALPHA,
        lora_dropout=0.0,
        target_modules=target_modules(lm.model, spec),
        task_type="CAUSAL_LM",
    )


def add_adapter(lm: LoadedModel, spec: LoraSpec, seed: int, prefix: str) -> str:
    """A new adapter on ``lm``, initialised from ``seed`` alone; returns its name."""
    lm.adapters_created += 1
    name = f"{prefix}{lm.adapters_created:05d}"
    devices = [lm.device] if lm.device.type == "cuda" else []
    _quiet_peft()
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        if lm.peft is None:
            lm.peft = get_peft_model(lm.model, peft_config(lm, spec), adapter_name=name)
        else:
            lm.peft.add_adapter(name, peft_config(lm, spec))
    if lm.dtype != torch.float32:
        # PEFT casts a layer's input to the adapter's float32 and autocast casts it straight back:
        # the same numbers without the two copies (the adapter itself stays float32)
        for module in lm.peft.modules():
            if isinstance(module, LoraLayer):
                module.cast_input_dtype_enabled = False
    return name


def delete_adapter(lm: LoadedModel, name: str) -> None:
    """Remove adapter ``name`` (its client is gone)."""
    if lm.peft is None or name not in lm.peft.peft_config:
        return
    others = [other for other in lm.peft.peft_config if other != name]
    if others and lm.peft.active_adapter == name:
        lm.peft.set_adapter(others[0])  # else PEFT warns that it picked one
    lm.peft.delete_adapter(name)
    lm.turns.forget(name)


def version(lm: LoadedModel, name: str | None) -> tuple[int, ...]:
    """A stamp of adapter ``name``'s weights that changes whenever they do: its tensors' versions,
    which torch bumps at every in-place write (an optimizer step, loaded weights). The base
    weights are never written: ``None`` (no adapter) is always ``()``."""
    return () if name is None else tuple(p._version for p in parameters(lm, name))


def parameters(lm: LoadedModel, name: str) -> list[torch.nn.Parameter]:
    """The trainable tensors of adapter ``name``, in a fixed order (the optimizer's order)."""
    marker = f".{name}."
    return [p for n, p in sorted(lm.peft.named_parameters()) if marker in n and "lora_" in n]


def state_dict(lm: LoadedModel, name: str) -> dict[str, torch.Tensor]:
    """A copy of adapter ``name``'s weights on the CPU, keyed as PEFT saves them."""
    state = get_peft_model_state_dict(lm.peft, adapter_name=name, save_embedding_layers=False)
    return {key: value.detach().to("cpu", copy=True).contiguous() for key, value in state.items()}


def load_state_dict(lm: LoadedModel, name: str, state: dict[str, torch.Tensor]) -> None:
    """Overwrite adapter ``name``'s weights with ``state`` (from ``state_dict``); shapes must match."""
    expected = set(get_peft_model_state_dict(lm.peft, adapter_name=name, save_embedding_layers=False))
    if set(state) != expected:
        missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
        raise ValueError(f"Saved LoRA weights do not fit this model: missing {missing[:3]}, unexpected {extra[:3]}")
    result = set_peft_model_state_dict(lm.peft, state, adapter_name=name)
    unexpected = getattr(result, "unexpected_keys", None)
    if unexpected:
        raise ValueError(f"Saved LoRA weights do not fit this model: {unexpected[:3]}")


@contextlib.contextmanager
def active(lm: LoadedModel, name: str | None) -> Iterator[Any]:
    """Run the base model with adapter ``name`` switched in (``None``: no adapter), in the
    dtype its weights are held in (``precision.py``); yields the Hugging Face model to call."""
    lm.use_threads()
    with precision.autocast(lm.device, lm.dtype), _switched(lm, name) as model:
        yield model


@contextlib.contextmanager
def _switched(lm: LoadedModel, name: str | None) -> Iterator[Any]:
    if lm.peft is None:
        if name is not None:
            raise RuntimeError(f"Adapter {name!r} does not exist")
        yield lm.model
    elif name is None:
        if lm.peft.active_adapter not in lm.peft.peft_config:  # every adapter is gone: none applies
            yield lm.model
            return
        with lm.peft.disable_adapter():
            yield lm.model
    else:
        lm.peft.set_adapter(name)
        yield lm.model
