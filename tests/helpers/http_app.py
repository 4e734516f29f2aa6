"""What tests of the HTTP app in-process share: a key the app is made with, the body of a new
session, polling a queued request's answer as the SDK polls it, and holding the training worker
while requests queue."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient

from tinker_emulator.futures import TRAINING, get_worker

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


@contextmanager
def training_worker_held() -> Iterator[None]:
    """The training worker busy with a job that has started, until the block ends, so requests
    queued within it wait for one another whatever their lanes' rounds. Waiting for the start
    matters: a holding job still in the inbox is scheduled by its lane's round like any other,
    and the test thread's lane, busy in earlier tests, is rounds ahead of a new key's."""
    started, release = threading.Event(), threading.Event()
    held = get_worker(TRAINING).submit(lambda: (started.set(), release.wait(120)))
    try:
        assert started.wait(120), "the training worker did not start the holding job"
        yield
    finally:
        release.set()
    held.result(timeout=120)
