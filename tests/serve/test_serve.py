"""The OpenAI-compatible endpoint, driven by the official ``openai`` client on loopback, over the
local backend's tiny model: answers, logprobs, streaming, errors, concurrency, weight swaps, and
an agent's episode turned into training data."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys

import httpx
import numpy as np
import openai
import pytest
from tinker import types

from gemlab.datums import policy_gradient_datum
from gemlab.envs import make_envs
from gemlab.openai_endpoint import BackgroundServer, Recorder, SamplerSlot, create_app
from gemlab.step import adam_params
from tinker_emulator import TINY, LocalServiceClient, sampling_client

MESSAGES = [{"role": "user", "content": "Guess a number between 1 and 20. Answer in \\boxed{}."}]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> LocalServiceClient:
    return LocalServiceClient(device="cpu", root=tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def training(service: LocalServiceClient):
    return service.create_lora_training_client(base_model=TINY, rank=8, seed=0).result()


@pytest.fixture(scope="module")
def served(training):
    slot = SamplerSlot(training.save_weights_and_get_sampling_client().result())
    recorder = Recorder()
    with BackgroundServer(create_app(slot, model_name=TINY, recorder=recorder)) as server:
        yield server, slot, recorder


@pytest.fixture(scope="module")
def client(served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served[0].url, api_key="local", max_retries=0)


def sampled_logprobs(sampler, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """The model's own logprob of each sampled token (temperature 1), computed independently."""
    scored = sampler.compute_logprobs(types.ModelInput.from_ints(prompt + tokens)).result()
    return np.asarray(scored[-len(tokens) :], dtype=np.float64)


def test_models_lists_the_served_model(client) -> None:
    assert [m.id for m in client.models.list().data] == [TINY]
    assert client.models.retrieve(TINY).id == TINY


def test_chat_uses_the_chat_template_and_reports_true_logprobs(client, served, training) -> None:
    _, slot, recorder = served
    reply = client.chat.completions.create(model=TINY, messages=MESSAGES, max_tokens=8, logprobs=True, seed=3)
    choice = reply.choices[0]
    tokenizer = training.get_tokenizer()
    expected_prompt = tokenizer.encode(
        tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False), add_special_tokens=False
    )
    extra = reply.model_extra
    assert extra["prompt_token_ids"] == expected_prompt
    token_ids = choice.model_extra["token_ids"]
    assert token_ids and len(token_ids) <= 8
    assert choice.message.content == tokenizer.decode(token_ids, skip_special_tokens=True)
    assert choice.finish_reason in ("stop", "length")
    if choice.finish_reason == "stop":
        assert token_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    reported = np.asarray([entry.logprob for entry in choice.logprobs.content])
    assert [entry.token for entry in choice.logprobs.content] == [tokenizer.decode([t]) for t in token_ids]
    np.testing.assert_allclose(reported, sampled_logprobs(slot.get()[0], expected_prompt, token_ids), atol=1e-4)
    assert reply.usage.prompt_tokens == len(expected_prompt) and reply.usage.completion_tokens == len(token_ids)
    assert recorder.get(reply.id).choices[0].token_ids == token_ids


def test_completions_take_text_or_token_ids(client, training) -> None:
    tokenizer = training.get_tokenizer()
    text = "<|im_start|>assistant\n"
    by_text = client.completions.create(model=TINY, prompt=text, max_tokens=6, logprobs=1, seed=11)
    by_ids = client.completions.create(model=TINY, prompt=tokenizer.encode(text), max_tokens=6, logprobs=1, seed=11)
    assert by_text.model_extra["prompt_token_ids"] == tokenizer.encode(text)
    assert by_text.choices[0].model_extra["token_ids"] == by_ids.choices[0].model_extra["token_ids"]
    logprobs = by_text.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(by_text.choices[0].model_extra["token_ids"])
    assert logprobs.text_offset[0] == len(text)
    assert all(lp <= 0 for lp in logprobs.token_logprobs)


def test_n_choices_are_drawn_independently(client) -> None:
    reply = client.chat.completions.create(model=TINY, messages=MESSAGES, max_tokens=8, n=6, temperature=1.5, seed=5)
    assert [c.index for c in reply.choices] == list(range(6))
    assert len({tuple(c.model_extra["token_ids"]) for c in reply.choices}) > 1


def test_streaming_chat_adds_up_to_the_same_answer(client) -> None:
    whole = client.chat.completions.create(model=TINY, messages=MESSAGES, max_tokens=8, logprobs=True, seed=21)
    stream = client.chat.completions.create(
        model=TINY,
        messages=MESSAGES,
        max_tokens=8,
        logprobs=True,
        seed=21,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    ids = [t for c in chunks if c.choices for t in (c.choices[0].model_extra.get("token_ids") or [])]
    logprobs = [e.logprob for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert content == whole.choices[0].message.content
    assert ids == whole.choices[0].model_extra["token_ids"]
    np.testing.assert_allclose(logprobs, [e.logprob for e in whole.choices[0].logprobs.content], atol=1e-6)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == len(ids)


def test_streaming_completions(client) -> None:
    whole = client.completions.create(model=TINY, prompt="I guess \\boxed{", max_tokens=5, seed=2)
    chunks = list(client.completions.create(model=TINY, prompt="I guess \\boxed{", max_tokens=5, seed=2, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_user_stop_strings_end_the_text(client) -> None:
    reply = client.completions.create(
        model=TINY, prompt="I guess \\boxed{", max_tokens=8, stop=["}"], seed=4, temperature=0
    )
    assert "}" not in reply.choices[0].text
    assert reply.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        (b"{not json", 400, None, None),
        ({"model": TINY}, 400, None, "messages"),
        (
            {"model": TINY, "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"},
            400,
            None,
            "temperature",
        ),
        ({"model": TINY, "messages": [{"role": "robot", "content": "hi"}]}, 400, None, "messages.0.role"),
        ({"model": TINY, "messages": []}, 400, None, "messages"),
        ({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, 404, "model_not_found", "model"),
        (
            {"model": TINY, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000},
            400,
            "context_length_exceeded",
            "max_tokens",
        ),
        (
            {"model": TINY, "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3},
            400,
            None,
            "top_logprobs",
        ),
        (
            {"model": TINY, "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 21, "logprobs": True},
            400,
            None,
            "top_logprobs",
        ),
        ({"model": TINY, "messages": [{"role": "user", "content": "hi"}], "n": 0}, 400, None, "n"),
    ],
)
def test_bad_chat_requests_get_openai_errors(served, body, status, code, param) -> None:
    url = served[0].url + "/chat/completions"
    response = httpx.post(url, content=body) if isinstance(body, bytes) else httpx.post(url, json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and error["type"] == "invalid_request_error"
    assert error["code"] == code and error["param"] == param


def test_bad_completion_requests_and_routes(served) -> None:
    base = served[0].url
    too_long = httpx.post(base + "/completions", json={"model": TINY, "prompt": [5] * 2040, "max_tokens": 16})
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
    outside = httpx.post(base + "/completions", json={"model": TINY, "prompt": [10**6], "max_tokens": 4})
    assert outside.status_code == 400 and "vocabulary" in outside.json()["error"]["message"]
    missing = httpx.get(base + "/engines")
    assert missing.status_code == 404 and "error" in missing.json()
    assert httpx.get(base + "/models/gpt-4o").status_code == 404


def test_openai_client_raises_its_own_errors(client) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    with pytest.raises(openai.BadRequestError, match="context"):
        client.chat.completions.create(model=TINY, messages=MESSAGES, max_tokens=100_000)


def test_32_concurrent_requests_succeed_in_few_batches(served, monkeypatch) -> None:
    sizes: list[int] = []
    run_group = sampling_client._batcher._run_group

    def counting(requests):
        sizes.append(len(requests))
        return run_group(requests)

    monkeypatch.setattr(sampling_client._batcher, "_run_group", counting)

    async def main() -> list:
        client = openai.AsyncOpenAI(base_url=served[0].url, api_key="local", max_retries=0)
        calls = [
            client.chat.completions.create(
                model=TINY, messages=[{"role": "user", "content": f"Guess {i}"}], max_tokens=8
            )
            for i in range(32)
        ]
        return await asyncio.gather(*calls)

    replies = asyncio.run(main())
    assert len({r.id for r in replies}) == 32
    assert all(r.choices[0].model_extra["token_ids"] for r in replies)
    assert sum(sizes) == 32 and len(sizes) < 16 and max(sizes) >= 4, sizes


def test_a_client_that_disconnects_does_not_affect_the_others(served) -> None:
    server, _, _ = served

    def abandon() -> None:
        body = json.dumps({"model": TINY, "messages": MESSAGES, "max_tokens": 8, "stream": True}).encode()
        with socket.create_connection((server.host, server.port)) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        # closed before reading a byte of the answer

    async def main() -> list:
        client = openai.AsyncOpenAI(base_url=server.url, api_key="local", max_retries=0)
        calls = [client.chat.completions.create(model=TINY, messages=MESSAGES, max_tokens=8, seed=i) for i in range(8)]
        loop = asyncio.get_running_loop()
        abandoned = [loop.run_in_executor(None, abandon) for _ in range(4)]
        replies = await asyncio.gather(*calls)
        await asyncio.gather(*abandoned)
        return replies

    replies = asyncio.run(main())
    assert all(r.choices[0].finish_reason in ("stop", "length") for r in replies)
    again = openai.OpenAI(base_url=server.url, api_key="local", max_retries=0)
    assert again.chat.completions.create(model=TINY, messages=MESSAGES, max_tokens=4).choices


def test_swapping_the_sampler_serves_new_weights(client, served, training, service) -> None:
    _, slot, recorder = served
    old_sampler, old_version = slot.get()
    try:
        first = client.chat.completions.create(model=TINY, messages=MESSAGES, max_tokens=8, logprobs=True, seed=8)
        datum = policy_gradient_datum(
            first.model_extra["prompt_token_ids"],
            first.choices[0].model_extra["token_ids"],
            [0.0] * len(first.choices[0].model_extra["token_ids"]),
            1.0,
        )
        training.forward_backward([datum], "importance_sampling").result()
        training.optim_step(adam_params(0.05)).result()
        version = slot.set(training.save_weights_and_get_sampling_client().result())
        second = client.chat.completions.create(model=TINY, messages=MESSAGES, max_tokens=8, logprobs=True, seed=8)
        assert version == old_version + 1
        assert (first.model_extra["sampler_version"], second.model_extra["sampler_version"]) == (old_version, version)
        assert recorder.get(second.id).sampler_version == version
        first_lp = [e.logprob for e in first.choices[0].logprobs.content]
        second_lp = [e.logprob for e in second.choices[0].logprobs.content]
        assert second.choices[0].model_extra["token_ids"] != first.choices[0].model_extra[
            "token_ids"
        ] or not np.allclose(first_lp, second_lp, atol=1e-4)
    finally:
        slot.set(old_sampler, old_version)


def test_an_openai_agent_plays_a_gem_game_and_its_episode_trains(client, served, training) -> None:
    """An agent that only knows the ``openai`` client plays GuessTheNumber; the recorder turns its
    requests into transitions whose datums the importance-sampling update accepts, with the
    sampler's logprobs equal to the learner's (same weights: on-policy)."""
    _, slot, recorder = served
    slot.set(training.save_weights_and_get_sampling_client().result())  # serve the trainer's current weights
    env = make_envs(
        "game:GuessTheNumber-v0-easy", 1, seed=0, env_wrappers="concat", tokenizer=training.get_tokenizer()
    )[0]
    steps, done = [], False
    observation, _ = env.reset()
    while not done:
        reply = client.chat.completions.create(
            model=TINY, messages=[{"role": "user", "content": observation}], max_tokens=8
        )
        observation, reward, terminated, truncated, _ = env.step(reply.choices[0].message.content)
        steps.append((reply.id, reward))
        done = terminated or truncated
    episode = recorder.episode(steps)
    assert episode.num_turns == len(steps) and episode.transitions[-1].done
    assert [t.reward for t in episode.transitions] == [r for _, r in steps]
    datums = [policy_gradient_datum(t.obs_tokens, t.act_tokens, t.act_logprobs, 1.0) for t in episode.transitions]
    output = training.forward(datums, "importance_sampling").result()
    for transition, out in zip(episode.transitions, output.loss_fn_outputs, strict=True):
        learner = np.asarray(out["logprobs"].tolist())[-len(transition.act_tokens) :]
        assert np.abs(learner - np.asarray(transition.act_logprobs)).max() < 1e-4


def test_recorder_refuses_unknown_ids(served) -> None:
    with pytest.raises(KeyError, match="no recorded request"):
        served[2].transition("chatcmpl-nope", 1.0, True)
    with pytest.raises(ValueError, match="at least one"):
        served[2].episode([])


@pytest.mark.slow
def test_command_line_refuses_an_unknown_model_in_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gemlab.openai_endpoint", "--model", "gemlab/nothing"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "gemlab/nothing" in result.stderr


@pytest.mark.parametrize(
    "error, said",
    [
        (
            ModuleNotFoundError("reading it needs the gguf package: pip install 'gguf>=0.10'"),
            "reading it needs the gguf package: pip install 'gguf>=0.10'",
        ),
        (MemoryError(), "out of memory while loading it: "),
    ],
)
def test_a_model_that_cannot_load_is_one_line(monkeypatch, capsys, error, said) -> None:
    from gemlab.openai_endpoint import __main__ as command

    def fails(service, model):
        raise error

    monkeypatch.setattr(command, "sampling_client", fails)
    assert command.main(["--model", "HuggingFaceTB/SmolLM2-135M-Instruct", "--backend", "local"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"cannot serve 'HuggingFaceTB/SmolLM2-135M-Instruct': {said}"), err
