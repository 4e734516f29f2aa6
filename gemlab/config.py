"""One ``chz`` config for a training run: GEM's Tinker example fields and defaults, plus the backend.

Values are checked when the config is built, so a bad value fails before any work starts.
"""

from __future__ import annotations

from typing import Any, Callable

import chz
from tinker import types

from gemlab.returns import NORMALIZATIONS
from gemlab.templates import TEMPLATES

BACKENDS = ("auto", "local", "tinker")
# Tinker's built-in policy-gradient losses and the ``loss_fn_config`` keys each one takes.
POLICY_LOSSES: dict[str, tuple[str, ...]] = {
    "importance_sampling": (),  # GEM's choice: sum(-ratio * advantage)
    "ppo": ("clip_low_threshold", "clip_high_threshold"),
    "cispo": ("clip_low_threshold", "clip_high_threshold"),
    "dro": ("beta",),
}


def _positive(obj: Any, attr: str) -> None:
    value = getattr(obj, attr)
    if not value > 0:
        raise ValueError(f"{attr} must be a positive number, got {value!r}")


def _in_range(low: float, high: float) -> Callable[[Any, str], None]:
    def check(obj: Any, attr: str) -> None:
        value = getattr(obj, attr)
        if not low <= value <= high:
            raise ValueError(f"{attr} must be in [{low}, {high}], got {value!r}")

    return check


def _one_of(allowed: tuple[str, ...] | dict) -> Callable[[Any, str], None]:
    def check(obj: Any, attr: str) -> None:
        value = getattr(obj, attr)
        if value not in allowed:
            raise ValueError(f"{attr} must be one of {', '.join(map(repr, allowed))}; got {value!r}")

    return check


@chz.chz
class Config:
    """Everything that defines a run. Defaults are GEM's Tinker example on GuessTheNumber."""

    # model and LoRA
    model_name: str = chz.field(default="Qwen/Qwen3-4B-Instruct-2507", doc="base model (Tinker name, local preset or folder)")
    lora_rank: int = chz.field(default=8, validator=_positive)
    learning_rate: float = chz.field(default=4e-5, validator=_positive)
    # batch and schedule
    batch_size: int = chz.field(default=128, validator=_positive, doc="transitions per policy-gradient step")
    max_steps: int = chz.field(default=200, validator=_positive)
    save_every: int = chz.field(default=-1, doc="checkpoint every N steps (<= 0: only at the end)")
    seed: int = 0
    # sampling
    max_tokens: int = chz.field(default=2048, validator=_positive, doc="cap on tokens per action")
    temperature: float = chz.field(default=1.0, validator=_in_range(0.0, 10.0))
    # environment
    env_id: str = "game:GuessTheNumber-v0-easy"
    num_env: int = chz.field(default=32, validator=_positive, doc="environments played concurrently")
    group_size: int = chz.field(
        default=1, validator=_positive, doc="envs per group that share one problem (GRPO's groups); must divide num_env"
    )
    env_wrappers: str = chz.field(default="concat", doc="comma-separated GEM wrapper names")
    template: str = chz.field(default="qwen3_game", validator=_one_of(tuple(TEMPLATES)))
    # returns
    gamma: float = chz.field(default=0.9, validator=_in_range(0.0, 1.0))
    normalization: str = chz.field(
        default="rebn", validator=_one_of(NORMALIZATIONS), doc="'rebn' (GEM's ReBN), 'none', 'center', 'group' or 'grpo'"
    )
    # policy-gradient loss (Tinker's built-in losses; GEM uses importance_sampling)
    loss_fn: str = chz.field(default="importance_sampling", validator=_one_of(tuple(POLICY_LOSSES)))
    loss_fn_config: dict[str, float] | None = chz.field(
        default=None, doc="the loss's settings, e.g. loss_fn_config.clip_low_threshold=0.8 (ppo, cispo)"
    )
    num_minibatches: int = chz.field(
        default=1, validator=_positive, doc="policy updates per batch: one forward_backward + optim_step per minibatch (PPO-style when > 1)"
    )
    # supervised warm-up (cross-entropy) before RL, in steps; 0 skips it
    warmup_steps: int = chz.field(default=0, validator=chz.validators.ge(0))
    warmup_learning_rate: float = chz.field(default=1e-3, validator=_positive)
    # where it runs and where it writes
    backend: str = chz.field(default="auto", validator=_one_of(BACKENDS), doc="'auto': Tinker if TINKER_API_KEY is set")
    log_dir: str = "runs"
    run_name: str | None = chz.field(default=None, doc="default: <env>-<model>-seed<seed>; an existing run resumes")
    wandb_project: str | None = None

    @chz.validate
    def _loss_config_keys(self) -> None:
        allowed = POLICY_LOSSES[self.loss_fn]
        unknown = sorted(set(self.loss_fn_config or {}) - set(allowed))
        if unknown:
            takes = ", ".join(allowed) or "no settings"
            raise ValueError(f"loss_fn_config keys {unknown} are not used by loss_fn={self.loss_fn!r}; it takes: {takes}")

    @chz.validate
    def _groups(self) -> None:
        if self.num_env % self.group_size:
            raise ValueError(f"group_size must divide num_env ({self.num_env}), got {self.group_size}")
        if self.normalization == "grpo" and self.group_size < 2:
            raise ValueError("normalization='grpo' compares episodes of one problem: set group_size >= 2")
        if self.num_minibatches > self.batch_size:
            raise ValueError(f"num_minibatches must be at most batch_size ({self.batch_size}), got {self.num_minibatches}")

    @property
    def resolved_run_name(self) -> str:
        """The run's folder name under ``log_dir``."""
        if self.run_name:
            return self.run_name
        env = self.env_id.split(":")[-1]
        model = self.model_name.rstrip("/").split("/")[-1]
        return f"{env}-{model}-seed{self.seed}"


def adam_params(learning_rate: float) -> types.AdamParams:
    """GEM's optimizer settings: Adam with beta1 0.9, beta2 0.95, eps 1e-8."""
    return types.AdamParams(learning_rate=learning_rate, beta1=0.9, beta2=0.95, eps=1e-8)


# The default local setup: sized so that a 2-core laptop sees learning within minutes
# (docs/laptop-recipe.md explains every choice). Real Tinker runs use ``Config()`` as GEM does.
LAPTOP: dict[str, Any] = dict(
    model_name="gemlab/tiny",  # 0.4M parameters, pretrained to play sloppily: RL has a skill to sharpen
    backend="local",
    learning_rate=2e-3,  # LoRA on a tiny model tolerates (and needs) a much larger step than on a 4B one
    max_tokens=8,  # "\boxed{7}<|im_end|>" is 4 tokens
    max_steps=100,  # about 2 minutes on a 2-core laptop
)

PRESETS: dict[str, dict[str, Any]] = {"gem": {}, "laptop": LAPTOP}


def make_config(preset: str = "gem", **overrides: Any) -> Config:
    """A ``Config`` from a named preset (``gem`` or ``laptop``) with keyword overrides."""
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}. Known presets: {', '.join(PRESETS)}")
    return Config(**{**PRESETS[preset], **overrides})


def config_from_argv(argv: list[str]) -> Config:
    """Parse ``[preset=NAME] key=value ...`` as the command line does."""
    preset = "gem"
    rest = []
    for arg in argv:
        if arg.startswith("preset="):
            preset = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}. Known presets: {', '.join(PRESETS)}")
    return chz.Blueprint(Config).apply(PRESETS[preset]).make_from_argv(rest)
