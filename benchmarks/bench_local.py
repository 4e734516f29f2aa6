"""Speed of gemlab's local backend as ratios to the hardware's limit and to the plain library, all
measured in one run: sampling, forward_backward, multi-turn and single-turn RL steps, bfloat16
against float32, and the preset steps.

    python benchmarks/bench_local.py                       # everything, native then AVX2-only (over an hour on 2 cores)
    python benchmarks/bench_local.py --isa native          # everything on this CPU's own kernels (about 30 minutes)
    python benchmarks/bench_local.py --parts tool --smollm2-steps 0 --tiny-steps 0   # the tool task's step and
    evaluation
    python benchmarks/bench_local.py --parts steps --smollm2-steps 0 --tiny-steps 0 --ablations   # the RL steps
    python benchmarks/bench_local.py --skip-smollm2        # the tiny model only

- **native and AVX2-only** (``--isa``, both by default): each ISA runs in a process of its own, the
  second with ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` (PyTorch's and oneDNN's AVX2
  kernels only: a laptop without AVX-512, where bfloat16 brings nothing), one after the other; the
  table at the end puts each row's two figures side by side, under the CPU's name.

- **limit**: one core's matmul peak in the dtype the model computes in (float32, or bfloat16
  where the backend chose it: ``tinker_emulator.precision``), the best of a few 2048x2048 ``torch.mm``
  on one thread (smaller on a CPU too slow for them; ``precision.matmul_rate``). A phase's
  efficiency is ``FLOPs / (CPU-seconds x peak per core)``: the share of the peak it gets from
  every CPU-second it burns, whatever the thread count. FLOPs are counted by
  ``torch.utils.flop_counter.FlopCounterMode`` on the thread that does the work (matmuls and
  attention, LoRA included).
- **plain library**: ``transformers`` ``generate`` (sampling) and a plain PEFT loop
  (forward_backward + AdamW; micro-batches of 2 sequences, as 16 at once do not fit in memory; 16
  for the preset's shape, 4 problems x 16 short answers) on the same weights in the same dtype,
  LoRA rank and thread count, in this process.
- **RL steps** (``steps``): 64 episodes in 4 groups of a synthetic conversation (``StepShape``):
  multi-turn, 4 turns of 20-token actions each followed by a 21-token reply (the turn's end, a
  user message, the next header), and single-turn, one 16-token answer (the smollm2 preset's
  shape); sampling, ``gemlab.step``'s prepare and update, against the plain way on one PEFT model
  (``generate`` on each turn's whole history, one datum per turn). ``--ablations`` adds the local
  multi-turn step without the turns kept and with a datum per turn.
- **bfloat16**: where the backend chose it, the same sampling and training on float32 weights, and
  the logprob difference bfloat16 costs: bf16 sampler vs float32 learner (what switching costs)
  and bf16 sampler vs bf16 learner (what ``train/logprob_diff_abs`` then shows; the RL steps print
  it too).
- **llama.cpp** (where ``llama-cpp-python`` imports): the same prompts through llama.cpp on the GGUF
  file SmolLM2 is loaded from (``--gguf`` for another), one request after another as its Python
  API serves them (each reusing the previous prompt's matching prefix), sampling at temperature 1
  on the same thread count: the anchor the local sampler is compared with. Its kernels are the
  ones it was built for (its system line is printed), whatever ``--isa`` says.
- **sampling's floors**: each sampling row also prints its floor: the larger of the compute floor
  (counted FLOPs at the per-core peak) and the memory floor (every decoding step reads the weights
  once, at the bandwidth of one thread copying 256 MB).
- **the tool task** (``tool``): ``preset=smollm2-tool`` as it runs (the preset's warm-up first):
  the 64-episode held-out evaluation, and RL steps (rounds of 64 episodes of up to two turns until
  the preset's 128 transitions: two while the model seldom calls the tool; sampling with GEM's
  python tool in gemlab's sandbox, then the update), with the sampler/learner logprob gap; FLOPs
  counted on one more step.
- **preset steps**: wall and CPU seconds of a ``preset=smollm2`` RL step (64 episodes; the base
  model, whose answers run to ``max_tokens``) and of a ``preset=laptop`` step, vs their compute
  floor (counted FLOPs at the per-core peak).

Each timing is the best of ``--repeats`` runs after a warm-up run (``--step-repeats`` for the RL
steps). Not a test: the figures depend on the machine and its load (printed before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tinker import types
from torch.utils.flop_counter import FlopCounterMode

from gemlab.datums import policy_gradient_datum
from tinker_emulator import SMOLLM2, TINY, LocalServiceClient, models
from tinker_emulator.futures import ROLES, get_worker
from tinker_emulator.models import build_model, load_tokenizer, model_source
from tinker_emulator.precision import DTYPE_ENV, matmul_rate
from tinker_emulator.turn_cache import BUDGET_ENV

PREAMBLE = (
    "<|im_start|>user\nYou are playing language games. Make valid actions to win.\n"
    "Observation: I'm thinking of a number between 1 and 10. You have 4 turns to guess it."
)
PROMPT = PREAMBLE + (
    "\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
)


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


@dataclass
class Row:
    """One measured row: seconds, FLOPs, the share of the peak, and the ratio to its baseline."""

    what: str
    wall: float
    cpu: float
    gflop: float
    efficiency: float  # % of the per-core peak per CPU-second
    ratio: str = ""  # "CPU-s x  wall x" against the baseline, or a note (the floor)


class Report:
    """Rows of the speed table, printed as they come and kept for the table of both ISAs."""

    def __init__(self, peak: float) -> None:
        self.peak = peak
        self.rows: list[Row] = []
        print(
            f"{'what':66} {'wall s':>7} {'CPU s':>7} {'GFLOP':>7} {'% peak/CPU-s':>12} {'speed-up (CPU s, wall)':>23}"
        )

    def row(
        self,
        what: str,
        wall: float,
        cpu: float,
        flops: float,
        baseline: tuple[float, float] | None = None,
        note: str = "",
    ) -> None:
        """One line; ``baseline`` is the (wall, CPU) seconds this row is compared with."""
        efficiency = 100 * flops / (cpu * self.peak) if cpu > 0 else float("nan")
        ratio = f"{baseline[1] / cpu:8.2f}x {baseline[0] / wall:8.2f}x" if baseline else note
        self.rows.append(Row(what, wall, cpu, flops / 1e9, efficiency, ratio.strip()))
        print(f"{what:66} {wall:7.2f} {cpu:7.2f} {flops / 1e9:7.1f} {efficiency:11.0f}% {ratio:>23}", flush=True)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    info = Path("/proc/cpuinfo")
    for line in info.read_text().splitlines() if info.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def memory_bandwidth(megabytes: int = 256) -> float:
    """Bytes per second one thread moves copying a ``megabytes`` tensor (read + write), the best of five."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        source = torch.ones(megabytes << 18)  # float32: 4 bytes each
        target = torch.empty_like(source)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            target.copy_(source)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return 2 * source.nbytes / best


def sampling_floor(flops: float, peak: float, weight_bytes: int, decoding_steps: int, bandwidth: float) -> str:
    """The row's floor: compute (FLOPs at one core's peak) or memory (the weights read once per
    decoding step), whichever is larger, as ``floor s (which)``."""
    compute, memory = flops / peak, weight_bytes * decoding_steps / bandwidth
    return f"floor {max(compute, memory):.2f} s ({'compute' if compute >= memory else 'memory'}; memory {memory:.2f} s)"


# ----- sampling -------------------------------------------------------------------------------
def local_sampling(sampler: Any, prompts: list[list[int]], max_tokens: int) -> Callable[[], Any]:
    """All prompts as concurrent requests (one batch), each generating exactly ``max_tokens``."""

    async def run() -> Any:
        params = [types.SamplingParams(max_tokens=max_tokens, stop=[], seed=i) for i in range(len(prompts))]
        return await asyncio.gather(
            *[sampler.sample(types.ModelInput.from_ints(p), 1, s) for p, s in zip(prompts, params, strict=True)]
        )

    return lambda: asyncio.run(run())


def llama_cpp_sampler(gguf: Path | None, threads: int) -> Callable[[list[list[int]], int], None] | None:
    """A function that samples ``max_tokens`` tokens after each prompt in turn with llama.cpp on
    ``gguf`` (default: the GGUF file SmolLM2 is loaded from), or None, saying why, where
    ``llama-cpp-python`` does not import or there is no such file."""
    try:
        import llama_cpp
    except ImportError:
        print("llama.cpp rows skipped: llama-cpp-python is not installed (pip install llama-cpp-python)")
        return None
    source, kwargs = model_source(SMOLLM2)
    path = gguf or (Path(source) / kwargs["gguf_file"] if "gguf_file" in kwargs else None)
    if path is None or not Path(path).is_file():
        print(f"llama.cpp rows skipped: no GGUF file ({path or 'SmolLM2 is not loaded from one'}; pass --gguf)")
        return None
    llm = llama_cpp.Llama(
        model_path=str(path), n_ctx=2048, n_threads=threads, n_threads_batch=threads, seed=0, verbose=False
    )
    print(f"llama.cpp {llama_cpp.__version__} on {Path(path).name}: {llama_cpp.llama_print_system_info().decode()}")

    def run(prompts: list[list[int]], max_tokens: int) -> None:
        for prompt in prompts:  # each request reuses the previous one's matching prefix in llama.cpp's cache
            tokens = llm.generate(prompt, top_k=0, top_p=1.0, min_p=0.0, temp=1.0)
            for _ in zip(range(max_tokens), tokens, strict=False):
                pass

    return run


def left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts as one left-padded batch of token ids, and its attention mask."""
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    return ids, mask


def plain_generate(model: Any, prompts: list[list[int]], max_tokens: int, pad_id: int) -> Callable[[], Any]:
    """``transformers`` ``generate`` on the same prompts (left-padded batch), sampling at temperature 1."""
    ids, mask = left_padded(prompts, pad_id)

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
    return [
        policy_gradient_datum(prompt, torch.randint(0, vocab, (actions,), generator=g).tolist(), [0.0] * actions, 1.0)
        for _ in range(rows)
    ]


def grouped_training_data(
    prompt: list[int], problems: list[list[int]], answers: int, answer_tokens: int, vocab: int
) -> list[types.Datum]:
    """A GRPO step's shape: ``answers`` datums per problem, each the prompt and the problem, then
    ``answer_tokens`` random action tokens with advantage 1."""
    g = torch.Generator().manual_seed(0)
    return [
        policy_gradient_datum(
            prompt + problem,
            torch.randint(0, vocab, (answer_tokens,), generator=g).tolist(),
            [0.0] * answer_tokens,
            1.0,
        )
        for problem in problems
        for _ in range(answers)
    ]


def plain_peft_loop(
    name: str, dtype: torch.dtype, data: list[types.Datum], rank: int, micro: int = 2
) -> Callable[[], Any]:
    """The same update written directly on PEFT, the model in ``dtype``: importance-sampling loss, backward, AdamW."""
    from peft import LoraConfig, get_peft_model

    model = build_model(name).to(dtype)
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
def bench_smollm2(report: Report, args: argparse.Namespace, peaks: dict[torch.dtype, float]) -> None:
    """Sampling against ``generate``; training against a plain PEFT loop; the RL steps against both;
    and, where the backend chose bfloat16, the same work on float32 weights, with the logprob
    difference that bfloat16 costs. The plain library computes in the dtype the backend chose."""
    service = LocalServiceClient(root=tempfile.mkdtemp(prefix="gemlab-bench-"))
    training = service.create_lora_training_client(base_model=SMOLLM2, rank=32, seed=0).result()
    sampler = training.save_weights_and_get_sampling_client().result()
    tokenizer = training.get_tokenizer()
    dtype = training._model.dtype
    report.peak = peaks[dtype]
    threads = training._model.cpu_threads
    torch.set_num_threads(threads)
    print(
        f"\n{SMOLLM2}: weights in {dtype} (GEMLAB_DTYPE={os.environ.get(DTYPE_ENV) or 'auto'}); % peak against "
        f"the {dtype} peak; "
        f"{threads} torch thread(s) per pass (the other worker idle); plain library on {threads} thread(s) too"
    )
    requests, max_tokens, repeats = args.requests, args.max_tokens, args.repeats
    scenarios = {
        "turn 1 (same prompt)": [tokenizer.encode(PROMPT)] * requests,
        "turn 2 (shared preamble, own history)": [tokenizer.encode(turn_two_prompt(i)) for i in range(requests)],
    }
    if "sampling" in args.parts:
        bandwidth = memory_bandwidth()
        print(f"memory bandwidth: {bandwidth / 1e9:.1f} GB/s (one thread copying 256 MB)")
        plain_model = build_model(SMOLLM2).to(dtype).eval()
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        llama = llama_cpp_sampler(args.gguf, threads)
        for label, prompts in scenarios.items():
            run_local = local_sampling(sampler, prompts, max_tokens)
            run_plain = plain_generate(plain_model, prompts, max_tokens, pad)
            local_flops = count_flops_on_workers(run_local)
            plain_flops = count_flops(run_plain)
            plain = timed(repeats, run_plain)
            local = timed(repeats, run_local)
            what = f"sample {requests}x{max_tokens} tok, {label}"
            report.row(f"{what}: plain generate", *plain, plain_flops)
            report.row(f"{what}: local", *local, local_flops, plain)
            if llama is not None:
                anchor = timed(repeats, lambda prompts=prompts: llama(prompts, max_tokens))
                report.row(f"{what}: llama.cpp", *anchor, local_flops, plain)
                report.row(f"{what}: local vs llama.cpp", *local, local_flops, anchor)
            # read every step
            weights = sum(m.weight.nbytes for m in plain_model.modules() if isinstance(m, torch.nn.Linear))
            report.row(
                f"{what}: local vs its floor",
                *local,
                local_flops,
                note=sampling_floor(local_flops, report.peak, weights, max_tokens, bandwidth),
            )
        del plain_model
    prompt = tokenizer.encode(PROMPT)
    data = training_data(prompt, args.rows, args.length, len(tokenizer))

    def train() -> None:
        training.forward_backward(data, "importance_sampling").result()
        training.optim_step(types.AdamParams(learning_rate=1e-5)).result()

    if "training" in args.parts:
        plain = plain_peft_loop(SMOLLM2, dtype, data, rank=32)
        plain_flops = count_flops(plain)
        plain_times = timed(repeats, plain)
        del plain
        report.row(f"forward_backward+optim {args.rows}x{args.length} tok: plain PEFT loop", *plain_times, plain_flops)
        report.row(
            f"forward_backward+optim {args.rows}x{args.length} tok: local",
            *timed(repeats, train),
            count_flops_on_workers(train),
            plain_times,
        )
        # the preset's shape: 4 problems x 16 answers of max_tokens (problems of one length, for the plain loop's batch)
        problems = [tokenizer.encode(f"Calculate {a} + {a + 1}.<|im_end|>") for a in range(1, 5)]
        grouped = grouped_training_data(prompt, problems, 16, max_tokens, len(tokenizer))

        def train_grouped() -> None:
            training.forward_backward(grouped, "importance_sampling").result()
            training.optim_step(types.AdamParams(learning_rate=1e-5)).result()

        plain = plain_peft_loop(SMOLLM2, dtype, grouped, rank=32, micro=16)
        plain_grouped = timed(repeats, plain), count_flops(plain)
        del plain
        what = f"forward_backward+optim 4 problems x 16 answers of {max_tokens} tok"
        report.row(f"{what}: plain PEFT loop", *plain_grouped[0], plain_grouped[1])
        report.row(
            f"{what}: local", *timed(repeats, train_grouped), count_flops_on_workers(train_grouped), plain_grouped[0]
        )
    if "tool" in args.parts:
        bench_tool(report, args.tool_steps, peaks)
    if "steps" in args.parts:
        stepper = service.create_lora_training_client(base_model=SMOLLM2, rank=8, seed=0).result()  # the preset's rank
        bench_steps(report, stepper, dtype, args.step_repeats, args.ablations)
    if dtype == torch.bfloat16:
        compare_float32(
            report, args, sampler, training, train, scenarios["turn 2 (shared preamble, own history)"], peaks
        )


@contextlib.contextmanager
def float32_models() -> Iterator[None]:
    """Clients created inside load their own float32 copies of the models (those loaded before stay as they are)."""
    loaded, models._models = models._models, {}
    os.environ[DTYPE_ENV] = "float32"
    try:
        yield
    finally:
        models._models = loaded
        os.environ.pop(DTYPE_ENV)


def compare_float32(
    report: Report,
    args: argparse.Namespace,
    sampler: Any,
    training: Any,
    train: Callable[[], None],
    prompts: list[list[int]],
    peaks: dict[torch.dtype, float],
) -> None:
    """The turn-2 sampling and the long training row on float32 weights (vs bfloat16), and the
    logprob difference between the bfloat16 sampler and a float32 and a bfloat16 learner."""
    bf16_sample = timed(args.repeats, local_sampling(sampler, prompts, args.max_tokens))
    bf16_train = timed(args.repeats, train)
    with float32_models():
        service = LocalServiceClient(root=tempfile.mkdtemp(prefix="gemlab-bench-"))
        fp32_training = service.create_lora_training_client(base_model=SMOLLM2, rank=32, seed=0).result()
        fp32_sampler = fp32_training.save_weights_and_get_sampling_client().result()
    run_sample = local_sampling(fp32_sampler, prompts, args.max_tokens)
    flops = count_flops_on_workers(run_sample)
    fp32_data = training_data(
        training.get_tokenizer().encode(PROMPT), args.rows, args.length, len(training.get_tokenizer())
    )

    def fp32_train() -> None:
        fp32_training.forward_backward(fp32_data, "importance_sampling").result()
        fp32_training.optim_step(types.AdamParams(learning_rate=1e-5)).result()

    train_flops = count_flops_on_workers(fp32_train)
    fp32_sample, fp32_train_times = timed(args.repeats, run_sample), timed(args.repeats, fp32_train)
    report.peak = peaks[torch.float32]
    report.row(f"sample {args.requests}x{args.max_tokens} tok turn 2: local, float32 weights", *fp32_sample, flops)
    report.row(
        f"forward_backward+optim {args.rows}x{args.length} tok: local, float32 weights", *fp32_train_times, train_flops
    )
    report.peak = peaks[torch.bfloat16]
    report.row(
        f"sample {args.requests}x{args.max_tokens} tok turn 2: local, bfloat16 (vs float32)",
        *bf16_sample,
        flops,
        fp32_sample,
    )
    report.row(
        f"forward_backward+optim {args.rows}x{args.length} tok: local, bfloat16 (vs float32)",
        *bf16_train,
        train_flops,
        fp32_train_times,
    )
    responses = local_sampling(sampler, prompts, args.max_tokens)()
    sampled = [r.sequences[0].logprobs for r in responses]
    for label, learner in (("float32 learner", fp32_training), ("bfloat16 learner", training)):
        diffs = [
            abs(a - b)
            for sampled_row, learner_row in zip(sampled, learner_logprobs(learner, prompts, responses), strict=True)
            for a, b in zip(sampled_row, learner_row, strict=True)
        ]
        print(f"  bf16 sampler vs {label}: mean |logprob diff| {statistics.mean(diffs):.4f} nats, max {max(diffs):.3f}")


# ----- steps: a multi-turn and a single-turn RL step of 64 episodes, local vs plain -----------
@dataclass(frozen=True)
class StepShape:
    """A synthetic RL step: ``episodes`` conversations in ``groups`` GRPO groups (each group shares its
    first prompt), ``turns`` turns of exactly ``action_tokens`` sampled tokens, the environment
    adding its reply (``REPLY``, 21 tokens with the turn's end and the next header) after each."""

    label: str
    turns: int
    action_tokens: int
    episodes: int = 64
    groups: int = 4


MULTI_TURN = StepShape("multi-turn", turns=4, action_tokens=20)
SINGLE_TURN = StepShape("single-turn", turns=1, action_tokens=16)
# what the environment adds after an action: the end of the turn, a user reply, the next header
REPLY = (
    "<|im_end|>\n<|im_start|>user\nNot quite: try another one, shorter this time.<|im_end|>\n<|im_start|>assistant\n"
)
TOPICS = ("a river", "the desert", "a forest", "the sea")


def first_prompts(tokenizer: Any, shape: StepShape) -> list[list[int]]:
    """Each group's opening question in the model's chat template, once per episode of the group."""
    per_group = shape.episodes // shape.groups
    questions = [
        f"Name an animal that lives in {TOPICS[g % len(TOPICS)]}, and say one fact about it."
        for g in range(shape.groups)
    ]
    rendered = [
        tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        )
        for q in questions
    ]
    return [rendered[e // per_group] for e in range(shape.episodes)]


def step_config(shape: StepShape) -> Any:
    from gemlab.config import make_config

    return make_config(
        "smollm2",
        batch_size=shape.episodes * shape.turns,
        num_env=shape.episodes,
        group_size=shape.episodes // shape.groups,
        log_dir=tempfile.mkdtemp(prefix="gemlab-bench-"),
        warmup_steps=0,
        eval_every=0,
        max_steps=10_000,
    )


SampleTurn = Callable[[list[list[int]], int], list[tuple[list[int], list[float]]]]


def play(sample_turn: SampleTurn, tokenizer: Any, shape: StepShape, step: int) -> Any:
    """A ``RolloutBatch`` of the shape's conversations: turn t+1's prompt is turn t's prompt, its
    action and the reply; the last turn's reward is 0 or 1 (seeded), so every group has a signal."""
    from gemlab.episodes import Episode, RolloutBatch, Transition

    prompts = first_prompts(tokenizer, shape)
    reply = tokenizer.encode(REPLY)
    turns: list[list[Transition]] = [[] for _ in prompts]
    rng = random.Random(step)
    for turn in range(shape.turns):
        actions = sample_turn(prompts, turn)
        last = turn == shape.turns - 1
        for played, prompt, (tokens, logprobs) in zip(turns, prompts, actions, strict=True):
            reward = float(rng.random() < 0.5) if last else 0.0
            played.append(
                Transition(obs_tokens=prompt, act_tokens=tokens, act_logprobs=logprobs, reward=reward, done=last)
            )
        prompts = [prompt + tokens + reply for prompt, (tokens, _) in zip(prompts, actions, strict=True)]
    per_group = shape.episodes // shape.groups
    return RolloutBatch([Episode(transitions=t, env_index=e, group=(0, e // per_group)) for e, t in enumerate(turns)])


def local_step(training: Any, shape: StepShape, merge: bool = True) -> Callable[[], dict[str, float]]:
    """The local backend's step: a snapshot sampler plays the conversations (each turn's requests
    together, as ``collect_batch`` sends them), then ``gemlab.step``'s prepare and update (merged
    datums; ``merge=False``: one datum per turn)."""
    from gemlab.datums import policy_gradient_datum, turn_output
    from gemlab.metrics import policy_metrics
    from gemlab.step import prepare, update

    config, tokenizer, steps = step_config(shape), training.get_tokenizer(), itertools.count()

    def run() -> dict[str, float]:
        step = next(steps)
        start = time.perf_counter()
        sampler = training.save_weights_and_get_sampling_client().result()

        def sample_turn(prompts: list[list[int]], turn: int) -> list[tuple[list[int], list[float]]]:
            async def turn_requests() -> list[Any]:
                return await asyncio.gather(
                    *[
                        sampler.sample(
                            types.ModelInput.from_ints(p),
                            1,
                            types.SamplingParams(
                                max_tokens=shape.action_tokens, stop=[], seed=1000 * step + 100 * turn + e
                            ),
                        )
                        for e, p in enumerate(prompts)
                    ]
                )

            return [(list(r.sequences[0].tokens), list(r.sequences[0].logprobs)) for r in asyncio.run(turn_requests())]

        batch = play(sample_turn, tokenizer, shape, step)
        sampler = None  # its snapshot is released before training
        sampled = time.perf_counter()
        prepared = prepare(batch, config, step)
        if not merge:
            prepared.datums = [
                policy_gradient_datum(t.obs_tokens, t.act_tokens, t.act_logprobs, a)
                for t, a in zip(prepared.transitions, prepared.advantages, strict=True)
            ]
            prepared.minibatches = [list(range(len(prepared.datums)))]
        outputs, _ = asyncio.run(update(training, prepared.datums, prepared.minibatches, config, step))
        trained = time.perf_counter()
        per_turn = [turn_output(outputs[p.datum], p) for p in prepared.placements] if merge else outputs
        gap = policy_metrics(prepared.transitions, per_turn)["train/logprob_diff_abs"]
        tokens = sum(d.model_input.length for d in prepared.datums)
        return {
            "sample": sampled - start,
            "train": trained - sampled,
            "gap": gap,
            "datums": len(prepared.datums),
            "tokens": tokens,
        }

    return run


def plain_step(
    name: str, dtype: torch.dtype, shape: StepShape, rank: int, micro: int
) -> Callable[[], dict[str, float]]:
    """The same step done the plain way, on one PEFT model in ``dtype``: ``generate`` each turn on
    the whole history (a left-padded batch, logprobs from its logits), then one datum per turn,
    ``micro`` datums a pass (right-padded), importance-sampling loss, AdamW."""
    from peft import LoraConfig, get_peft_model

    from gemlab.datums import policy_gradient_datum
    from gemlab.step import prepare_transitions

    model = build_model(name).to(dtype)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=32, target_modules=targets, task_type="CAUSAL_LM"))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    config, tokenizer, steps = step_config(shape), load_tokenizer(name), itertools.count()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def sample_turn(prompts: list[list[int]], turn: int) -> list[tuple[list[int], list[float]]]:
        ids, mask = left_padded(prompts, pad)
        width = ids.shape[1]
        model.eval()
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                top_k=0,
                top_p=1.0,
                max_new_tokens=shape.action_tokens,
                min_new_tokens=shape.action_tokens,
                pad_token_id=pad,
                output_logits=True,
                return_dict_in_generate=True,
            )
        new = out.sequences[:, width:]
        logprobs = torch.stack([torch.log_softmax(step_logits.float(), -1) for step_logits in out.logits], 1).gather(
            -1, new[..., None]
        )[..., 0]
        return [(new[i].tolist(), logprobs[i].tolist()) for i in range(len(prompts))]

    def run() -> dict[str, float]:
        step = next(steps)
        start = time.perf_counter()
        batch = play(sample_turn, tokenizer, shape, step)
        sampled = time.perf_counter()
        transitions, advantages = prepare_transitions(
            batch,
            gamma=config.gamma,
            advantage=config.advantage,
            batch_size=config.batch_size,
            rng=np.random.default_rng(step),
        )
        data = [
            policy_gradient_datum(t.obs_tokens, t.act_tokens, t.act_logprobs, a)
            for t, a in zip(transitions, advantages, strict=True)
        ]
        model.train()
        for first in range(0, len(data), micro):
            part = data[first : first + micro]
            width = max(d.model_input.length for d in part)
            ids, target, q, adv = (
                torch.zeros((len(part), width), dtype=t) for t in (torch.long, torch.long, torch.float32, torch.float32)
            )
            for i, d in enumerate(part):
                n = d.model_input.length
                ids[i, :n] = torch.tensor(d.model_input.to_ints())
                target[i, :n], q[i, :n], adv[i, :n] = (
                    d.loss_fn_inputs[k].to_torch() for k in ("target_tokens", "logprobs", "advantages")
                )
            logits = model(input_ids=ids).logits.float()
            lp = torch.log_softmax(logits, -1).gather(-1, target[..., None])[..., 0]
            (-(torch.exp(lp - q) * adv).sum()).backward()
        optimizer.step()
        optimizer.zero_grad()
        return {
            "sample": sampled - start,
            "train": time.perf_counter() - sampled,
            "datums": len(data),
            "tokens": sum(d.model_input.length for d in data),
        }

    return run


def timed_step(
    repeats: int, run: Callable[[], dict[str, float]], count: Callable[[Callable[[], Any]], int]
) -> tuple[float, float, float, dict[str, float]]:
    """(wall s, CPU s, FLOPs, what the step returned) of the fastest of ``repeats`` runs, after a
    warm-up run whose FLOPs ``count`` counts (every run does the same work: fixed-length actions)."""
    flops = count(run)
    best: tuple[float, float, float, dict[str, float]] | None = None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        info = run()
        result = (time.perf_counter() - wall, time.process_time() - cpu, flops, info)
        best = result if best is None or result[0] < best[0] else best
    assert best is not None
    return best


def bench_steps(report: Report, training: Any, dtype: torch.dtype, repeats: int, ablations: bool) -> None:
    """The multi-turn and the single-turn step, local against plain; with ``ablations``, the local
    multi-turn step without the turns kept (``GEMLAB_KV_CACHE_MB=0``) and without merged datums."""
    rank = training.get_info().lora_rank
    print(
        "\nRL steps of 64 episodes in 4 groups (synthetic conversations, fixed-length actions, 21-token "
        f"replies), LoRA rank {rank}, {dtype}"
    )
    for shape, micro in ((MULTI_TURN, 8), (SINGLE_TURN, 16)):
        what = f"{shape.label} step: 64 episodes x {shape.turns} turn(s) of {shape.action_tokens} tok"
        plain = timed_step(repeats, plain_step(SMOLLM2, dtype, shape, rank, micro), count_flops)
        local = timed_step(repeats, local_step(training, shape), count_flops_on_workers)
        report.row(f"{what}: plain generate + PEFT", *plain[:3])
        report.row(f"{what}: local", *local[:3], plain[:2])
        for label, (_, _, _, info) in (("plain", plain), ("local", local)):
            print(
                f"  {label}: sampling {info['sample']:.2f} s, training {info['train']:.2f} s on "
                f"{info['datums']} datums of {info['tokens']} tokens"
                + (f"; sampler/learner mean |logprob diff| {info['gap']:.4f} nats" if "gap" in info else "")
            )
        if ablations and shape is MULTI_TURN:
            os.environ[BUDGET_ENV] = "0"
            try:
                no_cache = timed_step(repeats, local_step(training, shape), count_flops_on_workers)
            finally:
                os.environ.pop(BUDGET_ENV)
            per_turn = timed_step(repeats, local_step(training, shape, merge=False), count_flops_on_workers)
            report.row(f"{what}: local, no turns kept (vs local)", *no_cache[:3], local[:2])
            report.row(f"{what}: local, a datum per turn (vs local)", *per_turn[:3], local[:2])
            for label, info in (("no turns kept", no_cache[3]), ("a datum per turn", per_turn[3])):
                print(
                    f"  local, {label}: sampling {info['sample']:.2f} s, training {info['train']:.2f} s on "
                    f"{info['datums']} datums of {info['tokens']} tokens"
                )


def learner_logprobs(training: Any, prompts: list[list[int]], responses: list[Any]) -> list[list[float]]:
    """The learner's logprobs of each sampled action (``forward``, no update)."""
    data = []
    for prompt, response in zip(prompts, responses, strict=True):
        tokens = prompt + list(response.sequences[0].tokens)
        data.append(types.Datum(
            model_input=types.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
        ))
    out = training.forward(data, "cross_entropy").result()
    return [o["logprobs"].to_torch()[len(p) - 1 :].tolist() for o, p in zip(out.loss_fn_outputs, prompts, strict=True)]


# ----- the tool task: preset=smollm2-tool as it runs -----------------------------------------
def bench_tool(report: Report, steps: int, peaks: dict[torch.dtype, float]) -> None:
    """``preset=smollm2-tool`` after its warm-up: the held-out evaluation of 64 two-turn episodes,
    then ``steps`` RL steps (sampling with the sandboxed python tool, then the update), each timed
    alone; FLOPs counted on one more step (the FLOP counter slows what it counts)."""
    from gemlab.config import make_config
    from gemlab.evaluate import evaluate_trainer
    from gemlab.trainer import Trainer

    config = make_config(
        "smollm2-tool", log_dir=tempfile.mkdtemp(prefix="gemlab-bench-"), eval_every=0, max_steps=10_000
    )
    trainer = Trainer(config, progress=False)
    try:
        trainer.warmup()
        dtype = trainer.training_client._model.dtype
        report.peak = peaks[dtype]
        wall, cpu = time.perf_counter(), time.process_time()
        result = evaluate_trainer(trainer)
        report.row(
            f"smollm2-tool: held-out evaluation, {config.eval_games} episodes",
            time.perf_counter() - wall,
            time.process_time() - cpu,
            0.0,
            note=f"success {result.success:.2f}",
        )
        rows = []
        for _ in range(steps):
            wall, cpu = time.perf_counter(), time.process_time()
            metrics = trainer.step()
            rows.append((time.perf_counter() - wall, time.process_time() - cpu, metrics))
        flops = count_flops_on_workers(trainer.step)
    finally:
        trainer.close()
    wall = statistics.median(r[0] for r in rows)
    cpu = statistics.median(r[1] for r in rows)
    sample = statistics.median(r[2]["time/sample"] for r in rows)
    train = statistics.median(r[2]["time/train"] for r in rows)
    gap = statistics.median(r[2].get("train/logprob_diff_abs", float("nan")) for r in rows)
    episodes = statistics.median(r[2]["sampler/num_episodes"] for r in rows)
    turns = statistics.median(r[2]["sampler/num_turns_per_episode"] for r in rows)
    label = f"smollm2-tool RL step, {episodes:.0f} episodes of {turns:.2f} turns (median of {steps})"
    report.row(label, wall, cpu, flops, note=f"sampling {sample:.1f} s, training {train:.1f} s")
    print(f"  sampler/learner mean |logprob diff| {gap:.4f} nats ({dtype}); peak RSS so far {peak_rss_gb():.2f} GB")


def peak_rss_gb() -> float:
    """This process's peak resident memory, in GB (Linux reports kB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def bench_step(report: Report, label: str, config: Any, steps: int, peaks: dict[torch.dtype, float]) -> None:
    """Wall and CPU seconds of a Trainer step (the median of ``steps``, after a warm-up step) against
    its floor: its counted FLOPs at the per-core peak of the dtype its model computes in, on one
    core and on every core."""
    from gemlab.trainer import Trainer

    trainer = Trainer(config, progress=False)
    trainer.step()  # warm-up: the sampler's model copy loads here
    dtype = trainer.training_client._model.dtype
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
    floor = flops / peaks[dtype]
    cpu, wall = statistics.median(cpu_times), statistics.median(walls)
    cores = os.cpu_count() or 1
    report.peak = peaks[dtype]
    report.row(
        f"{label.split(' (')[0]} (median of {steps})", wall, cpu, flops, note=f"{cpu / floor:.1f}x the floor in CPU-s"
    )
    print(
        f"\n{label}, {dtype}: median of {steps}: wall {wall:.2f} s (sampling {statistics.median(samples):.2f} "
        "s, training "
        f"{statistics.median(trains):.2f} s), {cpu:.2f} CPU-s; {flops / 1e9:.1f} GFLOP -> floor {floor:.2f} CPU-s: "
        f"{cpu / floor:.1f}x the floor in CPU-s, {wall / (floor / cores):.1f}x it in wall s on {cores} cores"
    )


ISAS = {"native": {}, "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--isa",
        nargs="+",
        default=list(ISAS),
        choices=list(ISAS),
        help="kernels to measure with, each in a process of its own: this CPU's own, and AVX2 only (a laptop's)",
    )
    parser.add_argument("--rows-to", help=argparse.SUPPRESS)  # a child process writes its rows here (JSON lines)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--step-repeats",
        type=int,
        default=1,
        help="timed runs of each RL step of the 'steps' part, after a counted warm-up",
    )
    parser.add_argument("--requests", type=int, default=32, help="concurrent sampling requests")
    parser.add_argument(
        "--max-tokens", type=int, default=16, help="tokens per sample (the smollm2 preset's max_tokens)"
    )
    parser.add_argument(
        "--gguf",
        type=Path,
        default=None,
        help="the GGUF file llama.cpp samples from (default: the one SmolLM2 is loaded from)",
    )
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=300)
    parser.add_argument("--tiny-steps", type=int, default=10)
    parser.add_argument("--smollm2-steps", type=int, default=3, help="preset=smollm2 steps to time (0: none)")
    parser.add_argument(
        "--tool-steps", type=int, default=2, help="preset=smollm2-tool RL steps to time, in the 'tool' part"
    )
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument(
        "--parts",
        nargs="*",
        default=["sampling", "training", "tool", "steps"],
        choices=["sampling", "training", "tool", "steps"],
        help="SmolLM2 parts to run (the float32 comparison runs with any, where the backend chose bfloat16)",
    )
    parser.add_argument(
        "--ablations",
        action="store_true",
        help="also the multi-turn step without the turns kept, and with a datum per turn",
    )
    args = parser.parse_args()
    if args.rows_to is None:
        side_by_side(args)
        return
    print(
        f"CPU: {cpu_name()}, {os.cpu_count()} CPUs visible; torch {torch.__version__} using "
        f"{torch.backends.cpu.get_cpu_capability()} kernels; "
        f"load {os.getloadavg()}"
    )
    peaks = {torch.float32: matmul_rate(), torch.bfloat16: matmul_rate(torch.bfloat16)}
    print(f"limit: {peaks[torch.float32] / 1e9:.0f} GFLOP per CPU-second float32 (torch.mm of up to 2048^3, 1 thread); "
          f"bfloat16 {peaks[torch.bfloat16] / 1e9:.1f} ({peaks[torch.bfloat16] / peaks[torch.float32]:.2f}x)")
    report = Report(peaks[torch.float32])
    try:
        measure(args, report, peaks)
    finally:
        with open(args.rows_to, "w") as out:
            out.writelines(json.dumps(asdict(row)) + "\n" for row in report.rows)
    print(f"load {os.getloadavg()}; peak RSS {peak_rss_gb():.2f} GB")


def measure(args: argparse.Namespace, report: Report, peaks: dict[torch.dtype, float]) -> None:
    """Every part asked for, on the kernels of this process."""
    if not args.skip_smollm2 and args.parts:
        try:
            model_source(SMOLLM2)
        except FileNotFoundError as exc:
            print(f"{SMOLLM2} skipped: {exc}")
        else:
            bench_smollm2(report, args, peaks)
    from gemlab.config import make_config

    log_dir = tempfile.mkdtemp(prefix="gemlab-bench-")
    if not args.skip_smollm2 and args.smollm2_steps:
        # the recipe's RL step on the base model (no warm-up: its answers run to max_tokens, the longest step)
        config = make_config("smollm2", log_dir=log_dir, warmup_steps=0, eval_every=0, max_steps=10_000)
        bench_step(
            report,
            f"{SMOLLM2} preset=smollm2 step (64 episodes: 4 problems x 16 answers)",
            config,
            args.smollm2_steps,
            peaks,
        )
    if args.tiny_steps:
        bench_step(
            report,
            f"{TINY} laptop step",
            make_config("laptop", log_dir=log_dir, max_steps=10_000),
            args.tiny_steps,
            peaks,
        )


def side_by_side(args: argparse.Namespace) -> None:
    """Run this script once per ISA, each in a process of its own (the kernels are chosen when torch
    loads), then print every row's figures side by side."""
    results: dict[str, list[Row]] = {}
    forwarded = [a for a in sys.argv[1:] if a not in ISAS and a != "--isa"]
    with tempfile.TemporaryDirectory(prefix="gemlab-bench-") as folder:
        for isa in args.isa:
            rows = Path(folder) / f"{isa}.jsonl"
            print(
                f"\n===== {isa} "
                f"kernels{' (' + ' '.join(f'{k}={v}' for k, v in ISAS[isa].items()) + ')' if ISAS[isa] else ''} "
                "=====",
                flush=True,
            )
            subprocess.run(
                [sys.executable, __file__, *forwarded, "--isa", isa, "--rows-to", str(rows)],
                env={**os.environ, **ISAS[isa]},
                check=False,
            )
            results[isa] = [Row(**json.loads(line)) for line in rows.read_text().splitlines()] if rows.exists() else []
    labels = list(dict.fromkeys(row.what for rows in results.values() for row in rows))
    print(
        f"\n{cpu_name()}, {os.cpu_count()} CPUs: each ISA's wall s, CPU s, % of its own peak per CPU-s, and "
        "ratio or note"
    )
    print(f"{'what':66} " + " | ".join(f"{isa:^53}" for isa in results))
    for label in labels:
        cells = []
        for rows in results.values():
            row = next((r for r in rows if r.what == label), None)
            cells.append(
                f"{row.wall:7.2f} {row.cpu:7.2f} {row.efficiency:5.0f}% {row.ratio[:30]:>30}" if row else f"{'-':^53}"
            )
        print(f"{label:66} " + " | ".join(cells))


if __name__ == "__main__":
    main()
