"""A scripted sampling client: plays a fixed list of guesses through the real episode loop."""

import numpy as np
from tinker import types

from gemlab.episodes import end_of_turn_ids
from gemlab.templates import get_template
from gemlab.tiny.model import load_tiny_tokenizer

TOKENIZER = load_tiny_tokenizer()
TEMPLATE = get_template("qwen3_game")


class ScriptedSampler:
    """Answers every prompt with the next guess of a fixed list, as a sampling client would."""

    def __init__(self, guesses, fail_on=()):
        self.guesses, self.fail_on, self.calls, self.prompts = list(guesses), set(fail_on), 0, []

    async def sample(self, prompt, num_samples, sampling_params):
        self.calls += 1
        self.prompts.append(prompt.to_ints())
        if self.calls in self.fail_on:
            raise ConnectionError(f"sampler down on call {self.calls}")
        assert sampling_params.stop == end_of_turn_ids(TOKENIZER)
        text = f"\\boxed{{{self.guesses[(self.calls - 1) % len(self.guesses)]}}}"
        tokens = TOKENIZER.encode(text, add_special_tokens=False) + end_of_turn_ids(TOKENIZER)
        sequence = types.SampledSequence(
            stop_reason="stop", tokens_np=np.array(tokens), logprobs_np=np.full(len(tokens), -0.5), sequence_id=0
        )
        return types.SampleResponse(sequences=[sequence])
