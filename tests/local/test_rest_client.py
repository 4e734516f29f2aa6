"""The local RestClient: a run's checkpoints, deleting one, training-run and weights information,
file URLs; what only Tinker's servers have raises a TinkerError naming the local backend."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import tinker
from tinker import types

from tinker_emulator import TINY, TINY_CHAT, LocalServiceClient
from tinker_emulator.errors import LocalBackendError
from tinker_emulator.rest_client import LocalRestClient


@pytest.fixture
def setup(tmp_path: Path):
    service = LocalServiceClient(device="cpu", root=tmp_path, stand_in=TINY_CHAT)
    training = service.create_lora_training_client(
        base_model="Qwen/Qwen3-4B-Instruct-2507", rank=4, seed=0, user_metadata={"renderer_name": "qwen3"}
    ).result()
    return service, training, service.create_rest_client()


def test_lists_a_runs_checkpoints_and_deletes_one(setup, tmp_path: Path):
    service, training, rest = setup
    state = training.save_state("a").result().path
    sampler = training.save_weights_for_sampler("b").result().path
    listed = rest.list_checkpoints(training.model_id).result().checkpoints
    assert {(c.checkpoint_id, c.checkpoint_type, c.tinker_path) for c in listed} == {
        ("weights/a", "training", state),
        ("sampler_weights/b", "sampler", sampler),
    }
    folder = tmp_path / training.model_id / "weights" / "a"
    assert next(c for c in listed if c.tinker_path == state).size_bytes == sum(
        f.stat().st_size for f in folder.iterdir()
    )
    rest.delete_checkpoint_from_tinker_path(state).result()
    assert not folder.exists()
    assert [c.tinker_path for c in rest.list_checkpoints(training.model_id).result().checkpoints] == [sampler]
    rest.delete_checkpoint(training.model_id, "sampler_weights/b").result()
    assert rest.list_checkpoints(training.model_id).result().checkpoints == []
    with pytest.raises(FileNotFoundError):
        rest.delete_checkpoint_from_tinker_path(state).result()


@pytest.mark.filterwarnings("ignore:DEPRECATED:FutureWarning")
def test_training_run_and_weights_info(setup):
    service, training, rest = setup
    path = training.save_state("s").result().path
    run = rest.get_training_run_by_tinker_path(path).result()
    assert run.training_run_id == training.model_id and run.base_model == "Qwen/Qwen3-4B-Instruct-2507"
    assert run.lora_rank == 4 and run.is_lora and run.user_metadata == {"renderer_name": "qwen3"}
    assert run.last_checkpoint is not None and run.last_checkpoint.tinker_path == path
    assert run.last_sampler_checkpoint is None
    assert asyncio.run(rest.get_training_run_async(training.model_id)) == run  # Tinker's async forms work too
    info = rest.get_weights_info_by_tinker_path(path).result()
    assert (info.base_model, info.lora_rank, info.is_lora) == ("Qwen/Qwen3-4B-Instruct-2507", 4, True)
    runs = rest.list_training_runs().result()
    assert [r.training_run_id for r in runs.training_runs] == [training.model_id] and runs.cursor.total_count == 1


def test_a_fresh_client_finds_runs_on_disk(setup, tmp_path: Path):
    """Another process (a new client on the same root, no in-process record) reads gemlab.json."""
    _, training, _ = setup
    path = training.save_weights_for_sampler("w").result().path
    rest = LocalRestClient(root=tmp_path)
    assert [c.tinker_path for c in rest.list_user_checkpoints().result().checkpoints] == [path]
    from tinker_emulator import checkpoints

    saved = checkpoints._run_info.pop(training.model_id)
    try:
        assert rest.get_training_run(training.model_id).result().base_model == "Qwen/Qwen3-4B-Instruct-2507"
    finally:
        checkpoints._run_info[training.model_id] = saved


def test_file_urls_of_a_checkpoint(setup):
    _, training, rest = setup
    path = training.save_weights_external("x").result().path
    urls = rest.get_external_weights_urls(path).result().urls
    assert {"adapter_model.safetensors", "adapter_config.json", "gemlab.json"} <= set(urls)
    assert all(url.startswith("file://") and Path(url[len("file://") :]).is_file() for url in urls.values())


def test_what_only_a_server_has_raises_a_tinker_error(setup):
    service, training, rest = setup
    calls = [
        lambda: rest.whoami(),
        lambda: rest.list_sessions(),
        lambda: rest.get_session("s"),
        lambda: rest.publish_checkpoint_from_tinker_path("local://r/weights/x"),
        lambda: rest.get_billing_usage("2026-01-01", "2026-02-01"),
        lambda: rest.holder,
        lambda: service.holder,
    ]
    for call in calls:
        with pytest.raises(tinker.TinkerError, match="not available on the local backend"):
            call()
    with pytest.raises(LocalBackendError, match="no training run 'run-nope'"):
        rest.get_training_run("run-nope").result()
    with pytest.raises(ValueError, match="Tinker's servers"):
        rest.get_training_run_by_tinker_path("tinker://abc/weights/x")
    assert isinstance(rest.get_server_capabilities().result(), types.GetServerCapabilitiesResponse)
    assert TINY in [m.model_name for m in rest.get_server_capabilities().result().supported_models]
