"""Command line: ``python -m gemlab.train [preset=laptop] key=value ...``.

Trains to ``max_steps`` (resuming if the run folder has a checkpoint), then writes the run's
learning curve and diagnostics as PNGs next to its ``metrics.jsonl``. Bad input is one line and
exit status 2; Ctrl-C or SIGTERM finishes or rolls back the step in flight, saves a checkpoint
and prints how to resume (exit 130 or 143). A run with ``eval_every`` > 0 prints each score on its
evaluation set as a line with its 95% interval (the base model, after the warm-up, every
``eval_every`` steps), and the whole curve on one line at the end.
"""

from __future__ import annotations

import _thread
import errno
import os
import shlex
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Only the standard library at the top: --help and a refused argument answer before PyTorch, GEM and
# the local backend load (each is imported where the work starts), and running out of memory while
# they load is one line (gemlab.cli.run).
if TYPE_CHECKING:
    from gemlab.trainer import Trainer


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _interrupt(signum: int, frame: Any) -> None:
    from gemlab.trainer import Interrupted

    signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C stops waiting
    raise Interrupted(signal.Signals(signum).name)


def _redeliver_lost_interrupts(unraisable: Any) -> None:
    """Python cannot raise out of a finalizer: a Ctrl-C that lands while one runs (a ``weakref.finalize``
    or ``__del__`` the garbage collector called) is printed as "Exception ignored" and dropped, and the
    run would go on. Deliver it again a moment later, when the finalizer is done; other reports pass on."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)
        return
    signum = signal.SIGTERM if str(unraisable.exc_value) == "SIGTERM" else signal.SIGINT
    threading.Timer(0.01, _thread.interrupt_main, args=(signum,)).start()


def _silence_teardown() -> None:
    """After a Ctrl-C the process is leaving: objects the signal cut in half (an event loop caught in
    its constructor) may complain from ``__del__``; their tracebacks would bury the one line that matters."""
    sys.unraisablehook = lambda unraisable: None


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); returns the exit status. The process-wide hooks it sets
    while it trains (Ctrl-C and SIGTERM handlers, the unraisable hook, the warning format) are put back
    when it returns, so a notebook or a test that calls it keeps its own: a SIGTERM handler left behind
    would turn a later ``kill`` of that process into an exception in whatever code it reached."""
    formatwarning, unraisablehook = warnings.formatwarning, sys.unraisablehook
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    finally:
        warnings.formatwarning, sys.unraisablehook = formatwarning, unraisablehook
        if threading.current_thread() is threading.main_thread():  # only the main thread sets handlers
            for signum, handler in handlers.items():
                if handler is not None:  # None: set outside Python, cannot be put back from it
                    signal.signal(signum, handler)


def _main(args: list[str]) -> int:
    from gemlab.config import config_from_argv, help_text

    if any(arg in ("-h", "--help", "help") for arg in args):
        print(help_text())
        return 0
    warnings.formatwarning = lambda message, category, *rest: f"gemlab.train: warning: {message}\n"
    sys.unraisablehook = _redeliver_lost_interrupts
    resume = "python -m gemlab.train " + " ".join(map(shlex.quote, args))
    try:
        config = config_from_argv(args)
    except ValueError as error:  # bad input: one clear line, no traceback, no files
        print(f"gemlab.train: {error}", file=sys.stderr)
        return 2
    if _tinker_model_without_key(config):
        print(
            f"gemlab.train: {config.model_name} is a Tinker model: set TINKER_API_KEY for Tinker, or use "
            "preset=laptop to train here",
            file=sys.stderr,
        )
        return 2
    from gemlab.cli import address_space_short
    from gemlab.memory import run_need

    short = address_space_short(run_need(config.model_name))
    if short:
        print(f"gemlab.train: {short}", file=sys.stderr)
        return 1
    from gemlab.envs import check_env_id, wrapper_names  # GEM's registry, without PyTorch: 1 s of CPU, not 3

    try:  # as the Trainer checks them, before it loads the model
        for env_id in filter(None, (config.env_id, config.eval_env_id)):
            check_env_id(env_id)
        wrapper_names(config.env_wrappers)
    except ValueError as error:
        print(f"gemlab.train: {error}", file=sys.stderr)
        return 2
    from gemlab.backend import BackendError
    from gemlab.memory import FREE_MEMORY, is_out_of_memory, out_of_memory
    from gemlab.trainer import Trainer, TrainingDiverged  # PyTorch, GEM, the local backend: the work starts

    try:
        trainer = Trainer(config)
    except (ValueError, BackendError) as error:  # bad input: one clear line, no traceback, no files
        print(f"gemlab.train: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while the model loads: the Trainer removed what it had created
        _silence_teardown()
        print("\ngemlab.train: SIGINT while starting; nothing was trained or changed", file=sys.stderr)
        return 130
    except Exception as error:  # the machine, not the input (memory, disk, a package): what to do about it
        if is_out_of_memory(error):
            print(
                f"gemlab.train: {out_of_memory(config.model_name, 'while starting')}; nothing was trained; "
                f"{FREE_MEMORY}, then rerun: {resume}",
                file=sys.stderr,
            )
        else:
            print(f"gemlab.train: cannot start, nothing was trained: {failure(error)}", file=sys.stderr)
        return 1
    loss = config.loss_fn + "".join(f" {k}={v}" for k, v in (config.loss_fn_config or {}).items())
    print(f"run folder: {trainer.run_dir} | loss: {loss}")
    print(estimate(config, trainer.step_index))
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        trainer.run()
    except KeyboardInterrupt as interrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the checkpoint below must not be cut
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _silence_teardown()
        name = str(interrupt) or "SIGINT"
        print(f"\ngemlab.train: {name}: {_stop(trainer, resume)}", file=sys.stderr)
        return 143 if name == "SIGTERM" else 130
    except TrainingDiverged as error:
        trainer.close()
        print(f"gemlab.train: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # e.g. the sampler is down or the disk full: keep what is done, say how to go on
        where = "the SFT warm-up (before step 0)" if trainer.in_warmup else f"step {trainer.step_index}"
        if is_out_of_memory(error):
            print(
                f"gemlab.train: {out_of_memory(config.model_name, 'in ' + where)}; "
                f"{_stop(trainer, resume, out_of_memory=True)}",
                file=sys.stderr,
            )
        else:
            print(f"gemlab.train: {where} failed ({failure(error)}); {_stop(trainer, resume)}", file=sys.stderr)
        return 1
    trainer.close()
    try:
        return _plots(trainer)
    except KeyboardInterrupt:
        _silence_teardown()
        print(
            f"\ngemlab.train: SIGINT while drawing the plots; the run is complete in {trainer.run_dir}", file=sys.stderr
        )
        return 130


def estimate(config: Any, done: int) -> str:
    """The run's duration before it starts: the steps left times the calibrated laptop step
    (``gemlab.doctor.laptop_step_estimate``) where the run steps as the laptop preset does; else a
    promise of the estimate after the first step, which the Trainer prints at that step's pace."""
    from gemlab.doctor import laptop_step_estimate, minutes

    left = config.max_steps - done
    limit = f"; max_minutes={config.max_minutes:g} stops it sooner if need be" if config.max_minutes else ""
    calibrated = laptop_step_estimate(config)
    if calibrated is None:
        return f"estimated time: said after the first step, at its pace ({left} steps to go){limit}"
    step_s, where = calibrated
    return (
        f"estimated time: about {minutes(left * step_s)} ({left} steps x {step_s:.1f} s, {where}; python -m "
        f"gemlab.doctor times this machine){limit}"
    )


def _tinker_model_without_key(config: Any) -> bool:
    """GEM's Tinker model (``Config``'s default) with ``backend='auto'`` and no ``TINKER_API_KEY``:
    a bare ``python -m gemlab.train`` on a machine without a key, which would otherwise end in the
    local backend's "Unknown model" (``$GEMLAB_LOCAL_MODEL`` or ``backend=local`` say otherwise)."""
    from gemlab.model_names import QWEN3_4B_INSTRUCT

    stand_in = os.environ.get("GEMLAB_LOCAL_MODEL")
    return (
        config.backend == "auto"
        and config.model_name == QWEN3_4B_INSTRUCT
        and not os.environ.get("TINKER_API_KEY")
        and not stand_in
    )


def failure(error: BaseException) -> str:
    """An exception in one line: an ``OSError``'s reason and file, else its type and message."""
    if isinstance(error, OSError):
        from gemlab.run_folder import os_reason

        return os_reason(error)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _stop(trainer: Trainer, resume: str, out_of_memory: bool = False) -> str:
    """Save a checkpoint if the trainer's state is consistent, close it, and say what is kept and
    how to go on: resume from the newest checkpoint, or rerun from the start when there is none
    (after ``out_of_memory``, once memory is freed)."""
    from gemlab.memory import FREE_MEMORY, is_out_of_memory
    last = trainer.checkpoints[-1]["step"] if trainer.checkpoints else None
    kept = f"the checkpoint at step {last} is kept" if last is not None else "no checkpoint was saved"
    go_on = f"resume with: {resume}" if last is not None else f"rerun from the start with: {resume}"
    if trainer.in_warmup:
        done = f"stopped in the SFT warm-up, whose updates are not kept; {kept}"
    elif not trainer.consistent:
        done = f"stopped in the middle of an update; {kept}"
    else:
        try:
            trainer.save_checkpoint()
            done, go_on = f"stopped after step {trainer.step_index}, checkpoint saved", f"resume with: {resume}"
        except Exception as error:  # e.g. a full disk or no memory left: the last checkpoint still holds
            trainer.close()
            if is_out_of_memory(error):
                return f"the checkpoint could not be saved (out of memory); {kept}; {FREE_MEMORY}, then {go_on}"
            disk_full = isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)
            return (
                f"the checkpoint could not be saved ({failure(error)}); {kept}; "
                f"{'free disk space, then ' if disk_full else ''}{go_on}"
            )
    trainer.close()
    return f"{done}; {FREE_MEMORY + ', then ' if out_of_memory else ''}{go_on}"


def _plots(trainer: Trainer) -> int:
    import chz
    import matplotlib

    matplotlib.use("Agg")
    from gemlab import plots
    from gemlab.eval_curve import describe, eval_points, eval_set_name

    config, name = trainer.config, trainer.run_dir.name
    curve = plots.plot_learning_curve(trainer.run_dir, smoothing=5, title=f"{name}: success rate")
    plots.save_figure(curve, trainer.run_dir / "learning_curve.png")
    diagnostics = plots.plot_diagnostics(
        trainer.run_dir, smoothing=5, title=f"{name}: training diagnostics ({config.loss_fn} loss)"
    )
    plots.save_figure(diagnostics, trainer.run_dir / "diagnostics.png")
    loss = None if config.loss_fn == "importance_sampling" else config.loss_fn
    points = eval_points(trainer.history)
    if points:
        print(describe(eval_set_name(chz.asdict(config)), points))
    print(
        f"done: {summary(trainer.history, loss=loss)}; wrote {trainer.run_dir}/: "
        f"{', '.join(_contents(trainer.run_dir))}"
    )
    return 0


def summary(history: list[dict[str, float]], window: int = 10, loss: str | None = None) -> str:
    """First-vs-last success of a run's rollouts (its training problems): the means over its first and
    last ``window`` steps (fewer in a short run), which one noisy step cannot swing; ``loss`` names a
    loss other than GEM's importance sampling."""
    success = [row["sampler/success_rate"] for row in history]
    n = max(1, min(window, len(success) // 2))
    first, last = sum(success[:n]) / n, sum(success[-n:]) / n
    steps = "step" if n == 1 else f"{n} steps"
    with_loss = f" with the {loss} loss" if loss else ""
    return (
        f"{len(success)} steps{with_loss}, rollout success on training problems {first:.2f} over the first "
        f"{steps} -> {last:.2f} over the last {steps}"
    )


def _contents(run_dir: Path) -> list[str]:
    """What the run folder holds (folders with a slash and their file count), hidden files aside."""
    names = []
    for path in sorted(run_dir.iterdir(), key=lambda p: (p.suffix == ".png", p.name)):
        if path.name.startswith("."):
            continue
        files = sum(1 for inner in path.rglob("*") if inner.is_file()) if path.is_dir() else 0
        names.append(f"{path.name}/ ({files} files)" if path.is_dir() else path.name)
    return names


if __name__ == "__main__":
    from gemlab.cli import run

    code = run("gemlab.train", lambda: _main(sys.argv[1:]))  # the process ends after it: nothing to put back
    if code in (130, 143):
        # Interrupted: the checkpoint is saved and the folder unlocked, but a cancelled sampling batch
        # may still be running on a local-backend worker thread; ending the interpreter around it
        # can abort in C++ ("terminate called without an active exception"), so leave at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
