"""Does SmolLM2-135M-Instruct learn in gemlab? Fixed-set success at base, after the SFT warm-up and
after RL, per seed, with the run's config and metrics recorded (no checkpoints).

    python benchmarks/smollm2_learning.py --seeds 0 1 2 --minutes 20 --out data/smollm2
    python benchmarks/smollm2_learning.py --probe template=chat          # base and warm-up only
    python benchmarks/smollm2_learning.py --report data/smollm2-seeds --figure docs/figures/smollm2-seeds.png

Each seed: a ``preset=smollm2`` Trainer (``key=value`` arguments override it), the fixed evaluation
set of ``gemlab.evaluate`` before anything, after ``Trainer.warmup()``, and after RL steps until
``max_steps`` or ``--minutes`` of wall time (warm-up included) run out. Writes
``OUT/seed<N>/{config.json, metrics.jsonl, warmup.jsonl, eval.json}`` and prints one line per
evaluation. Not a test: it takes minutes to an hour.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from gemlab.config import config_from_argv
from gemlab.evaluate import NUM_GAMES, evaluate_trainer
from gemlab.run_folder import export_run
from gemlab.trainer import Trainer


def evaluate(trainer: Trainer, games: int) -> dict:
    """The fixed set, played by the trainer's current weights."""
    start = time.time()
    result = evaluate_trainer(trainer, games)
    return {**result.to_dict(), "seconds": time.time() - start}


def run_seed(seed: int, overrides: list[str], args: argparse.Namespace, out: Path | None) -> dict:
    log_dir = tempfile.mkdtemp(prefix="smollm2-")
    config = config_from_argv(["preset=smollm2", f"seed={seed}", f"log_dir={log_dir}", *overrides])
    start = time.time()
    trainer = Trainer(config, progress=False)
    record: dict = {"seed": seed, "load": os.getloadavg()[0]}

    def log(stage: str, result: dict) -> None:
        record[stage] = {**result, "wall_s": time.time() - start, "step": trainer.step_index}
        low, high = result["interval95"]
        print(f"seed {seed} {stage:8} success {result['success']:.3f} [{low:.2f}, {high:.2f}] "
              f"step {trainer.step_index:3d} wall {time.time() - start:6.0f} s (eval {result['seconds']:.0f} s) "
              f"load {os.getloadavg()[0]:.1f}", flush=True)

    if not args.no_base:  # the base is the same for every seed (LoRA's B starts at zero)
        log("base", evaluate(trainer, args.games))
    trainer.warmup()
    log("warmup", evaluate(trainer, args.games))
    if not args.probe:
        eval_every = args.eval_every or config.max_steps
        while trainer.step_index < config.max_steps and time.time() - start < args.minutes * 60:
            metrics = trainer.step()
            print(f"seed {seed} step {trainer.step_index:3d} rollout success {metrics['sampler/success_rate']:.2f} "
                  f"step {metrics['time/step']:.0f} s (sample {metrics['time/sample']:.0f}, train {metrics['time/train']:.0f}) "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
            if trainer.step_index % eval_every == 0 and trainer.step_index < config.max_steps:
                log(f"step{trainer.step_index}", evaluate(trainer, args.games))
        log("rl", evaluate(trainer, args.games))
    record["wall_s"] = time.time() - start
    record["load_end"] = os.getloadavg()[0]
    trainer.close()
    if out is not None:
        export_run(trainer.run_dir, out / f"seed{seed}", extra={"eval.json": json.dumps(record, indent=1)})
    shutil.rmtree(log_dir, ignore_errors=True)
    return record


def stages_of(records: list[dict]) -> list[str]:
    """The evaluations the records hold, in order: base, warmup, every ``--eval-every`` step, rl."""
    steps = sorted({int(key[4:]) for r in records for key in r if key.startswith("step") and key[4:].isdigit()})
    return [s for s in ("base", "warmup", *(f"step{n}" for n in steps), "rl") if any(s in r for r in records)]


def report(folder: Path, figure: Path | None) -> None:
    """The result table over the recorded seeds (each seed's success with its Wilson 95% interval
    over games; the mean with its 95% t-interval over seeds) and its figure."""
    import matplotlib.pyplot as plt
    import numpy as np
    from scipy import stats

    records = [json.loads(f.read_text()) for f in sorted(folder.glob("seed*/eval.json"))]
    stages = stages_of(records)
    print(f"{'stage':8} " + " ".join(f"{'seed ' + str(r['seed']):<24}" for r in records) + "mean [95% CI over seeds]")
    means, errors = [], []
    for stage in stages:
        values = np.array([r[stage]["success"] for r in records if stage in r])
        mean = float(values.mean())
        half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")
        means.append(mean)
        errors.append(half)
        cells = " ".join(f"{cell(r, stage):<24}" for r in records)
        print(f"{stage:8} {cells}{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]")
    walls = [r["wall_s"] / 60 for r in records]
    print(f"wall per seed: {', '.join(f'{w:.1f}' for w in walls)} min; load {[round(r['load'], 1) for r in records]}")
    if figure is None:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.bar(stages, means, yerr=None if len(records) < 2 else errors, capsize=6, color=[{"base": "#999", "warmup": "#6a9fd4"}.get(s, "#2b7a3d") for s in stages])
    for r in records:
        left.plot([s for s in stages if s in r], [r[s]["success"] for s in stages if s in r], "k.", alpha=0.6)
    left.set_ylim(0, 1)
    left.set_ylabel(f"success on the fixed {len(records[0]['warmup']['wins'])} games")
    left.set_title(f"SmolLM2-135M by stage: {', '.join(stages)}\n(mean of {len(records)} seed(s); 95% CI over seeds when 2+)")
    for r in records:
        rows = [json.loads(line) for line in (folder / f"seed{r['seed']}" / "metrics.jsonl").read_text().splitlines() if line]
        right.plot([row["step"] for row in rows], [row["sampler/success_rate"] for row in rows], marker="o", label=f"seed {r['seed']}")
    right.set_xlabel("RL step")
    right.set_ylabel("rollout success")
    right.set_title("training rollouts")
    right.legend()
    fig.tight_layout()
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=120)
    print(f"wrote {figure}")


def cell(record: dict, stage: str) -> str:
    """``0.438 [0.28, 0.61]``: a seed's success at ``stage`` and its Wilson interval (``@N``: the RL
    step of the final evaluation)."""
    if stage not in record:
        return "-"
    result = record[stage]
    low, high = result["interval95"]
    at = f" @{result['step']}" if stage == "rl" else ""
    return f"{result['success']:.3f} [{low:.2f}, {high:.2f}]{at}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="key=value config overrides on top of preset=smollm2")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="wall-time budget per seed, warm-up included")
    parser.add_argument("--games", type=int, default=NUM_GAMES, help="games in the fixed evaluation set")
    parser.add_argument("--eval-every", type=int, default=0, help="also evaluate every N RL steps (0: only at the end)")
    parser.add_argument("--probe", action="store_true", help="base and warm-up evaluations only")
    parser.add_argument("--no-base", action="store_true", help="skip the base evaluation (the same for every seed)")
    parser.add_argument("--out", type=Path, default=None, help="record the runs here (e.g. data/smollm2)")
    parser.add_argument("--report", type=Path, default=None, help="print the table of the runs recorded here and stop")
    parser.add_argument("--figure", type=Path, default=None, help="with --report: write the figure here")
    args = parser.parse_args()
    if args.report is not None:
        report(args.report, args.figure)
        return
    for seed in args.seeds:
        run_seed(seed, args.overrides, args, args.out)


if __name__ == "__main__":
    main()
