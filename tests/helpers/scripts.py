"""Whole Tinker programs, as text, that tests write to a file and run unmodified.

- ``GEM_STYLE_SCRIPT``: a GEM-style Tinker RL loop (as GEM's examples/train_tinker/tinker_train.py)
  that loads its tokenizer by the Tinker model name and prints each step's sampler/learner gap.
"""

from __future__ import annotations

import textwrap

GEM_STYLE_SCRIPT = textwrap.dedent(
    '''
    """A GEM-style Tinker RL script: the tokenizer is loaded by the Tinker model name."""
    import asyncio

    import chz
    import gem
    import tinker
    import torch
    from gem.wrappers.wrapper_factory import get_wrapper_fns
    from tinker import types
    from transformers.models.auto.tokenization_auto import AutoTokenizer


    @chz.chz
    class Config:
        model_name: str = "Qwen/Qwen3-8B-Base"
        env_id: str = "game:GuessTheNumber-v0-easy"
        num_env: int = 4
        max_steps: int = 2
        max_tokens: int = 8


    def prompt(observation: str) -> str:
        return (
            "<|im_start|>user\\nYou are playing language games. Make valid actions to win.\\nObservation: "
            f"{observation}\\nPlease reason step by step, and put your final answer within \\\\boxed{{}}.<|im_end|>\\n"
            "<|im_start|>assistant\\n"
        )


    async def main(config: Config) -> None:
        tokenizer = AutoTokenizer.from_pretrained(config.model_name, use_fast=True)
        envs = [gem.make(config.env_id, seed=i, use_mp=False) for i in range(config.num_env)]
        for wrapper in get_wrapper_fns("concat", tokenizer=tokenizer):
            envs = [wrapper(env) for env in envs]
        service_client = tinker.ServiceClient()
        training_client = await service_client.create_lora_training_client_async(base_model=config.model_name, rank=8)
        params = types.SamplingParams(max_tokens=config.max_tokens)

        async def episode(sampling_client, env):
            steps, (obs, _) = [], env.reset()
            while True:
                tokens = tokenizer.encode(prompt(obs), add_special_tokens=False)
                result = await sampling_client.sample_async(
                    prompt=types.ModelInput.from_ints(tokens=tokens), num_samples=1, sampling_params=params
                )
                seq = result.sequences[0]
                obs, reward, terminated, truncated, _ = env.step(tokenizer.decode(seq.tokens))
                steps.append((tokens, seq.tokens, seq.logprobs, reward))
                if terminated or truncated:
                    return steps

        for step in range(config.max_steps):
            path = training_client.save_weights_for_sampler(name=f"{step:06d}").result().path
            sampling_client = service_client.create_sampling_client(model_path=path)
            episodes = await asyncio.gather(*[episode(sampling_client, env) for env in envs])
            transitions = [t for ep in episodes for t in ep]
            returns = torch.tensor([t[3] for t in transitions], dtype=torch.float32)
            returns = (returns - returns.mean()) / (returns.std() + 1e-9)
            datums = []
            for (obs_tokens, act_tokens, act_logprobs, _), ret in zip(transitions, returns.tolist()):
                tokens, n = obs_tokens + act_tokens, len(obs_tokens) - 1
                datums.append(
                    types.Datum(
                        model_input=types.ModelInput.from_ints(tokens=tokens[:-1]),
                        loss_fn_inputs={
                            "target_tokens": torch.tensor(tokens[1:]),
                            "logprobs": torch.tensor([0.0] * n + act_logprobs),
                            "advantages": torch.tensor([0.0] * n + [ret] * len(act_tokens)),
                        },
                    )
                )
            fwd_bwd = training_client.forward_backward(datums, loss_fn="importance_sampling")
            training_client.optim_step(types.AdamParams(learning_rate=1e-3)).result()
            outputs = fwd_bwd.result().loss_fn_outputs
            diffs = torch.cat(
                [torch.tensor(t[2]) - o["logprobs"].to_torch()[-len(t[2]) :] for t, o in zip(transitions, outputs)]
            )
            print(f"step {step} transitions {len(transitions)} kl_sample_train {float(diffs.mean()):.2e}")


    if __name__ == "__main__":
        asyncio.run(main(chz.entrypoint(Config)))
    '''
)
