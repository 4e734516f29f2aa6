"""``AtroposConfig``: what ``python -m gemlab.atropos key=value ...`` takes.

The training half (model, LoRA, learning rate, advantages, loss, checkpoints, run folder) is
gemlab's ``TrainingConfig``, whose fields ``Config`` shares: each is declared and checked once
there, and handed to gemlab's step as a ``Config`` (``train_config``). The defaults follow
tinker-atropos's write-up where it gives one; the rest says how long a sequence may be, where
``run-api`` is and where the trainer serves its weights.
"""

from __future__ import annotations

from typing import Any

import chz

from gemlab.config import MAX_BATCH_SIZE, Config, TrainingConfig, parse_value, with_default
from gemlab.model_names import TINY_CHAT

# where run-api and the endpoint live: free to change when a run is resumed
PLACE_FIELDS = (
    "api_url",
    "start_api",
    "poll_seconds",
    "batch_timeout",
    "serve_host",
    "serve_port",
    "served_model_name",
    "serve_api_key",
)


def _above_zero(obj: Any, attr: str) -> None:
    value = getattr(obj, attr)
    if not value > 0:
        raise ValueError(f"{attr.removeprefix('X_')} must be positive, got {value!r}")


def _port(obj: Any, attr: str) -> None:
    value = getattr(obj, attr)
    if not 0 <= value <= 65535:
        raise ValueError(f"{attr.removeprefix('X_')} must be a port, 0 to 65535 (0: a free one), got {value!r}")


@chz.chz
class AtroposConfig(TrainingConfig):
    """A gemlab trainer for Atropos environments (defaults: tinker-atropos's write-up where it gives one)."""

    # the training half's defaults for Atropos (the fields themselves: gemlab.config.TrainingConfig)
    model_name: str = with_default(TrainingConfig, "model_name", TINY_CHAT)
    lora_rank: int = with_default(TrainingConfig, "lora_rank", 32)
    max_steps: int = with_default(TrainingConfig, "max_steps", 50)
    save_every: int = with_default(TrainingConfig, "save_every", 1)  # a kill loses no step
    gamma: float = with_default(TrainingConfig, "gamma", 1.0)  # over a sequence's turns (rebn; grpo ignores it)
    advantage: str = with_default(TrainingConfig, "advantage", "grpo")  # within each scored group
    max_staleness: int = with_default(TrainingConfig, "max_staleness", 3)  # older groups are dropped
    # Atropos's own
    init_state: str | None = chz.field(
        default=None,
        doc="saved weights to start from instead of a fresh LoRA (a save_state path or folder, e.g. a "
        "warm-up's); a fresh optimizer",
    )
    max_token_len: int = chz.field(
        default=2048, validator=_above_zero, doc="longest sequence trained on; longer groups are refused"
    )
    # run-api
    api_url: str = chz.field(default="http://127.0.0.1:8000", doc="atroposlib's run-api")
    start_api: bool = chz.field(
        default=False, doc="start run-api at api_url's port (loopback) instead of joining a running one"
    )
    poll_seconds: float = chz.field(
        default=0.5, validator=_above_zero, doc="wait between /batch calls while none is ready"
    )
    batch_timeout: float = chz.field(
        default=600.0, validator=_above_zero, doc="stop (checkpoint saved) after this many seconds without a batch"
    )
    # the endpoint environments sample from
    serve_host: str = chz.field(default="127.0.0.1", doc="where the OpenAI/SGLang/vLLM-compatible endpoint listens")
    serve_port: int = chz.field(default=9001, validator=_port, doc="its port (0: a free one)")
    served_model_name: str | None = chz.field(default=None, doc="the model id clients send (default model_name)")
    serve_api_key: str | None = chz.field(default=None, doc="key clients must send (required beyond loopback)")

    @chz.validate
    def _training(self) -> None:
        self.train_config()  # the training half is checked by gemlab's own Config

    @property
    def resolved_run_name(self) -> str:
        """The run's folder name under ``log_dir``: ``run_name``, else atropos-<model>-seed<seed>."""
        return self.run_name or f"atropos-{self.model_name.rstrip('/').split('/')[-1]}-seed{self.seed}"

    def train_config(self) -> Config:
        """The training half as gemlab's ``Config`` for ``gemlab.step.train_step``: every
        transition of a batch is trained (no subsampling); GRPO's groups are Atropos's."""
        shared = {name: getattr(self, name) for name in chz.chz_fields(TrainingConfig)}
        # Atropos's groups: num_env and group_size only pass Config's GRPO check
        return Config(**{**shared, "batch_size": MAX_BATCH_SIZE}, num_env=2, group_size=2)


def config_from_argv(argv: list[str]) -> AtroposConfig:
    """``key=value ...`` (``loss_fn_config.NAME=value`` for the loss's settings) as an ``AtroposConfig``."""
    fields = chz.chz_fields(AtroposConfig)
    values: dict[str, Any] = {}
    for arg in argv:
        key, sep, text = arg.partition("=")
        head, _, sub = key.partition(".")
        if not sep or head not in fields:
            raise ValueError(f"expected key=value with a key of: {', '.join(fields)}; got {arg!r}")
        if head == "loss_fn_config" and sub:
            values.setdefault("loss_fn_config", {})[sub] = parse_value(key, text, float)
        else:
            values[head] = parse_value(key, text, fields[head].final_type)
    return AtroposConfig(**values)


def help_text() -> str:
    """Usage and every key with its default."""
    lines = ["usage: python -m gemlab.atropos [key=value ...]", "", "keys (default):"]
    for name, field in chz.chz_fields(AtroposConfig).items():
        doc = f" {field._doc}" if field._doc else ""
        lines.append(f"  {f'{name}={field._default!r}':<44}{doc}")
    return "\n".join(lines)
