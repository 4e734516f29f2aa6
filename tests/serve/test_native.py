"""``POST /generate`` in SGLang's and vLLM's shapes (gemlab/openai_endpoint/native.py), on loopback over the
local backend's tiny chat model: what comes back is what the sampler drew, and bad bodies are
one-line 400s."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from tinker import types

from gemlab.openai_endpoint import Recorder, SamplerSlot, create_app
from gemlab.openai_endpoint.server_thread import BackgroundServer
from tests.serve.conftest import MODEL

PROMPT = "<|im_start|>user\nGuess a number between 1 and 20. Answer in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def served(sampler):
    recorder = Recorder()
    with BackgroundServer(create_app(SamplerSlot(sampler, version=3), model_name=MODEL, recorder=recorder)) as server:
        yield server.url.removesuffix("/v1"), recorder


@pytest.fixture(scope="module")
def prompt_ids(sampler) -> list[int]:
    return sampler.get_tokenizer().encode(PROMPT, add_special_tokens=False)


def post(root: str, body: object) -> httpx.Response:
    return httpx.post(f"{root}/generate", json=body, timeout=60)


def test_sglang_shape_answers_each_sample_with_its_tokens_logprobs_and_finish(served, prompt_ids, sampler) -> None:
    root, recorder = served
    answer = post(
        root,
        {
            "input_ids": prompt_ids,
            "sampling_params": {"n": 3, "max_new_tokens": 8, "temperature": 1.0},
            "return_logprob": True,
        },
    )
    assert answer.status_code == 200, answer.text
    samples = answer.json()
    assert isinstance(samples, list) and len(samples) == 3
    record = recorder.records()[-1]
    assert record.prompt_token_ids == prompt_ids
    eot = set(sampler.get_tokenizer().convert_tokens_to_ids(["<|im_end|>"]))
    for sample, choice in zip(samples, record.choices, strict=True):
        meta = sample["meta_info"]
        assert [t for _, t, _ in meta["output_token_logprobs"]] == sample["output_ids"] == choice.token_ids
        assert [lp for lp, _, _ in meta["output_token_logprobs"]] == choice.logprobs
        assert meta["completion_tokens"] == len(sample["output_ids"]) <= 8
        assert meta["prompt_tokens"] == len(prompt_ids) and meta["sampler_version"] == 3
        if meta["finish_reason"]["type"] == "stop":  # stopped at the end of the turn, which is kept
            assert sample["output_ids"][-1] in eot and meta["finish_reason"]["matched"] == sample["output_ids"][-1]
        else:
            assert meta["finish_reason"] == {"type": "length", "length": 8}
    # the logprobs are the model's own, computed independently of the sampler
    first = samples[0]["output_ids"]
    scored = sampler.compute_logprobs(types.ModelInput.from_ints(prompt_ids + first)).result()[-len(first) :]
    np.testing.assert_allclose([lp for lp, _, _ in samples[0]["meta_info"]["output_token_logprobs"]], scored, atol=1e-4)


def test_sglang_shape_with_one_sample_is_one_object(served, prompt_ids) -> None:
    answer = post(
        served[0], {"input_ids": prompt_ids, "sampling_params": {"max_new_tokens": 4}, "return_logprob": True}
    )
    assert answer.status_code == 200 and isinstance(answer.json(), dict)
    assert len(answer.json()["output_ids"]) <= 4


def test_vllm_shape_answers_per_sample_id_logprob_pairs(served, prompt_ids) -> None:
    root, recorder = served
    answer = post(root, {"prompt": {"prompt_token_ids": prompt_ids}, "logprobs": 0, "n": 2, "max_tokens": 6})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    record = recorder.records()[-1]
    assert body["prompt_token_ids"] == prompt_ids and body["sampler_version"] == 3
    assert body["token_ids"] == [c.token_ids for c in record.choices]
    assert body["finish_reasons"] == [c.finish_reason for c in record.choices]
    for rows, choice in zip(body["logprobs"], record.choices, strict=True):
        assert [int(next(iter(row[0]))) for row in rows] == choice.token_ids
        assert [next(iter(row[0].values())) for row in rows] == choice.logprobs


def test_vllm_logprobs_k_adds_the_top_alternatives(served, prompt_ids) -> None:
    answer = post(served[0], {"prompt": {"prompt_token_ids": prompt_ids}, "logprobs": 2, "max_tokens": 3})
    assert answer.status_code == 200, answer.text
    for row in answer.json()["logprobs"][0]:
        entries = row[0]
        assert 2 <= len(entries) <= 3  # the sampled token, then the top 2 (the sampled one may be among them)
        assert max(entries.values()) <= 0


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([1, 2, 3], "must be a JSON object"),
        ({"text": "hi"}, "needs input_ids (SGLang) or prompt.prompt_token_ids (vLLM)"),
        ({"input_ids": []}, "non-empty list of token ids"),
        ({"input_ids": ["a"]}, "non-empty list of token ids"),
        ({"input_ids": [1, 2], "sampling_params": [1]}, "sampling_params must be a JSON object"),
        ({"input_ids": [1, 2], "sampling_params": []}, "sampling_params must be a JSON object"),  # was taken as {}
        ({"input_ids": [1, 2], "sampling_params": ""}, "sampling_params must be a JSON object"),
        (
            {"input_ids": [1, 2], "sampling_params": {"repetition_penalty": 1.3}},
            "sampling_params.repetition_penalty=1.3 is not supported",
        ),
        ({"input_ids": [1, 2], "sampling_params": {"stop_token_ids": [5]}}, "stop_token_ids=[5] is not supported"),
        ({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 0}}, "'max_new_tokens'"),
        ({"input_ids": [1, 2], "sampling_params": {"temperature": 9}}, "'temperature'"),
        ({"prompt": {"prompt_token_ids": [1, 2]}, "stream": True}, "stream=True is not supported"),
        ({"input_ids": [10**9]}, "outside the vocabulary"),
        ({"input_ids": [1] * 5000}, "the context holds"),
    ],
)
def test_bad_bodies_are_one_line_400s(served, body, says) -> None:
    answer = post(served[0], body)
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]["message"]
    assert says in message and "\n" not in message


def test_sampling_controls_at_their_neutral_value_are_accepted(served, prompt_ids) -> None:
    params = {
        "max_new_tokens": 2,
        "top_k": -1,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "frequency_penalty": 0,
        "skip_special_tokens": True,
    }
    assert post(served[0], {"input_ids": prompt_ids, "sampling_params": params}).status_code == 200
