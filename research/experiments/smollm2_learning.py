"""Does SmolLM2-135M-Instruct learn by RL in gemlab? Held-out success at base, after the warm-up
and during RL, per seed, with each run's config and metrics recorded (no checkpoints).

    python research/experiments/smollm2_learning.py --seeds 0 1 2 3 4 --minutes 15 --out data/smollm2-sums
    python research/experiments/smollm2_learning.py --report data/smollm2-sums --figure docs/figures/smollm2-sums.png
    GEMLAB_THREADS=1 python research/experiments/smollm2_learning.py --seeds 0 1 2 3 4 5 --minutes 12 --out
    research/data/smollm2-times \
        env_id=rg:times-1digit-train eval_env_id=rg:times-1digit-test max_steps=100

Each seed: a ``preset=smollm2`` Trainer (``key=value`` arguments override it) evaluated on the
fixed held-out set (``eval_env_id``, ``eval_games``) before anything and after ``Trainer.warmup()``
(``Trainer.evaluate_start``: also in step 0's row of ``metrics.jsonl``), and every ``eval_every`` RL
steps by the Trainer itself (``eval/*`` in ``metrics.jsonl``), until
``max_steps`` or ``--minutes`` of wall time run out (loading, warm-up and evaluations included: a
step starts only if it and the two last evaluations fit, each timed as the last of its kind); the last step
is always evaluated. These are sampled at the run's temperature, as in training; after the warm-up
and at the end the same problems are also answered greedily (temperature 0; per problem its question,
answer (a multi-turn game's answers joined by `` | ``) and return kept in ``eval.json``). Writes
``OUT/seed<N>/{config.json, metrics.jsonl, warmup.jsonl, eval.json}``
and prints a line per step. Not a test: a seed takes about a quarter of an hour.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from gemlab.config import config_from_argv
from gemlab.doctor import cpu_name, device_name
from gemlab.eval_curve import eval_metrics
from gemlab.evaluate import EvalResult, evaluate_trainer, random_play
from gemlab.run_folder import export_run
from gemlab.saved_runs import read_run
from gemlab.studies.guessing import guessing_habits, read_guesses
from gemlab.studies.held_out_runs import mean_interval, recorded_seeds
from gemlab.trainer import Trainer


def run_seed(seed: int, overrides: list[str], args: argparse.Namespace, out: Path | None) -> dict:
    log_dir = tempfile.mkdtemp(prefix="smollm2-")
    config = config_from_argv(["preset=smollm2", f"seed={seed}", f"log_dir={log_dir}", *overrides])
    start = time.time()
    trainer = Trainer(config, progress=False)
    record: dict = {
        "seed": seed,
        "cpu": cpu_name(),
        "device": device_name(),
        "threads": os.environ.get("GEMLAB_THREADS", "default"),
        "load": os.getloadavg()[0],
    }

    def log(stage: str, result: EvalResult) -> None:
        record[stage] = {**result.to_dict(), "wall_s": time.time() - start, "step": trainer.step_index}
        if stage == "final_greedy":  # what it answers, to read where it fails
            record[stage]["answers"] = [  # [first observation, the turns' actions joined by " | ", return]
                [e.transitions[0].observation, " | ".join(t.action for t in e.transitions), e.total_reward]
                for e in result.episodes
                if e.transitions
            ]
        low, high = result.interval95()
        print(
            f"seed {seed} {stage:7} held-out {result.success:.3f} [{low:.2f}, {high:.2f}] wall "
            f"{time.time() - start:5.0f} s load {os.getloadavg()[0]:.1f}",
            flush=True,
        )

    if not args.no_base:  # the base is the same for every seed (LoRA's B starts at zero)
        log("base", trainer.evaluate_start("base"))
    trainer.warmup()
    log("warmup", trainer.evaluate_start("warmup"))  # both also in step 0's metrics row, as a CLI run logs them
    evaluated = time.time()
    log("warmup_greedy", evaluate_trainer(trainer, temperature=0.0))
    evaluation_s = time.time() - evaluated  # what each of the two last evaluations will take, about
    step_s = 0.0  # the last step's wall time: the next one should take about as long

    def next_step_fits() -> bool:  # the step and the two last evaluations within the budget
        return time.time() - start + step_s + 2 * evaluation_s <= args.minutes * 60

    while trainer.step_index < config.max_steps and next_step_fits():
        began = time.time()
        metrics = trainer.step()
        step_s = time.time() - began
        held = f" held-out {metrics['eval/success']:.3f}" if "eval/success" in metrics else ""
        print(
            f"seed {seed} step {trainer.step_index:3d} rollout {metrics['sampler/success_rate']:.2f}{held} "
            f"step {metrics['time/step']:.0f} s (sample {metrics['time/sample']:.0f}, train "
            f"{metrics['time/train']:.0f}) "
            f"wall {time.time() - start:5.0f} s load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    if not trainer.history or "eval/success" not in trainer.history[-1]:  # the budget ended between evaluations
        record["final"] = {**eval_metrics(evaluate_trainer(trainer)), "step": trainer.step_index}
    # the same problems answered greedily (temperature 0)
    log("final_greedy", evaluate_trainer(trainer, temperature=0.0))
    record["wall_s"] = time.time() - start
    record["load_end"] = os.getloadavg()[0]
    record["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB
    trainer.close()
    if out is not None:
        export_run(trainer.run_dir, out / f"seed{seed}", extra={"eval.json": json.dumps(record, indent=1)})
    shutil.rmtree(log_dir, ignore_errors=True)
    return record


def report(folder: Path, figure: Path | None) -> None:
    """The table over the recorded seeds (each with its Wilson 95% interval over problems; the mean
    with its t-interval over seeds; the paired gain of RL over the warm-up) and its figure."""
    seeds = recorded_seeds(folder)
    print(f"{'seed':>4}  {'base':>6}  {'warm-up':22}  {'after RL':22}  steps  minutes  load     peak GB")
    for record, points in seeds:
        base = f"{record['base']['success']:.3f}" if "base" in record else "-"
        _, w, wl, wh = points[0]
        steps, f, fl, fh = points[-1]
        print(
            f"{record['seed']:>4}  {base:>6}  {w:.3f} [{wl:.2f}, {wh:.2f}]   {f:.3f} [{fl:.2f}, {fh:.2f}]   "
            f"{steps:5d}  {record['wall_s'] / 60:7.1f}  "
            f"{record['load']:.1f}-{record['load_end']:.1f}  {record.get('peak_rss_gb', float('nan')):.2f}"
        )
    for name, values in (
        ("warm-up", [p[0][1] for _, p in seeds]),
        ("after RL", [p[-1][1] for _, p in seeds]),
        ("gain (paired)", [p[-1][1] - p[0][1] for _, p in seeds]),
    ):
        mean, low, high = mean_interval(values)
        print(f"{name:14} mean {mean:.3f}, 95% CI over {len(values)} seeds [{low:.3f}, {high:.3f}]")
    greedy = [record for record, _ in seeds if "final_greedy" in record]
    for stage in ("warmup_greedy", "final_greedy") if greedy else ():
        values = [record[stage]["success"] for record in greedy]
        mean, low, high = mean_interval(values)
        print(f"{stage:14} mean {mean:.3f}, 95% CI over {len(values)} seeds [{low:.3f}, {high:.3f}] "
              f"(per seed: {', '.join(f'{v:.3f}' for v in values)})")
    config = read_run(next(folder.glob("seed*"))).config
    game = config["env_id"].startswith("game:") and config["eval_env_id"] in (None, config["env_id"])
    if game:  # chance's level: GEM's random player on the same fixed games
        chance = random_play(config["env_id"], len(seeds[0][0]["warmup"]["wins"]), repeats=1000)
        low, high = np.percentile(chance, [2.5, 97.5])
        mean, rl_low, _ = mean_interval([p[-1][1] for _, p in seeds])
        print(
            f"random play on the same games: {np.mean(chance):.3f} (95% of 1000 repeats in [{low:.3f}, {high:.3f}]); "
            f"after RL {mean:.3f}, its interval over seeds "
            f"{'lies above' if rl_low > np.mean(chance) else 'does not lie above'} it"
        )
        played = [
            [read_guesses(actions) for _, actions, _ in record["final_greedy"]["answers"]]
            for record, _ in seeds
            if "final_greedy" in record
        ]
        rng = np.random.default_rng(0)  # GEM's random player: four uniform guesses, repeats allowed
        habits = [guessing_habits(config["env_id"], games) for games in played]
        games = len(played[0])
        chance = [
            guessing_habits(config["env_id"], [list(rng.integers(1, 11, 4)) for _ in range(games)]) for _ in range(16)
        ]
        chance_within = sum(h.within_hints for h in chance) / sum(h.later for h in chance)
        print("later guesses within what the hints allow, greedy at the end: "
              + ", ".join(f"{h.within_hints}/{h.later} ({h.within_share:.2f})" for h in habits)
              + f"; GEM's random player on the same games (16 plays each): {chance_within:.2f}")
    device = f", device {seeds[0][0]['device']}" if "device" in seeds[0][0] else ""  # runs before the field: the CPU
    print(f"CPU: {seeds[0][0]['cpu']}{device}, GEMLAB_THREADS={seeds[0][0]['threads']}")
    if figure is None:
        return
    import matplotlib.pyplot as plt

    fig, (ax, rollouts) = plt.subplots(1, 2, figsize=(13, 4.4), gridspec_kw={"width_ratios": [3, 2]})
    for (record, points), path in zip(
        seeds, sorted(p for p in folder.glob("seed*") if (p / "eval.json").exists()), strict=False
    ):
        (line,) = ax.plot(
            [p[0] for p in points], [p[1] for p in points], marker="o", alpha=0.7, label=f"seed {record['seed']}"
        )
        # the step rows (step 0's holds the warm-up's scores)
        metrics = read_run(path).metrics.dropna(subset=["sampler/success_rate"])
        rollouts.plot(
            metrics["step"] + 1, metrics["sampler/success_rate"], marker=".", alpha=0.7, color=line.get_color()
        )
    steps = sorted({p[0] for _, points in seeds for p in points})
    common = [s for s in steps if all(any(p[0] == s for p in points) for _, points in seeds)]
    stats = [mean_interval([next(p[1] for p in points if p[0] == s) for _, points in seeds]) for s in common]
    if len(common) > 1:  # a curve needs two steps that every seed scored (not only the warm-up's)
        ax.plot(common, [m for m, _, _ in stats], color="black", linewidth=2.5, label="mean")
        ax.fill_between(
            common,
            [lo for _, lo, _ in stats],
            [hi for _, _, hi in stats],
            color="black",
            alpha=0.12,
            label="95% CI over seeds",
        )
    end, end_low, end_high = mean_interval([points[-1][1] for _, points in seeds])
    end_step = float(np.mean([points[-1][0] for _, points in seeds]))
    ax.errorbar(
        [end_step],
        [end],
        yerr=[[end - end_low], [end_high - end]],
        fmt="D",
        color="black",
        capsize=6,
        label="mean at the end (95% CI)",
    )
    if "base" in seeds[0][0]:
        ax.axhline(seeds[0][0]["base"]["success"], color="#999", linestyle=":", label="base model")
    if game:
        ax.axhline(float(np.mean(chance)), color="#c44", linestyle="--", label="random play, same games")
    scored_on = "held-out problems" if config["eval_env_id"] not in (None, config["env_id"]) else "fixed games (wins)"
    ax.set_ylim(0, 1)
    ax.set_xlabel("RL steps (0: after the format warm-up)")
    ax.set_ylabel(f"success on {len(seeds[0][0]['warmup']['wins'])} {scored_on}")
    # a run older than the field: its default
    rate = "" if config["lr_schedule"] == "constant" else f", {config['lr_schedule']} learning rate"
    tasks = {
        "rg:sums-1digit-train": "sums",
        "rg:diffs-1digit-train": "differences",
        "rg:times-1digit-train": "products",
        "game:GuessTheNumber-v0-easy": "GuessTheNumber",
        "math:products-3x2-train": "to use a Python tool",
    }
    task = tasks.get(config["env_id"], config["env_id"])
    ax.set_title(f"SmolLM2-135M-Instruct learns {task} by RL ({len(seeds)} seeds{rate})")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if game:
        rollouts.axhline(float(np.mean(chance)), color="#c44", linestyle="--")
    rollouts.set_ylim(0, 1)
    rollouts.set_xlabel("RL step (1: the first)")
    rollouts.set_ylabel("success of the step's rollouts (training problems)")
    rollouts.set_title("each step's own episodes, per seed")
    rollouts.grid(alpha=0.3)
    fig.tight_layout()
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(figure, dpi=120)
    print(f"wrote {figure}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="key=value config overrides on top of preset=smollm2")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--minutes",
        type=float,
        default=15.0,
        help="wall-time budget per seed, loading, warm-up and evaluations included",
    )
    parser.add_argument("--no-base", action="store_true", help="skip the base evaluation (the same for every seed)")
    parser.add_argument("--out", type=Path, default=None, help="record the runs here (e.g. data/smollm2-sums)")
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
