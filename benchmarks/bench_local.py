"""Speed of gemlab's local backend as ratios to the hardware's limit and to the plain library, all
measured in one run: sampling, forward_backward, the bfloat16 mode, and the tiny laptop step.

    python benchmarks/bench_local.py                       # everything (about 10 minutes on 2 cores)
    python benchmarks/bench_local.py --skip-smollm2        # the tiny model only

- **limit**: one core's float32 matmul peak, the best of a few 2048x2048 ``torch.mm`` on one
  thread (smaller on a CPU too slow for them; ``tinker_emulator.precision.matmul_rate``). A phase's
  efficiency is ``FLOPs / (CPU-seconds x peak per core)``: the share of the peak it gets from
  every CPU-second it burns, whatever the thread count. FLOPs are counted by
  ``torch.utils.flop_counter.FlopCounterMode`` on the thread that does the work (matmuls and
  attention, LoRA included).
- **plain library**: ``transformers`` ``generate`` (sampling) and a plain PEFT loop
  (forward_backward + AdamW; micro-batches of 2 sequences, as 16 at once do not fit in memory; 16
  for the preset's shape, 4 problems x 16 short answers) on the same weights, LoRA rank and thread
  count, in this process.
- **bfloat16**: ``GEMLAB_DTYPE=bfloat16`` for the same work, and the logprob difference it costs:
  bf16 sampler vs float32 learner (what switching costs) and bf16 sampler vs bf16 learner (what
  ``train/kl_sample_train`` then shows); left out where bfloat16's matmul peak is under a quarter
  of float32's (an AVX2-only CPU: about 1/60).
- **steps**: wall and CPU seconds of a ``preset=smollm2`` RL step (64 episodes; the base model,
  whose answers run to ``max_tokens``) and of a ``preset=laptop`` step, vs their compute floor
  (counted FLOPs at the per-core peak).

Each timing is the best of ``--repeats`` runs after a warm-up run. Not a test: the figures depend
on the machine and its load (printed before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode
from tinker import types

from gemlab.datums import policy_gradient_datum
from tinker_emulator import SMOLLM2, TINY, LocalServiceClient
from tinker_emulator.futures import ROLES, get_worker
from tinker_emulator.models import build_model, model_source
from tinker_emulator.precision import DTYPE_ENV, matmul_rate

PREAMBLE = (
    "<|im_start|>user\nYou are playing language games. Make valid actions to win.\n"
    "Observation: I'm thinking of a number between 1 and 10. You have 4 turns to guess it."
)
PROMPT = PREAMBLE + "\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"


def turn_two_prompt(i: int) -> str:
    """A second-turn prompt: the shared preamble, then a history that differs per env."""
    guess = 1 + i % 10
    verdict = ["too low", "too high"][i % 2]
    return (
        PREAMBLE + f"\\boxed{{{guess}}}\nAt turn 1, you guessed {guess}, which is {verdict}." + " " * (i % 3)
        + "\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )


def timed(repeats: int, fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of the fastest of ``repeats`` runs, after a warm-up."""
    fn()
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
    return best


def count_flops_on_workers(fn: Callable[[], Any]) -> int:
    """FLOPs that ``fn`` makes the local backend's worker threads compute (modes are per thread)."""
    modes = {role: FlopCounterMode(display=False) for role in ROLES}
    for role, mode in modes.items():
        get_worker(role).submit(mode.__enter__).result()
    try:
        fn()
    finally:
        for role, mode in modes.items():
            get_worker(role).submit(lambda mode=mode: mode.__exit__(None, None, None)).result()
    return sum(mode.get_total_flops() for mode in modes.values())


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs ``fn`` computes on this thread."""
    with FlopCounterMode(display=False) as mode:
        fn()
    return mode.get_total_flops()


class Report:
    """Rows of the speed table."""

    def __init__(self, peak: float) -> None:
        self.peak = peak
        print(f"{'what':66} {'wall s':>7} {'CPU s':>7} {'GFLOP':>7} {'% peak/CPU-s':>12} {'speed-up (CPU s, wall)':>23}")

    def row(self, what: str, wall: float, cpu: float, flops: float, baseline: tuple[float, float] | None = None) -> None:
        """One line; ``baseline`` is the (wall, CPU) seconds this row is compared with."""
        efficiency = 100 * flops / (cpu * self.peak) if cpu > 0 else float("nan")
        ratio = f"{baseline[1] / cpu:8.2f}x {baseline[0] / wall:8.2f}x" if baseline else ""
        print(f"{what:66} {wall:7.2f} {cpu:7.2f} {flops / 1e9:7.1f} {efficiency:11.0f}% {ratio:>23}", flush=True)


# ----- sampling -------------------------------------------------------------------------------
def local_sampling(sampler: Any, prompts: list[list[int]], max_tokens: int) -> Callable[[], Any]:
    """All prompts as concurrent requests (one batch), each generating exactly ``max_tokens``."""

    async def run() -> Any:
        params = [types.SamplingParams(max_tokens=max_tokens, stop=[], seed=i) for i in range(len(prompts))]
        return await asyncio.gather(
            *[sampler.sample(types.ModelInput.from_ints(p), 1, s) for p, s in zip(prompts, params)]
        )

    return lambda: asyncio.run(run())


def plain_generate(model: Any, prompts: list[list[int]], max_tokens: int, pad_id: int) -> Callable[[], Any]:
    """``transformers`` ``generate`` on the same prompts (left-padded batch), sampling at temperature 1."""
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1

    def run() -> Any:
        with torch.inference_mode():
            return model.generate(
                input_ids=ids, attention_mask=mask, do_sample=True, top_k=0, top_p=1.0, max_new_tokens=max_tokens,
                min_new_tokens=max_tokens, pad_token_id=pad_id,
            )

    return run


# ----- training -------------------------------------------------------------------------------
def training_data(prompt: list[int], rows: int, length: int, vocab: int) -> list[types.Datum]:
    """``rows`` datums of ``length`` tokens: the prompt, then random action tokens with advantage 1."""
    g = torch.Generator().manual_seed(0)
    actions = length + 1 - len(prompt)
    return [policy_gradient_datum(prompt, torch.randint(0, vocab, (actions,), generator=g).tolist(), [0.0] * actions, 1.0) for _ in range(rows)]


def grouped_training_data(prompt: list[int], problems: list[list[int]], answers: int, answer_tokens: int, vocab: int) -> list[types.Datum]:
    """A GRPO step's shape: ``answers`` datums per problem, each the prompt and the problem, then
    ``answer_tokens`` random action tokens with advantage 1."""
    g = torch.Generator().manual_seed(0)
    return [
        policy_gradient_datum(prompt + problem, torch.randint(0, vocab, (answer_tokens,), generator=g).tolist(), [0.0] * answer_tokens, 1.0)
        for problem in problems
        for _ in range(answers)
    ]


def plain_peft_loop(name: str, data: list[types.Datum], rank: int, micro: int = 2) -> Callable[[], Any]:
    """The same update written directly on PEFT: importance-sampling loss, backward, AdamW."""
    from peft import LoraConfig, get_peft_model

    model = build_model(name)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=32, target_modules=targets, task_type="CAUSAL_LM"))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    ids = torch.tensor([d.model_input.to_ints() for d in data])
    targets_t = torch.stack([d.loss_fn_inputs["target_tokens"].to_torch() for d in data])
    q = torch.stack([d.loss_fn_inputs["logprobs"].to_torch() for d in data])
    adv = torch.stack([d.loss_fn_inputs["advantages"].to_torch() for d in data])

    def run() -> None:
        for start in range(0, len(data), micro):
            part = slice(start, start + micro)
            logits = model(input_ids=ids[part]).logits.float()
            lp = torch.log_softmax(logits, -1).gather(-1, targets_t[part, :, None])[..., 0]
            (-(torch.exp(lp - q[part]) * adv[part]).sum()).backward()
        optimizer.step()
        optimizer.zero_grad()

    return run


# ----- the benchmark --------------------------------------------------------------------------
def bench_smollm2(
    report: Report, repeats: int, requests: int, max_tokens: int, rows: int, length: int, parts: list[str], bf16_ratio: float
) -> None:
    """Sampling against ``generate``; training (and bfloat16) against a plain PEFT loop. bfloat16 is
    left out where its matmul peak is under a quarter of float32's (``bf16_ratio``): its passes would
    take many times as long to say what that ratio already says."""
    service = LocalServiceClient(root=tempfile.mkdtemp(prefix="gemlab-bench-"))
    training = service.create_lora_training_client(base_model=SMOLLM2, rank=32, seed=0).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    tokenizer = training.get_tokenizer()
    threads = training._model.cpu_threads
    torch.set_num_threads(threads)
    print(f"\n{SMOLLM2}: {threads} torch thread(s) per pass (the other worker idle); plain library on {threads} thread(s) too")
    plain_model = build_model(SMOLLM2).eval() if "sampling" in parts else None
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scenarios = {
        "turn 1 (same prompt)": [tokenizer.encode(PROMPT)] * requests,
        "turn 2 (shared preamble, own history)": [tokenizer.encode(turn_two_prompt(i)) for i in range(requests)],
    }
    for label, prompts in scenarios.items() if "sampling" in parts else ():
        run_local = local_sampling(sampler, prompts, max_tokens)
        run_plain = plain_generate(plain_model, prompts, max_tokens, pad)
        local_flops = count_flops_on_workers(run_local)
        plain_flops = count_flops(run_plain)
        plain = timed(repeats, run_plain)
        local = timed(repeats, run_local)
        what = f"sample {requests}x{max_tokens} tok, {label}"
        report.row(f"{what}: plain generate", *plain, plain_flops)
        report.row(f"{what}: local", *local, local_flops, plain)
    del plain_model
    if "training" not in parts:
        return
    prompt = tokenizer.encode(PROMPT)
    data = training_data(prompt, rows, length, len(tokenizer))

    def train() -> None:
        training.forward_backward(data, "importance_sampling").result()
        training.optim_step(types.AdamParams(learning_rate=1e-5)).result()

    plain = plain_peft_loop(SMOLLM2, data, rank=32)
    plain_flops = count_flops(plain)
    plain_times = timed(repeats, plain)
    del plain
    flops = count_flops_on_workers(train)
    fp32_train = timed(repeats, train)
    report.row(f"forward_backward+optim {rows}x{length} tok: plain PEFT loop", *plain_times, plain_flops)
    report.row(f"forward_backward+optim {rows}x{length} tok: local", *fp32_train, flops, plain_times)

    # the preset's step: 4 problems x 16 answers of max_tokens (problems of one length, for the plain loop's batch)
    problems = [tokenizer.encode(f"Calculate {a} + {a + 1}.<|im_end|>") for a in range(1, 5)]
    grouped = grouped_training_data(prompt, problems, 16, max_tokens, len(tokenizer))

    def train_grouped() -> None:
        training.forward_backward(grouped, "importance_sampling").result()
        training.optim_step(types.AdamParams(learning_rate=1e-5)).result()

    plain = plain_peft_loop(SMOLLM2, grouped, rank=32, micro=16)
    plain_grouped = timed(repeats, plain), count_flops(plain)
    del plain
    what = f"forward_backward+optim 4 problems x 16 answers of {max_tokens} tok"
    report.row(f"{what}: plain PEFT loop", *plain_grouped[0], plain_grouped[1])
    report.row(f"{what}: local", *timed(repeats, train_grouped), count_flops_on_workers(train_grouped), plain_grouped[0])

    # bfloat16: the same sampling and training, and the logprob difference it costs
    if bf16_ratio < 0.25:
        print(f"  bfloat16 left out: its matmul peak is {bf16_ratio:.3f} of float32's on this CPU (GEMLAB_DTYPE=bfloat16 would be slower)")
        return
    prompts = scenarios["turn 2 (shared preamble, own history)"]
    local_flops = count_flops_on_workers(local_sampling(sampler, prompts, max_tokens))
    fp32_sample = timed(repeats, local_sampling(sampler, prompts, max_tokens))
    os.environ[DTYPE_ENV] = "bfloat16"
    try:
        bf16_sample = timed(repeats, local_sampling(sampler, prompts, max_tokens))
        bf16_train = timed(repeats, train)
        responses = local_sampling(sampler, prompts, max_tokens)()
        sampled = [[s.logprobs for s in r.sequences][0] for r in responses]
        lp_bf16 = learner_logprobs(training, prompts, responses)
    finally:
        os.environ.pop(DTYPE_ENV)
    lp_fp32 = learner_logprobs(training, prompts, responses)
    report.row(f"sample {requests}x{max_tokens} tok turn 2: local bfloat16 (vs local float32)", *bf16_sample, local_flops, fp32_sample)
    report.row(f"forward_backward+optim {rows}x{length} tok: local bfloat16 (vs float32)", *bf16_train, flops, fp32_train)
    for label, learner in (("float32 learner", lp_fp32), ("bfloat16 learner", lp_bf16)):
        diffs = [abs(a - b) for sampled_row, learner_row in zip(sampled, learner) for a, b in zip(sampled_row, learner_row)]
        print(f"  bf16 sampler vs {label}: mean |logprob diff| {statistics.mean(diffs):.4f} nats, max {max(diffs):.3f}")


def learner_logprobs(training: Any, prompts: list[list[int]], responses: list[Any]) -> list[list[float]]:
    """The learner's logprobs of each sampled action (``forward``, no update)."""
    data = []
    for prompt, response in zip(prompts, responses):
        tokens = prompt + list(response.sequences[0].tokens)
        data.append(types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
        ))
    out = training.forward(data, "cross_entropy").result()
    return [o["logprobs"].to_torch()[len(p) - 1 :].tolist() for o, p in zip(out.loss_fn_outputs, prompts)]


def bench_step(report: Report, label: str, config: Any, steps: int) -> None:
    """Wall and CPU seconds of a Trainer step (the median of ``steps``, after a warm-up step) against
    its floor: its counted FLOPs at the per-core peak, on one core and on every core."""
    from gemlab.trainer import Trainer

    trainer = Trainer(config, progress=False)
    trainer.step()  # warm-up: the sampler's model copy loads here
    cpu_times, walls, samples, trains = [], [], [], []
    for _ in range(steps):
        wall, cpu = time.perf_counter(), time.process_time()
        metrics = trainer.step()
        walls.append(time.perf_counter() - wall)
        cpu_times.append(time.process_time() - cpu)
        samples.append(metrics["time/sample"])
        trains.append(metrics["time/train"])
    flops = count_flops_on_workers(lambda: [trainer.step() for _ in range(2)]) / 2
    trainer.close()
    floor = flops / report.peak
    cpu, wall = statistics.median(cpu_times), statistics.median(walls)
    cores = os.cpu_count() or 1
    print(f"\n{label}: median of {steps}: wall {wall:.2f} s (sampling {statistics.median(samples):.2f} s, training "
          f"{statistics.median(trains):.2f} s), {cpu:.2f} CPU-s; {flops / 1e9:.1f} GFLOP -> floor {floor:.2f} CPU-s: "
          f"{cpu / floor:.1f}x the floor in CPU-s, {wall / (floor / cores):.1f}x it in wall s on {cores} cores")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--requests", type=int, default=32, help="concurrent sampling requests")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per sample (the smollm2 preset's max_tokens)")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=300)
    parser.add_argument("--tiny-steps", type=int, default=10)
    parser.add_argument("--smollm2-steps", type=int, default=3, help="preset=smollm2 steps to time (0: none)")
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--parts", nargs="+", default=["sampling", "training"], choices=["sampling", "training"],
                        help="SmolLM2 parts to run (training includes bfloat16)")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs visible, load {os.getloadavg()}")
    peak, bf16_peak = matmul_rate(), matmul_rate(torch.bfloat16)
    print(f"limit: {peak / 1e9:.0f} GFLOP per CPU-second float32 (torch.mm of up to 2048^3, 1 thread); bfloat16 {bf16_peak / 1e9:.1f}")
    report = Report(peak)
    if not args.skip_smollm2 and args.parts:
        try:
            model_source(SMOLLM2)
        except FileNotFoundError as exc:
            print(f"{SMOLLM2} skipped: {exc}")
        else:
            bench_smollm2(report, args.repeats, args.requests, args.max_tokens, args.rows, args.length, args.parts, bf16_peak / peak)
    from gemlab.config import make_config

    log_dir = tempfile.mkdtemp(prefix="gemlab-bench-")
    if not args.skip_smollm2 and args.smollm2_steps:
        # the recipe's RL step on the base model (no warm-up: its answers run to max_tokens, the longest step)
        config = make_config("smollm2", log_dir=log_dir, warmup_steps=0, eval_every=0, max_steps=10_000)
        bench_step(report, f"{SMOLLM2} preset=smollm2 step (64 episodes: 4 problems x 16 answers)", config, args.smollm2_steps)
    bench_step(report, f"{TINY} laptop step", make_config("laptop", log_dir=log_dir, max_steps=10_000), args.tiny_steps)
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
