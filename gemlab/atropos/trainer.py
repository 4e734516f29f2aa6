"""The trainer's loop: pull a batch from ``run-api``, train one importance-sampling step on it with
gemlab's own step (``gemlab.step.train_step``: advantages from ``gemlab.returns``, datums,
update, metrics), serve the new weights on the endpoint at once, log and checkpoint through the
run folder. ``AtroposTrainer`` holds the pieces; ``run`` goes to ``max_steps``.

A step is all-or-nothing as in ``gemlab.trainer.Trainer``: cancelled while it waits for a batch,
nothing has changed; once the update is sent, it finishes and is logged before the cancel goes on.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chz

from gemlab.atropos.api import ApiClient, wait_for
from gemlab.atropos.config import PLACE_FIELDS, AtroposConfig
from gemlab.atropos.groups import Converted, VersionBook, convert
from gemlab.config import CONFIG_FILE
from gemlab.episodes import RolloutBatch
from gemlab.openai_endpoint import BackgroundServer, Limits, SamplerSlot, create_app
from gemlab.openai_endpoint.guard import allowed_hosts_for
from gemlab.run_folder import RunFolder, config_changes, describe_changes
from gemlab.saved_runs import RunFolderError
from gemlab.step import StepResult, train_step


class BatchSampling:
    """Where a step's batch comes from: ``run-api``'s ``/batch``, checked and versioned
    (``groups.convert``). After each update the endpoint is handed the new weights."""

    def __init__(
        self,
        api: ApiClient,
        training_client: Any,
        slot: SamplerSlot,
        book: VersionBook,
        config: AtroposConfig,
        vocab_size: int,
        *,
        clock: float,
        say: Callable[[str], None],
    ) -> None:
        self.api, self.training_client, self.slot, self.book, self.config = api, training_client, slot, book, config
        self.vocab_size, self.clock, self.say = vocab_size, clock, say
        self.last = Converted()
        self._publish: Any = None  # the newest weights' sampling client, asked for after the update

    async def batch_for(self, step: int) -> tuple[RolloutBatch, dict[str, float]]:
        """The episodes of the next usable batch; refused and stale groups are counted, and a
        batch left with nothing to train is followed by the next one."""
        await self._served()
        start = time.time()
        total = Converted()
        while not total.episodes:
            groups = await wait_for(
                self.api, poll_seconds=self.config.poll_seconds, timeout=self.config.batch_timeout, say=self.say
            )
            got = convert(
                groups,
                step,
                self.book,
                max_staleness=self.config.max_staleness,
                max_sequences=self.config.batch_size,
                max_token_len=self.config.max_token_len,
                vocab_size=self.vocab_size,
            )
            for reason in got.reasons:
                self.say(f"gemlab.atropos: step {step}: a /batch item was refused: {reason}")
            total = Converted(
                total.episodes + got.episodes,
                total.groups + got.groups,
                total.refused + got.refused,
                total.stale + got.stale,
                total.unversioned + got.unversioned,
                total.sequences_dropped + got.sequences_dropped,
            )
        self.last = total
        batch = RolloutBatch(episodes=total.episodes, num_dropped=total.sequences_dropped)
        return batch, {"time/sample_start": start - self.clock, "time/sample_end": time.time() - self.clock}

    def weights_updated(self, version: int) -> None:
        """Ask for the new weights' sampling client now; the endpoint serves it as soon as it is ready."""
        self._publish = (self.training_client.save_weights_and_get_sampling_client(), version)

    async def _served(self) -> None:
        if self._publish is not None:
            future, version = self._publish
            self._publish = None
            self.slot.set(await future, version)

    async def close(self) -> None:
        """Serve the newest weights before the trainer goes."""
        await self._served()

    def metrics(self) -> dict[str, float]:
        """What the last batch left out, for the step's metrics row."""
        last = self.last
        return {
            "atropos/groups": float(last.groups),
            "atropos/groups_refused": float(last.refused),
            "atropos/groups_stale": float(last.stale),
            "atropos/groups_unversioned": float(last.unversioned),
            "atropos/api_registrations": float(self.api.registrations),
        }


def tokens_metrics(result: StepResult) -> dict[str, float]:
    """Tokens the environments' model wrote in the batch, and tokens the learner was given."""
    sampled = sum(len(t.act_tokens) for e in result.batch.episodes for t in e.transitions)
    trained = sum(len(t.obs_tokens) + len(t.act_tokens) - 1 for t in result.transitions)
    return {"tokens/sampled": float(sampled), "tokens/trained": float(trained)}


class AtroposTrainer:
    """The run folder, the training client, the endpoint and the ``run-api`` client of one run."""

    def __init__(self, config: AtroposConfig, service_client: Any, *, say: Callable[[str], None] = print) -> None:
        self.config, self.service_client, self.say = config, service_client, say
        self.train_config = config.train_config()
        self.folder = RunFolder(config.log_dir, config.resolved_run_name, config.keep_checkpoints)
        self.run_dir = self.folder.path
        self.history: list[dict[str, float]] = []
        self.step_index = 0
        self.training_client: Any = None
        self.server: BackgroundServer | None = None
        self.api: ApiClient | None = None
        self.sampling: BatchSampling | None = None
        self.clock = time.time()
        self.mid_update = False

    async def open(self) -> None:
        """Lock the folder, resume or start the LoRA, serve its weights, register with ``run-api``."""
        self.folder.open()
        try:
            changes = self.check_config()
            loop = asyncio.get_running_loop()

            async def restore(path: str) -> None:
                self.training_client = await self.service_client.create_training_client_from_state_with_optimizer(path)

            # on the folder's thread: a checkpoint that cannot load falls back to the one before
            def load(path: str) -> None:
                asyncio.run_coroutine_threadsafe(restore(path), loop).result()

            self.step_index, self.history = await asyncio.to_thread(self.folder.resume, load)
            # a new run from given weights, as cookbook's load_checkpoint_path
            if self.training_client is None and self.config.init_state:
                self.training_client = await self.start_from(self.config.init_state)
            if self.training_client is None:
                self.training_client = await self.service_client.create_lora_training_client(
                    base_model=self.config.model_name, rank=self.config.lora_rank, seed=self.config.seed
                )
        except BaseException:
            self.folder.abandon()
            raise
        self.folder.save_config(self.config, changes, self.step_index)  # type: ignore[arg-type]
        tokenizer = self.training_client.get_tokenizer()
        book = VersionBook()
        slot = SamplerSlot(await self.training_client.save_weights_and_get_sampling_client(), self.step_index)
        config = self.config
        limits = Limits(api_key=config.serve_api_key, allowed_hosts=allowed_hosts_for(config.serve_host, ()))
        app = create_app(slot, model_name=config.served_model_name or config.model_name, recorder=book, limits=limits)
        self.server = BackgroundServer(app, host=config.serve_host, port=config.serve_port)
        registration = {
            "wandb_group": "gemlab",
            "wandb_project": "gemlab",
            "batch_size": config.batch_size,
            "max_token_len": config.max_token_len,
            "checkpoint_dir": str(self.run_dir),
            "save_checkpoint_interval": config.save_every,
            "starting_step": self.step_index,
            "num_steps": config.max_steps,
        }
        self.api = ApiClient(config.api_url, registration, say=self.say)
        await self.api.register_when_up(poll_seconds=config.poll_seconds, timeout=config.batch_timeout)
        self.sampling = BatchSampling(
            self.api, self.training_client, slot, book, config, len(tokenizer), clock=self.clock, say=self.say
        )

    async def start_from(self, path: str) -> Any:
        """A training client on the saved weights at ``path`` (a fresh optimizer), for ``model_name`` only."""
        try:
            return await self.service_client.create_training_client_from_state(path, base_model=self.config.model_name)
        except FileNotFoundError as error:
            raise ValueError(f"init_state={path!r}: {error}") from None

    def tokenizer_folder(self) -> str:
        """A folder environments can load the tokenizer from (``AutoTokenizer.from_pretrained``):
        the model's own, or a copy saved in the run folder where the model has none (SmolLM2 from gguf)."""
        tokenizer = self.training_client.get_tokenizer()
        source = Path(getattr(tokenizer, "name_or_path", "") or ".")
        if (source / "tokenizer_config.json").is_file():
            return str(source)
        target = self.run_dir / "tokenizer"
        if not (target / "tokenizer_config.json").is_file():
            tokenizer.save_pretrained(target)
        return str(target)

    def check_config(self) -> dict[str, list[Any]]:
        """Compare with the run's saved ``config.json``; refuse a silent change of what is trained
        (where run-api and the endpoint live may change between restarts)."""
        path = self.run_dir / CONFIG_FILE
        if not path.exists():
            return {}
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise RunFolderError(
                f"{path} cannot be read ({type(error).__name__}); repair it or choose another run_name"
            ) from None
        ignored = set(PLACE_FIELDS) | {"max_steps", "log_dir", "run_name", "allow_config_change", "keep_checkpoints"}
        changes = {k: v for k, v in config_changes(saved, chz.asdict(self.config)).items() if k not in ignored}
        if changes and not self.config.allow_config_change:
            raise RunFolderError(
                f"run {self.run_dir} was started with a different config ({describe_changes(changes)}); to "
                "keep both, choose a new "
                "run_name; to continue this run with the new values, add allow_config_change=true"
            )
        return {key: list(pair) for key, pair in changes.items()}

    async def step(self) -> dict[str, float]:
        """One step: a batch from ``run-api``, gemlab's update, the new weights served, the row logged."""
        assert self.sampling is not None, "open() first"
        result = await train_step(
            self.training_client, self.sampling, self.train_config, self.step_index, clock=self.clock,
            on_update=self._update_sent, record=self._record,
        )
        return result.metrics

    def _update_sent(self) -> None:
        self.mid_update = True

    async def _record(self, result: StepResult) -> None:
        assert self.sampling is not None
        result.metrics.update(self.sampling.metrics())
        result.metrics.update(tokens_metrics(result))
        self.step_index += 1
        self.history.append(result.metrics)
        self.folder.log(result.metrics)
        self.mid_update = False
        if self.config.save_every > 0 and self.step_index % self.config.save_every == 0:
            await self.save_checkpoint()

    async def save_checkpoint(self) -> str:
        """LoRA weights and optimizer state at the current step (once per step)."""
        if self.folder.checkpoints and self.folder.checkpoints[-1]["step"] == self.step_index:
            return self.folder.checkpoints[-1]["state_path"]
        name = f"step{self.step_index:06d}"
        self.folder.will_save(name)
        saved = await self.training_client.save_state(name)
        self.folder.add_checkpoint(name, self.step_index, saved.path, self.history)
        return saved.path

    async def run(self, on_step: Callable[[dict[str, float]], None] | None = None) -> list[dict[str, float]]:
        """Steps until ``max_steps``, then a checkpoint."""
        while self.step_index < self.config.max_steps:
            metrics = await self.step()
            if on_step is not None:
                on_step(metrics)
        await self.save_checkpoint()
        return self.history

    async def close(self) -> None:
        """Stop serving, leave ``run-api``, unlock the folder."""
        if self.sampling is not None and not self.mid_update:
            await self.sampling.close()
        if self.api is not None:
            await self.api.close()
        if self.server is not None:
            self.server.stop()
        self.folder.close()
