"""``Trainer``: one run of GEM's REINFORCE + ReBN loop, one step at a time or end to end.

A step is ``gemlab.step.train_step`` (sample, prepare, update, metrics); the Trainer composes what
a run needs around it:

- **where sampling runs**, passed to the step: inline (``step.Inline``, GEM's synchronous loop), or
  ahead of the learner with ``max_staleness = k > 0`` (``gemlab.sampling_ahead``): each batch is
  then sampled by weights at most ``k`` steps old, every transition records that version, and the
  loss's importance ratio corrects for the lag;
- **a run folder** (``gemlab.run_folder.RunFolder``) that survives crashes, interrupts and a second
  process: locked while a Trainer holds it; a step is all-or-nothing (an interrupt during sampling
  rolls it back, one during the update lets it finish), so weights, optimizer, metrics and step
  counter always agree; resume starts from the newest intact checkpoint;
- **a fixed evaluation during the run** (``eval_every``): the held-out set of ``eval_env_id``,
  played after the step's update and logged in that step's row as ``eval/*``; a run the Trainer
  starts itself is also measured on the base model (``eval_base``) and after the warm-up, logged
  in step 0's row (``gemlab.eval_curve``); with ``progress`` each score is printed as a line;
- **an event loop of its own** on a daemon thread: ``step()`` and ``run()`` work in scripts and in
  Jupyter alike, and ``await trainer.astep()`` works from any other loop (the step still runs on
  the Trainer's, where its clients and queues live).

The loop talks to Tinker's client interface only; ``gemlab.backend`` decides whether that is real
Tinker or the local backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

import chz
from tqdm import tqdm

from gemlab.backend import get_service_client, resolve_backend, served_models
from gemlab.cli import duration
from gemlab.config import Config
from gemlab.envs import check_env_id, make_envs, wrapper_names
from gemlab.episodes import RolloutBatch, Transition
from gemlab.eval_curve import STAGES, Point, eval_metrics, eval_set_name, point_label
from gemlab.evaluate import EvalResult, evaluate_client
from gemlab.metrics import DROP_RATE_WARNING
from gemlab.run_folder import RunFolder
from gemlab.sampling_ahead import AheadSampler
from gemlab.step import Inline, NonFinite, Players, Sampling, StepResult, train_step
from gemlab.templates import get_template
from gemlab.warmup import warmup_async

T = TypeVar("T")


def check_wandb(project: str | None) -> None:
    """Refuse ``wandb_project`` up front when wandb is missing or not logged in (offline is fine)."""
    if not project:
        return
    try:
        import wandb  # optional: only runs that log to wandb need it installed
    except ImportError:
        raise ValueError(
            f"wandb_project={project!r} needs the wandb package: pip install wandb (or leave wandb_project unset)"
        ) from None
    if os.environ.get("WANDB_MODE") in ("offline", "disabled") or os.environ.get("WANDB_API_KEY"):
        return
    if not wandb.login(verify=False, prompt=False):  # reads the key wandb would use; no prompt, no network
        raise ValueError(
            f"wandb_project={project!r}: wandb is not logged in; run `wandb login`, set WANDB_API_KEY, or "
            "WANDB_MODE=offline"
        )


def check_context(service_client: Any, config: Config) -> None:
    """Refuse ``max_tokens`` beyond the model's context, when the backend lists the model."""
    try:
        models = served_models(service_client)
    except Exception:  # a backend that cannot say: the first sample will
        return
    limit = next(
        (m.max_context_length for m in models if m.model_name == config.model_name and m.max_context_length), None
    )
    if limit is not None and config.max_tokens > limit:
        raise ValueError(
            f"max_tokens={config.max_tokens} is more than {config.model_name}'s context of {limit} tokens; use "
            f"at most {limit}"
        )


class TrainingDiverged(RuntimeError):
    """A step produced a NaN or infinite loss or gradient; nothing of it was logged or saved."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM; raised after the step in flight has finished or been rolled back."""


def _settle(future: asyncio.Future[None]) -> None:
    """Mark ``future`` done unless it already is (a caller's wait, settled from another thread)."""
    if not future.done():
        future.set_result(None)


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

    async def run_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await ``coroutine`` on this loop from whatever loop the caller runs (or on this one).
        Cancelled meanwhile, it cancels the coroutine and waits until it has wound down."""
        caller = asyncio.get_running_loop()
        if caller is self.loop:
            return await coroutine
        finished = caller.create_future()

        async def tracked() -> T:
            try:
                return await coroutine
            finally:
                with contextlib.suppress(RuntimeError):  # a caller that stopped waiting may have closed its loop
                    caller.call_soon_threadsafe(_settle, finished)

        future: Future[T] = asyncio.run_coroutine_threadsafe(tracked(), self.loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            await asyncio.shield(finished)
            raise

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


#: The metric set to 1 in the row of the step after which ``max_minutes`` stopped ``run()``.
STOPPED_FOR_TIME = "time/stopped_by_max_minutes"
#: An evaluation's measured seconds, in the rows that hold one (after a step; of the base; after the warm-up).
EVAL_TIMES = ("time/eval", "time/eval_base", "time/eval_warmup")


class Trainer:
    """One training run. ``step()`` (or ``await astep()``) does one policy-gradient step and returns
    its metrics; ``run()`` goes to ``max_steps`` (or stops sooner for ``max_minutes``). A run whose
    folder holds a checkpoint resumes from it. ``with Trainer(config) as trainer:`` closes it at the end."""

    #: The clock ``max_minutes`` is judged by (a test gives it a fake one).
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self, config: Config, *, service_client: Any = None, progress: bool = True) -> None:
        check_env_id(config.env_id)  # bad input fails here, before anything is created
        if config.eval_env_id:
            check_env_id(config.eval_env_id)
        wrapper_names(config.env_wrappers)
        check_wandb(config.wandb_project)
        self.config = config
        self.template = get_template(config.template)
        self.progress = progress
        self.folder = RunFolder(config.log_dir, config.resolved_run_name, config.keep_checkpoints)
        self.run_dir = self.folder.path
        self.step_index = 0
        self.history: list[dict[str, float]] = []
        self.last_batch: RolloutBatch | None = None
        self._warmed_up = False
        self._warmed_up_by_caller = False  # ``warmup()`` called: the start is the caller's to measure
        # stage -> its eval/<stage>_* fields, until step 0's row is logged
        self._start_evals: dict[str, dict[str, float]] = {}
        self._eval_name = eval_set_name(chz.asdict(config))
        self.last_update: tuple[list[Transition], list[Any]] | None = None  # trained transitions, learner outputs
        self._stop_requested = False
        self._mid_update = False  # an update was sent but its step is not logged: state unknown
        # the evaluation the Trainer made of its current weights (eval_every), until a step or warm-up changes
        # them; weights changed outside the Trainer (training_client.optim_step) are not seen
        self.last_evaluation: EvalResult | None = None
        self._in_warmup = False  # the warm-up started and has not finished: its updates are not a checkpoint
        self._clock = time.time()  # the timeline's zero: time/*_start and time/*_end count from here
        self._wandb: Any = None  # the wandb module, imported on the first row logged to it
        self._closed = False
        self._budget_start: float | None = None  # run()'s start on ``clock``, while it runs with max_minutes
        self._run_last = config.max_steps  # the step run() goes to
        self._step_times: list[float] = []  # time/step of each step run() has taken
        #: Why ``run()`` stopped before its last step for ``max_minutes`` (None: it did not).
        self.stopped_for_time: str | None = None
        if service_client is None:
            service_client = self._default_service_client()  # a missing Tinker key fails before any file
        check_context(service_client, config)
        self.folder.open()  # refused while another process (or Trainer) holds the folder
        try:
            changes = self.folder.check_config(config)
            self.service_client = service_client
            self._loop = _LoopThread()

            self.training_client: Any = None
            # the newest intact checkpoint, else a fresh LoRA (SDK futures, awaited on the trainer's loop)
            self.step_index, self.history = self.folder.resume(lambda path: self._loop.run(self._resume_from(path)))
            if self.training_client is None:
                self.training_client = self._loop.run(self._fresh_client())
            self.tokenizer = self.training_client.get_tokenizer()
            self.envs = make_envs(
                config.env_id,
                config.num_env,
                seed=config.seed,
                env_wrappers=config.env_wrappers,
                tokenizer=self.tokenizer,
                group_size=config.group_size,
            )
        except BaseException:
            self.folder.abandon()  # bad input leaves no files: remove what this call made
            raise
        self.folder.save_config(config, changes, self.step_index)
        players = Players(config, self.envs, self.tokenizer, self.template, progress)
        if config.max_staleness > 0:
            self.sampler: Sampling = AheadSampler(
                self.training_client, players, self._clock, config.max_staleness, config.stale_batches
            )
        else:
            self.sampler = Inline(self.training_client, players, self._clock)

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def checkpoints(self) -> list[dict[str, Any]]:
        """The run's saved checkpoints, oldest first: name, step and state_path."""
        return self.folder.checkpoints

    # ----- one step -----------------------------------------------------------------------
    async def astep(self) -> dict[str, float]:
        """One policy-gradient step, awaited from any event loop (Jupyter's too); see ``step``."""
        self._check_usable()
        return await self._loop.run_async(self._step())

    def step(self) -> dict[str, float]:
        """One policy-gradient step; returns its metrics (also appended to ``metrics.jsonl``).

        All or nothing: interrupted (Ctrl-C) while sampling, nothing has changed; once the update
        is sent, the step finishes, is logged and counted before the interrupt goes on."""
        self._check_usable()
        return self._loop.run(self._step())

    async def _step(self) -> dict[str, float]:
        """The step on the Trainer's own loop (``train_step``), logged and checkpointed by the run folder."""
        self._check_usable()
        step = self.step_index
        try:
            if step == 0 and not self.history:
                await self._start()
            result = await train_step(
                self.training_client,
                self.sampler,
                self.config,
                step,
                clock=self._clock,
                on_update=self._update_sent,
                record=self._record,
            )
            return result.metrics
        except NonFinite as error:
            last = self.checkpoints[-1]["step"] if self.checkpoints else 0
            raise TrainingDiverged(
                f"step {step} diverged: {error} (learning_rate={self.config.learning_rate}); stopped before logging or "
                f"saving it. The run folder resumes from step {last}; lower learning_rate and use a new run_name "
                "(or allow_config_change=true)"
            ) from None

    def _update_sent(self) -> None:
        self._mid_update = True  # from here until the step is logged, weights and metrics may disagree
        self.last_evaluation = None  # the weights change

    async def _record(self, result: StepResult) -> None:
        """Log a finished step's metrics, then checkpoint if due."""
        self.last_batch = result.batch
        self.last_update = (result.transitions, result.outputs)
        batch = result.batch
        if batch.drop_rate > DROP_RATE_WARNING:
            warnings.warn(
                f"step {self.step_index}: {batch.drop_rate:.0%} of episodes were dropped after sampling failures "
                f"({batch.errors[0]}); the episode metrics lean towards short games",
                stacklevel=2,
            )
        if self.step_index == 0:
            for fields in self._start_evals.values():
                result.metrics.update(fields)
        evaluate = self.config.eval_every > 0 and (self.step_index + 1) % self.config.eval_every == 0
        if evaluate:  # the weights after this step
            result.metrics.update(await self._evaluate())
        self._step_times.append(float(result.metrics.get("time/step", 0.0)))
        self.stopped_for_time = self._out_of_time(result.metrics)
        if self.stopped_for_time:
            if self.config.eval_every > 0 and not evaluate:  # the final evaluation, its time kept for it
                result.metrics.update(await self._evaluate())
            result.metrics[STOPPED_FOR_TIME] = 1.0
        self.step_index += 1
        self._log(result.metrics)
        self._mid_update = False
        if self.config.save_every > 0 and self.step_index % self.config.save_every == 0:
            await self._save_checkpoint()

    def run_on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the Trainer's own event loop, where its clients live (e.g. an
        evaluation that samples with ``training_client``'s current weights)."""
        self._check_usable()
        return self._loop.run(coroutine)

    # ----- end to end ---------------------------------------------------------------------
    def run(self, max_steps: int | None = None) -> list[dict[str, float]]:
        """Train until ``max_steps`` (default: the config's) or ``request_stop()``, then save a checkpoint."""
        self._check_usable()
        last = max_steps if max_steps is not None else self.config.max_steps
        self._stop_requested = False
        self._run_last, self._step_times, self.stopped_for_time = last, [], None
        self._budget_start = self.clock() if self.config.max_minutes else None
        bar = tqdm(
            total=last,
            initial=min(self.step_index, last),
            desc="training",
            unit="step",
            disable=not self.progress,
            file=sys.stdout,
        )
        try:
            with bar:  # a text bar: a widget bar would flicker JupyterLab's kernel status to Idle
                while self.step_index < last and not self._stop_requested and not self.stopped_for_time:
                    metrics = self.step()
                    bar.set_postfix(
                        train_success=f"{metrics['sampler/success_rate']:.2f}",
                        ret=f"{metrics['sampler/episode_return']:.2f}",
                    )
                    bar.update(1)
                    if len(self._step_times) == 1 and self.step_index < last and self.progress:
                        tqdm.write(self._pace(last), file=sys.stdout)
        finally:
            self._budget_start = None
        if self.stopped_for_time and self.progress:
            tqdm.write(self.stopped_for_time, file=sys.stdout)
        self._loop.run(self.sampler.close())
        self.save_checkpoint()
        return self.history

    def _pace(self, last: int) -> str:
        """How long the steps up to ``last`` take at the pace of the steps ``run()`` measured (at least
        one), and the evaluations among them at the newest one's, in one line."""
        left = last - self.step_index
        step_s = statistics.mean(self._step_times)
        evals = sum(
            1
            for step in range(self.step_index + 1, last + 1)
            if self.config.eval_every > 0 and step % self.config.eval_every == 0
        )
        eval_s = self._evaluation_s({}) if evals else 0.0
        total = left * step_s + evals * eval_s
        also = f" and {evals} evaluation(s) x {eval_s:.0f} s" if evals else ""
        limit = (
            f"; max_minutes={self.config.max_minutes:g} stops it sooner"
            if self.config.max_minutes and total > self.config.max_minutes * 60
            else ""
        )
        return (
            f"about {duration(total)} to go at this step's pace ({left} step{'s' * (left != 1)} x {step_s:.1f} "
            f"s{also}){limit}"
        )

    def _evaluation_s(self, metrics: dict[str, float]) -> float:
        """The newest measured evaluation's seconds: in ``metrics``, else the run's rows, else 0."""
        for row in [metrics, *reversed(self.history), *self._start_evals.values()]:
            for key in EVAL_TIMES:
                if key in row:
                    return float(row[key])
        return 0.0

    def _out_of_time(self, metrics: dict[str, float]) -> str | None:
        """With ``max_minutes``, after a step (``metrics``, not yet logged): why ``run()`` stops here, when the
        next step plus the final evaluation (``eval_every`` > 0) would not fit in what is left, judged from
        the mean ``time/step`` of the steps ``run()`` took and the newest evaluation's time; else None."""
        if self._budget_start is None or self.config.max_minutes is None:
            return None
        if self.step_index + 1 >= self._run_last:
            return None  # the last step: the run ends here anyway
        used = self.clock() - self._budget_start
        step_s = statistics.mean(self._step_times)
        eval_s = self._evaluation_s(metrics) if self.config.eval_every > 0 else 0.0
        if used + step_s + eval_s <= self.config.max_minutes * 60:
            return None
        evaluation = f" and the final evaluation about {eval_s:.0f} s" if self.config.eval_every > 0 else ""
        return (
            f"max_minutes={self.config.max_minutes:g}: stopped after {self.step_index + 1} of {self._run_last} steps, "
            f"{used / 60:.1f} minutes used (the next step takes about {step_s:.0f} s{evaluation}); run it "
            "again to resume"
        )

    def request_stop(self) -> None:
        """Ask ``run()`` to stop after the step in flight (safe from another thread or a widget)."""
        self._stop_requested = True

    def save_checkpoint(self) -> str:
        """Save LoRA weights and optimizer state at the current step (once per step); the run resumes from the
        latest."""
        self._check_usable()
        return self._loop.run(self._save_checkpoint())

    async def asave_checkpoint(self) -> str:
        """``save_checkpoint``, awaited from any event loop."""
        self._check_usable()
        return await self._loop.run_async(self._save_checkpoint())

    def close(self) -> None:
        """Stop the trainer's event loop (and wandb, if used) and unlock the run folder."""
        if self._closed:
            return
        self._closed = True
        if self._wandb is not None:
            self._wandb.finish()
        if self.consistent:
            self._loop.run(self.sampler.close())
        self._loop.close()
        self.folder.close()

    # ----- internals ----------------------------------------------------------------------
    def _default_service_client(self) -> Any:
        """Tinker, or the local backend with its checkpoints inside the run folder."""
        if resolve_backend(self.config.backend) == "local":
            return get_service_client("local", root=self.folder.local_checkpoints)
        return get_service_client(self.config.backend)

    @property
    def consistent(self) -> bool:
        """Weights, optimizer, metrics and step counter agree (false after a failed or abandoned
        update, or a warm-up that did not finish)."""
        return not (self._mid_update or self._in_warmup or self._loop.abandoned)

    @property
    def in_warmup(self) -> bool:
        """The SFT warm-up started and did not finish (it failed or was interrupted)."""
        return self._in_warmup

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError(
                f"this Trainer is closed; create a new Trainer for {self.run_dir} to go on from its last checkpoint"
            )
        if not self.consistent:
            where = "its SFT warm-up" if self._in_warmup else "an update"
            raise RuntimeError(
                f"this Trainer stopped in the middle of {where}, so its weights may not match its metrics; "
                f"create a new Trainer for {self.run_dir} to resume from its last checkpoint"
            )

    def warmup(self, progress: Any = None) -> list[float]:
        """Run the SFT warm-up now (e.g. to evaluate the model after it) instead of at the first step;
        returns its mean loss per answer token at each step. ``progress``: a tqdm bar to advance by
        one a step (a notebook's text bar); by default the Trainer's own bar when ``progress=True``.
        A warm-up run this way is the caller's to measure: ``evaluate_start("base")`` before it and
        ``evaluate_start("warmup")`` after it log what the Trainer's own start would."""
        self._check_usable()
        if self.history or self._warmed_up:
            raise RuntimeError("the warm-up runs once, before the first step; this run is past it")
        self._warmed_up_by_caller = True
        return self._loop.run(self._warmup(progress))

    def evaluate_start(self, stage: str) -> EvalResult:
        """Play the evaluation set with the current weights as the run's ``stage`` point: ``"base"``
        (before the warm-up) or ``"warmup"`` (after it); logged in step 0's metrics row
        (``eval/<stage>_*``) and printed when the Trainer shows progress. A run the Trainer starts
        itself measures both on its own (``eval_every`` > 0); call this around your own ``warmup()``."""
        self._check_usable()
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(map(repr, STAGES))}; got {stage!r}")
        if self.history:
            raise RuntimeError("the start is logged in step 0's row; this run is past it")
        return self._loop.run(self._evaluate_start(stage))

    async def _warmup(self, progress: Any = None) -> list[float]:
        self._warmed_up = self._in_warmup = True
        self.last_evaluation = None
        bar = self.progress if progress is None else progress
        losses = await warmup_async(
            self.training_client, self.tokenizer, self.envs, self.template, self.config, progress=bar
        )
        self.folder.log_warmup(losses)
        self._in_warmup = False
        return losses

    async def _start(self) -> None:
        """The start of a run the Trainer begins itself, before its first step: with ``eval_every``
        > 0 the evaluation set is played by the base model (``eval_base``), then the warm-up runs
        (``warmup_steps`` > 0) and the set is played again. Each once: a first step tried again
        after an interrupt skips what is done. A failed evaluation is a warning, never a lost run."""
        measure = self.config.eval_every > 0 and not self._warmed_up_by_caller
        if measure and self.config.eval_base and not self._warmed_up and "base" not in self._start_evals:
            await self._evaluate_start_or_warn("base")
        if self.config.warmup_steps > 0 and not self._warmed_up:
            await self._warmup()
        if measure and self._warmed_up and "warmup" not in self._start_evals:
            await self._evaluate_start_or_warn("warmup")

    async def _evaluate_start_or_warn(self, stage: str) -> None:
        try:
            await self._evaluate_start(stage)
        except Exception as error:  # an env or sampler error in the evaluation must not cost the run
            warnings.warn(
                f"the {STAGES[stage]} evaluation failed ({error!r}); step 0 is logged without eval/{stage}_*",
                stacklevel=2,
            )

    async def _evaluate_start(self, stage: str) -> EvalResult:
        start = time.time()
        result = await self._play_evaluation(stage, 0)
        self._start_evals[stage] = {**eval_metrics(result, stage), f"time/eval_{stage}": time.time() - start}
        return result

    async def _evaluate(self) -> dict[str, float]:
        """``eval/*`` of the current weights on the config's evaluation set; a failed evaluation is
        a warning, never a lost step (the step's row is logged without it)."""
        start = time.time()
        try:
            result = await self._play_evaluation("step", self.step_index + 1)
        except Exception as error:  # an env or sampler error in the evaluation must not cost the update
            warnings.warn(
                f"step {self.step_index}: the evaluation failed ({error!r}); the step is logged without eval/*",
                stacklevel=2,
            )
            return {}
        return {**eval_metrics(result), "time/eval": time.time() - start}

    async def _play_evaluation(self, stage: str, steps: int) -> EvalResult:
        """The evaluation set played with the current weights (``steps`` taken), under a bar of its
        own and then printed as one line when the Trainer shows progress."""
        label = f"evaluation: {point_label(stage, steps)}"
        bar = tqdm(
            total=self.config.eval_games,
            desc=label,
            unit="episode",
            leave=False,
            disable=not self.progress,
            file=sys.stdout,
        )
        with bar:
            result = await evaluate_client(
                self.training_client, self.tokenizer, self.template, self.config, progress=bar
            )
        self.last_evaluation = result
        if self.progress:
            tqdm.write(f"{self._eval_name}: {Point.of(result, stage, steps).describe()}", file=sys.stdout)
        return result

    async def _save_checkpoint(self) -> str:
        if self.checkpoints and self.checkpoints[-1]["step"] == self.step_index:
            return self.checkpoints[-1]["state_path"]  # already saved at this step
        name = f"step{self.step_index:06d}"
        self.folder.will_save(name)  # recorded first: a save cut by a kill is known to be gemlab's
        saved = await self.training_client.save_state(name)
        self.folder.add_checkpoint(name, self.step_index, saved.path, self.history)
        return saved.path

    async def _fresh_client(self) -> Any:
        config = self.config
        return await self.service_client.create_lora_training_client(
            base_model=config.model_name, rank=config.lora_rank, seed=config.seed
        )

    async def _resume_from(self, path: str) -> None:
        """A training client with the LoRA weights and optimizer state saved at ``path``."""
        self.training_client = await self.service_client.create_training_client_from_state_with_optimizer(path)

    def _log(self, metrics: dict[str, float]) -> None:
        self.history.append(metrics)
        self.folder.log(metrics)
        if self.config.wandb_project:
            if self._wandb is None:
                import wandb  # optional: only runs that log to wandb need it installed

                self._wandb = wandb
                wandb.init(
                    project=self.config.wandb_project,
                    name=self.config.resolved_run_name,
                    config=chz.asdict(self.config),
                )
            self._wandb.log(metrics, step=int(metrics["step"]))
