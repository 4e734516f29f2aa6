"""Validate before you allocate, off the event loop (tinker_emulator/workshop_server/validate.py and the routes that
call it): every malformed request is a 4xx in Tinker's error JSON with one log line and no
traceback, refused before the server allocates or queues anything for it; a large body is decoded
off the event loop, so ``/healthz`` answers meanwhile. The app runs in this process on the tiny
preset (CPU)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.proto.response_conv import deserialize_sample_response

from tests.helpers.http_app import KEY, NEW_SESSION, result
from tinker_emulator.workshop_server import make_app, validate, wire
from tinker_emulator.workshop_server.errors import TooLarge, status_and_message
from tinker_emulator.workshop_server.routes import ROUTERS
from tinker_emulator.workshop_server.state import Limits

MAX_BODY = 2**20  # the app's body limit here: its tensors may hold MAX_BODY // 4 elements once dense
CONTEXT = 2048  # gemlab/tiny's context
PROTOBUF = {"Content-Type": "application/x-protobuf"}


@dataclass
class Served:
    client: TestClient
    session_id: str
    model_id: str


@dataclass
class FakeModel:
    context_length: int = 8
    vocab_size: int = 10


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The app with a training run of gemlab/tiny."""
    app = make_app(tmp_path_factory.mktemp("validate"), [KEY], limits=Limits(max_body=MAX_BODY), device="cpu")
    with TestClient(app, headers={"X-API-Key": KEY}) as client:
        session_id = client.post("/api/v1/create_session", json=NEW_SESSION).json()["session_id"]
        create = {"session_id": session_id, "model_seq_id": 0, "base_model": "gemlab/tiny", "lora_config": {"rank": 4}}
        made = client.post("/api/v1/create_model", json=create).json()
        yield Served(client, session_id, result(client, made["request_id"])["model_id"])


def dense(values: Any, dtype: int = pb.DTYPE_FLOAT32) -> pb.Tensor:
    array = np.asarray(values, np.int64 if dtype == pb.DTYPE_INT64 else np.float32)
    return pb.Tensor(dense=array.tobytes(), dtype=dtype, shape=list(array.shape))


def fb_body(
    model_id: str,
    tokens: list[int],
    loss_fn: str = "cross_entropy",
    config: dict[str, float] | None = None,
    forward_only: bool = False,
    **inputs: pb.Tensor,
) -> bytes:
    """A one-datum protobuf ``forward_backward`` request, as the SDK sends it."""
    msg = pb.ForwardBackwardRequest(model_id=model_id, seq_id=1, loss_fn=loss_fn, forward_only=forward_only)
    msg.loss_fn_config.update(config or {})
    datum = msg.data.add()
    datum.model_input.add().encoded_text.tokens = np.asarray(tokens, np.int32).tobytes()
    n = len(tokens)
    defaults = {"target_tokens": dense(np.arange(n) % 100 + 1, pb.DTYPE_INT64)}  # in every vocabulary
    if loss_fn == "cross_entropy":
        defaults["weights"] = dense(np.ones(n))
    else:
        defaults |= {"logprobs": dense(np.zeros(n)), "advantages": dense(np.ones(n))}
    for name, tensor in (defaults | inputs).items():
        datum.loss_fn_inputs[name].CopyFrom(tensor)
    return msg.SerializeToString()


def refused(answer: httpx.Response, status: int = 400) -> str:
    """The error message of a refusal in Tinker's error JSON, without a traceback."""
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == {"error", "category"} and answer.json()["category"] == "user"
    assert "Traceback" not in answer.text
    return answer.json()["error"]


def sample_request(served: Served, tokens: list[int]) -> dict[str, Any]:
    return {
        "base_model": "gemlab/tiny",
        "num_samples": 1,
        "prompt": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
        "sampling_params": {"max_tokens": 2},
    }


# ----- the checks themselves -----------------------------------------------------------------
def test_a_long_name_is_refused_without_being_echoed() -> None:
    validate.names(types.CreateModelRequest(session_id="s", model_seq_id=0, base_model="x" * validate.MAX_NAME))
    with pytest.raises(ValueError, match=f"base_model has 100000 characters; .* at most {validate.MAX_NAME}") as raised:
        validate.names(types.CreateModelRequest(session_id="s", model_seq_id=0, base_model="x" * 100_000))
    assert len(str(raised.value)) < 200


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), "nan", "-inf"])
def test_a_loss_config_number_must_be_finite(value: float | str) -> None:
    with pytest.raises(ValueError, match=r"loss_fn_config\['beta'\] is .*: numbers must be finite"):
        validate.finite_config({"clip_low_threshold": 0.8, "beta": value})
    assert validate.finite_config({"beta": 0.5, "mode": "seq"}) == {"beta": 0.5, "mode": "seq"}


def test_every_number_in_a_request_must_be_finite() -> None:
    request = types.SampleRequest(
        num_samples=1, prompt=types.ModelInput.from_ints([1, 2]), sampling_params=types.SamplingParams(max_tokens=2)
    )
    validate.finite(request)
    with pytest.raises(ValueError, match=r"sampling_params\.temperature is nan: numbers must be finite"):
        hot = types.SamplingParams(max_tokens=2, temperature=float("nan"))
        validate.finite(request.model_copy(update={"sampling_params": hot}))
    with pytest.raises(ValueError, match=r"user_metadata\['lr'\] is inf"):
        validate.finite(types.CreateSessionRequest(tags=[], user_metadata={"lr": float("inf")}, sdk_version="x"))


def test_tokens_must_fit_the_models_context_and_vocabulary() -> None:
    model = FakeModel(context_length=8, vocab_size=10)
    validate.tokens(list(range(8)), "x", model)
    with pytest.raises(ValueError, match="x has 9 tokens; the model's context holds 8"):
        validate.tokens([1] * 9, "x", model)
    with pytest.raises(ValueError, match=r"outside the vocabulary \(0\.\.9\): \[10, -1\]"):
        validate.tokens([1, 10, -1], "x", model)
    with pytest.raises(ValueError, match="the prompt has 8 tokens; .* at most 7"):  # no room for an answer
        validate.prompt(types.ModelInput.from_ints(list(range(8))), model)


def test_a_json_body_over_the_cap_is_refused() -> None:
    assert validate.json_body(b"{}") == b"{}"
    with pytest.raises(TooLarge, match=f"at most {validate.MAX_JSON} bytes") as raised:
        validate.json_body(b" " * (validate.MAX_JSON + 1))
    assert status_and_message(raised.value)[0] == 413


# ----- the routes ------------------------------------------------------------------------------
@pytest.mark.parametrize("body", [b"[]", b"null", b"1", b'"x"', b"{"])
def test_a_body_of_the_wrong_json_shape_is_a_4xx_on_every_route(served: Served, body: bytes) -> None:
    posts = [r.path for router in ROUTERS for r in router.routes if "POST" in r.methods and "{" not in r.path]
    assert "/api/v1/cancel_future" in posts and "/api/v1/forward_backward" in posts
    for path in posts:
        answer = served.client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code < 500, (path, answer.text)
        if answer.status_code >= 400:
            assert set(answer.json()) == {"error", "category"}, (path, answer.text)


def test_a_100000_character_name_is_a_short_400(served: Served) -> None:
    big = "x" * 100_000
    requests = {
        "/api/v1/create_model": {"session_id": served.session_id, "model_seq_id": 7, "base_model": big},
        "/api/v1/create_sampling_session": {
            "session_id": served.session_id,
            "sampling_session_seq_id": 7,
            "base_model": big,
        },
        "/api/v1/asample": sample_request(served, [1, 2]) | {"base_model": big},
        "/api/v1/save_weights": {"model_id": served.model_id, "path": big},
        "/api/v1/session_heartbeat": {"session_id": big},
    }
    for path, body in requests.items():
        message = refused(served.client.post(path, json=body))
        assert "100000 characters" in message and len(message) < 200, (path, message)


def test_a_corrupt_compressed_body_is_a_400(served: Served) -> None:
    answer = served.client.post(
        "/api/v1/forward_backward",
        content=b"\x28\xb5\x2f\xfd" + b"garbage" * 10,
        headers=PROTOBUF | {"Content-Encoding": "zstd"},
    )
    assert "not valid zstd" in refused(answer)


def test_an_invalid_sparse_tensor_is_a_400(served: Served) -> None:
    weights = pb.Tensor(
        sparse_csr=pb.SparseCsr(
            values=np.ones(3, np.float32).tobytes(),
            crow_indices=np.asarray([0, 5], np.int64).tobytes(),
            col_indices=np.asarray([0, 1, 99], np.int64).tobytes(),
        ),
        dtype=pb.DTYPE_FLOAT32,
        shape=[6, 4],
    )
    body = fb_body(served.model_id, [1, 2, 3, 4, 5, 6], weights=weights)
    answer = served.client.post("/api/v1/forward_backward", content=body, headers=PROTOBUF)
    assert "not a valid sparse CSR tensor" in refused(answer)


def test_a_small_request_declaring_millions_of_elements_is_refused_by_its_declared_size(served: Served) -> None:
    empty_rows = pb.SparseCsr(values=b"", crow_indices=np.zeros(7, np.int64).tobytes(), col_indices=b"")
    weights = pb.Tensor(sparse_csr=empty_rows, dtype=pb.DTYPE_FLOAT32, shape=[6, 1_000_000])
    body = fb_body(served.model_id, [1, 2, 3, 4, 5, 6], weights=weights)
    assert len(body) < 300
    message = refused(served.client.post("/api/v1/forward_backward", content=body, headers=PROTOBUF))
    assert f"declare 6000006 elements once dense; at most {MAX_BODY // 4}" in message


@pytest.mark.parametrize("forward_only", [False, True])
def test_a_sequence_longer_than_the_models_context_is_refused(served: Served, forward_only: bool) -> None:
    body = fb_body(served.model_id, [1] * 16_384, forward_only=forward_only)
    message = refused(served.client.post("/api/v1/forward_backward", content=body, headers=PROTOBUF))
    assert f"has 16384 tokens; the model's context holds {CONTEXT}" in message


def test_token_ids_outside_the_vocabulary_are_refused_naming_it(served: Served) -> None:
    body = fb_body(served.model_id, [1, 2, 10**6])
    message = refused(served.client.post("/api/v1/forward_backward", content=body, headers=PROTOBUF))
    assert "data[0].model_input has token ids outside the vocabulary (0.." in message


def test_a_sampling_prompt_must_fit_the_context_and_vocabulary(served: Served) -> None:
    too_long = refused(served.client.post("/api/v1/asample", json=sample_request(served, [1] * CONTEXT)))
    assert f"the prompt has {CONTEXT} tokens; the model's context holds {CONTEXT}" in too_long
    outside = refused(served.client.post("/api/v1/asample", json=sample_request(served, [1, 10**6])))
    assert "outside the vocabulary (0.." in outside
    fine = served.client.post("/api/v1/asample", json=sample_request(served, [1, 2, 3]))
    assert fine.status_code == 200, fine.text
    while (
        done := served.client.post("/api/v1/retrieve_future", json={"request_id": fine.json()["request_id"]})
    ).headers["content-type"] != wire.PROTOBUF:
        assert done.json().get("type") == "try_again", done.text
    assert len(deserialize_sample_response(done.content).sequences) == 1


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_loss_config_is_a_400_not_a_nan_loss(served: Served, value: float) -> None:
    body = fb_body(
        served.model_id, [1, 2, 3, 4], loss_fn="ppo", config={"clip_low_threshold": value}, forward_only=True
    )
    message = refused(served.client.post("/api/v1/forward_backward", content=body, headers=PROTOBUF))
    assert "loss_fn_config['clip_low_threshold']" in message and "numbers must be finite" in message


def test_a_nan_in_a_json_request_is_a_400(served: Served) -> None:
    params = {"max_tokens": 2, "temperature": float("nan")}  # json.dumps writes NaN, as Python's json reads it
    nan_temperature = json.dumps(sample_request(served, [1, 2]) | {"sampling_params": params})
    answer = served.client.post(
        "/api/v1/asample", content=nan_temperature, headers={"Content-Type": "application/json"}
    )
    message = refused(answer)
    assert message == "sampling_params.temperature is nan: numbers must be finite"
    nan_rate = json.dumps({"model_id": served.model_id, "optim_params": {"learning_rate": float("inf")}, "seq_id": 1})
    answer = served.client.post("/api/v1/optim_step", content=nan_rate, headers={"Content-Type": "application/json"})
    assert "optim_params.learning_rate is inf" in refused(answer)


@pytest.mark.parametrize("path", ["/api/v1/training_runs", "/api/v1/checkpoints"])
@pytest.mark.parametrize("query", ["limit=-1", "offset=-5"])
def test_a_negative_limit_or_offset_is_refused(served: Served, path: str, query: str) -> None:
    message = refused(served.client.get(f"{path}?{query}"), status=422)
    assert message.startswith(f"invalid request: query.{query.split('=')[0]}")
    assert served.client.get(f"{path}?limit=0&offset=0").status_code == 200


def test_each_refusal_is_one_log_line_without_a_traceback(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    bad = [
        lambda: served.client.post(
            "/api/v1/cancel_future", content=b"[]", headers={"Content-Type": "application/json"}
        ),
        lambda: served.client.post(
            "/api/v1/forward_backward", content=b"\x28\xb5\x2f\xfd!", headers=PROTOBUF | {"Content-Encoding": "zstd"}
        ),
        lambda: served.client.get("/api/v1/checkpoints?offset=-1"),
    ]
    for send in bad:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="tinker_emulator.workshop_server"):
            answer = send()
        assert 400 <= answer.status_code < 500, answer.text
        records = [r for r in caplog.records if r.name == "tinker_emulator.workshop_server"]
        assert len(records) == 1 and records[0].exc_info is None, [r.getMessage() for r in records]
        assert str(answer.status_code) in records[0].getMessage() and "\n" not in records[0].getMessage()


def test_healthz_answers_while_a_forward_backward_body_is_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoder is held until ``/healthz`` has answered: off the event loop, it answers at once;
    on the loop, nothing answers until the hold times out."""
    decoding, answered = threading.Event(), threading.Event()
    held: list[bool] = []
    decode = wire.read_forward_backward

    def held_decode(*args: Any, **kwargs: Any) -> Any:
        decoding.set()
        held.append(answered.wait(timeout=10))  # True: released because /healthz answered meanwhile
        return decode(*args, **kwargs)

    monkeypatch.setattr(wire, "read_forward_backward", held_decode)
    app = make_app(tmp_path, [KEY])

    async def scenario() -> tuple[int, int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://server", headers={"X-API-Key": KEY}
        ) as client:
            body = fb_body("nobody", [1] * 1000)
            big = asyncio.create_task(client.post("/api/v1/forward_backward", content=body, headers=PROTOBUF))
            await asyncio.to_thread(decoding.wait, 30)
            health = await client.get("/api/v1/healthz")
            answered.set()
            return health.status_code, (await big).status_code

    health, big = asyncio.run(scenario())
    assert health == 200 and held == [True]
    assert big == 404  # decoded after all, then refused: no such model


def test_out_of_memory_in_a_forward_backward_is_one_line_that_says_memory(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyTorch's CPU allocator failing mid-request: Tinker's failed-request answer, category "user"
    (a "server" failure is one the SDK may try again, and this would fail the same way), whose one
    line says memory and what to send instead."""
    from tinker_emulator import training_client

    def out_of_memory(*args: Any, **kwargs: Any) -> Iterator[Any]:
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 123456789 bytes")
        yield  # a generator, as scored_batches is

    monkeypatch.setattr(training_client, "scored_batches", out_of_memory)
    sent = served.client.post(
        "/api/v1/forward_backward", content=fb_body(served.model_id, [1, 2, 3, 4]), headers=PROTOBUF
    )
    answer = result(served.client, sent.json()["request_id"])
    assert answer["category"] == "user", answer
    assert answer["error"].startswith("the server ran out of memory for this request") and "\n" not in answer["error"]
