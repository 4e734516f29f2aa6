"""The lab's settings as widgets: laptop defaults, sensible ranges, and a checked ``Config`` out.

``Controls(base)`` shows one widget per setting, starting from ``base`` (the notebook's settings
cell). ``config(...)`` turns the widgets' values into a ``Config`` through the same validation as
the command line, so a bad value is refused with one line before anything is written.
"""

from __future__ import annotations

from typing import Any

import chz
import ipywidgets as widgets

from gemlab.config import POLICY_LOSSES, Config
from gemlab.envs import check_env_id, known_env_ids, wrapper_names
from gemlab.returns import ADVANTAGES

LOSSES = ("importance_sampling", "ppo", "cispo")  # the lab's choices of Tinker's policy-gradient losses
CLIP_DEFAULTS = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}  # Tinker's ppo defaults
LORA_RANKS = (1, 2, 4, 8, 16, 32, 64)
# A log scale of exact values (1, 2, 5 per decade), so a run's learning rate is 2e-3, not the
# 0.0019953 a log slider's 0.1 steps would give; the base config's own value is added to them.
LEARNING_RATES = tuple(float(f"{m}e{e}") for e in range(-6, 0) for m in (1, 2, 5))
SETTINGS = (  # the Config fields the lab sets, in display order
    "learning_rate", "gamma", "advantage", "loss_fn", "batch_size", "num_env",
    "lora_rank", "temperature", "max_tokens", "max_steps", "seed", "env_id",
)  # fmt: skip

# The classic comparisons: each is a list of runs, each run a few settings over the widgets'.
COMPARISONS: dict[str, list[dict[str, Any]]] = {
    "ReBN vs none": [{"advantage": "rebn"}, {"advantage": "none"}],
    "gamma 0.5 / 0.9 / 1.0": [{"gamma": 0.5}, {"gamma": 0.9}, {"gamma": 1.0}],
    "too-large learning rate": [{}, {"learning_rate": 5e-2}],  # 25x the laptop's 2e-3: collapses within 2 steps
    "importance sampling vs PPO": [{"loss_fn": "importance_sampling"}, {"loss_fn": "ppo"}],
}


class Controls:
    """One widget per setting. ``values()`` reads them, ``set(**values)`` writes them."""

    def __init__(self, base: Config) -> None:
        self.base = base
        style = {"description_width": "95px"}
        wide = widgets.Layout(width="310px")
        clip = dict(base.loss_fn_config or {})
        self.widgets: dict[str, widgets.Widget] = {
            "learning_rate": widgets.SelectionSlider(
                options=[(f"{lr:.3g}", lr) for lr in sorted({*LEARNING_RATES, base.learning_rate})],
                value=base.learning_rate,
                description="learning rate",
                style=style,
                layout=wide,
            ),
            "gamma": widgets.FloatSlider(
                value=base.gamma, min=0.0, max=1.0, step=0.05, description="gamma", style=style, layout=wide
            ),
            "advantage": widgets.Dropdown(
                options=list(ADVANTAGES), value=base.advantage, description="advantage", style=style, layout=wide
            ),
            "loss_fn": widgets.Dropdown(
                options=list(LOSSES), value=base.loss_fn, description="loss", style=style, layout=wide
            ),
            "clip_low_threshold": widgets.FloatSlider(
                value=clip.get("clip_low_threshold", CLIP_DEFAULTS["clip_low_threshold"]),
                min=0.1,
                max=1.0,
                step=0.05,
                description="clip low",
                style=style,
                layout=wide,
            ),
            "clip_high_threshold": widgets.FloatSlider(
                value=clip.get("clip_high_threshold", CLIP_DEFAULTS["clip_high_threshold"]),
                min=1.0,
                max=3.0,
                step=0.05,
                description="clip high",
                style=style,
                layout=wide,
            ),
            "batch_size": widgets.IntSlider(
                value=base.batch_size,
                min=4,
                max=max(512, base.batch_size),
                step=4,
                description="batch size",
                style=style,
                layout=wide,
            ),
            "num_env": widgets.IntSlider(
                value=base.num_env, min=1, max=max(64, base.num_env), description="num envs", style=style, layout=wide
            ),
            "lora_rank": widgets.Dropdown(
                options=sorted({*LORA_RANKS, base.lora_rank}),
                value=base.lora_rank,
                description="LoRA rank",
                style=style,
                layout=wide,
            ),
            "temperature": widgets.FloatSlider(
                value=base.temperature, min=0.0, max=2.0, step=0.05, description="temperature", style=style, layout=wide
            ),
            "max_tokens": widgets.BoundedIntText(
                value=base.max_tokens,
                min=1,
                max=max(4096, base.max_tokens),
                description="max tokens",
                style=style,
                layout=wide,
            ),
            "max_steps": widgets.IntSlider(
                value=base.max_steps, min=1, max=max(300, base.max_steps), description="steps", style=style, layout=wide
            ),
            "seed": widgets.BoundedIntText(
                value=base.seed, min=0, max=1_000_000, description="seed", style=style, layout=wide
            ),
            "env_id": widgets.Combobox(
                value=base.env_id,
                options=[e for e in known_env_ids() if e.startswith("game:")],
                ensure_option=False,
                description="env (level)",
                style=style,
                layout=widgets.Layout(width="340px"),  # the longest id, game:GuessTheNumber-v0-hard, shows whole
            ),
        }
        self.widgets["loss_fn"].observe(lambda _: self._show_clip(), names="value")
        self._show_clip()
        w = self.widgets
        self.box = widgets.HBox(
            [
                widgets.VBox(
                    [
                        w["learning_rate"],
                        w["gamma"],
                        w["advantage"],
                        w["loss_fn"],
                        w["clip_low_threshold"],
                        w["clip_high_threshold"],
                    ]
                ),
                widgets.VBox(
                    [w["batch_size"], w["num_env"], w["lora_rank"], w["temperature"], w["max_tokens"], w["max_steps"]]
                ),
                widgets.VBox([w["seed"], w["env_id"]]),
            ]
        )

    def _show_clip(self) -> None:
        takes_clip = "clip_low_threshold" in POLICY_LOSSES[self.widgets["loss_fn"].value]
        for name in CLIP_DEFAULTS:
            self.widgets[name].disabled = not takes_clip

    def values(self) -> dict[str, Any]:
        """The settings as ``Config`` fields (the clip thresholds folded into ``loss_fn_config``)."""
        values = {name: self.widgets[name].value for name in SETTINGS}
        # a browser slider sends back binary floats (0.9000000000000001): keep 4 digits
        values.update({name: float(f"{values[name]:.4g}") for name in ("gamma", "temperature")})
        values["env_id"] = str(values["env_id"]).strip()
        if "clip_low_threshold" in POLICY_LOSSES[values["loss_fn"]]:
            values["loss_fn_config"] = {name: float(f"{self.widgets[name].value:.4g}") for name in CLIP_DEFAULTS}
        else:
            values["loss_fn_config"] = None
        return values

    def set(self, **values: Any) -> None:
        """Set widgets by setting name (``loss_fn_config`` sets the clip sliders)."""
        for name, value in values.items():
            if name == "loss_fn_config":
                for key, threshold in (value or {}).items():
                    self.widgets[key].value = threshold
            elif name in self.widgets:
                self.widgets[name].value = value
            else:
                raise ValueError(f"the lab has no setting {name!r}; it has: {', '.join(SETTINGS)}")

    def config(self, *, run_name: str, log_dir: str, **overrides: Any) -> Config:
        """A checked ``Config`` from the widgets plus ``overrides``; a bad value raises ``ValueError``."""
        values = {**self.values(), **overrides}
        if overrides.get("loss_fn") and "loss_fn_config" not in overrides:
            takes_clip = "clip_low_threshold" in POLICY_LOSSES[values["loss_fn"]]
            values["loss_fn_config"] = (
                {name: float(f"{self.widgets[name].value:.4g}") for name in CLIP_DEFAULTS} if takes_clip else None
            )
        if not values["env_id"]:
            raise ValueError("env id is empty: pick one such as game:GuessTheNumber-v0-easy")
        try:
            config = chz.replace(self.base, **values, run_name=run_name, log_dir=log_dir)
        except (ValueError, TypeError) as error:  # keep the one line that says what is allowed
            raise ValueError(str(error).strip().splitlines()[-1]) from None
        check_env_id(config.env_id)
        wrapper_names(config.env_wrappers)
        return config
