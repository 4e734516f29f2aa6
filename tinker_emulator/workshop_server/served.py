"""The base models this server serves, by name, and the check every ``base_model`` a client sends
passes before anything is made for it.

The server serves its local models (the catalogue, SmolLM2 and the stand-in) and Tinker's own
model names, each trained and sampled on the stand-in (``$GEMLAB_LOCAL_MODEL``, default
``gemlab/tiny-chat``), so a Tinker program runs unchanged. ``get_server_capabilities`` lists
exactly these; any other name is refused (HTTP 400) with the list. The local backend also reads a
folder path as a model (``~``, ``""``, ``/any/folder``): that is for its in-process user, never for
a tenant, whose strings must not become paths on the server.
"""

from __future__ import annotations

import os
from typing import Any

from tinker import types

from tinker_emulator.checkpoints import brief
from tinker_emulator.models import MODEL_ENV, TINY_CHAT, context_length, looks_like_path, model_descriptions

# Tinker's model names: every model tinker-cookbook's model_info knows, in versions 0.1.0 and 0.6.1
# (the names Tinker has served; a program written for Tinker names one of these)
TINKER_MODELS = (
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-14B-Base",
    "Qwen/Qwen3-235B-A22B-Instruct-2507",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-30B-A3B-Base",
    "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-4B",
    "Qwen/Qwen3-4B-Base",
    "Qwen/Qwen3-4B-Instruct-2507",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-8B-Base",
    "Qwen/Qwen3-VL-235B-A22B-Instruct",
    "Qwen/Qwen3-VL-30B-A3B-Instruct",
    "Qwen/Qwen3.5-27B",
    "Qwen/Qwen3.5-35B-A3B",
    "Qwen/Qwen3.5-35B-A3B-Base",
    "Qwen/Qwen3.5-397B-A17B",
    "Qwen/Qwen3.5-4B",
    "Qwen/Qwen3.5-9B",
    "Qwen/Qwen3.5-9B-Base",
    "Qwen/Qwen3.6-27B",
    "Qwen/Qwen3.6-35B-A3B",
    "Qwen/Qwen3.8-27B",
    "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.2-1B",
    "meta-llama/Llama-3.2-1B-Instruct",
    "meta-llama/Llama-3.2-3B",
    "meta-llama/Llama-3.2-3B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct",
    "deepseek-ai/DeepSeek-V3.1",
    "deepseek-ai/DeepSeek-V3.1-Base",
    "deepseek-ai/DeepSeek-V4.1-Flash",
    "deepseek-ai/DeepSeek-V4.1-Flash-1017",
    "openai/gpt-oss-120b",
    "openai/gpt-oss-20b",
    "moonshotai/Kimi-K2-Thinking",
    "moonshotai/Kimi-K2.5",
    "moonshotai/Kimi-K2.6",
    "moonshotai/Kimi-K3.1-Pro",
    "zai-org/GLM-5.3",
    "zai-org/GLM-5.3-Flash",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16",
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16",
    "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16",
    "nvidia/NVIDIA-Nemotron-3.5-Super-VL-120B-A12B-BF16",
    "thinkingmachines/Inkling",
    "thinkingmachines/Inkling-2-Small",
    "thinkingmachines/Inkling-Small",
)


EXAMPLES = ("Qwen/Qwen3-8B-Base", "meta-llama/Llama-3.1-8B")  # named in the refusal


class NotServed(ValueError):
    """A base model this server does not serve (HTTP 400, with the served names)."""


def stand_in() -> str:
    """The local model that Tinker's model names are served by."""
    return os.environ.get(MODEL_ENV) or TINY_CHAT


def local_models() -> list[str]:
    """The local models served under their own names: the catalogue, SmolLM2, and the stand-in
    when it is a model name (not a folder path the instructor chose)."""
    names = list(model_descriptions())
    extra = stand_in()
    return names if extra in names or looks_like_path(extra) else [*names, extra]


def _context(name: str) -> int | None:
    try:
        return context_length(name)
    except (KeyError, OSError, ValueError):  # a stand-in outside the catalogue: its config is not read here
        return None


def capabilities() -> types.GetServerCapabilitiesResponse:
    """Every served model: the local ones, then Tinker's with the stand-in's context."""
    own = [(name, _context(name)) for name in local_models()]
    tinker = [(name, _context(stand_in())) for name in TINKER_MODELS if name not in dict(own)]
    return types.GetServerCapabilitiesResponse(
        supported_models=[
            types.SupportedModel(model_name=name, max_context_length=context, trainable=True, sampleable=True)
            for name, context in own + tinker
        ]
    )


def check(name: Any) -> str:
    """``name`` if this server serves it; ``NotServed`` naming what it serves otherwise."""
    if isinstance(name, str) and (name in TINKER_MODELS or name in local_models()):
        return name
    raise NotServed(
        f"Model {brief(name)} is not served here. Served: {', '.join(local_models())}; and Tinker's "
        f"{len(TINKER_MODELS)} model names ({', '.join(EXAMPLES)}, ...; "
        f"get_server_capabilities lists them) on {stand_in()}"
    )
