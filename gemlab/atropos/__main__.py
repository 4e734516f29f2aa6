"""Command line: ``python -m gemlab.atropos [key=value ...]`` (``--help`` lists every key).

Registers with atroposlib's ``run-api`` (``start_api=true`` starts one), serves its weights on an
OpenAI/SGLang/vLLM-compatible endpoint for the environments, trains on every ``/batch`` until
``max_steps``, then writes the learning curve next to ``metrics.jsonl``. Bad input is one line
and exit status 2; Ctrl-C or SIGTERM finishes or rolls back the step in flight, saves a
checkpoint and prints how to resume (exit 130 or 143); a signal sent again meanwhile is only answered.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from gemlab.atropos.config import config_from_argv, help_text

# The trainer, PyTorch and the backends load once the keys are read: --help and a refused key answer without them.
if TYPE_CHECKING:
    from gemlab.atropos.trainer import AtroposTrainer


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Stopper:
    """The SIGINT/SIGTERM handler: the first signal cancels the run's task; one sent again (an impatient
    Ctrl-C), or once the run is finishing, is only answered, so saving and closing are never cut short."""

    def __init__(self, task: asyncio.Task | None) -> None:
        self.task, self.first, self.finishing, self.answered = task, "", False, False

    def __call__(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if not self.first and not self.finishing:
            self.first = name
            if self.task is not None:
                self.task.cancel()
        elif not self.answered:
            self.answered = True
            say(f"gemlab.atropos: {name}: still stopping, the run's files are being written; please wait")


async def main_async(argv: list[str]) -> int:
    try:
        config = config_from_argv(argv)
    except ValueError as error:
        say(f"gemlab.atropos: {error}")
        return 2
    from gemlab.atropos.api import ApiError, start_api, stop_api
    from gemlab.atropos.trainer import AtroposTrainer
    from gemlab.backend import BackendError, get_service_client, resolve_backend
    from gemlab.run_folder import RunFolder, os_reason

    try:
        local = resolve_backend(config.backend) == "local"
        root = RunFolder(config.log_dir, config.resolved_run_name).local_checkpoints
        service = get_service_client(config.backend, **({"root": root} if local else {}))
    except (ValueError, BackendError) as error:
        say(f"gemlab.atropos: {error}")
        return 2
    api_process = None
    if config.start_api:
        url = urlparse(config.api_url)
        try:
            api_process = await asyncio.to_thread(start_api, url.hostname or "127.0.0.1", url.port or 8000)
        except ApiError as error:
            say(f"gemlab.atropos: {error}")
            return 1
        say(f"gemlab.atropos: started run-api at {config.api_url} (process {api_process.pid})")
    trainer = AtroposTrainer(config, service, say=say)
    resume = "python -m gemlab.atropos " + " ".join(map(shlex.quote, argv))
    stopper = Stopper(asyncio.current_task())
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopper, signum)
    try:
        try:
            await trainer.open()
        except (ValueError, ApiError) as error:
            say(f"gemlab.atropos: {error}")
            return 2 if isinstance(error, ValueError) else 1
        assert trainer.server is not None
        tokenizer_dir = await asyncio.to_thread(trainer.tokenizer_folder)
        say(f"gemlab.atropos: run folder {trainer.run_dir}, step {trainer.step_index} of {config.max_steps}")
        say(
            f"gemlab.atropos: serving {config.served_model_name or config.model_name!r} at "
            f"{trainer.server.url}; start environments with "
            f"--env.rollout_server_url {config.api_url} --openai.base_url {trainer.server.url} "
            "--openai.server_type sglang "
            f"--openai.model_name {config.served_model_name or config.model_name} --openai.api_key "
            f"{config.serve_api_key or 'local'} "
            f"--openai.tokenizer_name {tokenizer_dir} --env.tokenizer_name {tokenizer_dir}"
        )
        await trainer.run(on_step=lambda m: say(_line(m)))
        stopper.finishing = True
    except asyncio.CancelledError:
        name = stopper.first or "SIGINT"
        say(f"gemlab.atropos: {name}: {await _stop(trainer, resume)}")
        return 143 if name == "SIGTERM" else 130
    except ApiError as error:
        stopper.finishing = True
        say(f"gemlab.atropos: step {trainer.step_index}: {error}; {await _stop(trainer, resume)}")
        return 1
    except Exception as error:  # noqa: BLE001  (the sampler, the disk, the backend: keep what is done, say how to go on)
        stopper.finishing = True
        reason = os_reason(error) if isinstance(error, OSError) else f"{type(error).__name__}: {error}"
        say(f"gemlab.atropos: step {trainer.step_index} failed ({reason}); {await _stop(trainer, resume)}")
        return 1
    finally:
        stopper.finishing = True
        if api_process is not None:
            await asyncio.to_thread(stop_api, api_process)
    await trainer.close()
    _plots(trainer)
    return 0


def _line(metrics: dict[str, float]) -> str:
    return (
        f"step {int(metrics['step'])}: reward {metrics['sampler/episode_return']:.3f}, "
        f"{int(metrics['sampler/num_episodes'])} sequences, "
        f"staleness max {metrics['async/staleness_max']:.0f}, refused "
        f"{int(metrics['atropos/groups_refused'])}, stale {int(metrics['atropos/groups_stale'])}, "
        f"|logprob gap| {metrics.get('train/logprob_diff_abs', float('nan')):.4f}, {metrics['time/step']:.1f} s"
    )


async def _stop(trainer: AtroposTrainer, resume: str) -> str:
    """Save a checkpoint if the state is consistent, close, and say how to resume."""
    last = trainer.folder.checkpoints[-1]["step"] if trainer.folder.checkpoints else 0
    done = f"stopped in the middle of an update; the checkpoint at step {last} is kept"
    if trainer.step_index == 0 and not trainer.mid_update:
        done = "stopped before the first step; nothing to save"
    elif trainer.training_client is not None and not trainer.mid_update:
        try:
            await asyncio.shield(trainer.save_checkpoint())
            done = f"stopped after step {trainer.step_index}, checkpoint saved"
        except Exception as error:  # noqa: BLE001  (the sampler, the disk, the backend: keep what is done, say how to go on)
            done = (
                f"the checkpoint could not be saved ({type(error).__name__}: {error}); the one at step {last} is kept"
            )
    await trainer.close()
    return f"{done}; resume with: {resume}"


def _plots(trainer: AtroposTrainer) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from gemlab import plots

    name = trainer.run_dir.name
    plots.save_figure(
        plots.plot_learning_curve(trainer.run_dir, smoothing=5, title=f"{name}: success rate"),
        trainer.run_dir / "learning_curve.png",
    )
    plots.save_figure(
        plots.plot_diagnostics(trainer.run_dir, smoothing=5, title=f"{name}: training diagnostics"),
        trainer.run_dir / "diagnostics.png",
    )
    say(f"gemlab.atropos: done, {len(trainer.history)} steps in {trainer.run_dir}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help", "help") for arg in args):
        print(help_text())
        return 0
    try:
        return asyncio.run(main_async(args))
    finally:  # the loop's handlers are gone: a late signal must not cut the exit short
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the local backend's worker threads may still hold a cancelled sample
