"""Command line: ``python -m gemlab.train [preset=laptop] key=value ...``.

Trains to ``max_steps`` (resuming if the run folder has a checkpoint), then writes the run's
learning curve and diagnostics as PNGs next to its ``metrics.jsonl``.
"""

from __future__ import annotations

import sys

import matplotlib

from gemlab.backend import BackendError
from gemlab.config import config_from_argv
from gemlab.training import Trainer


def main(argv: list[str] | None = None) -> int:
    matplotlib.use("Agg")
    from gemlab import plots

    try:
        trainer = Trainer(config_from_argv(sys.argv[1:] if argv is None else argv))
    except (ValueError, BackendError) as error:  # bad input: one clear line, no traceback
        print(f"gemlab.train: {error}", file=sys.stderr)
        return 2
    config = trainer.config
    loss = config.loss_fn + "".join(f" {k}={v}" for k, v in (config.loss_fn_config or {}).items())
    print(f"run folder: {trainer.run_dir} | loss: {loss}")
    trainer.run()
    trainer.close()
    curve = plots.save_figure(plots.plot_learning_curve(trainer.run_dir, smoothing=5), trainer.run_dir / "learning_curve.png")
    diagnostics = plots.plot_diagnostics(trainer.run_dir, smoothing=5, title=f"Training diagnostics ({config.loss_fn} loss)")
    plots.save_figure(diagnostics, trainer.run_dir / "diagnostics.png")
    last = trainer.history[-1]
    print(
        f"done: {len(trainer.history)} steps with the {config.loss_fn} loss, last success rate {last['sampler/success_rate']:.2f}, "
        f"last {config.loss_fn} loss (train/loss:sum) {last['train/loss:sum']:.3f}; learning curve: {curve}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
