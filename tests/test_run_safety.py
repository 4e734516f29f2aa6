"""Runs that survive kills, interrupts and each other, and lose nothing.

Each crash case kills a real ``python -m gemlab.train`` at an exact point (``tests/helpers/faults.py``),
runs the same command again, and checks that the metrics equal those of a run that was never
interrupted (time fields aside), with no row duplicated, missing or cut, and no file left over.
"""

from __future__ import annotations

import _thread
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gemlab import Trainer, make_config
from tests.helpers.faults import FaultyService, FaultyTraining
from tests.helpers.laptop_run import STEPS, LaptopRun, global_random_interference, train_laptop_run

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(batch_size=32, num_env=8, max_steps=6, save_every=2)
ARGS = ["preset=laptop", *(f"{k}={v}" for k, v in SMALL.items())]
ENV = {**os.environ, "GEMLAB_THREADS": "1", "PYTHONPATH": str(ROOT), "TINKER_API_KEY": ""}


def _train(
    log_dir: Path, *extra: str, fault: str | None = None, wait: bool = True
) -> subprocess.CompletedProcess | subprocess.Popen:
    command = [
        sys.executable,
        *(["tests/helpers/faults.py", fault] if fault else ["-m", "gemlab.train"]),
        *ARGS,
        f"log_dir={log_dir}",
        "run_name=r",
        *extra,
    ]
    if not wait:
        return subprocess.Popen(command, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _without_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The metrics of the same run, never interrupted."""
    log_dir = tmp_path_factory.mktemp("reference")
    result = _train(log_dir)
    assert result.returncode == 0, result.stderr
    return _without_time(_rows(log_dir / "r" / "metrics.jsonl"))


def _assert_lost_nothing(run: Path, reference: list[dict]) -> None:
    assert _without_time(_rows(run / "metrics.jsonl")) == reference
    steps = [line["step"] for line in _rows(run / "checkpoints.jsonl")]
    assert steps == sorted(set(steps)) and steps[-1] == SMALL["max_steps"]
    leftovers = [p for p in run.rglob(".*") if p.name not in (".lock", ".gemlab-run")]
    assert leftovers == []  # no staging files or folders
    folders = {p.parent.name for p in run.glob("checkpoints/*/weights/*/gemlab.json")}
    assert folders == {line["name"] for line in _rows(run / "checkpoints.jsonl")}  # nothing orphaned
    assert (run / "learning_curve.png").is_file()


# Each kill lands in a run resumed from the one before, so one chain covers every point:
# (fault, the step that process resumed from)
KILLS = [
    ("sample:1", 0),  # before the first checkpoint (step 2)
    ("forward_backward:3", 0),
    ("save_state:4", 2),  # mid checkpoint write: that checkpoint must not count
    ("optim_step:5", 2),
    ("metrics_rewrite:1", 4),  # during resume's truncation of metrics.jsonl, before it replaces the file
    ("sample:5", 4),
]


@pytest.mark.slow
def test_kills_at_every_point_lose_nothing(tmp_path: Path, reference: list[dict]) -> None:
    run = tmp_path / "r"
    for fault, resume_from in KILLS:
        killed = _train(tmp_path, fault=fault)
        assert killed.returncode == -signal.SIGKILL, (fault, killed.stderr)
        rows = _without_time(_rows(run / "metrics.jsonl"))  # every row whole (json.loads would fail on a cut one)
        assert rows == reference[: len(rows)], fault
        if resume_from:
            assert f"resuming r from step {resume_from}" in killed.stderr, (fault, killed.stderr)
    resumed = _train(tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming r from step 4" in resumed.stderr
    _assert_lost_nothing(run, reference)


def _wait_for_rows(metrics: Path, count: int) -> None:
    deadline = time.time() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= count) and time.time() < deadline:
        time.sleep(0.2)


@pytest.mark.slow
def test_signals_save_and_a_second_process_is_refused(tmp_path: Path, reference: list[dict]) -> None:
    metrics = tmp_path / "r" / "metrics.jsonl"
    stopped = 0
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        process = _train(tmp_path, "max_steps=200", wait=False)
        _wait_for_rows(metrics, stopped + 2)
        if sig == signal.SIGINT:
            second = _train(tmp_path)
            assert second.returncode == 2
            assert f"is in use by process {process.pid}" in second.stderr
            assert len(second.stderr.strip().splitlines()) == 1
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == code, stderr
        assert "Traceback" not in stderr
        assert "checkpoint saved; resume with: python -m gemlab.train" in stderr
        stopped = len(_rows(metrics))
        assert _rows(tmp_path / "r" / "checkpoints.jsonl")[-1]["step"] == stopped  # nothing to redo
    resumed = _train(tmp_path)  # the original command: max_steps may differ, nothing else
    assert resumed.returncode == 0, resumed.stderr
    rows = _without_time(_rows(metrics))
    assert len(rows) == max(stopped, SMALL["max_steps"]) and rows[: len(reference)] == reference


# ----- in a notebook: Ctrl-C during step() --------------------------------------------------
def _nothing_else_draws_from_global_random() -> None:
    """A run repeats only while no other thread draws from Python's global random (GEM's games do)."""
    interference = global_random_interference()
    assert interference is None, interference


def _trainer(tmp_path: Path, name: str, service=None) -> Trainer:
    return Trainer(
        make_config("laptop", log_dir=str(tmp_path), run_name=name, **SMALL), service_client=service, progress=False
    )


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt for the test: a job a shell starts in the background has SIGINT
    ignored, Python then keeps it ignored, and ``_thread.interrupt_main`` does nothing (the test would hang)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("point", ["sample", "forward_backward"])
@pytest.mark.usefixtures("ctrl_c_raises")
def test_ctrl_c_in_step_leaves_weights_metrics_and_counter_agreeing(tmp_path: Path, point: str) -> None:
    """Ctrl-C while sampling rolls the step back; while updating, lets it finish. Either way the
    next steps are exactly those of a run that was never interrupted."""
    _nothing_else_draws_from_global_random()
    plain = _trainer(tmp_path, "plain")
    expected = _without_time([plain.step() for _ in range(4)])
    plain.close()

    from tinker_emulator import LocalServiceClient

    service = FaultyService(LocalServiceClient(root=tmp_path / "ckpt"), point, 1, _thread.interrupt_main)
    trainer = _trainer(tmp_path, "interrupted", service)
    trainer.step()
    with pytest.raises(KeyboardInterrupt):
        trainer.step()
    done = 1 if point == "sample" else 2
    assert trainer.step_index == len(trainer.history) == len(_rows(trainer.run_dir / "metrics.jsonl")) == done
    trainer.training_client.point = None  # no more interrupts
    while trainer.step_index < 4:
        trainer.step()
    trainer.close()
    assert _without_time(_rows(trainer.run_dir / "metrics.jsonl")) == expected


def test_request_stop_ends_run_after_the_step_with_a_checkpoint(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "stop")
    timer = threading.Timer(0.5, trainer.request_stop)
    timer.start()
    history = trainer.run()
    trainer.close()
    assert 1 <= len(history) < SMALL["max_steps"]
    assert _rows(trainer.run_dir / "checkpoints.jsonl")[-1]["step"] == len(history)


# ----- reproducibility ---------------------------------------------------------------------------
@pytest.mark.slow
def test_laptop_preset_is_reproducible_bit_for_bit(tmp_path: Path, laptop_run: LaptopRun) -> None:
    """Same seed, same machine and thread count: every metric of all 40 steps is identical
    (lockstep sampling makes the sampler's batches, hence its float rounding, timing-free).
    The first run is the session's shared one (tests/conftest.py), trained at another point of the
    session: 40 steps hold 8 checkpoints and the learning curve's rise, what the old 100 did."""
    again = train_laptop_run(tmp_path, "again")
    assert laptop_run.interference is None, laptop_run.interference
    assert again.interference is None, again.interference
    assert len(laptop_run.rows) == STEPS
    assert _without_time(again.rows) == _without_time(laptop_run.rows)


# ----- damaged run folders, changed configs, sampling faults ------------------------------------
def _four_steps(tmp_path: Path) -> Path:
    trainer = _trainer(tmp_path, "damaged")
    for _ in range(4):
        trainer.step()  # checkpoints at steps 2 and 4
    trainer.close()
    return trainer.run_dir


def _checkpoint_folder(run: Path, step: int) -> Path:
    return next(run.glob(f"checkpoints/*/weights/step{step:06d}"))


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_damaged_checkpoint_falls_back_to_the_one_before(tmp_path: Path, damage: str) -> None:
    run = _four_steps(tmp_path)
    folder = _checkpoint_folder(run, 4)
    if damage == "truncate":
        weights = folder / "adapter_model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
    else:
        import shutil

        shutil.rmtree(folder)
    with pytest.warns(
        UserWarning, match=r"checkpoint at step 4 \(local://.*step000004\) cannot be loaded .*falling back"
    ):
        trainer = _trainer(tmp_path, "damaged")
    assert trainer.step_index == 2 and len(_rows(run / "metrics.jsonl")) == 2
    assert [line["step"] for line in _rows(run / "checkpoints.jsonl")] == [2]
    assert not folder.exists()  # the damaged folder is cleaned away
    trainer.close()


def test_damaged_metrics_line_is_named_and_resume_recovers_the_rows_from_the_checkpoint(tmp_path: Path) -> None:
    run = _four_steps(tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[2] = lines[2][:40]  # step 2's row cut short
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match=r"metrics.jsonl line 3 is damaged"):
        trainer = _trainer(tmp_path, "damaged")
    assert trainer.step_index == 4 and [row["step"] for row in _rows(run / "metrics.jsonl")] == [0, 1, 2, 3]
    assert (run / "metrics.jsonl.damaged-1").read_text().splitlines()[2] == lines[2]  # the damaged file is kept
    trainer.close()


def test_repeated_rows_from_an_old_restart_are_replaced_by_the_checkpoints_copy(tmp_path: Path) -> None:
    run = _four_steps(tmp_path)
    rows = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(rows[:3] + rows) + "\n")  # steps 0 1 2 0 1 2 3
    with pytest.warns(UserWarning, match=r"kept as metrics.jsonl.damaged-1"):
        trainer = _trainer(tmp_path, "damaged")
    assert trainer.step_index == 4 and [row["step"] for row in _rows(run / "metrics.jsonl")] == [0, 1, 2, 3]
    trainer.close()


@pytest.mark.slow
def test_changed_config_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    run = _four_steps(tmp_path)
    before = {p: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"}
    changed = make_config(
        "laptop", log_dir=str(tmp_path), run_name="damaged", **{**SMALL, "learning_rate": 0.01, "seed": 1}
    )
    with pytest.raises(
        ValueError,
        match=r"different config \(learning_rate 0.002 -> 0.01, seed 0 -> 1\); .*new "
        r"run_name.*allow_config_change=true",
    ):
        Trainer(changed, progress=False)
    with pytest.raises(ValueError, match="different lora_rank .* choose a new run_name"):
        Trainer(chz_replace(changed, lora_rank=4, allow_config_change=True), progress=False)
    assert {p: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"} == before
    trainer = Trainer(chz_replace(changed, allow_config_change=True), progress=False)
    trainer.close()
    assert _rows(run / "config_changes.jsonl") == [
        {"step": 4, "changes": {"learning_rate": [0.002, 0.01], "seed": [0, 1]}}
    ]
    assert json.loads((run / "config.json").read_text())["learning_rate"] == 0.01


def chz_replace(config, **changes):
    import chz

    return chz.replace(config, **changes)


def test_high_drop_rate_is_flagged(tmp_path: Path, monkeypatch) -> None:
    """Requests of env 0 always fail: after the retries its episodes are dropped, counted, warned about."""
    import gemlab.episodes
    from tinker_emulator import LocalServiceClient

    monkeypatch.setattr(gemlab.episodes, "RETRY_DELAYS", (0.0,))

    class EnvZeroDown(FaultyTraining):
        async def save_weights_and_get_sampling_client(self, *args, **kwargs):
            sampler = await self.client.save_weights_and_get_sampling_client(*args, **kwargs)

            class Sampler:
                async def sample(self, **request):
                    if request["sampling_params"].seed % 8 == 0:  # about one request in eight
                        raise ConnectionError("sampler unreachable")
                    return await sampler.sample(**request)

            return Sampler()

    service = LocalServiceClient(root=tmp_path / "ckpt")
    service.create_lora_training_client = _wrapping(service.create_lora_training_client, EnvZeroDown)
    trainer = _trainer(tmp_path, "drops", service)
    with pytest.warns(
        UserWarning, match=r"step 0: \d+% of episodes were dropped after sampling failures .*sampler unreachable"
    ):
        metrics = trainer.step()
    trainer.close()
    assert metrics["sampler/drop_rate"] > 0.05 and metrics["sampler/sample_retries"] > 0
    assert metrics["sampler/episodes_dropped"] == round(
        metrics["sampler/drop_rate"] * (metrics["sampler/episodes_dropped"] + metrics["sampler/num_episodes"])
    )


def _wrapping(create, cls):
    async def wrapped(**kwargs):
        return cls(await create(**kwargs), None, -1, lambda: None)

    return wrapped


@pytest.mark.slow
def test_sampler_outage_keeps_what_is_done_and_says_how_to_resume(
    tmp_path: Path, monkeypatch, capsys, reference
) -> None:
    """From step 3 on every request fails, retries included: the command saves step 3's state,
    prints one line with the resume command, exits 1; the rerun (sampler back) loses nothing."""
    import gemlab.episodes
    import gemlab.train
    from gemlab.trainer import Trainer as RealTrainer

    monkeypatch.setattr(gemlab.episodes, "RETRY_DELAYS", (0.0, 0.0))

    class DownFromStep3(FaultyTraining):
        async def save_weights_and_get_sampling_client(self, *args, **kwargs):
            sampler = await self.client.save_weights_and_get_sampling_client(*args, **kwargs)
            self.snapshots += 1
            down = self.snapshots > 3

            class Sampler:
                async def sample(self, **request):
                    if down:
                        raise ConnectionError("sampler unreachable")
                    return await sampler.sample(**request)

            return Sampler()

    real = RealTrainer._default_service_client

    def faulty(self):
        service = real(self)
        service.create_lora_training_client = _wrapping(service.create_lora_training_client, DownFromStep3)
        return service

    monkeypatch.setattr(RealTrainer, "_default_service_client", faulty)
    argv = ["preset=laptop", *(f"{k}={v}" for k, v in SMALL.items()), f"log_dir={tmp_path}", "run_name=r"]
    assert gemlab.train.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "step 3 failed (RuntimeError: every episode of a rollout round failed" in err
    assert err.endswith("stopped after step 3, checkpoint saved; resume with: python -m gemlab.train " + " ".join(argv))
    assert [line["step"] for line in _rows(tmp_path / "r" / "checkpoints.jsonl")] == [2, 3]
    monkeypatch.setattr(RealTrainer, "_default_service_client", real)
    assert gemlab.train.main(argv) == 0
    assert _without_time(_rows(tmp_path / "r" / "metrics.jsonl")) == reference


def test_a_field_added_after_the_run_started_counts_as_its_default(tmp_path: Path) -> None:
    """A run folder written before a config field existed resumes when the new field keeps its
    default, and is refused when it does not."""
    run = _four_steps(tmp_path)
    saved = json.loads((run / "config.json").read_text())
    del saved["max_staleness"], saved["num_minibatches"]  # as a run from an older gemlab wrote it
    (run / "config.json").write_text(json.dumps(saved))
    trainer = _trainer(tmp_path, "damaged")
    assert trainer.step_index == 4
    trainer.close()
    (run / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"different config \(num_minibatches 1 -> 2\)"):
        Trainer(
            make_config("laptop", log_dir=str(tmp_path), run_name="damaged", **SMALL, num_minibatches=2), progress=False
        )


def test_a_config_with_the_old_normalization_field_resumes_unchanged(tmp_path: Path) -> None:
    """``normalization`` was renamed ``advantage``: a run folder that saved the old name resumes
    without counting it as a change, and ``read_run`` shows it under the new name."""
    from gemlab.saved_runs import read_run

    run = _four_steps(tmp_path)
    saved = json.loads((run / "config.json").read_text())
    saved["normalization"] = saved.pop("advantage")
    (run / "config.json").write_text(json.dumps(saved))
    assert read_run(run).config["advantage"] == "rebn" and "normalization" not in read_run(run).config
    trainer = _trainer(tmp_path, "damaged")
    assert trainer.step_index == 4 and not (run / "config_changes.jsonl").exists()
    trainer.close()
    saved["normalization"] = "none"
    (run / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"different config \(advantage 'none' -> 'rebn'\)"):
        _trainer(tmp_path, "damaged")
