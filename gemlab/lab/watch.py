"""Watch a saved policy play: load a run's last checkpoint and play one episode with it."""

from __future__ import annotations

from typing import Any

import chz

from gemlab.config import Config
from gemlab.envs import make_envs
from gemlab.episodes import Episode, Prompting, collect_episode
from gemlab.saved_runs import LOCAL_CHECKPOINTS_DIR, SavedRun
from gemlab.templates import get_template
from tinker_emulator.checkpoints import SCHEME, WEIGHTS_FILE, folder_of


def run_config(run: SavedRun) -> Config:
    """The run's ``Config``, rebuilt from its ``config.json`` (fields this version lacks are dropped)."""
    fields = {f.logical_name for f in chz.chz_fields(Config).values()}
    return Config(**{k: v for k, v in run.config.items() if k in fields})


def checkpoint_path(run: SavedRun) -> str:
    """The run's last checkpoint, as a path any client can load: a local checkpoint becomes its
    folder (inside the run folder, or under the local backend's default root for older runs)."""
    path = run.checkpoints[-1]["state_path"]
    if not path.startswith(SCHEME):
        return path  # a Tinker path or a folder already
    inside = folder_of(path, run.path / LOCAL_CHECKPOINTS_DIR)
    return str(inside if (inside / WEIGHTS_FILE).is_file() else folder_of(path))


async def play_saved_policy(run: SavedRun, service_client: Any, *, seed: int = 0) -> Episode:
    """One episode of ``run``'s env played by the policy in its last checkpoint."""
    if not run.checkpoints:
        raise ValueError(f"{run.name} has no checkpoint to play (precomputed runs keep only their metrics)")
    config = run_config(run)
    client = await service_client.create_training_client_from_state(checkpoint_path(run))
    saved = await client.save_weights_for_sampler(name=f"lab-watch-{run.name}-{seed}")
    sampler = await service_client.create_sampling_client(model_path=saved.path)
    tokenizer = client.get_tokenizer()
    env = make_envs(config.env_id, 1, seed=seed, env_wrappers=config.env_wrappers, tokenizer=tokenizer)[0]
    template = get_template(config.template)
    return await collect_episode(
        sampler, env, Prompting(tokenizer, template, config.max_tokens, config.temperature), seed=seed
    )
