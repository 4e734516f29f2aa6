"""tinker-atropos's experiment at laptop scale: Atropos's decoupled layout against gemlab's
synchronous Trainer, on one task (SmolLM2-135M-Instruct, ``preset=smollm2``'s sums), per seed from
the same warmed-up weights.

    python research/experiments/decoupled_vs_sync.py --seeds 0 1 2 3 4 --steps 15 --out research/data/decoupled-vs-sync
    python research/experiments/decoupled_vs_sync.py --report research/data/decoupled-vs-sync --plot
    docs/figures/decoupled-vs-sync.png

Per seed: the preset's Trainer runs its warm-up and saves it; the **synchronous** arm is that
Trainer going on for ``--steps`` RL steps (sample 64 answers, train, repeat). The **decoupled** arm
is three processes: atroposlib's ``run-api``, ``python -m gemlab.atropos`` started from the saved
warm-up (``init_state``) with the preset's model, rank, learning rate, GRPO and 64 sequences a step
(``max_staleness=3``, as tinker-atropos ran), and ``examples/atropos_gem_env.py`` serving the same
GEM env with the same chat prompt and 16 answers a group (atroposlib's default: it samples up to 3
batches ahead). Both arms train every group, as the Trainer does: the environment keeps the groups
whose answers all score the same (``--env.ensure_scores_are_not_same false``), so the batches differ
only in how old their weights are. Neither arm saves a checkpoint before its last step. The two arms
of a seed run one after the other, so a change in the machine's load hits both.

The clock of each arm starts when its first RL step starts waiting for answers (the decoupled one
includes its environment process's start). ``--report`` prints per arm: seconds per step (between
consecutive updates, the first left out), the mean |sampler - learner| logprob gap, tokens sampled and trained per step,
the reward of every answer sampled (the environment's own log for the decoupled arm: stale groups
too) over the first and last 5 steps, and the time until the reward of the last 320 answers sampled
(5 steps' worth) first reaches ``--plateau`` (0.6, chosen before the runs); intervals are 95%
bootstrap over seeds, differences paired by seed (``gemlab.studies.stats``). Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import chz
import numpy as np

from gemlab.config import make_config
from gemlab.doctor import cpu_name
from gemlab.run_folder import export_run
from gemlab.saved_runs import METRICS_FILE, read_rows
from gemlab.studies.stats import interval, paired_contrast
from gemlab.trainer import Trainer
from tinker_emulator.checkpoints import folder_of

ROOT = Path(__file__).resolve().parents[2]
ENV = ROOT / "examples" / "atropos_gem_env.py"
ANSWERS_PER_STEP = 64
WINDOW = 5  # steps


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_seed(seed: int, steps: int, out: Path, work: Path) -> None:
    """Both arms of one seed from one warm-up: their records under ``out``, checkpoints and logs under ``work``."""
    config = make_config(
        "smollm2",
        seed=seed,
        max_steps=steps,
        eval_every=0,
        log_dir=str(work),
        run_name=f"sync-seed{seed}",
        save_every=-1,
    )
    trainer = Trainer(config, progress=False)
    try:
        trainer.warmup()
        warm = folder_of(trainer.save_checkpoint())
        print(f"seed {seed}: warmed up ({warm}); synchronous arm, load {os.getloadavg()[0]:.1f}", flush=True)
        trainer.run()
    finally:
        trainer.close()
    export_run(trainer.run_dir, out / f"sync-seed{seed}", config=config)
    print(f"seed {seed}: decoupled arm, load {os.getloadavg()[0]:.1f}", flush=True)
    run_decoupled(config, seed, steps, warm, out, work)


def run_decoupled(config: chz.Chz, seed: int, steps: int, warm: Path, out: Path, work: Path) -> None:
    """run-api, the trainer from ``warm``, one environment process; until the trainer's last step."""
    api_port, serve_port = free_port(), free_port()
    api, name = f"http://127.0.0.1:{api_port}", f"decoupled-seed{seed}"
    logs = work / f"{name}-logs"
    logs.mkdir(parents=True, exist_ok=True)
    trainer_args = [
        "-m",
        "gemlab.atropos",
        f"model_name={config.model_name}",
        f"init_state={warm}",
        f"lora_rank={config.lora_rank}",
        f"learning_rate={config.learning_rate}",
        f"batch_size={ANSWERS_PER_STEP}",
        f"max_steps={steps}",
        f"save_every={steps}",
        f"seed={seed}",
        "advantage=grpo",
        "max_staleness=3",
        "max_token_len=512",
        f"log_dir={work}",
        f"run_name={name}",
        f"api_url={api}",
        f"serve_port={serve_port}",
        "poll_seconds=0.1",
    ]
    env_args = [
        str(ENV),
        "serve",
        "--env.env_id",
        config.env_id,
        "--env.group_size",
        str(config.group_size),
        "--env.max_reply_tokens",
        str(config.max_tokens),
        "--env.temperature",
        str(config.temperature),
        "--env.seed",
        str(seed),
        "--env.scores_path",
        str(logs / "scores.jsonl"),
        "--env.rollout_server_url",
        api,
        "--openai.base_url",
        f"http://127.0.0.1:{serve_port}/v1",
        "--openai.server_type",
        "sglang",
        "--openai.model_name",
        config.model_name,
        "--openai.api_key",
        "local",
        "--env.use_wandb",
        "false",
        "--env.total_steps",
        "100000",
        "--env.ensure_scores_are_not_same",
        "false",
        "--slurm",
        "false",
    ]
    started: list[subprocess.Popen] = []

    def start(args: list[str], log: str) -> subprocess.Popen:
        with open(logs / log, "w") as sink:
            started.append(subprocess.Popen([sys.executable, *args], stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT))
        return started[-1]

    try:
        start(["-m", "atroposlib.cli.run_api", "--host", "127.0.0.1", "--port", str(api_port)], "api.log")
        trainer = start(trainer_args, "trainer.log")
        while "serving" not in (logs / "trainer.log").read_text():
            if trainer.poll() is not None:
                raise SystemExit(f"the trainer ended with {trainer.returncode}: see {logs / 'trainer.log'}")
            time.sleep(0.1)
        # as the trainer prints it
        tokenizer = re.search(r"--env\.tokenizer_name (\S+)", (logs / "trainer.log").read_text()).group(1)
        env_args += ["--openai.tokenizer_name", tokenizer, "--env.tokenizer_name", tokenizer]
        # its first step starts waiting for a batch now: the clock the environment's log is read on
        clock = json.dumps({"first_step_start": time.time()})
        start(env_args, "env.log")
        if trainer.wait() != 0:
            raise SystemExit(f"the trainer ended with {trainer.returncode}: see {logs / 'trainer.log'}")
        # the record only: no checkpoints; the environment's log of every group and the clock it is read on
        export_run(
            work / name, out / name, extra={"scores.jsonl": (logs / "scores.jsonl").read_text(), "clock.json": clock}
        )
    finally:
        for process in reversed(started):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()


# ----- the report -------------------------------------------------------------------------------
def arm(folder: Path) -> dict[str, np.ndarray]:
    """One run's series on its own clock (seconds since its first step started waiting for answers)."""
    rows = read_rows(folder / METRICS_FILE).rows
    start = rows[0]["time/sample_start"]
    ends = np.array([r["time/train_end"] for r in rows]) - start
    series = {
        "update_s": ends,
        "step_s": np.diff(np.concatenate([[0.0], ends])),
        "gap": np.array([r["train/logprob_diff_abs"] for r in rows]),
        "batch_reward": np.array([r["sampler/episode_return"] for r in rows]),
        "trained_tokens": np.array([r.get("tokens/trained", r.get("train/num_tokens", np.nan)) for r in rows]),
    }
    scores = read_rows(folder / "scores.jsonl").rows
    if scores:  # decoupled: every group the environment sampled, stale ones too
        start_abs = json.loads((folder / "clock.json").read_text())["first_step_start"]
        series["answer_time"] = np.repeat(
            np.array([s["time"] for s in scores]) - start_abs, [len(s["scores"]) for s in scores]
        )
        series["answer_score"] = np.concatenate([s["scores"] for s in scores])
        # all it sampled, per step
        series["sampled_tokens"] = np.full(len(rows), sum(sum(s["tokens"]) for s in scores) / len(rows))
    else:
        series["answer_time"] = np.repeat(np.array([r["time/sample_end"] for r in rows]) - start, ANSWERS_PER_STEP)
        series["answer_score"] = np.repeat([r["sampler/success_rate"] for r in rows], ANSWERS_PER_STEP)
        series["sampled_tokens"] = np.array([r["sampler/action_num_tokens"] * r["sampler/num_episodes"] for r in rows])
    return series


def plateau_time(series: dict[str, np.ndarray], level: float) -> float:
    """Seconds until the mean of the last 320 answers sampled first reaches ``level`` (inf: never)."""
    n = WINDOW * ANSWERS_PER_STEP
    scores, times = series["answer_score"], series["answer_time"]
    rolling = np.convolve(scores, np.ones(n) / n, mode="valid")
    hit = np.nonzero(rolling >= level)[0]
    return float(times[hit[0] + n - 1]) if hit.size else float("inf")


def summary(series: dict[str, np.ndarray], level: float) -> dict[str, float]:
    """One run's figures: the rows of the report's table."""
    n = WINDOW * ANSWERS_PER_STEP
    last_update = series["update_s"][-1]
    before_end = series["answer_score"][series["answer_time"] <= last_update]
    return {
        "s/step": float(np.mean(series["step_s"][1:])),
        "wall s": float(last_update),
        "|gap|": float(np.mean(series["gap"])),
        "sampled tok/step": float(np.mean(series["sampled_tokens"])),
        "trained tok/step": float(np.mean(series["trained_tokens"])),
        "reward first": float(np.mean(series["answer_score"][:n])),
        "reward last": float(np.mean(before_end[-n:])),
        "plateau s": plateau_time(series, level),
    }


def report(folder: Path, level: float, plot: Path | None) -> None:
    seeds = sorted(
        int(p.name.removeprefix("sync-seed"))
        for p in folder.glob("sync-seed*")
        if (folder / f"decoupled-seed{p.name[9:]}" / "metrics.jsonl").exists()
    )
    if not seeds:
        raise SystemExit(f"no seed of {folder} has both arms (sync-seed<N>/ and decoupled-seed<N>/)")
    runs = {name: [arm(folder / f"{name}-seed{s}") for s in seeds] for name in ("sync", "decoupled")}
    rows = {name: [summary(r, level) for r in series] for name, series in runs.items()}
    print(
        f"{folder}: seeds {seeds}; plateau: the last {WINDOW * ANSWERS_PER_STEP} answers sampled at {level} or "
        "more; 95% bootstrap intervals over seeds"
    )
    print(f"| | {' | '.join(rows['sync'][0])} |\n|---|{'---|' * len(rows['sync'][0])}")
    for name in rows:
        for s, row in zip(seeds, rows[name], strict=True):
            print(f"| {name} seed {s} | " + " | ".join(f"{v:.3g}" for v in row.values()) + " |")
    for name in rows:
        cells = []
        for key in rows[name][0]:
            values = [r[key] for r in rows[name]]
            reached = [v for v in values if np.isfinite(v)]
            if len(reached) < len(values):
                cells.append(
                    f"{len(reached)} of {len(values)} reached"
                    + (f", median {np.median(reached):.3g}" if reached else "")
                )
            else:
                est = interval(values) if len(values) > 1 else None
                cells.append(f"**{np.mean(values):.3g}**" + (f" [{est.low:.3g}, {est.high:.3g}]" if est else ""))
        print(f"| {name}, mean | " + " | ".join(cells) + " |")
    for key in ("s/step", "|gap|", "reward last", "wall s") if len(seeds) > 1 else ():
        c = paired_contrast([r[key] for r in rows["decoupled"]], [r[key] for r in rows["sync"]])
        print(
            f"decoupled - sync, {key}: {c.difference:+.3g} [{c.low:+.3g}, {c.high:+.3g}] (paired by seed), "
            f"sign-flip p {c.p:.3f}"
        )
    if plot is not None:
        draw(runs, level, plot)
        print(f"wrote {plot}")


def draw(runs: dict[str, list[dict[str, np.ndarray]]], level: float, path: Path) -> None:
    """Reward of the answers sampled over wall-clock time, reward per step, logprob gap per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = WINDOW * ANSWERS_PER_STEP
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for (name, series), color in zip(runs.items(), ("tab:blue", "tab:orange"), strict=True):
        grid = np.linspace(0, max(s["update_s"][-1] for s in series), 200)
        curves = []
        for s in series:
            rolling = np.convolve(s["answer_score"], np.ones(n) / n, mode="valid")
            t = s["answer_time"][n - 1 :]
            curves.append(np.interp(grid, t, rolling, left=np.nan, right=np.nan))
            axes[0].plot(t, rolling, color=color, alpha=0.2, lw=0.8)
        # the mean only where every seed has a value: a tail of fewer seeds would read as a change
        axes[0].plot(grid, np.mean(curves, axis=0), color=color, lw=2, label=f"{name} (mean of {len(series)} seeds)")
        steps = min(len(s["step_s"]) for s in series)
        rewards = np.array([s["batch_reward"][:steps] for s in series])
        axes[1].plot(range(steps), rewards.mean(axis=0), color=color, marker="o", ms=3, label=name)
        gaps = np.array([s["gap"][:steps] for s in series])
        axes[2].plot(range(steps), gaps.mean(axis=0), color=color, marker="o", ms=3, label=name)
    axes[0].axhline(level, color="gray", ls="--", lw=1)
    axes[0].set(
        xlabel="seconds since the first RL step started",
        ylabel=f"reward, last {n} answers sampled",
        title="Reward over wall-clock time",
    )
    axes[1].set(xlabel="update", ylabel="reward of the batch it trained on", title="Reward per step")
    axes[2].set(xlabel="update", ylabel="mean |sampler - learner| logprob", title="Sampler/learner gap")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"SmolLM2-135M on sums: Atropos's decoupled layout against the synchronous Trainer ({cpu_name()}, 2 cores)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("research/data/decoupled-vs-sync"))
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "gemlab-decoupled-vs-sync",
        help="checkpoints and process logs",
    )
    parser.add_argument("--report", type=Path, help="only report on the runs in this folder")
    parser.add_argument("--plot", type=Path, help="with --report: draw the figure here")
    parser.add_argument("--plateau", type=float, default=0.6)
    args = parser.parse_args()
    if args.report is not None:
        report(args.report, args.plateau, args.plot)
        return
    if args.steps < 2 * WINDOW:
        parser.error(f"--steps must be at least {2 * WINDOW}")
    print(f"{cpu_name()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    for seed in args.seeds:
        run_seed(seed, args.steps, args.out, args.work)
    report(args.out, args.plateau, None)


if __name__ == "__main__":
    main()
