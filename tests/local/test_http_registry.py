"""What the workshop server holds per key (tinker_emulator/workshop_server/registry.py): keys take turns on the
training worker while each keeps its order, each key is bounded (training runs 403; queued
requests, unfetched results and the bytes they hold 429), and a session that ends takes its
models, samplers and results with it, so their memory can go."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.helpers.http_app import NEW_SESSION, result, training_worker_held
from tinker_emulator import training_client
from tinker_emulator.futures import SAMPLING, TRAINING, get_worker
from tinker_emulator.workshop_server import make_app
from tinker_emulator.workshop_server.registry import (
    REQUEST_BYTES,
    SESSION_TTL_S,
    Busy,
    NotFound,
    QuotaExceeded,
    Quotas,
    Registry,
    Sampler,
)
from tinker_emulator.workshop_server.state import Limits

KEYS = ["tml-" + "a" * 40, "tml-" + "b" * 40]
STEP = {"adam_params": {"learning_rate": 1e-3}}


def new_model(client: TestClient, key: str, seq: int = 0, session_id: str | None = None) -> tuple[str, str]:
    """``(session id, model id)`` of a new rank-4 training run of ``key``."""
    headers = {"X-API-Key": key}
    if session_id is None:
        session_id = client.post("/api/v1/create_session", json=NEW_SESSION, headers=headers).json()["session_id"]
    create = {"session_id": session_id, "model_seq_id": seq, "base_model": "gemlab/tiny", "lora_config": {"rank": 4}}
    made = client.post("/api/v1/create_model", json=create, headers=headers)
    assert made.status_code == 200, made.text
    assert "error" not in result(client, made.json()["request_id"], key)
    return session_id, made.json()["model_id"]


def test_a_keys_one_request_waits_for_one_of_anothers_not_its_whole_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    step = training_client.LocalTrainingClient._step

    def recording(self: Any, params: Any) -> Any:  # runs on the training worker, in its order
        ran.append(self.model_id)
        return step(self, params)

    app = make_app(tmp_path, KEYS, device="cpu")
    with TestClient(app) as client:
        (_, big), (_, small) = (new_model(client, key) for key in KEYS)
        runs = [app.state.server.registry.models[m].client.result().model_id for m in (big, small)]
        monkeypatch.setattr(training_client.LocalTrainingClient, "_step", recording)
        with training_worker_held():  # nothing runs until all are queued
            queued = [
                client.post("/api/v1/optim_step", json={"model_id": big, **STEP}, headers={"X-API-Key": KEYS[0]})
                for _ in range(4)
            ]
            queued.append(
                client.post("/api/v1/optim_step", json={"model_id": small, **STEP}, headers={"X-API-Key": KEYS[1]})
            )
        assert [answer.status_code for answer in queued] == [200] * 5
        keys = [KEYS[0]] * 4 + [KEYS[1]]
        assert all("error" not in result(client, a.json()["request_id"], k) for a, k in zip(queued, keys, strict=True))
    # the second key's step ran after one of the first key's four, and the first key's kept their order
    assert ran == [runs[0], runs[1], runs[0], runs[0], runs[0]]


def test_a_key_over_its_training_runs_gets_403_and_over_its_queue_429(tmp_path: Path) -> None:
    limits = Limits(quotas=Quotas(models=2, queued=2))
    with TestClient(make_app(tmp_path, KEYS, limits, device="cpu")) as client:
        session_id, first = new_model(client, KEYS[0])
        new_model(client, KEYS[0], seq=1, session_id=session_id)
        create = {"session_id": session_id, "model_seq_id": 2, "base_model": "gemlab/tiny", "lora_config": {"rank": 4}}
        third = client.post("/api/v1/create_model", json=create, headers={"X-API-Key": KEYS[0]})
        assert third.status_code == 403, third.text  # a cap: the SDK does not retry a 403
        assert third.json()["category"] == "user" and "2 training runs open" in third.json()["error"]
        _, other = new_model(client, KEYS[1])  # another key is not held back by this one's cap

        with training_worker_held():
            steps = [
                client.post("/api/v1/optim_step", json={"model_id": first, **STEP}, headers={"X-API-Key": KEYS[0]})
                for _ in range(3)
            ]
            others = client.post("/api/v1/optim_step", json={"model_id": other, **STEP}, headers={"X-API-Key": KEYS[1]})
        assert [s.status_code for s in steps] == [200, 200, 429]
        assert steps[2].json() == {
            "error": "this API key has 2 requests queued (limit 2); retry shortly",
            "category": "server",
        }
        assert others.status_code == 200


def test_unfetched_results_and_held_bytes_are_bounded_per_key(tmp_path: Path) -> None:
    registry = Registry(
        tmp_path, max_pending=100, max_pending_per_session=100, quotas=Quotas(results=2, held_bytes=1000)
    )

    async def scenario() -> None:
        alice, bob = registry.new_session("alice"), registry.new_session("bob")
        done = [registry.submit(alice, asyncio.sleep(0), lambda r: r) for _ in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(Busy, match="2 results nobody fetched"):
            registry.submit(alice, asyncio.sleep(0), lambda r: r)
        registry.submit(bob, asyncio.sleep(0), lambda r: r)  # bob's share is his own
        registry.mark_fetched(done[0])  # fetched: no longer counted
        waiting = asyncio.get_running_loop().create_future()
        REQUEST_BYTES.set(600)
        registry.submit(alice, waiting, lambda r: r)
        with pytest.raises(Busy, match="hold 600 bytes; 600 more is over the limit of 1000"):
            registry.submit(alice, waiting, lambda r: r)
        REQUEST_BYTES.set(300)
        registry.submit(bob, waiting, lambda r: r)
        waiting.cancel()

    asyncio.run(scenario())


def test_a_key_keeps_its_most_recently_used_samplers(tmp_path: Path) -> None:
    registry = Registry(tmp_path, max_pending=10, max_pending_per_session=10, quotas=Quotas(samplers=3))

    async def scenario() -> None:
        alice, bob = registry.new_session("alice"), registry.new_session("bob")
        made = asyncio.get_running_loop().create_future()
        registry.add_sampler(Sampler("bob-0", bob, "gemlab/tiny", None, made))
        for step in range(3):
            registry.add_sampler(Sampler(f"alice-{step}", alice, "gemlab/tiny", None, made))
            await asyncio.sleep(0.01)
        registry.sampler("alice-0", "alice")  # used again: kept over alice-1
        for step in range(3, 5):
            await asyncio.sleep(0.01)
            registry.add_sampler(Sampler(f"alice-{step}", alice, "gemlab/tiny", None, made))
        made.cancel()

    asyncio.run(scenario())
    assert sorted(registry.samplers) == ["alice-0", "alice-3", "alice-4", "bob-0"]
    with pytest.raises(NotFound, match="keeps its 3 most recently used samplers"):
        registry.sampler("alice-1", "alice")


def test_unfetched_results_expire_after_the_result_ttl(tmp_path: Path) -> None:
    registry = Registry(tmp_path, max_pending=10, max_pending_per_session=10, quotas=Quotas(result_ttl_s=120))

    async def scenario() -> str:
        request_id = registry.submit(registry.new_session("alice"), asyncio.sleep(0), lambda r: r)
        await asyncio.sleep(0.01)
        return request_id

    request_id = asyncio.run(scenario())
    done_at = registry.pending[request_id].done_at
    registry.sweep(now=done_at + 60)
    assert request_id in registry.pending
    registry.sweep(now=done_at + 121)  # 30 minutes on the base commit
    assert request_id not in registry.pending


@pytest.mark.parametrize("end", ["finish", "expiry"])
def test_an_ended_session_releases_its_models_samplers_and_results(tmp_path: Path, end: str) -> None:
    app = make_app(tmp_path, KEYS, device="cpu")
    registry = app.state.server.registry
    headers = {"X-API-Key": KEYS[0]}
    with TestClient(app) as client:
        session_id, model_id = new_model(client, KEYS[0])
        _, kept = new_model(client, KEYS[1])
        made = client.post(
            "/api/v1/save_weights_for_sampler",
            json={"model_id": model_id, "sampling_session_seq_id": 0},
            headers=headers,
        )
        assert "error" not in result(client, made.json()["request_id"], KEYS[0])
        unfetched = client.post("/api/v1/optim_step", json={"model_id": model_id, **STEP}, headers=headers).json()[
            "request_id"
        ]
        trained = registry.models[model_id].client.result()
        loaded, adapter = trained._model, trained._adapter
        gone = weakref.ref(trained)
        sampler = weakref.ref(
            next(s for s in registry.samplers.values() if s.session and s.session.id == session_id).client.result()
        )
        del trained
        get_worker(TRAINING).drain()
        deadline = time.monotonic() + 60
        while not registry.pending[unfetched].task.done():  # the app's loop marks it done a moment after the worker
            assert time.monotonic() < deadline, "the optim_step never finished"
            time.sleep(0.01)
        if end == "finish":
            assert client.post(f"/api/v1/sessions/{session_id}/finish", headers=headers).status_code == 204
        else:
            registry.sessions[session_id].last_seen -= SESSION_TTL_S + 1  # no heartbeat for longer than the TTL
            registry.sweep()
        held = [*registry.models.values(), *registry.samplers.values(), *registry.pending.values()]
        assert session_id not in registry.sessions and unfetched not in registry.pending
        assert not [item for item in held if item.session is not None and item.session.id == session_id]
        assert kept in registry.models  # the other key's run stays
        del held
        for _ in range(5):  # a worker thread may hold its last job a moment longer
            gc.collect()
            for role in (TRAINING, SAMPLING):
                get_worker(role).drain()  # the released adapters are deleted on the workers
            if gone() is None and sampler() is None:
                break
        assert gone() is None and sampler() is None
        assert adapter not in loaded.peft.peft_config


def test_a_sampler_in_use_is_never_dropped_and_a_key_past_its_limit_is_refused_naming_the_flag(tmp_path: Path) -> None:
    """Issue 45: 30 programs on one key lost samplers mid-run, dropped as least recently used."""
    registry = Registry(tmp_path, max_pending=10, max_pending_per_session=10, quotas=Quotas(samplers=3))

    async def scenario() -> None:
        programs = [registry.new_session("alice") for _ in range(4)]
        made = asyncio.get_running_loop().create_future()
        for index, program in enumerate(programs[:3]):
            registry.add_sampler(Sampler(f"p{index}-0", program, "gemlab/tiny", None, made))
            await asyncio.sleep(0.01)
        registry.samplers["p0-0"].sampling = 1  # answering a request
        registry.check_sampler_room(programs[0])  # p0 may replace its own sampler ...
        registry.add_sampler(Sampler("p0-1", programs[0], "gemlab/tiny", None, made))
        assert "p0-0" in registry.samplers  # ... but the one still sampling stays
        with pytest.raises(
            QuotaExceeded, match=r"4 samplers in use, at the server's limit of 3 per key \(its --samplers-per-key\)"
        ):
            registry.check_sampler_room(programs[3])  # every sampler is some program's newest
        registry.samplers["p0-0"].sampling = 0
        registry.check_sampler_room(programs[3])  # p0-0 is neither newest nor sampling now
        registry.add_sampler(Sampler("p3-0", programs[3], "gemlab/tiny", None, made))
        made.cancel()

    asyncio.run(scenario())
    assert sorted(registry.samplers) == ["p0-1", "p1-0", "p2-0", "p3-0"]


def test_fetched_results_are_kept_for_a_second_poll_but_not_scanned_per_request(tmp_path: Path) -> None:
    """Every request runs ``check_room``; a busy server holds thousands of fetched results (kept a
    minute for a client that polls again), and walking them all made each request milliseconds slower."""
    registry = Registry(tmp_path, max_pending=100, max_pending_per_session=100)

    async def scenario() -> list[str]:
        alice = registry.new_session("alice")
        ids = [registry.submit(alice, asyncio.sleep(0), lambda r: r) for _ in range(50)]
        await asyncio.sleep(0.01)
        for request_id in ids:
            registry.mark_fetched(request_id)
        looked_at = 0

        class Counted:  # a finished task that counts how often check_room asks about it
            def done(self) -> bool:
                nonlocal looked_at
                looked_at += 1
                return True

        for request_id in ids:
            registry.result(request_id, "alice").task = Counted()
        registry.submit(alice, asyncio.sleep(0), lambda r: r)
        assert looked_at == 0
        return ids

    ids = asyncio.run(scenario())
    fetched_at = registry.result(ids[0], "alice").retrieved_at
    registry.sweep(now=fetched_at + 30)
    assert registry.result(ids[0], "alice") is not None  # a client that polls again still gets it
    registry.sweep(now=fetched_at + 61)
    with pytest.raises(NotFound):
        registry.result(ids[0], "alice")
