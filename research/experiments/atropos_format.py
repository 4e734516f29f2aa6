"""Does a format warm-up give Atropos's reasoning_gym environment something to train on? SmolLM2-135M-Instruct
before and after ``gemlab.atropos.warmup.format_warmup``, scored by the environment's own code.

    git clone https://github.com/NousResearch/atropos && git -C atropos checkout 296a0bc5
    python research/experiments/atropos_format.py --seeds 0 1 2 --out research/data/atropos-format \
        --env-file atropos/environments/reasoning_gym_environment/reasoning_gym_environment.py

Per seed: the environment (the file as Atropos ships it, loaded in this process; no server is
called) makes ``--items`` problems with its own ``get_next_item`` (its seed ``1000 + seed``, apart
from the warm-up's; a prompt longer than its ``max_token_length`` is skipped, as it skips it);
SmolLM2 answers each ``--group-size`` times as the environment samples (temperature 1.0, top_p
0.95, its ``max_token_length`` less the prompt), before and after the warm-up (``--warmup-steps``
x ``--warmup-batch`` of its own answers to the environment's prompts seeded ``seed``, each followed by
its last integer in ``<answer>`` tags). Each answer is scored as the environment's
``score`` scores it (``_extract_final_answer``, then ``_score_answer_with_both_formats``). Printed
per seed and stage: answers with exactly one tag, answers cut at the length (the environment zeroes
their advantage), answers it keeps (10 trained tokens or more), mean score, groups whose scores differ,
groups it sends to the trainer (scores differ and all answers kept: atroposlib skips a smaller group)
groups with a score of 0.5 or more, the median answer's length and how often the higher-scored of two kept
answers to a problem is the shorter; then after - before over seeds, paired
(``gemlab.studies.stats``). ``--out`` writes ``seed<N>.json`` with every answer's score and task
(``--report DIR`` prints them again), and saves each warm-up under ``--states`` for
``python -m gemlab.atropos init_state=...``. ``--before-from DIR`` takes the base model's measure from an
earlier record instead of sampling it again. After RL, ``--state PATH --seeds N`` scores the run's saved
weights on seed N's problems in the same way (``state-seed<N>.json``; ``--report`` pairs it with the
warm-up's "after"). Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from gemlab.atropos.warmup import (
    MIN_TRAINED_TOKENS,
    Answer,
    answer_items,
    environment_items,
    format_warmup,
    item_messages,
    prompt_tokens,
    tag_count,
)
from gemlab.doctor import cpu_name
from gemlab.studies.stats import paired_contrast
from tinker_emulator import LocalServiceClient
from tinker_emulator.model_names import SMOLLM2

MAX_TOKEN_LENGTH = 512  # the environment's budget per answer, prompt included (the earlier attempt's)


def load_environment(path: Path, seed: int, group_size: int, folder: str) -> Any:
    """The environment class from ``path``, configured for SmolLM2 and ``seed``; set up."""
    spec = importlib.util.spec_from_file_location("atropos_environment", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"atropos_format: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from atroposlib.envs.base import APIServerConfig

    config = module.ReasoningGymEnvConfig(
        tokenizer_name=folder,
        group_size=group_size,
        seed=seed,
        use_wandb=False,
        max_token_length=MAX_TOKEN_LENGTH,
        ensure_scores_are_not_same=False,
    )
    server = APIServerConfig(model_name=SMOLLM2, base_url="http://127.0.0.1:9/v1", api_key="unused", health_check=False)
    env = module.ReasoningGymEnv(config, [server], slurm=False, testing=False)
    asyncio.run(env.setup())
    return env


def measure(env: Any, sampler: Any, tokenizer: Any, items: list[Any], group_size: int, seed: int) -> dict[str, Any]:
    """Every answer's tag count, cut, score and task, as the environment would score it."""
    budgets = [MAX_TOKEN_LENGTH - len(prompt_tokens(tokenizer, item_messages(item))) for item in items]

    async def answers() -> list[list[list[Answer]]]:  # every item at once, each at its own budget: batched
        return await asyncio.gather(
            *(
                answer_items(sampler, tokenizer, [item], samples=group_size, max_tokens=budget, seed=seed + index)
                for index, (item, budget) in enumerate(zip(items, budgets, strict=True))
            )
        )

    rows = []
    for index, ((texts,), (_, rg_item, dataset)) in enumerate(zip(asyncio.run(answers()), items, strict=True)):
        for text, finished in texts:
            tokens = len(tokenizer.encode(text, add_special_tokens=False))
            extracted = env._extract_final_answer(text)
            score = 0.0 if extracted is None else env._score_answer_with_both_formats(extracted, rg_item, dataset)
            rows.append(
                {
                    "item": index,
                    "task": rg_item.get("metadata", {}).get("source_dataset", "unknown"),
                    "tags": tag_count(text),
                    "tokens": tokens,
                    "cut": not finished,
                    "score": score,
                    "text": text[:300],
                }
            )
    return {"answers": rows, **summary(rows, group_size)}


def kept(row: dict[str, Any]) -> bool:
    """Whether the environment keeps the answer: it drops one with fewer than ``MIN_TRAINED_TOKENS`` trained
    tokens (the answer and, unless it was cut, its end-of-turn token) as "insufficient context"."""
    return row["tokens"] + (0 if row["cut"] else 1) >= MIN_TRAINED_TOKENS


def summary(rows: list[dict[str, Any]], group_size: int) -> dict[str, float]:
    """The shares of answers with one tag, cut at the length and kept (``kept``), the mean score, the groups
    whose scores differ, those the environment sends on (every answer kept, as atroposlib skips a group of fewer
    than ``group_size``, and scores that differ) and those holding a score of 0.5 or more (a right or half-right
    answer: reasoning_gym also pays 0.01 for a well-formed wrong one, and some tasks a vanishing partial credit);
    the median answer's tokens; and ``shorter_scores_higher``: of the pairs of kept answers to one problem that
    differ in score and length, the share where the higher score is the shorter answer (above 0.5, a
    policy gradient on these groups shortens answers)."""
    groups = [rows[i : i + group_size] for i in range(0, len(rows), group_size)]
    pairs = [
        (a["score"] > b["score"]) == (a["tokens"] < b["tokens"])
        for g in groups
        for a, b in itertools.combinations(filter(kept, g), 2)
        if a["score"] != b["score"] and a["tokens"] != b["tokens"]
    ]
    return {
        "one_tag": sum(r["tags"] == 1 for r in rows) / len(rows),
        "cut": sum(r["cut"] for r in rows) / len(rows),
        "kept": sum(map(kept, rows)) / len(rows),
        "score": statistics.fmean(r["score"] for r in rows),
        "groups_with_signal": sum(len({r["score"] for r in g}) > 1 for g in groups) / len(groups),
        "groups_sent_on": sum(all(map(kept, g)) and len({r["score"] for r in g}) > 1 for g in groups) / len(groups),
        "groups_with_a_right_answer": sum(max(r["score"] for r in g) >= 0.5 for g in groups) / len(groups),
        "median_tokens": statistics.median(r["tokens"] for r in rows),
        "shorter_scores_higher": statistics.fmean(pairs) if pairs else math.nan,
    }


def held_out(args: argparse.Namespace, seed: int, training: Any) -> tuple[Any, str, Any, list[Any]]:
    """The tokenizer, a folder the environment can load it from, the environment seeded ``1000 + seed``
    and its ``--items`` problems: the same for the warm-up's measures and for ``--state``'s."""
    tokenizer = training.get_tokenizer()
    folder = Path(args.states) / "tokenizer"  # SmolLM2 comes as gguf: the environment loads a folder
    tokenizer.save_pretrained(folder)
    eval_env = load_environment(args.env_file, 1000 + seed, args.group_size, str(folder))
    return (
        tokenizer,
        str(folder),
        eval_env,
        asyncio.run(environment_items(eval_env, args.items, tokenizer, MAX_TOKEN_LENGTH)),
    )


def provenance(args: argparse.Namespace, start: float) -> dict[str, Any]:
    return {
        "wall_s": time.time() - start,
        "cpu": cpu_name(),
        "load": os.getloadavg()[0],
        "settings": {k: str(v) for k, v in vars(args).items()},
    }


def earlier_before(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The base model's measure from ``--before-from``'s ``seed<N>.json``: the same problems and sampling
    seeds give the same answers, so a new warm-up need not sample them again (an hour of a core)."""
    path = args.before_from / f"seed{seed}.json"
    if not path.is_file():
        raise SystemExit(f"atropos_format: --before-from has no {path.name} in {args.before_from}")
    record = json.loads(path.read_text())
    for key in ("items", "group_size"):
        if record["settings"][key] != str(getattr(args, key)):
            raise SystemExit(
                f"atropos_format: {path} was measured with --{key.replace('_', '-')} {record['settings'][key]}"
            )
    return {**record["before"], "from": str(path)}


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Before the warm-up (or ``--before-from``'s), the warm-up (saved under ``--states``), after it."""
    service = LocalServiceClient(root=args.states)
    training = service.create_lora_training_client(base_model=SMOLLM2, rank=8, seed=seed).result()
    tokenizer, folder, eval_env, items = held_out(args, seed, training)
    train_env = load_environment(args.env_file, seed, args.group_size, folder)
    start = time.time()
    if args.before_from:
        before = earlier_before(args, seed)
    else:
        sampler = training.save_weights_and_get_sampling_client().result()
        before = measure(eval_env, sampler, tokenizer, items, args.group_size, seed)
    losses = asyncio.run(
        format_warmup(
            training,
            tokenizer,
            train_env,
            steps=args.warmup_steps,
            batch_size=args.warmup_batch,
            learning_rate=args.learning_rate,
            seed=seed,
            max_prompt_tokens=MAX_TOKEN_LENGTH,
        )
    )
    state = training.save_state(f"format-warmup-seed{seed}").result().path
    after = measure(
        eval_env, training.save_weights_and_get_sampling_client().result(), tokenizer, items, args.group_size, seed
    )
    return {
        "seed": seed,
        "warmup_losses": losses,
        "state": state,
        **provenance(args, start),
        "before": before,
        "after": after,
    }


def score_state(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The saved weights at ``--state`` (an RL run's checkpoint) on the seed's problems, as ``run_seed``
    measures after the warm-up: same problems, same sampling seeds."""
    service = LocalServiceClient(root=args.states)
    training = service.create_training_client_from_state(str(args.state), base_model=SMOLLM2).result()
    tokenizer, _, eval_env, items = held_out(args, seed, training)
    start = time.time()
    sampler = training.save_weights_and_get_sampling_client().result()
    scored = measure(eval_env, sampler, tokenizer, items, args.group_size, seed)
    return {"seed": seed, "state": str(args.state), **provenance(args, start), "scored": scored}


KEYS = (
    "one_tag",
    "cut",
    "kept",
    "score",
    "groups_with_signal",
    "groups_sent_on",
    "groups_with_a_right_answer",
    "median_tokens",
    "shorter_scores_higher",
)


def stage_line(seed: int, stage: str, measured: dict[str, Any], group_size: int) -> None:
    """The figures of one measure (recomputed from its answers) and the tasks that scored."""
    measured.update(summary(measured["answers"], group_size))
    figures = {key: round(measured[key], 3) for key in KEYS}
    scored = sorted({row["task"] for row in measured["answers"] if row["score"] > 0})
    print(f"seed {seed} {stage}: {figures}; tasks that scored: {', '.join(scored) or 'none'}")


def report(results: list[dict[str, Any]]) -> None:
    """Per seed and stage the figures and the tasks that scored, then after - before over the seeds."""
    for result in results:
        seed = result["seed"]
        for stage in ("before", "after"):
            stage_line(seed, stage, result[stage], int(result["settings"]["group_size"]))
        print(
            f"seed {seed}: warm-up losses {[round(x, 3) for x in result['warmup_losses']]}, "
            f"{result['wall_s']:.0f} s on {result['cpu']} (load {result['load']:.1f})"
        )
    if len(results) > 1:
        contrasts([r["after"] for r in results], [r["before"] for r in results], "after - before")


def report_states(records: list[dict[str, Any]], warmups: list[dict[str, Any]]) -> None:
    """Per seed the scored state's figures, then state - after the warm-up over the seeds both have."""
    for record in records:
        stage_line(record["seed"], f"state {record['state']}", record["scored"], int(record["settings"]["group_size"]))
        print(f"seed {record['seed']}: {record['wall_s']:.0f} s on {record['cpu']} (load {record['load']:.1f})")
    after = {w["seed"]: w["after"] for w in warmups}
    paired = [r for r in records if r["seed"] in after]
    if paired:
        contrasts([r["scored"] for r in paired], [after[r["seed"]] for r in paired], "state - after the warm-up")


def contrasts(later: list[dict[str, Any]], earlier: list[dict[str, Any]], label: str) -> None:
    """``later - earlier`` over the seeds, paired, for each figure."""
    for key in KEYS:
        pairs = [(x[key], y[key]) for x, y in zip(later, earlier, strict=True)]
        if any(math.isnan(value) for pair in pairs for value in pair):  # shorter_scores_higher without a pair
            print(f"{label}, {key}: not defined in every seed")
            continue
        print(f"{label}, {key}: {paired_contrast([x for x, _ in pairs], [y for _, y in pairs])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-file", type=Path, help="Atropos's reasoning_gym_environment.py")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--items", type=int, default=32, help="problems measured per seed (default 32)")
    parser.add_argument(
        "--group-size", type=int, default=8, help="answers per problem (default 8, as the earlier attempt)"
    )
    parser.add_argument("--warmup-steps", type=int, default=4, help="(default 4, as preset=smollm2)")
    parser.add_argument("--warmup-batch", type=int, default=32, help="(default 32, as preset=smollm2)")
    parser.add_argument(
        "--learning-rate", type=float, default=1e-3, help="the warm-up's (default 1e-3, as preset=smollm2's)"
    )
    parser.add_argument("--out", type=Path, help="write seed<N>.json here")
    parser.add_argument(
        "--states",
        type=Path,
        default=Path("runs/atropos-format"),
        help="where the warm-ups are saved, for `python -m gemlab.atropos init_state=...` (runs/atropos-format)",
    )
    parser.add_argument(
        "--before-from",
        type=Path,
        metavar="DIR",
        help="take the base model's measure from DIR's seed<N>.json instead of sampling it again",
    )
    parser.add_argument(
        "--state",
        help="score these saved weights (e.g. `gemlab.atropos`'s checkpoint after RL) on the one seed's problems "
        "instead of warming up; writes state-seed<N>.json",
    )
    parser.add_argument(
        "--report", type=Path, metavar="DIR", help="print the tables of the seed<N>.json and state-seed<N>.json in DIR"
    )
    args = parser.parse_args(argv)
    if args.report:
        results = [json.loads(path.read_text()) for path in sorted(args.report.glob("seed*.json"))]
        states = [json.loads(path.read_text()) for path in sorted(args.report.glob("state-seed*.json"))]
        if not results and not states:
            print(f"atropos_format: no seed<N>.json or state-seed<N>.json in {args.report}", file=sys.stderr)
            return 2
        report(results)
        report_states(states, results)
        return 0
    if args.state and len(args.seeds) != 1:
        print(
            "atropos_format: --state scores one run: give the one seed it was trained with (--seeds N)", file=sys.stderr
        )
        return 2
    if args.env_file is None or not args.env_file.is_file():
        print(f"atropos_format: --env-file must name Atropos's reasoning_gym_environment.py (got {args.env_file})",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.state:
        (seed,) = args.seeds
        record = score_state(args, seed)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"state-seed{seed}.json").write_text(json.dumps(record, indent=1))
        report_states([record], [])
        return 0
    results = []
    for seed in args.seeds:
        result = run_seed(args, seed)
        results.append(result)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"seed{seed}.json").write_text(json.dumps(result, indent=1))
        report([result])
    if len(results) > 1:
        contrasts([r["after"] for r in results], [r["before"] for r in results], "after - before")
    return 0


if __name__ == "__main__":
    sys.exit(main())
