"""What tests of the HTTP app in-process share: a key the app is made with, the body of a new
session, and polling a queued request's answer as the SDK polls it."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

KEY = "tml-" + "0123456789" * 4
NEW_SESSION = {"tags": [], "user_metadata": {}, "sdk_version": "test"}


def result(client: TestClient, request_id: str, key: str | None = None) -> Any:
    """The answer of a queued request, polled as the SDK polls ``retrieve_future``."""
    headers = {"X-API-Key": key} if key is not None else None
    while True:
        answer = client.post("/api/v1/retrieve_future", json={"request_id": request_id}, headers=headers)
        assert answer.status_code == 200, answer.text
        if answer.json().get("type") != "try_again":
            return answer.json()
