"""Shared pieces of the endpoint's tests: a local sampler of ``gemlab/tiny-chat`` (its tokenizer has
Qwen3's ``<tool_call>`` tokens), samplers that hold or script their answers, and a server per test
on loopback."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tinker import types

from gemlab.openai_endpoint import BackgroundServer, Limits, create_app
from tinker_emulator import TINY_CHAT, LocalServiceClient

MODEL = TINY_CHAT


@pytest.fixture(scope="session")
def sampler(tmp_path_factory: pytest.TempPathFactory) -> Any:
    service = LocalServiceClient(device="cpu", root=tmp_path_factory.mktemp("serve"))
    return service.create_sampling_client(base_model=MODEL).result()


class _Future:
    def __init__(self, wait: Any, result: Any) -> None:
        self.wait, self.result = wait, result

    async def result_async(self) -> Any:
        await asyncio.to_thread(self.wait)
        return await self.result()


class GatedSampler:
    """The local sampler, but every sample waits until ``gate`` is set (to hold requests in flight)."""

    def __init__(self, client: Any) -> None:
        self.client, self.gate = client, threading.Event()
        self.context_length = client.context_length  # as the local sampler reports it

    def get_tokenizer(self) -> Any:
        return self.client.get_tokenizer()

    def sample(self, *args: Any, **kwargs: Any) -> _Future:
        future = self.client.sample(*args, **kwargs)
        return _Future(lambda: self.gate.wait(30), future.result_async)


class ScriptedSampler:
    """Answers every request with ``text`` (tokenized), logprob -0.5 per token and, when top-k is
    asked, ``k`` made-up alternatives per token: token ids ``t, t+1, ...`` at -0.5, -1.5, ..."""

    def __init__(self, client: Any, text: str) -> None:
        self.client, self.text, self.calls = client, text, []
        self.context_length = client.context_length

    def get_tokenizer(self) -> Any:
        return self.client.get_tokenizer()

    def sample(self, prompt: Any, num_samples: int, params: Any, topk_sample_logprobs: int = 0) -> _Future:
        self.calls.append({"prompt": prompt.to_ints(), "topk": topk_sample_logprobs})
        tokens = self.get_tokenizer().encode(self.text, add_special_tokens=False)
        top = (
            [[(t + j, -0.5 - j) for j in range(topk_sample_logprobs)] for t in tokens] if topk_sample_logprobs else None
        )
        sequence = types.SampledSequence(
            stop_reason="stop",
            sequence_id="scripted",
            _tokens_list=tokens,
            _logprobs_list=[-0.5] * len(tokens),
            _topk_logprobs_list=top,
        )

        async def result() -> types.SampleResponse:
            return types.SampleResponse(sequences=[sequence] * num_samples)

        return _Future(lambda: None, result)


def serve(client: Any, **limits: Any) -> BackgroundServer:
    """A server of ``client`` as ``MODEL`` on a free loopback port, with ``Limits(**limits)``."""
    return BackgroundServer(create_app(client, model_name=MODEL, limits=Limits(**limits)))


@pytest.fixture
def server(sampler: Any) -> Iterator[BackgroundServer]:
    with serve(sampler) as running:
        yield running
