"""The official tinker SDK, unpatched, against ``python -m tinker_emulator.workshop_server`` in its own process:
the SDK's whole client path, keys and tenants, limits, malformed requests, and faults."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.http_server import ServerProcess, first_line, run_client

CLIENT = textwrap.dedent(
    '''
    """Every SDK call the training loops use, as a plain Tinker program."""
    import json, sys
    import tinker
    from tinker import types

    service = tinker.ServiceClient()
    training = service.create_lora_training_client(base_model="gemlab/tiny", rank=4, seed=0).result()
    tokens = [1, 2, 3, 4, 5, 6, 7]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * 6},
    )
    before = training.forward([datum], "cross_entropy").result()
    fb = training.forward_backward([datum], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = training.forward([datum], "cross_entropy").result()
    state = training.save_state("s1").result().path
    sampler_path = training.save_weights_for_sampler("w1").result().path
    sampler = training.save_weights_and_get_sampling_client()
    sample = sampler.sample(types.ModelInput.from_ints(tokens), 2, types.SamplingParams(max_tokens=4, seed=1)).result()
    by_path = service.create_sampling_client(model_path=sampler_path)
    base = service.create_sampling_client(base_model="gemlab/tiny")
    prompt = types.ModelInput.from_ints(tokens)
    with_logprobs = base.sample(prompt, 1, types.SamplingParams(max_tokens=2), include_prompt_logprobs=True).result()
    greedy_params = types.SamplingParams(max_tokens=3, temperature=0.0)
    greedy = base.sample(prompt, 1, greedy_params, topk_sample_logprobs=2).result().sequences[0]
    resumed = service.create_training_client_from_state_with_optimizer(state).result()
    resumed_loss = resumed.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    rest = service.create_rest_client()
    run_id = state.split("/")[2]
    listed = rest.list_checkpoints(run_id).result()
    print(json.dumps({
        "before": before.metrics["loss:sum"], "fb": fb.metrics["loss:sum"], "after": after.metrics["loss:sum"],
        "logprobs_len": len(fb.loss_fn_outputs[0]["logprobs"].tolist()),
        "state": state, "sampler_path": sampler_path,
        "sequence_ids": [s.sequence_id for s in sample.sequences],
        "sample_lens": [len(s.tokens) for s in sample.sequences],
        "by_path": len(
            by_path.sample(types.ModelInput.from_ints(tokens), 1, types.SamplingParams(max_tokens=3))
            .result()
            .sequences[0]
            .tokens
        ),
        "prompt_logprobs": with_logprobs.prompt_logprobs,
        "greedy": [greedy.tokens, greedy.logprobs, greedy.topk_logprobs],
        "resumed_loss": resumed_loss,
        "checkpoints": sorted(c.checkpoint_id for c in listed.checkpoints),
        "weights_info_rank": rest.get_weights_info_by_tinker_path(state).result().lora_rank,
        "model_id": training.get_info().model_id,
        "sampler_base": base.get_base_model(),
    }))
    '''
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    data = tmp_path_factory.mktemp("http") / "data"
    server = ServerProcess(data, "--keys", "2", "--max-tokens", "64")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client_run(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> dict:
    cwd = tmp_path_factory.mktemp("client")
    (cwd / "client.py").write_text(CLIENT)
    done = run_client(server, ["client.py"], cwd)
    return json.loads(done.stdout.strip().splitlines()[-1])


def api(server: ServerProcess, key: int | None = 0) -> httpx.Client:
    headers = {} if key is None else {"X-API-Key": server.keys[key]}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def test_the_sdk_trains_saves_samples_and_resumes_over_http(client_run: dict, server: ServerProcess):
    assert client_run["after"] < client_run["before"]  # one AdamW step on the datum lowered its loss
    assert client_run["fb"] == pytest.approx(client_run["before"], rel=1e-5)
    assert client_run["logprobs_len"] == 6
    assert client_run["state"].startswith("tinker://") and "/weights/s1" in client_run["state"]
    assert client_run["sampler_path"].endswith("/sampler_weights/w1")
    assert client_run["resumed_loss"] == pytest.approx(client_run["after"], rel=1e-5)  # the saved weights came back
    assert client_run["sample_lens"] == [4, 4] and len(set(client_run["sequence_ids"])) == 2
    assert client_run["by_path"] >= 1
    assert client_run["prompt_logprobs"][0] is None and len(client_run["prompt_logprobs"]) == 7
    tokens, logprobs, top = client_run["greedy"]  # top-k of each sampled token: greedy picks the first
    assert len(top) == len(tokens) and all(len(row) == 2 and row[0][0] == t for t, row in zip(tokens, top, strict=True))
    assert [row[0][1] for row in top] == pytest.approx(logprobs) and all(row[0][1] >= row[1][1] for row in top)
    assert client_run["checkpoints"] == ["sampler_weights/w1", "weights/s1"]
    assert client_run["weights_info_rank"] == 4 and client_run["sampler_base"] == "gemlab/tiny"
    assert server.alive()


def test_the_tinker_cli_lists_runs_and_checkpoints(client_run: dict, server: ServerProcess, tmp_path: Path):
    run_id = client_run["state"].split("/")[2]
    runs = subprocess.run(["tinker", "run", "list"], capture_output=True, text=True, env=server.env(), timeout=120)
    assert runs.returncode == 0 and run_id in runs.stdout, runs.stderr[-2000:]
    listed = subprocess.run(
        ["tinker", "-f", "json", "checkpoint", "list", "--run-id", run_id],
        capture_output=True,
        text=True,
        env=server.env(),
        timeout=120,
    )
    assert listed.returncode == 0 and "weights/s1" in listed.stdout, listed.stderr[-2000:]


def test_every_request_needs_a_key_the_server_made(server: ServerProcess):
    for headers in ({}, {"X-API-Key": "tml-not-a-key-of-this-server"}):
        answer = httpx.post(f"{server.url}/api/v1/create_session", headers=headers, json={})
        assert answer.status_code == 401
        assert answer.json()["category"] == "user" and "TINKER_API_KEY" in answer.json()["error"]
    assert httpx.get(f"{server.url}/api/v1/healthz").json() == {"status": "ok"}


def test_one_key_cannot_reach_anothers_models_or_checkpoints(client_run: dict, server: ServerProcess):
    run_id = client_run["state"].split("/")[2]
    with api(server, key=1) as other:
        session = other.post(
            "/api/v1/create_session", json={"tags": [], "user_metadata": {}, "sdk_version": "x"}
        ).json()["session_id"]
        answers = [
            other.post("/api/v1/get_info", json={"model_id": client_run["model_id"]}),
            other.get(f"/api/v1/training_runs/{run_id}/checkpoints"),
            other.post("/api/v1/weights_info", json={"tinker_path": client_run["state"]}),
            other.post(
                "/api/v1/load_weights",
                json={"session_id": session, "model_seq_id": 0, "path": client_run["state"], "optimizer": False},
            ),
            other.delete(f"/api/v1/training_runs/{run_id}/checkpoints/weights/s1"),
        ]
        assert [a.status_code for a in answers] == [404] * 5, [a.text for a in answers]
        assert other.get("/api/v1/training_runs").json()["training_runs"] == []
    with api(server) as owner:  # still there for its owner
        assert owner.post("/api/v1/weights_info", json={"tinker_path": client_run["state"]}).status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/api/v1/create_session", b"{not json", 422),
        ("/api/v1/create_model", b'{"session_id": 3}', 422),
        ("/api/v1/forward_backward", b"\xff\x00garbage", 400),
        ("/api/v1/retrieve_future", b'{"request_id": "req-nope"}', 404),
        ("/api/v1/weights_info", b'{"tinker_path": "tinker://../../etc/passwd"}', 400),
        ("/api/v1/no_such_route", b"{}", 404),
    ],
)
def test_malformed_requests_get_a_4xx_in_tinkers_error_shape(
    server: ServerProcess, path: str, body: bytes, status: int
):
    with api(server) as client:
        answer = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == {"error", "category"} and "Traceback" not in answer.text


def test_max_tokens_and_body_size_are_bounded(server: ServerProcess):
    with api(server) as client:
        session = client.post(
            "/api/v1/create_session", json={"tags": [], "user_metadata": {}, "sdk_version": "x"}
        ).json()["session_id"]
        client.post(
            "/api/v1/create_sampling_session",
            json={"session_id": session, "sampling_session_seq_id": 0, "base_model": "gemlab/tiny"},
        )
        request = {
            "sampling_session_id": f"{session}:sample:0",
            "seq_id": 0,
            "num_samples": 1,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]},
            "sampling_params": {"max_tokens": 65},
        }
        too_long = client.post("/api/v1/asample", json=request)
        assert too_long.status_code == 400 and "max_tokens must be between 1 and 64" in too_long.json()["error"]
        huge = client.post("/api/v1/create_session", content=b"x" * (65 * 2**20))
        assert huge.status_code == 413 and "limit" in huge.json()["error"]


def test_a_full_queue_answers_busy_in_tinkers_shape(tmp_path: Path):
    server = ServerProcess(tmp_path / "data", "--max-queue", "1")
    try:
        with api(server) as client:
            session = client.post(
                "/api/v1/create_session", json={"tags": [], "user_metadata": {}, "sdk_version": "x"}
            ).json()["session_id"]
            client.post(
                "/api/v1/create_sampling_session",
                json={"session_id": session, "sampling_session_seq_id": 0, "base_model": "gemlab/tiny-random"},
            )
            request = {  # random weights rarely stop early: this keeps the sampler busy for a while
                "sampling_session_id": f"{session}:sample:0",
                "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]},
                "sampling_params": {"max_tokens": 1024},
                "num_samples": 60,  # 60 x (2 + 1024) tokens: within --max-sample-tokens
            }
            answers = [client.post("/api/v1/asample", json=request) for _ in range(3)]
        assert answers[0].status_code == 200
        busy = answers[-1]
        assert busy.status_code == 429 and busy.json()["category"] == "server" and "busy" in busy.json()["error"]
    finally:
        server.stop()


KILLED = textwrap.dedent(
    '''
    import tinker
    from tinker import types
    training = tinker.ServiceClient().create_lora_training_client(base_model="gemlab/tiny", rank=4).result()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(list(range(1, 400))),
        loss_fn_inputs={"target_tokens": list(range(2, 401)), "weights": [1.0] * 399},
    )
    future = training.forward_backward([datum] * 64, "cross_entropy")
    print("sent", flush=True)
    future.result()
    '''
)


def test_a_client_killed_mid_request_leaves_the_server_healthy(server: ServerProcess, tmp_path: Path):
    (tmp_path / "killed.py").write_text(KILLED)
    victim = subprocess.Popen(
        [sys.executable, "killed.py"], cwd=tmp_path, env=server.env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert first_line(victim) == "sent"
        time.sleep(0.5)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    (tmp_path / "client.py").write_text(CLIENT)
    after = json.loads(run_client(server, ["client.py"], tmp_path).stdout.strip().splitlines()[-1])
    assert after["after"] < after["before"] and server.alive()


def test_a_restarted_server_keeps_checkpoints_and_the_client_resumes_with_load_state(tmp_path: Path):
    data = tmp_path / "data"
    first = ServerProcess(data)
    (tmp_path / "client.py").write_text(CLIENT)
    try:
        saved = json.loads(run_client(first, ["client.py"], tmp_path).stdout.strip().splitlines()[-1])
    finally:
        first.stop(signal.SIGKILL)  # a crash, not a clean stop
    second = ServerProcess(data)
    resume = textwrap.dedent(
        f'''
        import tinker
        from tinker import types
        service = tinker.ServiceClient()
        training = service.create_lora_training_client(base_model="gemlab/tiny", rank=4, seed=1).result()
        training.load_state({saved["state"]!r}).result()
        datum = types.Datum(
            model_input=types.ModelInput.from_ints([1, 2, 3, 4, 5, 6]),
            loss_fn_inputs={{"target_tokens": [2, 3, 4, 5, 6, 7], "weights": [1.0] * 6}},
        )
        print(training.forward([datum], "cross_entropy").result().metrics["loss:sum"])
        print(len(service.create_rest_client().list_checkpoints({saved["state"].split("/")[2]!r}).result().checkpoints))
        '''
    )
    (tmp_path / "resume.py").write_text(resume)
    try:
        assert second.keys == first.keys  # the key survives the restart
        loss, count = run_client(second, ["resume.py"], tmp_path).stdout.split()[-2:]
    finally:
        second.stop()
    assert float(loss) == pytest.approx(saved["after"], rel=1e-5) and int(count) == 2
