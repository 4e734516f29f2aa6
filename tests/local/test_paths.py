"""Client strings that become folders on the server (tinker_emulator/workshop_server/paths.py and the checkpoint
names of tinker_emulator/checkpoints.py) pass one allow-rule, ``checkpoints.NAME``: 1-200 letters,
digits, '.', '_', '-', starting with a letter or digit. Anything else, a 255+ character name
included, is a 4xx in Tinker's error JSON that names the rule, never an internal error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.helpers.http_app import KEY, NEW_SESSION, result
from tinker_emulator import checkpoints
from tinker_emulator.workshop_server import make_app, paths

RULE = "1-200 letters, digits"
BAD_NAMES = ["a" * 201, "a" * 255, "a" * 300, "x" * 1000, "../up", ".hidden", "a/b", "a\\b", "-dash", "a b", "é"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str, str, Path]]:
    """A client of a fresh server, a session and its training run (gemlab/tiny, rank 4)."""
    data_dir = tmp_path_factory.mktemp("paths")
    with TestClient(make_app(data_dir, [KEY], device="cpu"), headers={"X-API-Key": KEY}) as client:
        session = client.post("/api/v1/create_session", json=NEW_SESSION).json()["session_id"]
        create = {"session_id": session, "model_seq_id": 0, "base_model": "gemlab/tiny", "lora_config": {"rank": 4}}
        made = client.post("/api/v1/create_model", json=create).json()
        assert result(client, made["request_id"])["model_id"] == made["model_id"]
        yield client, session, made["model_id"], data_dir


def assert_names_the_rule(answer: Any) -> None:
    assert answer.status_code == 400, answer.text[:300]
    body = answer.json()
    assert set(body) == {"error", "category"} and body["category"] == "user"
    assert RULE in body["error"] and "\n" not in body["error"] and len(body["error"]) < 500


@pytest.mark.parametrize("name", BAD_NAMES, ids=lambda n: n[:12] + (f"..{len(n)}" if len(n) > 12 else ""))
def test_a_checkpoint_name_outside_the_rule_is_a_400_naming_it(
    model: tuple[TestClient, str, str, Path], name: str
) -> None:
    client, _, model_id, data_dir = model
    for route in ("save_weights", "save_weights_for_sampler", "save_weights_external"):
        assert_names_the_rule(client.post(f"/api/v1/{route}", json={"model_id": model_id, "path": name}))
    tenants = data_dir / "tenants"
    assert not [p for p in tenants.rglob("*") if p.name.startswith(name[:20])]  # nothing written under any name


def test_the_longest_allowed_name_saves_lists_and_loads(model: tuple[TestClient, str, str, Path]) -> None:
    client, session, model_id, _ = model
    name = "n" * 200
    saved = result(
        client, client.post("/api/v1/save_weights", json={"model_id": model_id, "path": name}).json()["request_id"]
    )
    assert saved["path"].endswith(f"/weights/{name}"), saved
    listed = client.get("/api/v1/checkpoints").json()["checkpoints"]
    assert f"weights/{name}" in [c["checkpoint_id"] for c in listed]
    load = {"session_id": session, "model_seq_id": 1, "path": saved["path"], "optimizer": False}
    loaded = client.post("/api/v1/load_weights", json=load)
    assert loaded.status_code == 200 and result(client, loaded.json()["request_id"])["path"] == saved["path"]


@pytest.mark.parametrize("segment", ["r" * 201, "..", ".staging", "a%2Fb"])
def test_tinker_paths_and_run_ids_outside_the_rule_are_refused(
    model: tuple[TestClient, str, str, Path], segment: str
) -> None:
    client, _, _, _ = model
    for tinker_path in (f"tinker://{segment}/weights/s1", f"tinker://run-1/weights/{segment}"):
        assert_names_the_rule(client.post("/api/v1/weights_info", json={"tinker_path": tinker_path}))
    if segment != "..":  # the HTTP client itself resolves '..' in a URL
        answer = client.get(f"/api/v1/training_runs/{segment}/checkpoints")
        assert answer.status_code == 404 and len(answer.json()["error"]) < 500


def test_the_http_rule_is_the_checkpoint_name_rule() -> None:
    """What a save may be named is exactly what a tinker path may name (one rule, not two)."""
    for name in ["a", "a" * 200, "v1.2_x-y", *BAD_NAMES]:
        allowed = bool(checkpoints.NAME.fullmatch(name))
        try:
            paths.split(f"tinker://run-1/weights/{name}")
            in_path = True
        except ValueError:
            in_path = False
        try:
            checkpoints.checkpoint_path("run-1", "weights", name)
            in_save = True
        except ValueError:
            in_save = False
        assert allowed == in_path == in_save, name[:20]
