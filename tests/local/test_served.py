"""A model name is a name (tinker_emulator/workshop_server/served.py): the server takes only the base models
``get_server_capabilities`` lists; a path on the server (``~``, ``""``, a model folder outside the
data folder, another key's folder), an unknown or huge name is a 400 in Tinker's error JSON naming
what is served, on every route that takes a ``base_model``, and nothing is made for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.helpers.http_app import NEW_SESSION
from tinker_emulator import TINY
from tinker_emulator.models import catalogue
from tinker_emulator.workshop_server import make_app
from tinker_emulator.workshop_server.keys import tenant_of

KEY, OTHER = "tml-" + "0123456789" * 4, "tml-" + "9876543210" * 4
PROMPT = {"chunks": [{"type": "encoded_text", "tokens": [1, 2]}]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Any, Path]]:
    data_dir = tmp_path_factory.mktemp("served")
    app = make_app(data_dir, [KEY, OTHER], device="cpu")
    with TestClient(app, headers={"X-API-Key": KEY}) as client:
        yield client, app.state.server.registry, data_dir


def not_names(data_dir: Path) -> list[str]:
    """base_model values that name a place on the server or nothing served."""
    other_tenant = data_dir / "tenants" / tenant_of(OTHER)
    other_tenant.mkdir(parents=True, exist_ok=True)
    return [
        "~",
        "",
        ".",
        "/",
        str(catalogue()[TINY]),  # a real model folder, outside the data folder
        str(other_tenant),
        f"../tenants/{tenant_of(OTHER)}",
        "gemlab/tiny/../tiny",
        "gemlab/no-such-model",
        "acme/not-served",
        "x" * 1000,  # longer strings are cut off earlier, by the request checks (validate.py)
    ]


def assert_refused(answer: Any, name: str) -> None:
    assert answer.status_code == 400, (name[:60], answer.status_code, answer.text[:300])
    body = answer.json()
    assert set(body) == {"error", "category"} and body["category"] == "user"
    message = body["error"]
    assert "\n" not in message and "Traceback" not in message and len(message) < 2000
    assert "not served" in message and TINY in message and "Qwen/Qwen3-8B-Base" in message


def test_every_route_taking_a_base_model_refuses_anything_not_served(served: tuple[TestClient, Any, Path]) -> None:
    client, registry, data_dir = served
    session = client.post("/api/v1/create_session", json=NEW_SESSION).json()["session_id"]
    models, samplers = dict(registry.models), dict(registry.samplers)
    for name in not_names(data_dir):
        requests = {
            "create_model": {"session_id": session, "model_seq_id": 0, "base_model": name, "lora_config": {"rank": 4}},
            "create_sampling_session": {"session_id": session, "sampling_session_seq_id": 0, "base_model": name},
            "asample": {"base_model": name, "num_samples": 1, "prompt": PROMPT, "sampling_params": {"max_tokens": 2}},
            "load_weights": {
                "session_id": session,
                "model_seq_id": 0,
                "path": "tinker://run-x/weights/s1",
                "base_model": name,
                "optimizer": False,
            },
        }
        for route, body in requests.items():
            assert_refused(client.post(f"/api/v1/{route}", json=body), f"{route}: {name}")
    assert (registry.models, registry.samplers, registry.waiting()) == (models, samplers, 0)  # nothing was made


def test_the_served_names_are_what_the_server_lists_and_they_are_taken(served: tuple[TestClient, Any, Path]) -> None:
    client, registry, _ = served
    listed = {m["model_name"]: m for m in client.get("/api/v1/get_server_capabilities").json()["supported_models"]}
    assert {TINY, "gemlab/tiny-chat", "Qwen/Qwen3-8B-Base", "Qwen/Qwen3-4B-Instruct-2507"} <= set(listed)
    assert not any(name.startswith(("/", "~", ".")) for name in listed)
    assert listed["Qwen/Qwen3-8B-Base"]["max_context_length"] == listed["gemlab/tiny-chat"]["max_context_length"]
    session = client.post("/api/v1/create_session", json=NEW_SESSION).json()["session_id"]
    for seq_id, name in enumerate((TINY, "Qwen/Qwen3-8B-Base")):
        body = {"session_id": session, "sampling_session_seq_id": seq_id, "base_model": name}
        made = client.post("/api/v1/create_sampling_session", json=body)
        assert made.status_code == 200, made.text
        assert registry.sampler(made.json()["sampling_session_id"], tenant_of(KEY)).base_model == name
