"""One ``chz`` config for a training run: GEM's Tinker example fields and defaults, plus the backend.

Values are checked when the config is built, so a bad value fails before any work starts.
"""

from __future__ import annotations

import difflib
import json
import math
import numbers
import re
import types as pytypes
import typing
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chz
import numpy as np

from gemlab.env_ids import GUESS_EASY, PRODUCTS_TEST, PRODUCTS_TRAIN, SUMS_TEST, SUMS_TRAIN
from gemlab.model_names import QWEN3_4B_INSTRUCT, SMOLLM2, TINY
from gemlab.returns import ADVANTAGES
from gemlab.templates import TEMPLATES

# where the SFT warm-up's examples come from (gemlab/warmup.py)
WARMUP_DATA = ("scripted", "own_answers", "own_code", "tool_reports")

CONFIG_FILE = "config.json"  # a run folder's saved config (gemlab/run_folder.py reads run folders)
BACKENDS = ("auto", "local", "tinker")
# Tinker's built-in policy-gradient losses and the ``loss_fn_config`` keys each one takes.
POLICY_LOSSES: dict[str, tuple[str, ...]] = {
    "importance_sampling": (),  # GEM's choice: sum(-ratio * advantage)
    "ppo": ("clip_low_threshold", "clip_high_threshold"),
    "cispo": ("clip_low_threshold", "clip_high_threshold"),
}
# Tinker losses the emulator computes (for tinker-cookbook's recipes) but the Trainer refuses.
REFUSED_LOSSES = {
    "dro": "with the Trainer's datums it pulls every prompt token by beta/2 * lp^2 and gets plain ReBN "
    "advantages, not DRO's soft ones",
    "stable_reinforce": "on real Tinker it needs record_stability_info and sequence_ids, which the Trainer does not "
    "set (locally it is only an importance-sampling stand-in)",
}


def _policy_loss(obj: Any, attr: str) -> None:
    value = getattr(obj, attr)
    if value in REFUSED_LOSSES:
        raise ValueError(
            f"loss_fn={value!r} is refused: {REFUSED_LOSSES[value]}; use one of {', '.join(map(repr, POLICY_LOSSES))}"
        )
    _one_of(tuple(POLICY_LOSSES))(obj, attr)


# Sizes past these are refused: measured on a 2-core laptop, creating an env takes about 0.5 ms
# and 5 kB, and every step plays at least one episode per env.
MAX_NUM_ENV = 4096
MAX_BATCH_SIZE = 65536
ENV_SECONDS = 5e-4
ENV_BYTES = 5e3
MAX_SEED = 2**31 - 1  # derive_seed works in 31 bits; numpy and torch take any seed in [0, 2**32)


def _name(attr: str) -> str:
    return attr.removeprefix("X_")  # chz hands validators its internal attribute name


def _number(value: Any) -> bool:
    """A real number (numpy's included), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def plain_number(value: Any) -> Any:
    """numpy's ints and floats as Python's (``np.int64(16)`` -> ``16``), so configs save as JSON."""
    return value.item() if isinstance(value, np.generic) else value


def _positive(obj: Any, attr: str) -> None:
    value = getattr(obj, attr)
    if _number(value) and not (math.isfinite(value) and value > 0):  # other types: ``Config._types`` names them
        raise ValueError(f"{_name(attr)} must be a positive number, got {value!r}")


def _in_range(low: float, high: float) -> Callable[[Any, str], None]:
    def check(obj: Any, attr: str) -> None:
        value = getattr(obj, attr)
        if not _number(value):
            return  # ``Config._types`` names the type
        if not math.isfinite(value):
            raise ValueError(f"{_name(attr)} must be a finite number in [{low}, {high}]; {value!r} is not")
        if not low <= value <= high:
            raise ValueError(f"{_name(attr)} must be in [{low}, {high}], got {value!r}")

    return check


def _at_least(low: int) -> Callable[[Any, str], None]:
    def check(obj: Any, attr: str) -> None:
        value = getattr(obj, attr)
        if _number(value) and value < low:
            raise ValueError(f"{_name(attr)} must be at least {low}, got {value!r}")

    return check


def _at_most(limit: int, why: str | Callable[[Any], str]) -> Callable[[Any, str], None]:
    def check(obj: Any, attr: str) -> None:
        _positive(obj, attr)
        value = getattr(obj, attr)
        if _number(value) and value > limit:
            raise ValueError(
                f"{_name(attr)}={value} is too large ({why(value) if callable(why) else why}); at most {limit}"
            )

    return check


def _one_of(allowed: tuple[str, ...] | dict) -> Callable[[Any, str], None]:
    def check(obj: Any, attr: str) -> None:
        value = getattr(obj, attr)
        if value not in allowed:
            raise ValueError(f"{_name(attr)} must be one of {', '.join(map(repr, allowed))}; got {value!r}")

    return check


_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")


def check_run_name(run_name: str) -> None:
    """Refuse a run name that would leave ``log_dir`` (``..``, ``/``)."""
    if not _RUN_NAME.fullmatch(run_name) or run_name in (".", ".."):
        raise ValueError(
            f"run_name {run_name!r} is not allowed: use letters, digits and . _ = + - (no '/' or '..'), "
            "starting with a letter or digit"
        )


def _run_name(obj: Any, attr: str) -> None:
    value = getattr(obj, attr)
    if value is not None:
        check_run_name(value)


def _env_cost(num_env: int) -> str:
    return (
        f"each step plays at least {num_env} episodes, and all {num_env} play at once: "
        f"{num_env * ENV_BYTES / 2**20:.0f} MB of envs and {num_env} concurrent requests per turn"
    )


LR_SCHEDULES = ("constant", "linear", "cosine")  # learning_rate over max_steps (gemlab/step.py)
STALE_BATCHES = ("drop", "resample")  # what sampling ahead does with a batch older than max_staleness


def with_default(cls: type, name: str, default: Any) -> Any:
    """Field ``name`` of chz class ``cls`` with another default (its validators and doc kept): how a
    subclass changes a shared field's default without declaring the field again."""
    field = chz.chz_fields(cls)[name]
    return chz.field(default=default, validator=list(field._validator), doc=field._doc)


@chz.chz
class TrainingConfig:
    """The fields every gemlab trainer shares: the model and its training, checkpoints, where it runs
    and writes. ``Config`` (GEM's loop) and ``gemlab.atropos.AtroposConfig`` (Atropos environments)
    extend it, so each field is declared, checked and documented once. Defaults are GEM's Tinker example."""

    # model and LoRA
    model_name: str = chz.field(default=QWEN3_4B_INSTRUCT, doc="base model (Tinker name, local preset or folder)")
    lora_rank: int = chz.field(default=8, validator=_positive)
    learning_rate: float = chz.field(default=4e-5, validator=_positive)
    lr_schedule: str = chz.field(
        default="constant",
        validator=_one_of(LR_SCHEDULES),
        doc="learning_rate over the run: 'constant', or decayed to 0 at max_steps ('linear', 'cosine')",
    )
    # batch and schedule
    batch_size: int = chz.field(
        default=128,
        validator=_at_most(MAX_BATCH_SIZE, "transitions sampled per step"),
        doc="transitions per policy-gradient step",
    )
    max_steps: int = chz.field(default=200, validator=_positive)
    save_every: int = chz.field(default=5, doc="checkpoint every N steps (<= 0: only at the end and on interrupt)")
    keep_checkpoints: int = chz.field(
        default=5, validator=_at_least(0), doc="local checkpoints kept, newest first (0: keep all)"
    )
    seed: int = chz.field(default=0, validator=_in_range(0, MAX_SEED), doc=f"0 to {MAX_SEED}")
    # returns and advantages (gemlab/returns.py)
    gamma: float = chz.field(default=0.9, validator=_in_range(0.0, 1.0))
    advantage: str = chz.field(
        default="rebn",
        validator=_one_of(ADVANTAGES),
        doc="advantage estimator: 'rebn' (GEM's ReBN), 'none' (raw returns), 'center', 'group' or 'grpo' (was "
        "`normalization`)",
    )
    # how old the data a step trains on may be (gemlab/sampling_ahead.py; Atropos: gemlab/atropos/groups.py)
    max_staleness: int = chz.field(
        default=0,
        validator=_at_least(0),
        doc="0: GEM's synchronous loop; k: data sampled by weights at most k steps old (the Trainer collects "
        "the next batches while a step trains)",
    )
    # policy-gradient loss (Tinker's built-in losses; GEM uses importance_sampling)
    loss_fn: str = chz.field(default="importance_sampling", validator=_policy_loss)
    loss_fn_config: dict[str, float] | None = chz.field(
        default=None, doc="the loss's settings, e.g. loss_fn_config.clip_low_threshold=0.8 (ppo, cispo)"
    )
    num_minibatches: int = chz.field(
        default=1,
        validator=_positive,
        doc="policy updates per batch: one forward_backward + optim_step per minibatch (PPO-style when > 1)",
    )
    # where it runs and where it writes
    backend: str = chz.field(default="auto", validator=_one_of(BACKENDS), doc="'auto': Tinker if TINKER_API_KEY is set")
    log_dir: str = "runs"
    run_name: str | None = chz.field(
        default=None,
        validator=_run_name,
        doc="folder under log_dir (default: resolved_run_name, from the model and seed); an existing run resumes",
    )
    allow_config_change: bool = chz.field(
        default=False, doc="resume an existing run even though its config changed (the change is logged)"
    )

    @chz.validate
    def _types(self) -> None:
        """Integers are integers and numbers are finite, from Python as from the command line."""
        for name, field in chz.chz_fields(self).items():
            value = getattr(self, name)
            if not type_matches(value, field.final_type):
                raise ValueError(f"{name} must be {type_name(field.final_type)}, got {value!r}")
            if _number(value) and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")


@chz.chz
class Config(TrainingConfig):
    """Everything that defines a run. Defaults are GEM's Tinker example on GuessTheNumber."""

    # a learner's time (Trainer.run)
    max_minutes: float | None = chz.field(
        default=None,
        validator=_positive,
        doc="stop run() at a step boundary before this many minutes, judged from the steps (and evaluation) "
        "measured so far; rerun to resume (None: no limit)",
    )
    # sampling
    max_tokens: int = chz.field(default=2048, validator=_positive, doc="cap on tokens per action")
    temperature: float = chz.field(default=1.0, validator=_in_range(0.0, 10.0))
    # environment
    env_id: str = GUESS_EASY
    num_env: int = chz.field(
        default=32, validator=_at_most(MAX_NUM_ENV, _env_cost), doc="environments played concurrently"
    )
    group_size: int = chz.field(
        default=1, validator=_positive, doc="envs per group that share one problem (GRPO's groups); must divide num_env"
    )
    env_wrappers: str = chz.field(default="concat", doc="comma-separated GEM wrapper names")
    template: str = chz.field(default="qwen3_game", validator=_one_of(tuple(TEMPLATES)))
    # sampling ahead of the learner (gemlab/sampling_ahead.py)
    stale_batches: str = chz.field(
        default="drop",
        validator=_one_of(STALE_BATCHES),
        doc="a batch older than max_staleness: 'drop' it, or 'resample' its games with the newest weights (as "
        "tinker-cookbook)",
    )
    # supervised warm-up (cross-entropy) before RL, in steps; 0 skips it
    warmup_steps: int = chz.field(default=0, validator=_at_least(0))
    warmup_learning_rate: float = chz.field(default=1e-3, validator=_positive)
    warmup_batch_size: int | None = chz.field(default=None, doc="examples per warm-up step (default batch_size)")
    warmup_data: str = chz.field(
        default="scripted",
        validator=_one_of(WARMUP_DATA),
        doc=(
            "'scripted': the env's own player's answers (GEM games); 'own_answers': the model's answers, "
            "last integer as "
            "\\boxed{N} (any env, no labels); 'own_code': its answers cut after their first Python block, "
            "then the tool's "
            "printed number as \\boxed{N} (tool envs, no labels); 'tool_reports': as 'own_code', training "
            "only the report "
            "of what the tool printed (the code is left to RL)"
        ),
    )
    # a fixed evaluation during the run (gemlab/evaluate.py), logged in the step's metrics as eval/*,
    # and of the base model and after the warm-up, logged in step 0's row (gemlab/eval_curve.py)
    eval_every: int = chz.field(
        default=0, validator=_at_least(0), doc="evaluate every N steps, after the step's update (0: never)"
    )
    eval_env_id: str | None = chz.field(
        default=None, doc="the evaluation's env (a held-out split such as rg:sums-1digit-test); default env_id"
    )
    eval_games: int = chz.field(default=64, validator=_positive, doc="games (or problems) in the fixed evaluation set")
    eval_base: bool = chz.field(
        default=True,
        doc="with eval_every > 0: also evaluate the base model, before the warm-up (SmolLM2 on its 64 held-out "
        "sums: 59 s on a loaded 2-core Xeon)",
    )
    wandb_project: str | None = None

    @chz.validate
    def _sizes(self) -> None:
        if self.num_env > self.batch_size:
            warnings.warn(
                f"num_env={self.num_env} > batch_size={self.batch_size}: each step plays at least {self.num_env} "
                f"episodes and trains on {self.batch_size} of their transitions",
                stacklevel=2,
            )

    @chz.validate
    def _conversation(self) -> None:
        if TEMPLATES[self.template].continues and "concat" in [name.strip() for name in self.env_wrappers.split(",")]:
            raise ValueError(
                f"template={self.template!r} keeps the episode as one conversation, and the concat wrapper "
                "would repeat "
                "the whole history in every turn: drop concat from env_wrappers (e.g. env_wrappers= for a game)"
            )

    @chz.validate
    def _loss_config_keys(self) -> None:
        allowed = POLICY_LOSSES[self.loss_fn]
        for key, value in (self.loss_fn_config or {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"loss_fn_config.{key} must be a finite number, got {value!r}")
        unknown = sorted(set(self.loss_fn_config or {}) - set(allowed))
        if unknown:
            takes = ", ".join(allowed) or "no settings"
            raise ValueError(
                f"loss_fn_config keys {unknown} are not used by loss_fn={self.loss_fn!r}; it takes: {takes}"
            )

    @chz.validate
    def _groups(self) -> None:
        if self.num_env % self.group_size:
            raise ValueError(f"group_size must divide num_env ({self.num_env}), got {self.group_size}")
        if ADVANTAGES[self.advantage].needs_groups and self.group_size < 2:
            raise ValueError(f"advantage={self.advantage!r} compares episodes of one problem: set group_size >= 2")
        if self.eval_every > 0 and self.max_staleness > 0:
            raise ValueError(
                "eval_every needs max_staleness=0: an evaluation while the next batch is sampled ahead "
                "would change that "
                "batch's problems (GEM's envs share Python's global random); evaluate between steps with "
                "gemlab.evaluate_trainer"
            )
        if self.warmup_batch_size is not None and self.warmup_batch_size < 1:
            raise ValueError(
                f"warmup_batch_size must be positive (or None for batch_size), got {self.warmup_batch_size}"
            )
        if self.num_minibatches > self.batch_size:
            raise ValueError(
                f"num_minibatches must be at most batch_size ({self.batch_size}), got {self.num_minibatches}"
            )

    @property
    def resolved_run_name(self) -> str:
        """The run's folder name under ``log_dir``."""
        if self.run_name:
            return self.run_name
        env = self.env_id.split(":")[-1]
        model = self.model_name.rstrip("/").split("/")[-1]
        return f"{env}-{model}-seed{self.seed}"


# The default local setup: sized so that a 2-core laptop sees learning within minutes
# (docs/laptop-recipe.md explains every choice). Real Tinker runs use ``Config()`` as GEM does.
LAPTOP: dict[str, Any] = dict(
    model_name=TINY,  # 0.4M parameters, pretrained to play sloppily: RL has a skill to sharpen
    backend="local",
    learning_rate=2e-3,  # LoRA on a tiny model tolerates (and needs) a much larger step than on a 4B one
    max_tokens=8,  # "\boxed{7}<|im_end|>" is 4 tokens
    max_steps=100,  # about 2 minutes on a 2-core laptop
)

PRESETS: dict[str, dict[str, Any]] = {
    "gem": {},
    "laptop": LAPTOP,
    # SmolLM2-135M-Instruct learning sums by RL, scored on held-out sums (research/notes/smollm2.md): a
    # label-free format warm-up on its own answers, then REINFORCE with GRPO's group advantages
    # (research/experiments/smollm2_learning.py measures it over seeds)
    "smollm2": dict(
        LAPTOP,
        model_name=SMOLLM2,
        env_id=SUMS_TRAIN,  # 57 of the 121 sums of two numbers 0-10; the other 64 are held out
        eval_env_id=SUMS_TEST,
        eval_every=10,
        template="chat",  # the prompt format SmolLM2 was tuned on
        learning_rate=5e-4,
        max_tokens=16,
        num_env=64,
        batch_size=64,
        group_size=16,  # 4 problems a step, 16 answers each (groups of 8 collapsed: research/notes/smollm2.md)
        advantage="grpo",
        warmup_steps=4,  # 4 x 32 of its own answers, re-formatted
        warmup_batch_size=32,
        warmup_learning_rate=1e-3,
        warmup_data="own_answers",
        max_steps=60,
        max_minutes=30,  # a learner's time: 60 steps took 15 minutes of RL on a 2-core CPU; a slower one stops at 30
    ),
    # SmolLM2-135M-Instruct learning to use GEM's python tool on products it cannot do in its head,
    # scored on held-out products: a short label-free warm-up on its own code and what the tool printed
    # for it, then GRPO over whole two-turn episodes (write code, read its output, answer), the episode
    # as one conversation. At temperature 0.7 the sampler's logprobs are those of the sharpened
    # distribution, so train/kl_sample_train_* and train/logprob_diff_abs measure that, not rounding
    "smollm2-tool": dict(
        LAPTOP,
        model_name=SMOLLM2,
        env_id=PRODUCTS_TRAIN,
        eval_env_id=PRODUCTS_TEST,
        env_wrappers="python_tool_sandboxed",
        eval_every=10,
        template="chat_turns",
        temperature=0.7,  # its first turn held a Python block in 21 of 64 answers at 1.0, 47 at 0.5 (base)
        learning_rate=5e-4,
        max_tokens=48,
        num_env=64,
        batch_size=128,  # 64 two-turn episodes; while the model seldom calls the tool, two rounds of 64
        group_size=16,
        advantage="grpo",
        gamma=1.0,
        # one step of 16 of its own (code, report) pairs: two steps of 16 pairs took held-out success
        # from 0.00 to 0.28 before RL; training the report alone (tool_reports) stopped its tool calls
        warmup_steps=1,
        warmup_batch_size=32,
        warmup_learning_rate=1e-3,
        warmup_data="own_code",
        max_steps=100,
        max_minutes=30,  # a learner's time: 100 steps at 79-85 s each (a quiet 2-core AMD EPYC) take over 2 hours
    ),
    # SmolLM2-135M-Instruct learning GEM's GuessTheNumber-easy (1-10 in 4 turns) by RL, scored on 64
    # fixed games against GEM's random player on the same games (gemlab.evaluate.random_play: 0.34).
    # GEM's rewards as they are (a win 1, a guess without \boxed{} -0.1 and the game ends, the last
    # turn's guess scored by its distance); the game as one conversation, so each guess sees the
    # earlier hints; the warm-up shows the format with GEM's random player, no strategy
    "smollm2-guess": dict(
        LAPTOP,
        model_name=SMOLLM2,
        env_id=GUESS_EASY,
        eval_env_id=GUESS_EASY,
        env_wrappers="",  # each turn sends only the game's reply; chat_turns keeps the history
        template="chat_turns",
        learning_rate=5e-4,
        max_tokens=16,
        num_env=64,
        batch_size=128,  # transitions: about 40 games of up to 4 guesses
        group_size=16,  # 16 games with one secret number: GRPO compares ways of playing the same game
        advantage="grpo",
        gamma=0.9,  # read by ReBN's and raw returns' per-turn returns; GRPO gives each turn its game's total
        warmup_steps=4,
        warmup_batch_size=32,
        warmup_learning_rate=1e-3,
        warmup_data="scripted",
        eval_every=4,
        max_steps=100,
        max_minutes=30,  # a learner's time on a 2-core laptop (research/notes/game.md ran its seeds for 30 minutes)
    ),
}


def make_config(preset: str = "gem", **overrides: Any) -> Config:
    """A ``Config`` from a named preset (a key of ``PRESETS``: ``gem``, ``laptop``, ``smollm2``...) with keyword
    overrides."""
    if preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}. Known presets: {', '.join(PRESETS)}")
    for key in overrides:
        check_key(key)
    return Config(**{**PRESETS[preset], **{key: plain_number(value) for key, value in overrides.items()}})


# ----- the command line ------------------------------------------------------------------------
def type_matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` has the type a config field declares (``bool`` is not an ``int``)."""
    if typing.get_origin(annotation) in (typing.Union, pytypes.UnionType):
        return any(type_matches(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation in (int, float) and isinstance(value, bool):
        return False
    if annotation is float:
        return _number(value)
    if annotation is int:
        return isinstance(value, numbers.Integral)
    if typing.get_origin(annotation) is dict:
        return isinstance(value, dict)
    return isinstance(value, annotation) if isinstance(annotation, type) else True


def type_name(annotation: Any) -> str:
    """``an integer``, ``a number``, ``text or None``, ..."""
    if typing.get_origin(annotation) in (typing.Union, pytypes.UnionType):
        return " or ".join(type_name(arg) for arg in typing.get_args(annotation))
    names = {int: "an integer", float: "a number", str: "text", bool: "true or false", type(None): "None"}
    return names.get(annotation, "a mapping of names to numbers")


def check_key(key: str) -> None:
    """Refuse a key that is not a config field, suggesting the closest ones."""
    fields = list(chz.chz_fields(Config))
    if key in fields:
        return
    close = difflib.get_close_matches(key, fields + ["preset"], n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    raise ValueError(f"unknown key {key!r}{hint} (python -m gemlab.train --help lists every key)")


def parse_value(key: str, text: str, annotation: Any) -> Any:
    """The command-line text ``text`` as the type field ``key`` declares."""
    options = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, pytypes.UnionType)
        else (annotation,)
    )
    if type(None) in options and text in ("None", "none", "null"):
        return None
    if int in options and text.lstrip("+-").isdigit():
        return int(text)
    if float in options:
        try:
            return float(text)
        except ValueError:
            pass
    if bool in options and text.lower() in ("true", "false", "1", "0", "yes", "no"):
        return text.lower() in ("true", "1", "yes")
    if str in options:
        return text
    raise ValueError(f"{key} must be {type_name(annotation)}, got {text!r}")


# Fields renamed since runs were recorded: a saved config.json with the old name loads as the new one.
RENAMED_FIELDS = {"normalization": "advantage"}


def read_saved_config(path: str | Path) -> dict[str, Any]:
    """The one reader of saved configs: a run's ``config.json`` (or its folder) under today's field
    names (``RENAMED_FIELDS``), with the default of each field the run predates (added to gemlab
    after it started: it trained with the default). ``ValueError`` in one line naming the file when
    it cannot be read or is not a JSON object. Keys that are not config fields are kept."""
    file = Path(path)
    if file.is_dir():
        file = file / CONFIG_FILE
    try:
        saved = json.loads(file.read_text())
    except OSError as error:
        raise ValueError(f"{file} cannot be read ({error.strerror or error})") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{file} cannot be read (not JSON: {error})") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{file} is not a gemlab config (a JSON {type(saved).__name__}, not an object)")
    return {
        **chz.asdict(Config()),
        **{(RENAMED_FIELDS[key] if key in RENAMED_FIELDS else key): value for key, value in saved.items()},
    }


def load_saved_config(path: str) -> dict[str, Any]:
    """The saved config that ``config=PATH`` reruns: ``read_saved_config``, with keys that are not
    config fields refused (``Config`` cannot take them), in one line that says ``config=PATH``."""
    try:
        saved = read_saved_config(path)
    except ValueError as error:
        raise ValueError(f"config={path}: {error}") from None
    unknown = sorted(set(saved) - set(chz.chz_fields(Config)))
    if unknown:
        raise ValueError(f"config={path}: not a gemlab config.json (unknown keys {unknown})")
    return saved


def config_from_argv(argv: list[str]) -> Config:
    """Parse ``[preset=NAME | config=PATH] key=value ...`` (``loss_fn_config.NAME=value`` for the
    loss's settings). ``config=`` starts from a run's saved ``config.json`` (or its folder), so
    ``python -m gemlab.train config=RUN/config.json log_dir=/tmp/again`` reruns that run."""
    preset = "gem"
    saved: dict[str, Any] | None = None
    overrides: dict[str, Any] = {}
    fields = chz.chz_fields(Config)
    for arg in argv:
        key, sep, text = arg.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value, got {arg!r} (python -m gemlab.train --help lists every key)")
        if key == "preset":
            preset = text
            continue
        if key == "config":
            saved = load_saved_config(text)
            continue
        head, _, sub = key.partition(".")
        check_key(head)
        if head == "loss_fn_config" and sub:
            overrides.setdefault("loss_fn_config", {})[sub] = parse_value(key, text, float)
        elif sub:
            raise ValueError(f"{head} takes no sub-keys; write {head}=VALUE")
        else:
            overrides[head] = parse_value(key, text, fields[head].final_type)
    if saved is not None:
        if any(arg.startswith("preset=") for arg in argv):
            raise ValueError("give preset= or config=, not both (a saved config already holds every field)")
        return Config(**{**saved, **overrides})
    return make_config(preset, **overrides)


def help_text() -> str:
    """What ``python -m gemlab.train --help`` prints: usage, presets, every key with its default."""
    lines = [
        f"usage: python -m gemlab.train [preset={'|'.join(PRESETS)} | config=RUN/config.json] [key=value ...]",
        "",
        "Trains GEM's REINFORCE + ReBN loop; writes <log_dir>/<run_name>/ and resumes a run found there.",
        f"presets: gem (GEM's defaults), laptop ({', '.join(f'{k}={v}' for k, v in LAPTOP.items())}), "
        "smollm2 (SmolLM2-135M-Instruct on sums, scored on held-out sums: a warm-up on its own answers, then GRPO), "
        "smollm2-tool (SmolLM2 calling GEM's python tool on held-out 3-digit x 2-digit products), "
        "smollm2-guess (SmolLM2 playing GuessTheNumber-easy, the game as one conversation)",
        "",
        "keys (default):",
    ]
    for name, field in chz.chz_fields(Config).items():
        doc = f" {field._doc}." if field._doc else ""
        lines.append(f"  {f'{name}={field._default!r}':<44} {type_name(field.final_type)}.{doc}")
    lines.append(f"  {'loss_fn_config.NAME=NUMBER':<44} one of the loss's settings (see loss_fn).")
    return "\n".join(lines)
