"""``AtroposConfig``: what ``python -m gemlab.atropos key=value ...`` takes.

The training half (model, LoRA, learning rate, advantages, loss, checkpoints, run folder) means
what it means in gemlab's ``Config`` and is handed to gemlab's step as one (``train_config``), so
the same values are checked the same way; the rest says where ``run-api`` is and where the
trainer serves its weights.
"""

from __future__ import annotations

from typing import Any

import chz

from gemlab.config import BACKENDS, MAX_BATCH_SIZE, Config, _at_least, _one_of, _positive, _run_name, parse_value
from gemlab.model_names import TINY_CHAT
from gemlab.returns import ADVANTAGES

# where run-api and the endpoint live: free to change when a run is resumed
PLACE_FIELDS = ("api_url", "start_api", "poll_seconds", "batch_timeout", "serve_host", "serve_port", "served_model_name", "serve_api_key")


@chz.chz
class AtroposConfig:
    """A gemlab trainer for Atropos environments (defaults: tinker-atropos's write-up where it gives one)."""

    # the model and its training (as in gemlab's Config)
    model_name: str = chz.field(default=TINY_CHAT, doc="base model (Tinker name, local preset or folder)")
    lora_rank: int = chz.field(default=32, validator=_positive)
    learning_rate: float = chz.field(default=4e-5, validator=_positive)
    lr_schedule: str = chz.field(default="constant", doc="'constant', 'linear' or 'cosine' over max_steps")
    batch_size: int = chz.field(default=128, validator=_positive, doc="sequences per step: run-api hands out batches of this many")
    max_steps: int = chz.field(default=50, validator=_positive)
    save_every: int = chz.field(default=1, validator=_positive, doc="checkpoint every N steps (1: a kill loses no step)")
    keep_checkpoints: int = chz.field(default=5, validator=_at_least(0), doc="local checkpoints kept, newest first (0: all)")
    seed: int = chz.field(default=0, validator=_at_least(0))
    init_state: str | None = chz.field(
        default=None, doc="saved weights to start from instead of a fresh LoRA (a save_state path or folder, e.g. a warm-up's); a fresh optimizer"
    )
    advantage: str = chz.field(default="grpo", validator=_one_of(ADVANTAGES), doc="'grpo' (within each scored group) or 'rebn' (over the batch), ...")
    gamma: float = chz.field(default=1.0, doc="discount over a sequence's turns (rebn; grpo ignores it)")
    loss_fn: str = chz.field(default="importance_sampling", doc="importance_sampling, ppo or cispo")
    loss_fn_config: dict[str, float] | None = None
    num_minibatches: int = chz.field(default=1, validator=_positive)
    max_staleness: int = chz.field(default=3, validator=_at_least(0), doc="groups sampled by weights more versions old than this are dropped")
    max_token_len: int = chz.field(default=2048, validator=_positive, doc="longest sequence trained on; longer groups are refused")
    backend: str = chz.field(default="auto", validator=_one_of(BACKENDS), doc="'auto': real Tinker if TINKER_API_KEY is set")
    log_dir: str = "runs"
    run_name: str | None = chz.field(default=None, validator=_run_name, doc="default atropos-<model>-seed<seed>; an existing run resumes")
    allow_config_change: bool = False
    # run-api
    api_url: str = chz.field(default="http://127.0.0.1:8000", doc="atroposlib's run-api")
    start_api: bool = chz.field(default=False, doc="start run-api at api_url's port (loopback) instead of joining a running one")
    poll_seconds: float = chz.field(default=0.5, validator=_positive, doc="wait between /batch calls while none is ready")
    batch_timeout: float = chz.field(default=600.0, validator=_positive, doc="stop (checkpoint saved) after this many seconds without a batch")
    # the endpoint environments sample from
    serve_host: str = chz.field(default="127.0.0.1", doc="where the OpenAI/SGLang/vLLM-compatible endpoint listens")
    serve_port: int = chz.field(default=9001, validator=_at_least(0), doc="its port (0: a free one)")
    served_model_name: str | None = chz.field(default=None, doc="the model id clients send (default model_name)")
    serve_api_key: str | None = chz.field(default=None, doc="key clients must send (required beyond loopback)")

    @chz.validate
    def _training(self) -> None:
        self.train_config()  # the training half is checked by gemlab's own Config

    @property
    def resolved_run_name(self) -> str:
        return self.run_name or f"atropos-{self.model_name.rstrip('/').split('/')[-1]}-seed{self.seed}"

    def train_config(self) -> Config:
        """The training half as gemlab's ``Config`` for ``gemlab.step.train_step``: every
        transition of a batch is trained (no subsampling); GRPO's groups are Atropos's."""
        return Config(
            model_name=self.model_name,
            lora_rank=self.lora_rank,
            learning_rate=self.learning_rate,
            lr_schedule=self.lr_schedule,
            batch_size=MAX_BATCH_SIZE,
            max_steps=self.max_steps,
            seed=self.seed,
            gamma=self.gamma,
            advantage=self.advantage,
            num_env=2,
            group_size=2,  # Atropos's groups: only to pass Config's GRPO check
            loss_fn=self.loss_fn,
            loss_fn_config=self.loss_fn_config,
            num_minibatches=self.num_minibatches,
            backend=self.backend,
        )


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
