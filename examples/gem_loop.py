"""GEM's REINFORCE + ReBN loop on one screen: tinker + gem + numpy, no gemlab.

The loop of GEM's ``tinker_train.py`` (GEM paper, Algorithm 1), written so that it computes what
``gemlab.Trainer`` computes for the same config and seed (tests/test_gem_loop.py checks it):
requests carry seeds derived from the run seed, each turn's requests go out together in env order
(so the sampler's batches, hence its float rounding, never depend on timing), and ReBN runs in
float64 (GEM's float32 can give an all-equal batch advantages of about +-0.9; gemlab gives 0).

    python examples/gem_loop.py max_steps=20                      # real Tinker (TINKER_API_KEY)
    python -m tinker_emulator examples/gem_loop.py model_name=gemlab/tiny learning_rate=2e-3 max_tokens=8

Every ``key=value`` argument overrides a CONFIG entry; ``metrics=PATH`` writes one JSON line per step.
"""

import asyncio
import json
import random
import sys

import gem
import numpy as np
import tinker
from gem.wrappers.wrapper_factory import get_wrapper_fns
from tinker import types

CONFIG = dict(
    model_name="Qwen/Qwen3-4B-Instruct-2507", lora_rank=8, learning_rate=4e-5, batch_size=128, max_steps=20,
    save_every=5,
    seed=0, max_tokens=2048, temperature=1.0, env_id="game:GuessTheNumber-v0-easy", num_env=32, env_wrappers="concat",
    gamma=0.9, metrics="",
)  # fmt: skip


def seed_of(*parts: int) -> int:
    """A request's seed from integers (run seed, step, ...): CPython's tuple hash, as gemlab.seeds."""
    return hash(tuple(parts)) & 0x7FFFFFFF


def qwen3_game_template(observation: str) -> str:
    return (
        "<|im_start|>user\nYou are playing language games. Make valid actions to win.\nObservation: "
        f"{observation}\nPlease reason step by step, and put your final answer within \\boxed{{}}.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def make_envs(config: dict, tokenizer) -> list:
    """``num_env`` envs seeded from the run seed (GEM seeds them from the clock)."""
    random.seed(config["seed"])  # GEM's games draw their secrets from the global random
    envs = [gem.make(config["env_id"], seed=config["seed"], use_mp=False)]
    extra = {"dataset": envs[0].dataset} if getattr(envs[0], "dataset", None) is not None else {}
    envs += [
        gem.make(config["env_id"], seed=config["seed"] * 10_007 + i, use_mp=False, **extra)
        for i in range(1, config["num_env"])
    ]
    wrappers = get_wrapper_fns(config["env_wrappers"], tokenizer=tokenizer)
    for i in range(len(envs)):
        for wrapper in wrappers:
            envs[i] = wrapper(envs[i])
    return envs


# ========== collect episodes ==========
async def collect_round(sampling_client, envs, tokenizer, config: dict, seeds: list[int]) -> list[list[dict]]:
    """One episode per env (env ``i``'s turn ``k`` sampled with seed ``seed_of(seeds[i], k)``); each
    turn, every live episode's request goes out together, in env order."""
    stop = sorted({tokenizer.get_vocab().get("<|im_end|>", tokenizer.eos_token_id), tokenizer.eos_token_id} - {None})
    observations = [env.reset()[0] for env in envs]
    episodes: list[list[dict]] = [[] for _ in envs]
    live = list(range(len(envs)))
    while live:
        prompts = [tokenizer.encode(qwen3_game_template(observations[i]), add_special_tokens=False) for i in live]
        params = [
            types.SamplingParams(
                max_tokens=config["max_tokens"],
                temperature=config["temperature"],
                stop=stop,
                seed=seed_of(seeds[i], len(episodes[i])),
            )
            for i in live
        ]
        results = await asyncio.gather(
            *(
                sampling_client.sample(prompt=types.ModelInput.from_ints(p), num_samples=1, sampling_params=s)
                for p, s in zip(prompts, params, strict=True)
            )
        )
        for i, prompt, result in zip(live, prompts, results, strict=True):
            tokens = list(result.sequences[0].tokens)
            observations[i], reward, terminated, truncated, _ = envs[i].step(tokenizer.decode(tokens))
            episodes[i].append(
                {
                    "obs_tokens": prompt,
                    "act_tokens": tokens,
                    "act_logprobs": list(result.sequences[0].logprobs),
                    "reward": float(reward),
                    "done": terminated or truncated,
                }
            )
        live = [i for i in live if not episodes[i][-1]["done"]]
    return episodes


async def collect_episodes(sampling_client, envs, tokenizer, config: dict, step: int) -> list[list[dict]]:
    """Rounds of one episode per env until at least ``batch_size`` transitions."""
    random.seed(seed_of(config["seed"], step))
    batch_seed, episodes, round_index = seed_of(config["seed"], step, 1), [], 0
    while sum(len(e) for e in episodes) < config["batch_size"]:
        seeds = [seed_of(batch_seed, round_index, i) for i in range(len(envs))]
        episodes += await collect_round(sampling_client, envs, tokenizer, config, seeds)
        round_index += 1
    return episodes


# ========== returns, ReBN, subsampling ==========
def advantages(episodes: list[list[dict]], config: dict, step: int) -> list[dict]:
    transitions = []
    for episode in episodes:
        running = 0.0
        for transition in reversed(episode):
            running = transition["reward"] + config["gamma"] * running  # ALGO LOGIC: G_t = r_t + gamma * G_{t+1}
            transition["return"] = running
        transitions += episode
    returns = np.array([t["return"] for t in transitions], dtype=np.float64)
    if np.all(returns == returns[0]):
        normalized = np.zeros_like(returns)  # all equal: no signal
    else:
        normalized = (returns - returns.mean()) / (returns.std(ddof=1) + 1e-9)  # ALGO LOGIC: ReBN
    for transition, value in zip(transitions, normalized, strict=True):
        transition["advantage"] = float(value)
    if len(transitions) > config["batch_size"]:
        keep = np.random.default_rng([config["seed"], step]).choice(
            len(transitions), config["batch_size"], replace=False
        )
        transitions = [transitions[i] for i in keep]  # ALGO LOGIC: subsample batch_size transitions
    return transitions


# ========== datums ==========
def make_datum(transition: dict) -> types.Datum:
    """Prompt + action shifted by one; only action tokens carry the sampler logprob and advantage."""
    prompt, action = transition["obs_tokens"], transition["act_tokens"]
    tokens = prompt + action
    logprobs = [0.0] * (len(prompt) - 1) + transition["act_logprobs"]
    advantage = [0.0] * (len(prompt) - 1) + [transition["advantage"]] * len(action)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.array(tokens[1:], dtype=np.int64)),
            "logprobs": types.TensorData.from_numpy(np.array(logprobs, dtype=np.float32)),
            "advantages": types.TensorData.from_numpy(np.array(advantage, dtype=np.float32)),
        },
    )


# ========== metrics ==========
def step_metrics(step: int, episodes: list[list[dict]], transitions: list[dict], result) -> dict:
    diffs = np.concatenate(
        [
            np.array(t["act_logprobs"]) - np.array(out["logprobs"].tolist())[-len(t["act_logprobs"]) :]
            for t, out in zip(transitions, result.loss_fn_outputs, strict=True)
        ]
    )
    return {
        "step": step,
        "sampler/episode_return": float(np.mean([sum(t["reward"] for t in e) for e in episodes])),
        "sampler/success_rate": float(np.mean([e[-1]["reward"] >= 1.0 for e in episodes])),
        "sampler/num_turns_per_episode": float(np.mean([len(e) for e in episodes])),
        "sampler/action_num_tokens": float(np.mean([sum(len(t["act_tokens"]) for t in e) for e in episodes])),
        "sampler/num_episodes": float(len(episodes)),
        "sampler/token_entropy": float(-np.mean([x for t in transitions for x in t["act_logprobs"]])),
        "train/kl_sample_train_v1": float(diffs.mean()),
        "train/kl_sample_train_v2": float(0.5 * (diffs**2).mean()),
        **{f"train/{k}": float(v) for k, v in result.metrics.items()},
    }


async def main(config: dict) -> None:
    service_client = tinker.ServiceClient()
    training_client = await service_client.create_lora_training_client(
        base_model=config["model_name"], rank=config["lora_rank"], seed=config["seed"]
    )
    tokenizer = training_client.get_tokenizer()
    envs = make_envs(config, tokenizer)
    adam = types.AdamParams(learning_rate=config["learning_rate"], beta1=0.9, beta2=0.95, eps=1e-8)
    log = open(config["metrics"], "w") if config["metrics"] else None
    for step in range(config["max_steps"]):
        sampling_client = await training_client.save_weights_and_get_sampling_client()
        episodes = await collect_episodes(sampling_client, envs, tokenizer, config, step)
        transitions = advantages(episodes, config, step)
        datums = [make_datum(t) for t in transitions]
        # ========== train: one importance-sampling policy-gradient step ==========
        backward = training_client.forward_backward(datums, "importance_sampling")
        optim = training_client.optim_step(adam)  # queued behind forward_backward: both in flight
        result = await backward
        await optim
        metrics = step_metrics(step, episodes, transitions, result)
        print(json.dumps(metrics), file=log or sys.stdout, flush=True)
        if config["save_every"] > 0 and (step + 1) % config["save_every"] == 0:
            await training_client.save_state(f"step{step + 1:06d}")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        key, _, value = arg.partition("=")
        if key not in CONFIG:
            sys.exit(f"unknown key {key!r}; known: {', '.join(CONFIG)}")
        CONFIG[key] = type(CONFIG[key])(value)
    asyncio.run(main(CONFIG))
