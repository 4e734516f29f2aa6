"""Make ``num_env`` GEM environments, wrapped by name, reproducibly from one seed.

GEM's example seeds each env from the clock; here every seed derives from ``seed``. GEM's game
envs draw from Python's global ``random``, so ``make_envs`` also seeds that (the rollout re-seeds
it once per step, which is what makes a resumed run replay the same games).
"""

from __future__ import annotations

import difflib
import importlib
import logging
import random
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

# gem's __init__ calls logging.basicConfig(level=INFO): a root handler that prints every library's
# INFO records (openai/httpx log one line per HTTP request). gemlab is where gem gets imported, so the
# root logger is put back as it was; whoever runs gemlab configures logging, not a library.
_root_handlers, _root_level = list(logging.getLogger().handlers), logging.getLogger().level
import gem  # noqa: E402
from gem.envs.registration import ENV_REGISTRY  # noqa: E402

from gemlab.env_variants import register_variants  # noqa: E402

logging.getLogger().handlers[:] = _root_handlers
logging.getLogger().setLevel(_root_level)

register_variants()

#: Wrappers a role of gemlab provides (name -> its module), imported on first use, which registers
#: them with GEM: the pipeline names them without importing the role, as gemlab/__init__ names its
#: lazy attributes.
ROLE_WRAPPERS = {"python_tool_sandboxed": "gemlab.tool_sandbox"}
#: What a wrapper needs checked before any work (name -> a function raising one line when the
#: wrapper cannot work here): gemlab.tool_sandbox adds the sandboxed python tool's preflight.
WRAPPER_CHECKS: dict[str, Callable[[], None]] = {}
#: One line each on what such a wrapper does on this machine (``python -m gemlab.doctor`` prints them).
WRAPPER_NOTES: dict[str, Callable[[], str]] = {}


def known_env_ids() -> list[str]:
    """Every env id registered with GEM (games, reasoning-gym, math, qa, code, ...)."""
    return sorted(ENV_REGISTRY)


def data_set_of(env_id: str) -> str | None:
    """The Hugging Face data set a registered env loads its questions from (``None`` for games)."""
    return ENV_REGISTRY[env_id].kwargs.get("dataset_name")


def has_local_copy(data_set: str) -> bool:
    """Whether the Hugging Face caches on this machine hold ``data_set`` (no network is used)."""
    from datasets import config as datasets_config
    from huggingface_hub import constants

    hub = Path(constants.HF_HUB_CACHE) / f"datasets--{data_set.replace('/', '--')}"
    prepared = Path(datasets_config.HF_DATASETS_CACHE) / data_set.replace("/", "___").lower()
    return hub.is_dir() or prepared.is_dir()


def check_env_id(env_id: str) -> None:
    """Fail before any work when ``env_id`` is not registered (naming the closest ids), or when it
    needs a data set this machine does not have."""
    if env_id in ENV_REGISTRY:
        data_set = data_set_of(env_id)
        if data_set and not has_local_copy(data_set):
            raise ValueError(
                f"env_id {env_id!r} loads the data set {data_set!r} from the Hugging Face hub and this machine has "
                "no copy of it; fetch it where there is network (datasets.load_dataset) or pick an env that needs "
                "none (game:* or rg:*)"
            )
        return
    close = difflib.get_close_matches(env_id, ENV_REGISTRY, n=5, cutoff=0.5)
    hint = f" Closest registered ids: {', '.join(close)}." if close else ""
    raise ValueError(f"Unknown GEM env id {env_id!r}.{hint} See gemlab.envs.known_env_ids() for all of them.")


def load_role_wrappers(names: Iterable[str] = ROLE_WRAPPERS) -> None:
    """Import the roles that provide the wrappers ``names`` (all of them by default), which registers them."""
    for name in names:
        if name in ROLE_WRAPPERS:
            importlib.import_module(ROLE_WRAPPERS[name])


def wrapper_names(env_wrappers: str) -> list[str]:
    """Split and check a comma-separated wrapper list such as ``"concat"`` or ``"python_tool,concat"``."""
    from gem.wrappers.wrapper_factory import WRAPPER_FACTORY

    names = [name.strip() for name in env_wrappers.split(",") if name.strip()]
    load_role_wrappers(names)
    unknown = [name for name in names if name not in WRAPPER_FACTORY]
    if unknown:
        raise ValueError(
            f"Unknown GEM wrapper(s) {', '.join(map(repr, unknown))}. Known: "
            f"{', '.join(dict.fromkeys([*WRAPPER_FACTORY, *ROLE_WRAPPERS]))}"
        )
    for name in dict.fromkeys(names):
        WRAPPER_CHECKS.get(name, lambda: None)()
    return names


def make_envs(
    env_id: str,
    num_env: int,
    *,
    seed: int = 0,
    env_wrappers: str = "concat",
    tokenizer: Any = None,
    group_size: int = 1,
) -> list[gem.Env]:
    """``num_env`` envs of ``env_id``, each wrapped by ``env_wrappers`` (in order).

    The first env's dataset, where it has one, is shared with the others so it loads once. With
    ``group_size`` > 1, consecutive envs form groups of identical copies (same seed), so that
    resetting a group with one seed gives all its members the same problem (GRPO's groups).
    """
    from gem.wrappers.wrapper_factory import TOKENIZER_REQUIRED, WRAPPER_FACTORY

    check_env_id(env_id)
    if num_env < 1:
        raise ValueError(f"num_env must be positive, got {num_env}")
    if group_size < 1 or num_env % group_size:
        raise ValueError(f"group_size must divide num_env ({num_env}), got {group_size}")
    # GEM's get_wrapper_fns, without its prints
    wrappers = [
        partial(WRAPPER_FACTORY[name], tokenizer=tokenizer)
        if name in TOKENIZER_REQUIRED and tokenizer is not None
        else WRAPPER_FACTORY[name]
        for name in wrapper_names(env_wrappers)
    ]
    random.seed(seed)
    envs = [gem.make(env_id, seed=seed, use_mp=False)]
    dataset = getattr(envs[0], "dataset", None)
    extra = {"dataset": dataset} if dataset is not None else {}
    for index in range(1, num_env):
        group = index // group_size
        envs.append(gem.make(env_id, seed=seed * 10_007 + group if group else seed, use_mp=False, **extra))
    wrapped = []
    for env in envs:
        for wrap in wrappers:
            env = wrap(env)
        wrapped.append(env)
    return wrapped
