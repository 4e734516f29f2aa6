"""GEM's REINFORCE + ReBN training loop, usable one step at a time or end to end.

Each step (GEM paper, Algorithm 1; GEM's Tinker example):
  1. snapshot the trainer's weights for the sampler,
  2. play ``num_env`` envs concurrently until ``batch_size`` transitions,
  3. per episode, discounted returns ``G_t = r_t + gamma * G_{t+1}``,
  4. normalize all returns in the batch (ReBN by default),
  5. subsample ``batch_size`` transitions and build one Datum each,
  6. ``forward_backward(..., "importance_sampling")`` then ``optim_step`` (Adam); ``loss_fn``
     picks another of Tinker's policy-gradient losses (``ppo``, ``cispo``, ``dro``), and
     ``num_minibatches`` > 1 splits the batch into that many updates (PPO-style).

``normalization="grpo"`` with ``group_size`` > 1 is GRPO instead of steps 3-4: envs play in groups
that share one problem, and every turn of an episode gets the episode's total reward normalized
within its group (trajectory-level, gamma 1, as GRPO treats a whole episode as one response).

The loop talks to Tinker's client interface only; ``gemlab.backend`` decides whether that is real
Tinker or the local backend.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Coroutine, TypeVar

import chz
import numpy as np
from tqdm.auto import tqdm

from gemlab.backend import get_service_client
from gemlab.config import Config, adam_params
from gemlab.datums import policy_gradient_datum
from gemlab.envs import check_env_id, make_envs, wrapper_names
from gemlab.metrics import policy_metrics, rollout_metrics
from gemlab.returns import discounted_returns, normalize
from gemlab.rollout import RolloutBatch, Transition, collect_batch, request_seed
from gemlab.templates import get_template

T = TypeVar("T")
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"


def prepare_transitions(
    batch: RolloutBatch, *, gamma: float, normalization: str, batch_size: int, rng: np.random.Generator
) -> tuple[list[Transition], list[float]]:
    """Steps 3-5: returns per episode, normalized over the batch, then subsampled to ``batch_size``."""
    transitions: list[Transition] = []
    returns: list[float] = []
    for episode in batch.episodes:
        transitions.extend(episode.transitions)
        returns.extend(discounted_returns([t.reward for t in episode.transitions], gamma))
    if normalization == "grpo":  # one advantage per episode, from its group, on every turn
        scores = normalize([e.total_reward for e in batch.episodes], "grpo", [e.group for e in batch.episodes])
        advantages = [score for episode, score in zip(batch.episodes, scores) for _ in episode.transitions]
    else:
        groups = [tuple(t.obs_tokens) for t in transitions] if normalization == "group" else None
        advantages = normalize(returns, normalization, groups)
    if len(transitions) > batch_size:
        keep = rng.choice(len(transitions), batch_size, replace=False)
        transitions = [transitions[i] for i in keep]
        advantages = [advantages[i] for i in keep]
    return transitions, advantages


class _LoopThread:
    """A private event loop on a daemon thread, so sync calls work in scripts and in Jupyter alike."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="gemlab-loop").start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            raise

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


class Trainer:
    """One training run. ``step()`` does one policy-gradient step and returns its metrics;
    ``run()`` goes to ``max_steps``. A run whose folder holds a checkpoint resumes from it."""

    def __init__(self, config: Config, *, service_client: Any = None, progress: bool = True) -> None:
        check_env_id(config.env_id)  # bad input fails here, before anything is created
        wrapper_names(config.env_wrappers)
        self.config = config
        self.template = get_template(config.template)
        self.progress = progress
        self.service_client = service_client if service_client is not None else get_service_client(config.backend)
        self._loop = _LoopThread()
        self.training_client = self._loop.run(
            self.service_client.create_lora_training_client_async(
                base_model=config.model_name, rank=config.lora_rank, seed=config.seed
            )
        )
        self.tokenizer = self.training_client.get_tokenizer()
        self.envs = make_envs(
            config.env_id,
            config.num_env,
            seed=config.seed,
            env_wrappers=config.env_wrappers,
            tokenizer=self.tokenizer,
            group_size=config.group_size,
        )
        self.run_dir = Path(config.log_dir) / config.resolved_run_name
        self.step_index = 0
        self.history: list[dict[str, float]] = []
        self.last_batch: RolloutBatch | None = None
        self._wandb = None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(json.dumps(chz.asdict(config), indent=2))
        self._resume()

    # ----- one step -----------------------------------------------------------------------
    async def astep(self) -> dict[str, float]:
        """One policy-gradient step (async form, for code that already runs an event loop)."""
        config, step = self.config, self.step_index
        if step == 0 and config.warmup_steps > 0 and not self.history:
            await self._warmup()
        start = time.time()
        saved = await (await self.training_client.save_weights_for_sampler_async(name=f"{step:06d}")).result_async()
        sampling_client = await self.service_client.create_sampling_client_async(model_path=saved.path)

        random.seed(request_seed(config.seed, step))  # GEM's games draw from the global random
        with tqdm(total=config.batch_size, desc=f"step {step} episodes", unit="transition", leave=False, disable=not self.progress) as bar:
            batch = await collect_batch(
                sampling_client,
                self.envs,
                tokenizer=self.tokenizer,
                template=self.template,
                min_transitions=config.batch_size,
                max_tokens=config.max_tokens,
                temperature=config.temperature,
                seed=request_seed(config.seed, step, 1),
                progress=bar,
                group_size=config.group_size,
            )
        self.last_batch = batch
        sample_time = time.time() - start

        rng = np.random.default_rng([config.seed, step])
        transitions, advantages = prepare_transitions(
            batch, gamma=config.gamma, normalization=config.normalization, batch_size=config.batch_size, rng=rng
        )
        datums = [policy_gradient_datum(t.obs_tokens, t.act_tokens, t.act_logprobs, a) for t, a in zip(transitions, advantages)]
        train_start = time.time()
        # ALGO LOGIC: one update on the whole batch, or (PPO-style) one per shuffled minibatch
        order = rng.permutation(len(datums)) if config.num_minibatches > 1 else np.arange(len(datums))
        minibatches = np.array_split(order, config.num_minibatches)
        outputs: list[Any] = [None] * len(datums)
        train: dict[str, float] = {}
        for minibatch in minibatches:
            backward = await self.training_client.forward_backward_async(
                [datums[i] for i in minibatch], config.loss_fn, loss_fn_config=config.loss_fn_config
            )
            optim = await self.training_client.optim_step_async(adam_params(config.learning_rate))
            result = await backward.result_async()
            await optim.result_async()
            for index, output in zip(minibatch, result.loss_fn_outputs):
                outputs[index] = output
            for key, value in result.metrics.items():  # summed over minibatches
                train[key] = train.get(key, 0.0) + float(value)

        metrics: dict[str, float] = {"step": float(step)}
        metrics.update(rollout_metrics(batch))
        metrics.update(policy_metrics(transitions, outputs))
        metrics.update({f"train/{k}": v for k, v in train.items()})
        metrics["train/num_transitions"] = float(len(transitions))
        metrics["time/sample"] = sample_time
        metrics["time/train"] = time.time() - train_start
        metrics["time/step"] = time.time() - start
        self.step_index = step + 1
        self._log(metrics)
        if config.save_every > 0 and self.step_index % config.save_every == 0:
            await self._save_checkpoint()
        return metrics

    def step(self) -> dict[str, float]:
        """One policy-gradient step; returns its metrics (also appended to ``metrics.jsonl``)."""
        return self._loop.run(self.astep())

    # ----- end to end ---------------------------------------------------------------------
    def run(self, max_steps: int | None = None) -> list[dict[str, float]]:
        """Train until ``max_steps`` (default: the config's), then save a final checkpoint."""
        last = max_steps if max_steps is not None else self.config.max_steps
        with tqdm(total=last, initial=self.step_index, desc="training", unit="step", disable=not self.progress) as bar:
            while self.step_index < last:
                metrics = self.step()
                bar.set_postfix(success=f"{metrics['sampler/success_rate']:.2f}", ret=f"{metrics['sampler/episode_return']:.2f}")
                bar.update(1)
        self.save_checkpoint()
        return self.history

    def save_checkpoint(self) -> str:
        """Save LoRA weights and optimizer state; the run resumes from the latest one."""
        return self._loop.run(self._save_checkpoint())

    def close(self) -> None:
        """Stop the trainer's event loop (and wandb, if used)."""
        if self._wandb is not None:
            self._wandb.finish()
        self._loop.close()

    # ----- internals ----------------------------------------------------------------------
    async def _warmup(self) -> None:
        from gemlab.warmup import warmup_async

        losses = await warmup_async(self.training_client, self.tokenizer, self.envs, self.template, self.config, progress=self.progress)
        with open(self.run_dir / "warmup.jsonl", "w") as f:
            for index, loss in enumerate(losses):
                f.write(json.dumps({"warmup_step": index, "loss": loss}) + "\n")

    async def _save_checkpoint(self) -> str:
        name = f"step{self.step_index:06d}"
        saved = await (await self.training_client.save_state_async(name)).result_async()
        with open(self.run_dir / CHECKPOINTS_FILE, "a") as f:
            f.write(json.dumps({"name": name, "step": self.step_index, "state_path": saved.path}) + "\n")
        return saved.path

    def _resume(self) -> None:
        checkpoints = self.run_dir / CHECKPOINTS_FILE
        if not checkpoints.exists():
            return
        lines = [json.loads(line) for line in checkpoints.read_text().splitlines() if line.strip()]
        if not lines:
            return
        last = lines[-1]
        self._loop.run(self._load(last["state_path"]))
        self.step_index = int(last["step"])
        metrics_file = self.run_dir / METRICS_FILE
        if metrics_file.exists():
            rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
            self.history = [row for row in rows if row["step"] < self.step_index]
            metrics_file.write_text("".join(json.dumps(row) + "\n" for row in self.history))

    async def _load(self, path: str) -> None:
        await (await self.training_client.load_state_with_optimizer_async(path)).result_async()

    def _log(self, metrics: dict[str, float]) -> None:
        self.history.append(metrics)
        with open(self.run_dir / METRICS_FILE, "a") as f:
            f.write(json.dumps(metrics) + "\n")
        if self.config.wandb_project:
            if self._wandb is None:
                import wandb

                self._wandb = wandb
                wandb.init(project=self.config.wandb_project, name=self.config.resolved_run_name, config=chz.asdict(self.config))
            self._wandb.log(metrics, step=int(metrics["step"]))
