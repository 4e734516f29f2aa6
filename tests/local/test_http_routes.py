"""The local Tinker server's app in this process (tinker_emulator/workshop_server/app.py and routes/): a router
serves on an app of its own given its state, the lifespan sweeps expired sessions, and a training
run's model id names its run on the RestClient's routes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.helpers.http_app import KEY, NEW_SESSION, result
from tinker_emulator.workshop_server import app as http_app
from tinker_emulator.workshop_server import make_app
from tinker_emulator.workshop_server.gate import SampleGate
from tinker_emulator.workshop_server.registry import SESSION_TTL_S, Registry
from tinker_emulator.workshop_server.routes import sessions
from tinker_emulator.workshop_server.state import Limits, Server, tenant


def test_a_router_serves_alone_given_its_state_and_tenant(tmp_path: Path) -> None:
    app = FastAPI()
    app.include_router(sessions.router)
    registry = Registry(tmp_path, max_pending=4, max_pending_per_session=2)
    app.state.server = Server(registry, SampleGate(), Limits(), compress=False)
    app.dependency_overrides[tenant] = lambda: "alice"
    with TestClient(app) as client:
        made = client.post("/api/v1/create_session", json=NEW_SESSION)
        assert made.status_code == 200, made.text
        session_id = made.json()["session_id"]
        assert registry.sessions[session_id].tenant.name == "alice"
        assert client.post("/api/v1/session_heartbeat", json={"session_id": session_id}).status_code == 200
        assert client.post("/api/v1/client/config").json()["proto_compress_fwdbwd"] is False
        assert client.post(f"/api/v1/sessions/{session_id}/finish").status_code == 204
    assert session_id not in registry.sessions  # finished: closed at once


def test_the_lifespan_sweeps_expired_sessions_while_the_app_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_app, "SWEEP_S", 0.01)
    app = make_app(tmp_path, [KEY])
    registry = app.state.server.registry
    with TestClient(app, headers={"X-API-Key": KEY}) as client:
        expired, alive = (
            client.post("/api/v1/create_session", json=NEW_SESSION).json()["session_id"] for _ in range(2)
        )
        registry.sessions[expired].last_seen = time.monotonic() - 2 * SESSION_TTL_S
        deadline = time.monotonic() + 60
        while expired in registry.sessions and time.monotonic() < deadline:
            time.sleep(0.01)
        assert expired not in registry.sessions and alive in registry.sessions
        gone = client.post("/api/v1/session_heartbeat", json={"session_id": expired})
        assert gone.status_code == 404 and set(gone.json()) == {"error", "category"}


def test_the_app_answers_keys_and_unknown_routes_in_tinkers_shape(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path, [KEY])) as client:
        assert client.get("/api/v1/healthz").json() == {"status": "ok"}  # open without a key
        refused = client.post("/api/v1/create_session", json=NEW_SESSION, headers={"X-API-Key": "tml-wrong"})
        assert refused.status_code == 401 and refused.json()["category"] == "user"
        unknown = client.get("/api/v1/nothing_here", headers={"X-API-Key": KEY})
        assert unknown.status_code == 404 and "not served by gemlab's local Tinker server" in unknown.json()["error"]
        bad_query = client.get("/api/v1/training_runs?limit=many", headers={"X-API-Key": KEY})
        assert bad_query.status_code == 422 and bad_query.json()["error"].startswith("invalid request: query.limit")


def test_a_training_runs_model_id_names_its_run_on_the_rest_routes(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path, [KEY], device="cpu"), headers={"X-API-Key": KEY}) as client:
        session_id = client.post("/api/v1/create_session", json=NEW_SESSION).json()["session_id"]
        create = {"session_id": session_id, "model_seq_id": 0, "base_model": "gemlab/tiny", "lora_config": {"rank": 4}}
        made = client.post("/api/v1/create_model", json=create).json()
        model_id = made["model_id"]
        assert result(client, made["request_id"])["model_id"] == model_id
        saved = client.post("/api/v1/save_weights", json={"model_id": model_id, "path": "s1"}).json()
        path = result(client, saved["request_id"])["path"]
        run_id = path.split("/")[2]
        assert path == f"tinker://{run_id}/weights/s1" and run_id != model_id
        for name in (run_id, model_id):  # the run, by its own id or by the model id the SDK holds
            assert client.get(f"/api/v1/training_runs/{name}").json()["training_run_id"] == run_id
            listed = client.get(f"/api/v1/training_runs/{name}/checkpoints").json()["checkpoints"]
            assert [c["checkpoint_id"] for c in listed] == ["weights/s1"]
