"""A single-turn GEM environment served as an Atropos environment: each item is a GEM problem
(``env_id``, reset with a seed drawn from ``seed``), a group is ``group_size`` answers to it
collected through ``ManagedServer`` with the tokenizer's chat template (one user turn, as gemlab's
``template=chat``), and each answer is scored by GEM's own ``step``. So a run of
``python -m gemlab.atropos`` on it trains on the same task, prompts and rewards as
``python -m gemlab.train`` with ``env_id=... template=chat``: the decoupled and the synchronous
loop can be compared on one task (research/experiments/decoupled_vs_sync.py).

atroposlib drops a group whose answers all score the same (``ensure_scores_are_not_same``); set
``--env.scores_path`` to keep a line per group sampled (its wall-clock time and every score),
dropped or not, with its answers' lengths in tokens, so the reward of everything sampled can be read beside the
trainer's.

    python examples/atropos_gem_env.py serve --env.env_id rg:sums-1digit-train --env.rollout_server_url ...
    --openai.base_url ...
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import gem
from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup

import gemlab.env_variants  # noqa: F401  (registers gemlab's rg:sums-1digit-train and the other splits with GEM)


class GemConfig(BaseEnvConfig):
    env_id: str = "rg:sums-1digit-train"
    max_reply_tokens: int = 16
    temperature: float = 1.0
    seed: int = 0
    scores_path: str | None = None


class GemSingleTurnEnv(BaseEnv):
    name = "gem_single_turn"
    env_config_cls = GemConfig

    @classmethod
    def config_init(cls) -> tuple[GemConfig, list[APIServerConfig]]:
        env = GemConfig(
            group_size=16, use_wandb=False, wandb_name=cls.name, tokenizer_name="HuggingFaceTB/SmolLM2-135M-Instruct"
        )
        server = APIServerConfig(
            model_name="HuggingFaceTB/SmolLM2-135M-Instruct", base_url="http://localhost:9001/v1", server_type="sglang"
        )
        return env, [server]

    async def setup(self) -> None:
        self.rng = random.Random(self.config.seed)
        gem.make(self.config.env_id)  # an unknown id fails here, before any sampling

    async def get_next_item(self) -> int:
        return self.rng.randrange(2**31)

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        return None

    def score(self, reset_seed: int, answer: str) -> float:
        env = gem.make(self.config.env_id)
        env.reset(seed=reset_seed)
        return float(env.step(answer)[1])

    async def collect_trajectories(self, item: int) -> tuple[ScoredDataGroup, list]:
        question, _ = gem.make(self.config.env_id).reset(seed=item)
        messages = [{"role": "user", "content": question}]
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            reply = await managed.chat_completion(
                messages=messages,
                n=self.config.group_size,
                max_tokens=self.config.max_reply_tokens,
                temperature=self.config.temperature,
            )
            nodes = managed.get_state()["nodes"]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[], messages=[])
        for choice, node in zip(reply.choices, nodes, strict=True):
            text = choice.message.content or ""
            group["tokens"].append(node.tokens)
            group["masks"].append(node.masked_tokens)
            group["inference_logprobs"].append(node.logprobs)
            group["messages"].append([*messages, {"role": "assistant", "content": text}])
            group["scores"].append(self.score(item, text))
        if self.config.scores_path:
            with open(self.config.scores_path, "a") as log:
                written = [sum(1 for m in node.masked_tokens if m != -100) for node in nodes]
                log.write(json.dumps({"time": time.time(), "scores": group["scores"], "tokens": written}) + "\n")
        return group, []


if __name__ == "__main__":
    GemSingleTurnEnv.cli()
