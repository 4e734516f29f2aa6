"""Saving and loading: exact round trips of weights and optimizer state, snapshots for
samplers, paths, and determinism given the seed."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from tinker import types

from gemlab.tiny import registry
from tests.helpers.local import nudge, rl_datum, sft_datum, weights
from tinker_emulator import TINY, LocalRestClient, LocalServiceClient, checkpoints

ADAM = types.AdamParams(learning_rate=1e-2, weight_decay=0.01, grad_clip_norm=1.0)


def logprobs(training, prompt) -> torch.Tensor:
    datum = rl_datum(prompt[:1], prompt[1:], [0.0] * (len(prompt) - 1), 0.0)
    return training.forward([datum], "importance_sampling").result().loss_fn_outputs[0]["logprobs"].to_torch()


def train_step(training, prompt, answer=(9, 10, 11)) -> None:
    training.forward_backward([sft_datum(prompt, answer)], "cross_entropy")
    training.optim_step(ADAM).result()


def test_save_state_round_trip_is_exact(service, training, prompt):
    for answer in ([5, 6], [7, 8, 9]):
        train_step(training, prompt, answer)
    saved = training.save_state("round-trip").result()
    assert saved.path == f"local://{training.get_info().model_id}/weights/round-trip"
    folder = checkpoints.resolve(saved.path)
    assert folder == service._root / training.get_info().model_id / "weights" / "round-trip"
    assert {p.name for p in folder.iterdir()} >= {
        "adapter_model.safetensors",
        "adapter_config.json",
        "gemlab.json",
        "optimizer.pt",
    }

    other = service.create_lora_training_client(base_model=TINY, rank=8, seed=123).result()
    assert not torch.equal(logprobs(other, prompt), logprobs(training, prompt))
    other.load_state_with_optimizer(saved.path).result()
    assert torch.equal(logprobs(other, prompt), logprobs(training, prompt))

    resumed = service.create_training_client_from_state_with_optimizer(saved.path).result()
    for client in (training, other, resumed):
        train_step(client, prompt, [3, 4])
    for a, b, c in zip(weights(training), weights(other), weights(resumed), strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)


def as_saved_on_a_gpu(optimizer_file: Path) -> None:
    """Rewrite ``optimizer_file`` as ``torch.save`` writes CUDA tensors: each storage's location
    tag becomes ``cuda:0`` (the bytes stay), which a CPU-only ``torch.load`` refuses unless mapped."""
    with zipfile.ZipFile(optimizer_file) as old:
        members = {info.filename: old.read(info) for info in old.infolist()}
    pickle_name = next(name for name in members if name.endswith("/data.pkl"))
    cpu_tag, cuda_tag = b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0"  # BINUNICODE: 4-byte length, then text
    assert cpu_tag in members[pickle_name]
    members[pickle_name] = members[pickle_name].replace(cpu_tag, cuda_tag)
    with zipfile.ZipFile(optimizer_file, "w", zipfile.ZIP_STORED) as new:
        for name, data in members.items():
            new.writestr(name, data)


def test_state_saved_on_a_gpu_resumes_on_a_cpu(service, training, prompt):
    train_step(training, prompt)
    saved = training.save_state("from-gpu").result()
    as_saved_on_a_gpu(checkpoints.resolve(saved.path) / "optimizer.pt")
    resumed = service.create_training_client_from_state_with_optimizer(saved.path).result()
    for client in (training, resumed):
        train_step(client, prompt, [3, 4])
    assert all(torch.equal(a, b) for a, b in zip(weights(training), weights(resumed), strict=True))


def test_load_state_restores_weights_and_restarts_the_optimizer(service, training, prompt):
    train_step(training, prompt)
    path = training.save_state("weights-only").result().path
    other = service.create_lora_training_client(base_model=TINY, rank=8, seed=5).result()
    other.load_state(path).result()
    assert torch.equal(logprobs(other, prompt), logprobs(training, prompt))
    assert other._optimizer.state_dict()["state"] == {}
    fresh = service.create_training_client_from_state(path).result()
    assert torch.equal(logprobs(fresh, prompt), logprobs(training, prompt))
    assert fresh._optimizer.state_dict()["state"] == {}


def test_samplers_keep_their_snapshot_while_training_goes_on(service, training, prompt):
    nudge(training, prompt)
    path = training.save_weights_for_sampler("snapshot").result().path
    assert path.startswith("local://") and "/sampler_weights/snapshot" in path
    from_path = service.create_sampling_client(model_path=path).result()
    from_folder = service.create_sampling_client(model_path=str(checkpoints.resolve(path))).result()
    in_memory = training.save_weights_and_get_sampling_client().result()
    inflight = training.save_weights_and_get_sampling_client(kind="inflight").result()
    model_input = types.ModelInput.from_ints(prompt)
    before = [c.compute_logprobs(model_input).result() for c in (from_path, from_folder, in_memory, inflight)]
    assert before[0] == before[1] == before[2] == before[3]
    for _ in range(2):
        train_step(training, prompt)
    after = [c.compute_logprobs(model_input).result() for c in (from_path, from_folder, in_memory, inflight)]
    assert after[:3] == before[:3]
    assert after[3] != before[3]  # inflight follows the live weights
    torch.testing.assert_close(torch.tensor(after[3][1:]), logprobs(training, prompt), rtol=0, atol=1e-5)


def test_same_seed_same_run(service, prompt):
    runs = [service.create_lora_training_client(base_model=TINY, rank=4, seed=77).result() for _ in range(2)]
    other = service.create_lora_training_client(base_model=TINY, rank=4, seed=78).result()
    assert all(torch.equal(a, b) for a, b in zip(weights(runs[0]), weights(runs[1]), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(weights(runs[0]), weights(other), strict=True))
    samples = []
    for run in runs:
        train_step(run, prompt)
        sampler = run.save_weights_and_get_sampling_client().result()
        samples.append(
            sampler.sample(types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=8)).result()
        )
    assert all(torch.equal(a, b) for a, b in zip(weights(runs[0]), weights(runs[1]), strict=True))
    assert [s.tokens for s in samples[0].sequences] == [s.tokens for s in samples[1].sequences]


def test_save_state_does_not_overwrite_unless_asked(training):
    training.save_state("once").result()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        training.save_state("once").result()
    training.save_state("once", overwrite=True).result()


def test_root_comes_from_the_environment(monkeypatch, tmp_path, prompt):
    monkeypatch.setenv("GEMLAB_LOCAL_DIR", str(tmp_path / "env-root"))
    client = LocalServiceClient(device="cpu")
    run = client.create_lora_training_client(base_model=TINY, rank=2, seed=0).result()
    path = run.save_weights_for_sampler("w").result().path
    assert checkpoints.resolve(path) == tmp_path / "env-root" / run.get_info().model_id / "sampler_weights" / "w"
    assert os.path.isfile(tmp_path / "env-root" / run.get_info().model_id / "sampler_weights" / "w" / "gemlab.json")


def test_external_weights_load_with_peft(training, prompt, tmp_path):
    from peft import PeftModel

    nudge(training, prompt)
    path = training.save_weights_external("peft").result().path
    model = PeftModel.from_pretrained(registry.build(TINY), str(checkpoints.resolve(path))).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt[:-1]])).logits[0]
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(prompt[1:])[:, None])[:, 0]
    torch.testing.assert_close(logprobs(training, prompt), expected, rtol=0, atol=1e-5)


def test_copy_weights_and_close(service, training, prompt):
    nudge(training, prompt)
    original = training.save_weights_for_sampler("to-copy").result().path
    copied = service.copy_weights(original).result()
    assert copied != original and copied.endswith("/sampler_weights/to-copy")
    samplers = [service.create_sampling_client(model_path=p).result() for p in (original, copied)]
    scored = [s.compute_logprobs(types.ModelInput.from_ints(prompt)).result() for s in samplers]
    assert scored[0] == scored[1]
    assert service.close("success").result() is None


# ----- crashes and full disks -----------------------------------------------------------------
# A process that saves "kept", then is killed (SIGKILL, so no clean-up runs) at the last step of
# saving "whole" (every file written, the rename into place not done) and, in a second run, while
# "partial" is half written (its weights on disk, the optimizer state not).
CRASH = """
import os, signal, sys, torch
from pathlib import Path
from tinker_emulator import TINY, LocalServiceClient, checkpoints
root, where = Path(sys.argv[1]), sys.argv[2]
service = LocalServiceClient(device="cpu", root=root)
training = service.create_lora_training_client(base_model=TINY, rank=4, seed=0).result()
die = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
if where == "rename":
    training.save_state("kept").result()
    Path.rename = die
    training.save_state("whole").result()
else:
    torch.save = die
    training.save_state("partial").result()
"""


@pytest.fixture(scope="module")
def crashed(tmp_path_factory) -> Path:
    """A checkpoint root as two killed saving processes left it (see ``CRASH``)."""
    root = tmp_path_factory.mktemp("crashed")
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "GEMLAB_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    for where in ("rename", "torch.save"):
        done = subprocess.run(
            [sys.executable, "-c", CRASH, str(root), where], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    return root


def leftovers(root: Path) -> list[Path]:
    """Hidden folders beside the checkpoints: what a killed save leaves."""
    return sorted(p for p in root.glob("*/*/.*") if p.is_dir())


def listed(rest: LocalRestClient) -> list[str]:
    return sorted(c.checkpoint_id for c in rest.list_user_checkpoints().result().checkpoints)


@pytest.mark.slow
def test_a_save_killed_midway_never_breaks_a_listing(crashed: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(crashed, root, symlinks=True)
    assert len(leftovers(root)) == 2  # what the issue saw: a hidden, complete staging folder (and a partial one)
    rest = LocalRestClient(root=root)
    assert listed(rest) == ["weights/kept"]
    runs = rest.list_training_runs().result().training_runs
    assert [len(rest.list_checkpoints(r.training_run_id).result().checkpoints) for r in runs] == [1]


@pytest.mark.slow
def test_a_restart_finishes_a_whole_save_and_removes_a_partial_one(crashed: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(crashed, root, symlinks=True)
    ours_not = root / "not-gemlabs"
    (ours_not / "weights" / ".someone-elses").mkdir(parents=True)  # hidden, but not named as gemlab's staging
    finished = checkpoints.recover(root)
    assert [p.name for p in finished] == ["whole"]
    assert leftovers(root) == [ours_not / "weights" / ".someone-elses"]
    assert listed(LocalRestClient(root=root)) == ["weights/kept", "weights/whole"]
    whole = checkpoints.load(finished[0])
    assert whole.optimizer is not None and whole.weights and set(whole.meta) >= {"base_model", "lora"}
    assert sorted(p.name for p in finished[0].iterdir()) == sorted(
        p.name for p in finished[0].parent.joinpath("kept").iterdir()
    )
    assert checkpoints.recover(root) == []  # nothing left to do


@pytest.mark.slow
def test_a_restarted_server_lists_the_keys_checkpoints_after_a_killed_save(crashed: Path, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from tinker_emulator.workshop_server import make_app
    from tinker_emulator.workshop_server.keys import tenant_of

    key = "tml-" + "0123456789" * 4
    shutil.copytree(crashed, tmp_path / "data" / "tenants" / tenant_of(key), symlinks=True)
    with TestClient(make_app(tmp_path / "data", [key], device="cpu"), headers={"X-API-Key": key}) as client:
        mine = client.get("/api/v1/checkpoints")
        assert mine.status_code == 200, mine.text
        assert sorted(c["checkpoint_id"] for c in mine.json()["checkpoints"]) == ["weights/kept", "weights/whole"]
        runs = client.get("/api/v1/training_runs")
        assert runs.status_code == 200 and len(runs.json()["training_runs"]) == 1
        run_id = runs.json()["training_runs"][0]["training_run_id"]
        assert client.get(f"/api/v1/training_runs/{run_id}/checkpoints").status_code == 200


FULL = "Error while serializing: I/O error: No space left on device (os error 28)"  # safetensors' words for ENOSPC


def no_space(*args, **kwargs):
    from safetensors import SafetensorError

    raise SafetensorError(FULL)


def test_a_full_disk_is_reported_as_such_and_leaves_nothing(training, monkeypatch) -> None:
    monkeypatch.setattr(checkpoints, "save_file", no_space)
    with pytest.raises(OSError, match="No space left") as failed:
        training.save_state("full").result()
    assert failed.value.errno == errno.ENOSPC
    run = checkpoints.run_folder(training.get_info().model_id)
    assert not list(run.glob("*/*full*")) and not list(run.glob("*/.*"))

    def full_json(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.undo()
    monkeypatch.setattr(Path, "write_text", full_json)  # the metadata file, after the weights
    with pytest.raises(OSError, match="No space left"):
        training.save_weights_for_sampler("full").result()
    assert not list(run.glob("*/*full*")) and not list(run.glob("*/.*"))


def test_a_full_disk_over_http_is_one_line_in_the_answer_and_the_log(tmp_path: Path, monkeypatch, caplog) -> None:
    from fastapi.testclient import TestClient

    from tinker_emulator.workshop_server import make_app

    key = "tml-" + "0123456789" * 4
    with TestClient(make_app(tmp_path, [key], device="cpu"), headers={"X-API-Key": key}) as client:
        session = client.post(
            "/api/v1/create_session", json={"tags": [], "user_metadata": {}, "sdk_version": "t"}
        ).json()["session_id"]
        made = client.post(
            "/api/v1/create_model",
            json={"session_id": session, "model_seq_id": 0, "base_model": TINY, "lora_config": {"rank": 4}},
        ).json()
        assert poll(client, made["request_id"])["model_id"] == made["model_id"]
        monkeypatch.setattr(checkpoints, "save_file", no_space)
        with caplog.at_level(logging.ERROR, logger="tinker_emulator.workshop_server"):
            for route in ("save_weights", "save_weights_for_sampler"):
                saved = client.post(f"/api/v1/{route}", json={"model_id": made["model_id"], "path": "full"}).json()
                answer = poll(client, saved["request_id"])
                assert answer["category"] == "server" and "disk is full" in answer["error"], answer
                assert "\n" not in answer["error"] and "SafetensorError" not in answer["error"]
        logged = [
            r
            for r in caplog.records
            if r.name == "tinker_emulator.workshop_server" and "No space left" in r.getMessage()
        ]
        assert len(logged) == 2 and all(r.exc_info is None for r in logged)
        assert client.get("/api/v1/checkpoints").json()["checkpoints"] == []


def poll(client, request_id: str) -> dict:
    while True:
        answer = client.post("/api/v1/retrieve_future", json={"request_id": request_id}).json()
        if answer.get("type") != "try_again":
            return answer
