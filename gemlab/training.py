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

With ``max_staleness = k > 0`` steps 1-2 run ahead, while earlier steps train
(``gemlab.async_rollout``): each batch is sampled by weights at most ``k`` steps old, every
transition records that version, and the loss's importance ratio corrects for the lag.

The loop talks to Tinker's client interface only; ``gemlab.backend`` decides whether that is real
Tinker or the local backend.

A run folder survives crashes, interrupts and a second process (``gemlab.run_folder``): it is
locked while a Trainer holds it; a step is all-or-nothing (an interrupt during sampling rolls it
back, one during the update lets it finish), so weights, optimizer, metrics and step counter
always agree; resume starts from the newest intact checkpoint and cuts the metrics back to it.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import shutil
import sys
import threading
import time
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Coroutine, TypeVar

import chz
import numpy as np
from tqdm.auto import tqdm

from gemlab import run_folder
from gemlab.async_rollout import AsyncRollouts, stamp_version, staleness_metrics
from gemlab.backend import get_service_client, resolve_backend
from gemlab.config import Config, adam_params
from gemlab.datums import policy_gradient_datum
from gemlab.envs import check_env_id, make_envs, wrapper_names
from gemlab.metrics import DROP_RATE_WARNING, policy_metrics, rollout_metrics
from gemlab.returns import discounted_returns, normalize
from gemlab.rollout import RolloutBatch, Transition, collect_batch, request_seed
from gemlab.run_folder import CHECKPOINTS_FILE, CONFIG_FILE, METRICS_FILE, RunFolderError
from gemlab.templates import get_template

T = TypeVar("T")


class TrainingDiverged(RuntimeError):
    """A step produced a NaN or infinite loss or gradient; nothing of it was logged or saved."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM; raised after the step in flight has finished or been rolled back."""


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
    """A private event loop on a daemon thread, so sync calls work in scripts and in Jupyter alike.

    Ctrl-C while waiting cancels the coroutine and waits until it has wound down (a step rolls
    back or finishes, see ``Trainer.astep``); a second Ctrl-C stops waiting and marks the state
    unknown (``abandoned``)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.abandoned = False
        threading.Thread(target=self.loop.run_forever, daemon=True, name="gemlab-loop").start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        finished = threading.Event()

        async def tracked() -> T:
            try:
                return await coroutine
            finally:
                finished.set()

        future: Future[T] = asyncio.run_coroutine_threadsafe(tracked(), self.loop)
        try:
            while True:  # short waits: Python runs signal handlers (Ctrl-C) between them
                try:
                    return future.result(timeout=0.1)
                except TimeoutError:
                    continue
        except KeyboardInterrupt:
            future.cancel()
            try:
                while not finished.wait(0.05):
                    pass
            except KeyboardInterrupt:
                self.abandoned = True
                raise
            raise

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


async def _finish(task: asyncio.Task) -> T:
    """Await ``task`` to its end even if the caller is cancelled meanwhile (then re-raise that)."""
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        task.result()  # the step's own error, if it had one, wins over the interrupt
        raise


class Trainer:
    """One training run. ``step()`` does one policy-gradient step and returns its metrics;
    ``run()`` goes to ``max_steps``. A run whose folder holds a checkpoint resumes from it."""

    def __init__(self, config: Config, *, service_client: Any = None, progress: bool = True) -> None:
        check_env_id(config.env_id)  # bad input fails here, before anything is created
        wrapper_names(config.env_wrappers)
        self.config = config
        self.template = get_template(config.template)
        self.progress = progress
        self.run_dir = run_folder.run_dir_for(config.log_dir, config.resolved_run_name)
        self.step_index = 0
        self.history: list[dict[str, float]] = []
        self.last_batch: RolloutBatch | None = None
        self.last_update: tuple[list[Transition], list[Any]] | None = None  # trained transitions, learner outputs
        self.checkpoints: list[dict[str, Any]] = []
        self._stop_requested = False
        self._warmed_up = False
        self._mid_update = False  # an update was sent but its step is not logged: state unknown
        self._rollouts: AsyncRollouts | None = None  # batches collected ahead (max_staleness > 0)
        self._clock = time.time()  # the timeline's zero: time/*_start and time/*_end count from here
        self._wandb = None
        self._lock = run_folder.RunLock(self.run_dir)
        created = next((p for p in reversed((self.run_dir, *self.run_dir.parents)) if not p.exists()), None)
        if service_client is None:
            service_client = self._default_service_client()  # a missing Tinker key fails before any file
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()  # refused while another process (or Trainer) holds the folder
        try:
            changes = self._check_saved_config()
            self.service_client = service_client
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
            self._resume()
        except BaseException:
            self._lock.release()
            if created is not None:  # bad input leaves no files: remove what this call made
                shutil.rmtree(created, ignore_errors=True)
            raise
        if changes:
            run_folder.append_row(self.run_dir / run_folder.CONFIG_CHANGES_FILE, {"step": self.step_index, "changes": changes})
        run_folder.atomic_write_text(self.run_dir / CONFIG_FILE, json.dumps(chz.asdict(config), indent=2))

    # ----- one step -----------------------------------------------------------------------
    async def astep(self) -> dict[str, float]:
        """One policy-gradient step (async form, for code that already runs an event loop).

        All or nothing: cancelled (Ctrl-C) while sampling, nothing has changed; once the update
        is sent, the step finishes, is logged and counted before the cancellation goes on."""
        self._check_usable()
        config, step = self.config, self.step_index
        if step == 0 and config.warmup_steps > 0 and not self.history and not self._warmed_up:
            await self._warmup()
        start = time.time()
        # ALGO LOGIC: 1-2. snapshot the weights, play the envs (ahead of the learner if max_staleness > 0)
        if config.max_staleness > 0:
            batch, timeline = await self._take_ahead(step)
        else:
            batch = await self.sample_batch(step)
            stamp_version(batch, step)
            timeline = {"time/sample_start": start - self._clock, "time/sample_end": time.time() - self._clock}
        sample_time = timeline["time/sample_end"] - timeline["time/sample_start"]
        self.last_batch = batch
        if not all(math.isfinite(x) for e in batch.episodes for t in e.transitions for x in t.act_logprobs):
            raise TrainingDiverged(self._diverged_message(step, "the sampler returned non-finite logprobs (the weights blew up)"))
        # ALGO LOGIC: 3-5. returns, normalization, subsampling, datums
        rng = np.random.default_rng([config.seed, step])
        transitions, advantages = prepare_transitions(
            batch, gamma=config.gamma, normalization=config.normalization, batch_size=config.batch_size, rng=rng
        )
        datums = [policy_gradient_datum(t.obs_tokens, t.act_tokens, t.act_logprobs, a) for t, a in zip(transitions, advantages)]
        # ALGO LOGIC: 6. one update on the whole batch, or (PPO-style) one per shuffled minibatch;
        # then log and checkpoint: from here on the step always completes
        timeline.update(staleness_metrics(transitions, step))
        order = rng.permutation(len(datums)) if config.num_minibatches > 1 else np.arange(len(datums))
        minibatches = [list(chunk) for chunk in np.array_split(order, config.num_minibatches)]
        update = asyncio.ensure_future(self._update(step, batch, transitions, datums, minibatches, start, sample_time, timeline))
        return await _finish(update)

    async def sample_batch(self, step: int) -> RolloutBatch:
        """Steps 1-2: a snapshot of the current weights plays the envs until ``batch_size`` transitions."""
        sampling_client = await self.training_client.save_weights_and_get_sampling_client_async()
        return await self._collect(step, sampling_client)

    async def _collect(self, index: int, sampling_client: Any) -> RolloutBatch:
        """Batch ``index`` (its seeds derive from the index): the envs played until ``batch_size`` transitions."""
        config = self.config
        random.seed(request_seed(config.seed, index))  # GEM's games draw from the global random
        with tqdm(total=config.batch_size, desc=f"step {index} episodes", unit="transition", leave=False, disable=not self.progress) as bar:
            return await collect_batch(
                sampling_client,
                self.envs,
                tokenizer=self.tokenizer,
                template=self.template,
                min_transitions=config.batch_size,
                max_tokens=config.max_tokens,
                temperature=config.temperature,
                seed=request_seed(config.seed, index, 1),
                progress=bar,
                group_size=config.group_size,
            )

    async def _take_ahead(self, step: int) -> tuple[RolloutBatch, dict[str, float]]:
        """The batch for ``step`` from the rollouts collected ahead (started on first use)."""
        if self._rollouts is None:
            self._rollouts = AsyncRollouts(self._collect, max_staleness=self.config.max_staleness, first_step=step)
            self._rollouts.publish(self.training_client.save_weights_and_get_sampling_client(), version=step)
        waited = time.time()
        ready, dropped = await self._rollouts.take(step)
        return ready.batch, {
            "time/sample_start": ready.started - self._clock,
            "time/sample_end": ready.finished - self._clock,
            "time/wait": time.time() - waited,
            "async/batches_dropped": float(dropped),
        }

    async def _stop_rollouts(self) -> None:
        if self._rollouts is not None:
            await self._rollouts.close()
            self._rollouts = None

    async def _update(
        self,
        step: int,
        batch: RolloutBatch,
        transitions: list[Transition],
        datums: list[Any],
        minibatches: list[list[int]],
        start: float,
        sample_time: float,
        timeline: dict[str, float],
    ) -> dict[str, float]:
        config = self.config
        train_start = time.time()
        outputs: list[Any] = [None] * len(datums)
        train: dict[str, list[float]] = {}  # the backend's metrics of every minibatch
        for number, minibatch in enumerate(minibatches, 1):
            backward = await self.training_client.forward_backward_async(
                [datums[i] for i in minibatch], config.loss_fn, loss_fn_config=config.loss_fn_config
            )
            self._mid_update = True  # from here until the step is logged, weights and metrics may disagree
            optim = await self.training_client.optim_step_async(adam_params(config.learning_rate))
            if self._rollouts is not None and number == len(minibatches):  # new weights go to the sampler at once
                self._rollouts.publish(self.training_client.save_weights_and_get_sampling_client(), version=step + 1)
            result = await backward.result_async()
            self._check_finite(step, result.metrics)
            try:
                optim_result = await optim.result_async()
            except ValueError as error:  # the local backend refuses a step that would make the weights non-finite
                raise TrainingDiverged(self._diverged_message(step, str(error))) from None
            self._check_finite(step, optim_result.metrics or {})
            for index, output in zip(minibatch, result.loss_fn_outputs):
                outputs[index] = output
            for key, value in {**result.metrics, **(optim_result.metrics or {})}.items():
                train.setdefault(key, []).append(float(value))

        self.last_update = (transitions, outputs)
        metrics: dict[str, float] = {"step": float(step)}
        metrics.update(rollout_metrics(batch))
        metrics.update(policy_metrics(transitions, outputs))
        # Tinker's metric names say how to combine them: "loss:sum" adds up, "grad_norm:mean" averages
        metrics.update({f"train/{k}": sum(v) if k.endswith(":sum") else float(np.mean(v)) for k, v in train.items()})
        metrics["train/num_transitions"] = float(len(transitions))
        if batch.drop_rate > DROP_RATE_WARNING:
            warnings.warn(
                f"step {step}: {batch.drop_rate:.0%} of episodes were dropped after sampling failures "
                f"({batch.errors[0]}); the episode metrics lean towards short games",
                stacklevel=2,
            )
        metrics["time/sample"] = sample_time
        metrics["time/train"] = time.time() - train_start
        metrics["time/step"] = time.time() - start
        metrics.update(timeline)
        metrics["time/train_start"] = train_start - self._clock
        metrics["time/train_end"] = time.time() - self._clock
        self.step_index = step + 1
        self._log(metrics)
        self._mid_update = False
        if config.save_every > 0 and self.step_index % config.save_every == 0:
            await self._save_checkpoint()
        return metrics

    def step(self) -> dict[str, float]:
        """One policy-gradient step; returns its metrics (also appended to ``metrics.jsonl``)."""
        return self._loop.run(self.astep())

    # ----- end to end ---------------------------------------------------------------------
    def run(self, max_steps: int | None = None) -> list[dict[str, float]]:
        """Train until ``max_steps`` (default: the config's) or ``request_stop()``, then save a checkpoint."""
        last = max_steps if max_steps is not None else self.config.max_steps
        self._stop_requested = False
        with tqdm(total=last, initial=min(self.step_index, last), desc="training", unit="step", disable=not self.progress) as bar:
            while self.step_index < last and not self._stop_requested:
                metrics = self.step()
                bar.set_postfix(success=f"{metrics['sampler/success_rate']:.2f}", ret=f"{metrics['sampler/episode_return']:.2f}")
                bar.update(1)
        self._loop.run(self._stop_rollouts())
        self.save_checkpoint()
        return self.history

    def request_stop(self) -> None:
        """Ask ``run()`` to stop after the step in flight (safe from another thread or a widget)."""
        self._stop_requested = True

    def save_checkpoint(self) -> str:
        """Save LoRA weights and optimizer state at the current step (once per step); the run resumes from the latest."""
        self._check_usable()
        return self._loop.run(self._save_checkpoint())

    def close(self) -> None:
        """Stop the trainer's event loop (and wandb, if used) and unlock the run folder."""
        if self._wandb is not None:
            self._wandb.finish()
        if self.consistent:
            self._loop.run(self._stop_rollouts())
        self._loop.close()
        self._lock.release()

    # ----- internals ----------------------------------------------------------------------
    def _default_service_client(self) -> Any:
        """Tinker, or the local backend with its checkpoints inside the run folder."""
        if resolve_backend(self.config.backend) == "local":
            return get_service_client("local", root=self.run_dir / run_folder.LOCAL_CHECKPOINTS_DIR)
        return get_service_client(self.config.backend)

    @property
    def consistent(self) -> bool:
        """Weights, optimizer, metrics and step counter agree (false after a failed or abandoned update)."""
        return not (self._mid_update or self._loop.abandoned)

    def _check_usable(self) -> None:
        if not self.consistent:
            raise RuntimeError(
                "this Trainer stopped in the middle of an update, so its weights may not match its metrics; "
                f"create a new Trainer for {self.run_dir} to resume from its last checkpoint"
            )

    def _check_finite(self, step: int, metrics: dict[str, float]) -> None:
        bad = [key for key, value in metrics.items() if not math.isfinite(float(value))]
        if bad:
            raise TrainingDiverged(self._diverged_message(step, ", ".join(f"{key} is {metrics[key]}" for key in bad)))

    def _diverged_message(self, step: int, what: str) -> str:
        last = self.checkpoints[-1]["step"] if self.checkpoints else 0
        return (
            f"step {step} diverged: {what} (learning_rate={self.config.learning_rate}); stopped before logging or "
            f"saving it. The run folder resumes from step {last}; lower learning_rate and use a new run_name "
            "(or allow_config_change=true)"
        )

    def warmup(self) -> None:
        """Run the SFT warm-up now (e.g. to evaluate after it), instead of at the first step."""
        if self.history or self._warmed_up:
            raise RuntimeError("The warm-up runs once, before the first step; this run is past it")
        self._loop.run(self._warmup())

    async def _warmup(self) -> None:
        from gemlab.warmup import warmup_async

        self._warmed_up = True
        losses = await warmup_async(self.training_client, self.tokenizer, self.envs, self.template, self.config, progress=self.progress)
        rows = [{"warmup_step": index, "loss": loss} for index, loss in enumerate(losses)]
        run_folder.atomic_write_text(self.run_dir / "warmup.jsonl", run_folder.rows_text(rows))

    async def _save_checkpoint(self) -> str:
        if self.checkpoints and self.checkpoints[-1]["step"] == self.step_index:
            return self.checkpoints[-1]["state_path"]  # already saved at this step
        name = f"step{self.step_index:06d}"
        saved = await (await self.training_client.save_state_async(name)).result_async()
        line = {"name": name, "step": self.step_index, "state_path": saved.path}
        run_folder.append_row(self.run_dir / CHECKPOINTS_FILE, line)
        self.checkpoints.append(line)
        return saved.path

    def _check_saved_config(self) -> dict[str, list[Any]]:
        """Compare with the run folder's config before anything is written; refuse a silent change."""
        path = self.run_dir / CONFIG_FILE
        if not path.exists():
            return {}
        try:
            saved = json.loads(path.read_text())
        except ValueError as error:
            raise RunFolderError(f"{path} is damaged ({error}); delete it to reuse this run folder with the new config") from None
        # a field the saved config lacks was added to gemlab after the run started: it had the default
        saved = {**chz.asdict(Config()), **saved}
        changes = run_folder.config_changes(saved, chz.asdict(self.config))
        if not changes:
            return {}
        described = run_folder.describe_changes(changes)
        fixed = sorted(set(changes) & run_folder.WEIGHT_FIELDS)
        if fixed:
            raise RunFolderError(
                f"run {self.run_dir} was trained with a different {' and '.join(fixed)} ({described}); its checkpoints "
                "cannot continue with it: choose a new run_name"
            )
        if not self.config.allow_config_change:
            raise RunFolderError(
                f"run {self.run_dir} was started with a different config ({described}); to keep both, choose a new "
                "run_name; to continue this run with the new values, add allow_config_change=true"
            )
        return {key: list(pair) for key, pair in changes.items()}

    def _resume(self) -> None:
        """Continue from the newest intact checkpoint; cut metrics and index back to it (atomically)."""
        run_folder.remove_staging_files(self.run_dir)
        metrics = run_folder.read_rows(self.run_dir / METRICS_FILE)
        index = run_folder.read_rows(self.run_dir / CHECKPOINTS_FILE)
        for problem in metrics.problems + index.problems:
            warnings.warn(problem, stacklevel=3)
        intact = run_folder.intact_steps(metrics.rows)
        for line in run_folder.resume_candidates(index.rows, intact):
            try:
                self._loop.run(self._load(line["state_path"]))
            except Exception as error:  # a deleted or truncated checkpoint: fall back to the one before
                warnings.warn(
                    f"checkpoint at step {line['step']} ({line['state_path']}) cannot be loaded ({str(error)[:200]}); "
                    "falling back to the one before",
                    stacklevel=3,
                )
                continue
            self.step_index = int(line["step"])
            break
        if self.step_index == 0 and (metrics.rows or index.rows):
            warnings.warn(f"no usable checkpoint in {self.run_dir}: starting again from step 0", stacklevel=3)
        if self.step_index > 0:
            print(f"resuming {self.run_dir.name} from step {self.step_index}", file=sys.stderr)
        self.history = metrics.rows[: self.step_index]
        self.checkpoints = run_folder.resume_candidates(index.rows, self.step_index)[::-1]
        run_folder.atomic_write_text(self.run_dir / METRICS_FILE, run_folder.rows_text(self.history))
        run_folder.atomic_write_text(self.run_dir / CHECKPOINTS_FILE, run_folder.rows_text(self.checkpoints))
        self._prune()

    def _prune(self) -> None:
        """Delete local checkpoint folders that no index line names (rolled back, or cut by a kill)."""
        from gemlab.local.checkpoints import folder_of

        root = self.run_dir / run_folder.LOCAL_CHECKPOINTS_DIR
        keep = {folder_of(line["state_path"], root) for line in self.checkpoints if line["state_path"].startswith("local://")}
        run_folder.prune_local_checkpoints(root, keep | {Path(line["state_path"]) for line in self.checkpoints})

    async def _load(self, path: str) -> None:
        await (await self.training_client.load_state_with_optimizer_async(path)).result_async()

    def _log(self, metrics: dict[str, float]) -> None:
        self.history.append(metrics)
        run_folder.append_row(self.run_dir / METRICS_FILE, metrics)
        if self.config.wandb_project:
            if self._wandb is None:
                import wandb

                self._wandb = wandb
                wandb.init(project=self.config.wandb_project, name=self.config.resolved_run_name, config=chz.asdict(self.config))
            self._wandb.log(metrics, step=int(metrics["step"]))
