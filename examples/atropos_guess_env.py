"""A multi-turn Atropos environment, written the way atroposlib's own environments are: a
``BaseEnv`` whose groups are collected through ``ManagedServer`` (no gemlab import anywhere).

The game: GEM's GuessTheNumber-v0-easy, in GEM's words: guess a secret number from 1 to ``high`` in
at most ``max_turns`` replies, each answered with "higher" or "lower"; a group is ``group_size``
games of the same secret. Every game is one
growing conversation, so ``ManagedServer`` keeps it as one sequence: its tokens, a mask that is
-100 on everything the model did not write (the prompts and the hints), and the sampler's logprob
of every token the model did write. Score 1 for a win, 0 otherwise.

Run against any SGLang-style server (``server_type="sglang"``), such as ``python -m gemlab.openai_endpoint``;
``gemlab.atropos.loop`` trains on what it collects in-process; ``python -m gemlab.atropos`` trains on
what it posts to atroposlib's ``run-api`` (docs/atropos.md). ``wandb_name`` is the name the
environment registers under (``run-api`` refuses a registration without one).
"""

from __future__ import annotations

import asyncio
import random
import re
from typing import Any

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup

# GEM's GuessTheNumber-v0-easy in GEM's words, inside the instruction of GEM's qwen3_game template
PROMPT = (
    "You are playing language games. Make valid actions to win.\nObservation: You are playing Guess The Number.\n"
    "You have to guess the number between 1 and {high} (inclusive) within {turns} turns.\n"
    "As you enter your guess, the game will provide you with hints such as the target number is 'higher' or 'lower'.\n"
    "You may provide your response in any manner. Only the number that is wrapped inside \\boxed{{}} will "
    "be considered "
    "as your guess, for example, \\boxed{{{high}}}.\nAs you play, the history of your guesses will be appended below. "
    "Use the information to complete the game before you run out of guesses.\nEnter your first guess to "
    "start the game.\n"
    "\nPlease reason step by step, and put your final answer within \\boxed{{}}."
)
HINT = "At turn {turn}, you guessed {guess}, and the target number is {side} than {guess}."
GUESS = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


class GuessConfig(BaseEnvConfig):
    high: int = 10
    max_turns: int = 4
    max_reply_tokens: int = 8
    seed: int = 0


class GuessNumberEnv(BaseEnv):
    name = "guess_number"
    env_config_cls = GuessConfig

    @classmethod
    def config_init(cls) -> tuple[GuessConfig, list[APIServerConfig]]:
        env = GuessConfig(
            group_size=4,
            use_wandb=False,
            wandb_name=cls.name,
            tokenizer_name="NousResearch/DeepHermes-3-Llama-3-3B-Preview",
        )
        server = APIServerConfig(
            model_name="NousResearch/DeepHermes-3-Llama-3-3B-Preview",
            base_url="http://localhost:9001/v1",
            server_type="sglang",
        )
        return env, [server]

    async def setup(self) -> None:
        self.rng = random.Random(self.config.seed)

    async def get_next_item(self) -> int:
        return self.rng.randint(1, self.config.high)

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def play(self, secret: int) -> tuple[dict[str, Any], float]:
        """One game through ManagedServer: the tracked sequence and its score."""
        messages = [{"role": "user", "content": PROMPT.format(high=self.config.high, turns=self.config.max_turns)}]
        score = 0.0
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            for turn in range(1, self.config.max_turns + 1):
                reply = await managed.chat_completion(
                    messages=messages, n=1, max_tokens=self.config.max_reply_tokens, temperature=1.0
                )
                text = reply.choices[0].message.content or ""
                messages.append({"role": "assistant", "content": text})
                found = GUESS.search(text)
                if found is None:
                    break  # not a guess: the game is lost
                guess = int(found.group(1))
                if guess == secret:
                    score = 1.0
                    break
                side = "higher" if guess < secret else "lower"
                messages.append({"role": "user", "content": HINT.format(turn=turn, guess=guess, side=side)})
            node = managed.get_state()["nodes"][-1]
        return {
            "tokens": node.tokens,
            "masks": node.masked_tokens,
            "logprobs": node.logprobs,
            "messages": messages,
        }, score

    async def collect_trajectories(self, item: int) -> tuple[ScoredDataGroup, list]:
        games = await asyncio.gather(*(self.play(item) for _ in range(self.config.group_size)))
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[], messages=[])
        for sequence, score in games:
            group["tokens"].append(sequence["tokens"])
            group["masks"].append(sequence["masks"])
            group["inference_logprobs"].append(sequence["logprobs"])
            group["messages"].append(sequence["messages"])
            group["scores"].append(score)
        return group, []


if __name__ == "__main__":
    GuessNumberEnv.cli()
