"""Fault injection on run folders: damage, foreign files, unusable folders, full disks, races.

The fast cases drive ``RunFolder`` directly with a stand-in backend (checkpoints are plain
folders, ``load`` fails when one is missing), so each takes milliseconds; the slow ones train
for real (``python -m gemlab.train`` in a subprocess, two study runners at once). What must
hold everywhere: nothing gemlab did not write is deleted, no run restarts from step 0 while an
intact checkpoint exists, and what cannot be used is refused in one line with nothing changed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from gemlab import Trainer, make_config
from gemlab.run_folder import RECORDS_DIR, RunFolder, export_run
from gemlab.saved_runs import CHECKPOINTS_FILE, METRICS_FILE, RunFolderError, read_run
from tinker_emulator.checkpoints import STAGING_PREFIX

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "GEMLAB_THREADS": "1", "PYTHONPATH": str(ROOT), "TINKER_API_KEY": ""}
STEPS, EVERY = 12, 3
FOREIGN = [
    "notes.txt",
    "checkpoints/run-x/weights/step000003-backup/w.bin",
    "checkpoints/mine/a.txt",
    ".notes.tmp-1",
    f"{RECORDS_DIR}/readme.txt",
]


# ----- a run folder written through RunFolder, with stand-in checkpoints ----------------------
def _state(step: int) -> str:
    return f"local://run-x/weights/step{step:06d}"


def _loader(run: Path):
    def load(state_path: str) -> None:
        folder = run / "checkpoints" / state_path.removeprefix("local://")
        if not (folder / "w.bin").is_file():
            raise FileNotFoundError(f"no checkpoint at {folder}")

    return load


def _write_run(log_dir: Path, keep: int = 0, steps: int = STEPS) -> Path:
    """A run of ``steps`` logged steps with a checkpoint every ``EVERY``, as a Trainer writes it."""
    folder = RunFolder(str(log_dir), "r", keep)
    folder.open()
    history = []
    for step in range(steps):
        row = {"step": step, "value": step * 0.5}
        folder.log(row)
        history.append(row)
        if (step + 1) % EVERY == 0:
            name = f"step{step + 1:06d}"
            folder.will_save(name)
            checkpoint = log_dir / "r" / "checkpoints" / "run-x" / "weights" / name
            checkpoint.mkdir(parents=True)
            (checkpoint / "w.bin").write_bytes(b"weights")
            folder.add_checkpoint(name, step + 1, _state(step + 1), history)
    (log_dir / "r" / "config.json").write_text("{}")
    folder.close()
    return log_dir / "r"


def _resume(run: Path, keep: int = 0) -> tuple[int, list[dict], RunFolder]:
    folder = RunFolder(str(run.parent), run.name, keep)
    folder.open()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step, history = folder.resume(_loader(run))
    finally:
        folder.close()
    return step, history, folder


def _snapshot(run: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != ".lock"
    }


def _checkpoint_steps(run: Path) -> list[int]:
    return sorted(int(p.name.removeprefix("step")) for p in run.glob("checkpoints/run-x/weights/step??????"))


def _damage(path: Path, where: str) -> None:
    lines = path.read_text().splitlines()
    index = {"top": 0, "middle": len(lines) // 2, "end": len(lines) - 1}[where]
    lines[index] = "GARBAGE{"
    path.write_text("\n".join(lines) + "\n")


# ----- damage never restarts a run that has an intact checkpoint ------------------------------
@pytest.mark.parametrize("where", ["top", "middle", "end"])
@pytest.mark.parametrize("name", [METRICS_FILE, CHECKPOINTS_FILE])
def test_a_damaged_line_anywhere_resumes_from_the_newest_checkpoint(tmp_path: Path, name: str, where: str) -> None:
    run = _write_run(tmp_path)
    original = (run / name).read_text()
    _damage(run / name, where)
    step, history, _ = _resume(run)
    assert step == STEPS and [row["step"] for row in history] == list(range(STEPS))
    assert [row["step"] for row in map(json.loads, (run / METRICS_FILE).read_text().splitlines())] == list(range(STEPS))
    assert [json.loads(line)["step"] for line in (run / CHECKPOINTS_FILE).read_text().splitlines()] == [3, 6, 9, 12]
    assert _checkpoint_steps(run) == [3, 6, 9, 12]  # nothing deleted
    assert "GARBAGE{" in (run / f"{name}.damaged-1").read_text()  # the damaged file is kept
    assert (run / name).read_text().count("\n") == original.count("\n")


@pytest.mark.parametrize("how", ["missing", "emptied"])
@pytest.mark.parametrize("name", [METRICS_FILE, CHECKPOINTS_FILE])
def test_a_missing_or_emptied_file_resumes_from_the_newest_checkpoint(tmp_path: Path, name: str, how: str) -> None:
    run = _write_run(tmp_path)
    (run / name).unlink() if how == "missing" else (run / name).write_text("")
    step, history, _ = _resume(run)
    assert step == STEPS and len(history) == STEPS and _checkpoint_steps(run) == [3, 6, 9, 12]


def test_both_files_damaged_recover_from_the_records(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    _damage(run / METRICS_FILE, "top")
    (run / CHECKPOINTS_FILE).write_text("")
    assert _resume(run)[0] == STEPS


def test_a_damaged_newest_checkpoint_falls_back_to_a_copy_of_the_metrics(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    (run / "checkpoints/run-x/weights/step000012/w.bin").unlink()
    _damage(run / METRICS_FILE, "top")
    step, history, _ = _resume(run)  # step 9's record still carries the metrics (the newest two do)
    assert step == 9 and len(history) == 9


def test_damage_that_cannot_be_recovered_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    for record in (run / RECORDS_DIR).iterdir():  # as a run made before the records existed
        record.unlink()
    _damage(run / METRICS_FILE, "top")
    before = _snapshot(run)
    with pytest.raises(
        RunFolderError,
        match=r"cannot resume .*step 12: the metrics rows up to it are damaged.*nothing was changed.*new run_name",
    ):
        _resume(run)
    assert _snapshot(run) == before


def test_an_index_line_without_state_path_is_reported(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    with open(run / CHECKPOINTS_FILE, "a") as f:
        f.write(json.dumps({"name": "step000015", "step": 15}) + "\n")
    folder = RunFolder(str(tmp_path), "r")
    folder.open()
    with pytest.warns(UserWarning, match=r"entry 5 has no step or state_path"):
        assert folder.resume(_loader(run))[0] == STEPS
    folder.close()


# ----- gemlab deletes only what it recorded writing -------------------------------------------
def test_foreign_files_in_a_run_folder_survive_resume_prune_and_keep(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    for name in FOREIGN:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("mine")
    _damage(run / METRICS_FILE, "middle")
    step, _, _ = _resume(run, keep=1)
    assert step == STEPS
    for name in FOREIGN:
        assert (run / name).read_text() == "mine", name


def test_keep_checkpoints_keeps_the_newest_and_deletes_only_recorded_ones(tmp_path: Path) -> None:
    run = _write_run(tmp_path, keep=2)
    assert _checkpoint_steps(run) == [9, 12]
    assert [json.loads(line)["step"] for line in (run / CHECKPOINTS_FILE).read_text().splitlines()] == [9, 12]
    assert sorted(p.name for p in (run / RECORDS_DIR).iterdir()) == ["step000009.jsonl", "step000012.jsonl"]


def test_a_save_cut_by_a_kill_is_cleaned_but_a_lookalike_is_not(tmp_path: Path) -> None:
    run = _write_run(tmp_path, steps=STEPS)
    folder = RunFolder(str(tmp_path), "r")
    folder.open()
    folder.will_save("step000015")  # the kill came after the backend's staging folder appeared
    folder.close()
    weights = run / "checkpoints/run-x/weights"
    staging = weights / f"{STAGING_PREFIX}0123456789ab-step000015"  # the name the local backend stages under
    staging.mkdir()
    (weights / "step000015").mkdir()  # written, never recorded in the index
    (weights / ".backup-1").mkdir()  # not gemlab's: no such name recorded
    _resume(run)
    assert not staging.exists() and not (weights / "step000015").exists()
    assert (weights / ".backup-1").is_dir()


def test_only_gemlabs_staging_files_are_removed(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    (run / f".{METRICS_FILE}.tmp-999").write_text("half")
    (run / ".mine.tmp-1").write_text("mine")
    _resume(run)
    assert not (run / f".{METRICS_FILE}.tmp-999").exists() and (run / ".mine.tmp-1").read_text() == "mine"


def test_a_folder_that_is_not_a_gemlab_run_is_refused_unchanged(tmp_path: Path) -> None:
    mine = tmp_path / "r"
    (mine / "photos").mkdir(parents=True)
    (mine / "photos" / "a.jpg").write_bytes(b"jpg")
    with pytest.raises(
        RunFolderError, match=r"is not a gemlab run folder \(it holds photos\).*choose another run_name"
    ):
        RunFolder(str(tmp_path), "r").open()
    assert sorted(p.name for p in mine.rglob("*")) == ["a.jpg", "photos"]


def test_an_old_run_without_a_marker_is_recognised(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    (run / ".gemlab-run").unlink()
    assert _resume(run)[0] == STEPS
    assert _checkpoint_steps(run) == [3, 6, 9, 12]  # its index named them: gemlab's, and kept


def test_an_empty_folder_is_used(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    folder = RunFolder(str(tmp_path), "r")
    folder.open()
    folder.close()
    assert (tmp_path / "r" / ".gemlab-run").is_file()


# ----- folders that cannot be used: one line, no traceback ------------------------------------
def test_unusable_places_are_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = {
        "/proc/nope": "cannot create run folder /proc/nope/r",
        str(afile): "cannot create run folder",
    }
    for log_dir, message in cases.items():
        with pytest.raises(RunFolderError, match=message) as error:
            RunFolder(log_dir, "r").open()
        assert "\n" not in str(error.value)
    (tmp_path / "locked" / "r" / ".lock").mkdir(parents=True)
    (tmp_path / "locked" / "r" / "config.json").write_text("{}")
    with pytest.raises(RunFolderError, match=r"cannot lock run folder .*Is a directory"):
        RunFolder(str(tmp_path / "locked"), "r").open()


def test_a_config_json_holding_a_list_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.json").write_text("[1, 2]")
    folder = RunFolder(str(tmp_path), "r")
    folder.open()
    with pytest.raises(RunFolderError, match=r"is not a gemlab config \(a JSON list, not an object\)"):
        folder.check_config(make_config("laptop"))
    folder.close()


@pytest.mark.parametrize("text, reason", [('{"seed": 1', "cannot be read"), ("[1, 2]", "is not a gemlab config")])
def test_reading_a_saved_run_with_a_damaged_config_is_one_line_naming_the_file(
    tmp_path: Path, text: str, reason: str
) -> None:
    """The one reader of run folders (studies, the lab, the async benchmark) refuses in one line."""
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.json").write_text(text)
    with pytest.raises(RunFolderError) as error:
        read_run(tmp_path / "r")
    assert reason in str(error.value) and str(tmp_path / "r" / "config.json") in str(error.value)
    assert "\n" not in str(error.value)
    assert (tmp_path / "r" / "config.json").read_text() == text  # nothing changed


def _mount_tmpfs(path: Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, check=False
        ).returncode
        == 0
    )


def test_a_read_only_log_dir_is_one_line(tmp_path: Path) -> None:
    disk = tmp_path / "ro"
    if not _mount_tmpfs(disk, "size=1m,ro"):
        pytest.skip("needs root to mount a read-only tmpfs")
    try:
        with pytest.raises(RunFolderError, match=r"cannot create run folder .*Read-only file system"):
            RunFolder(str(disk), "r").open()
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# ----- a Trainer -------------------------------------------------------------------------------
def _config(log_dir: Path, **overrides) -> object:
    return make_config(
        "laptop", log_dir=str(log_dir), run_name="r", batch_size=16, num_env=8, **{"max_steps": 2, **overrides}
    )


def test_step_after_close_is_one_line_not_a_hang(tmp_path: Path) -> None:
    trainer = Trainer(_config(tmp_path), progress=False)
    trainer.close()
    with pytest.raises(RuntimeError, match="this Trainer is closed; create a new Trainer"):
        trainer.step()
    trainer.close()  # twice is fine


def test_a_none_reward_is_the_envs_error_not_a_drop() -> None:
    from gemlab.episodes import RewardError, play_turn

    class NoReward:
        def step(self, action: str):
            return "obs", None, False, False, {}

    with pytest.raises(RewardError, match=r"env NoReward returned the reward None .*rewards must be numbers"):
        play_turn(NoReward(), "obs", "guess")


def test_a_damaged_optimizer_file_says_so_without_torchs_advice(tmp_path: Path) -> None:
    from tinker_emulator import checkpoints

    trainer = Trainer(_config(tmp_path, save_every=1), progress=False)
    trainer.step()
    trainer.close()
    folder = next((tmp_path / "r").glob("checkpoints/*/weights/step000001"))
    (folder / checkpoints.OPTIMIZER_FILE).write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match=r"optimizer.pt is damaged and cannot be read") as error:
        checkpoints.load(folder)
    assert "weights_only" not in str(error.value)


@pytest.mark.slow
def test_the_issues_case_garbage_on_line_2_resumes_at_step_12(tmp_path: Path) -> None:
    """Issue 20: 12 steps with save_every=3, line 2 of metrics.jsonl replaced, then max_steps=14."""
    with Trainer(_config(tmp_path, max_steps=12, save_every=3), progress=False) as trainer:
        trainer.run()
    run = tmp_path / "r"
    lines = (run / METRICS_FILE).read_text().splitlines()
    lines[1] = "GARBAGE{"
    (run / METRICS_FILE).write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="metrics.jsonl line 2 is damaged"):
        trainer = Trainer(_config(tmp_path, max_steps=14, save_every=3), progress=False)
    with trainer:
        assert trainer.step_index == 12
        trainer.run()
    assert [json.loads(line)["step"] for line in (run / METRICS_FILE).read_text().splitlines()] == list(range(14))
    assert sorted(p.name for p in run.glob("checkpoints/*/weights/*")) == [f"step{s:06d}" for s in (3, 6, 9, 12, 14)]


# ----- real processes: a full disk, Ctrl-C while loading and while drawing, racing runners ------
def _train(log_dir: Path, *extra: str, wait: bool = True):
    command = [
        sys.executable,
        "-m",
        "gemlab.train",
        "preset=laptop",
        "batch_size=16",
        "num_env=8",
        f"log_dir={log_dir}",
        "run_name=r",
        *extra,
    ]
    if not wait:
        return subprocess.Popen(command, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_resumes_once_space_is_freed(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "size=1m"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        full = _train(disk, "max_steps=40", "save_every=1", "keep_checkpoints=0")
        assert full.returncode == 1, full.stderr
        assert "Traceback" not in full.stderr and "No space left on device" in full.stderr
        assert (
            full.stderr.strip().splitlines()[-1].startswith("gemlab.train: step ")
            and "resume with: python -m gemlab.train" in full.stderr
        )
        saved = (disk / "r" / CHECKPOINTS_FILE).read_text().count("\n")
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        again = _train(disk, "max_steps=40", "save_every=1", "keep_checkpoints=0")
        assert again.returncode == 0, again.stderr
        assert ("resuming r from step" in again.stderr) == (saved > 0)
        steps = [json.loads(line)["step"] for line in (disk / "r" / METRICS_FILE).read_text().splitlines()]
        assert steps == list(range(40))
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("when", ["loading", "plots"])
def test_ctrl_c_while_loading_or_drawing_exits_130_in_one_line(tmp_path: Path, when: str) -> None:
    marker = "run folder:" if when == "plots" else None
    process = _train(tmp_path, "max_steps=2", wait=False)
    if marker is None:
        while not (tmp_path / "r" / ".gemlab-run").exists():  # the folder is locked: the model loads next
            time.sleep(0.01)
    else:
        for line in process.stdout:  # the run is done once "done:" would follow; plots start after close
            if line.startswith(marker):
                break
        while (
            not (tmp_path / "r" / CHECKPOINTS_FILE).exists()
            or "\"step\": 2" not in (tmp_path / "r" / CHECKPOINTS_FILE).read_text()
        ):
            time.sleep(0.02)
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=300)
    assert "Traceback" not in err, err
    if process.returncode == 0:
        pytest.skip(f"the run finished before the SIGINT reached the {when}")
    assert process.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("gemlab.train: SIGINT")


LOST_IN_A_FINALIZER = """
import signal, sys, time, weakref
from gemlab import train
train._main(["preset=nonsense"])  # as `python -m gemlab.train` runs it: returns 2 and leaves its hooks in place
signal.signal(signal.SIGINT, train._interrupt)
class Thing: pass
thing = Thing()
weakref.finalize(thing, signal.raise_signal, signal.SIGINT)  # the Ctrl-C lands while the finalizer runs
try:
    del thing
    time.sleep(3)
    print("the Ctrl-C was lost")
except KeyboardInterrupt:
    print("the Ctrl-C reached the program")
"""


def test_a_ctrl_c_landing_in_a_finalizer_is_delivered_not_lost() -> None:
    """CI caught it once: a SIGINT while the garbage collector ran a ``weakref.finalize`` printed a
    traceback and was dropped (Python cannot raise out of a finalizer), so the command went on."""
    process = subprocess.run(
        [sys.executable, "-c", LOST_IN_A_FINALIZER],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert process.stdout.strip() == "the Ctrl-C reached the program", process.stdout + process.stderr
    assert "Traceback" not in process.stderr, process.stderr


RACE = """
import dataclasses, sys
from gemlab.saved_runs import RunFolderError
from gemlab.studies.definitions import study_runs
from gemlab.studies.runner import run_studies
import chz
runs = [
    dataclasses.replace(r, config=chz.replace(r.config, batch_size=8, num_env=4))
    for r in study_runs("gamma", sys.argv[1], steps=3, seeds=[0], eval_every=0)
]
try:
    run_studies(runs, progress=False)
except RunFolderError as error:
    print(f"refused: {error}", file=sys.stderr)
    sys.exit(3)
"""


@pytest.mark.slow
def test_two_study_runners_on_one_folder_delete_nothing(tmp_path: Path) -> None:
    runners = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, str(tmp_path)],
            cwd=ROOT,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [(r.wait(timeout=600), r.stderr.read()) for r in runners]
    for code, err in results:
        assert code in (0, 3), err
        assert "Traceback" not in err, err
        if code == 3:
            assert len(err.strip().splitlines()) == 1 and "is in use by process" in err
    assert 0 in [code for code, _ in results]
    runs = sorted(path for path in (tmp_path / "gamma").iterdir() if path.is_dir())
    assert len(runs) == 3
    for run in runs:
        steps = [json.loads(line)["step"] for line in (run / METRICS_FILE).read_text().splitlines()]
        assert steps == [0, 1, 2], run


def test_a_folder_whose_marker_another_runner_is_writing_is_not_foreign(tmp_path: Path) -> None:
    """The race the test above can meet: one runner holds the lock and is writing its marker (the
    staged ``..gemlab-run.tmp-PID``) as the other looks in: gemlab's own file being written, not
    someone else's folder. A file of anyone else's is still refused."""
    run = tmp_path / "r"
    run.mkdir()
    (run / ".lock").write_text("")
    (run / "..gemlab-run.tmp-13823").write_text("{")
    RunFolder(str(tmp_path), "r")._refuse_foreign()
    (run / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="is not a gemlab run folder"):
        RunFolder(str(tmp_path), "r")._refuse_foreign()


def test_export_run_keeps_the_record_and_refuses_a_folder_of_someone_elses(tmp_path: Path) -> None:
    """Benchmarks keep finished runs in data/ through ``export_run``: config and metrics only, under
    the target's lock; a target holding other files is refused and left byte for byte as it was."""
    run = _write_run(tmp_path / "runs")
    target = tmp_path / "data" / "kept"
    export_run(run, target, extra={"eval.json": "{}"})
    assert sorted(p.name for p in target.iterdir() if not p.name.startswith(".")) == [
        "config.json",
        "eval.json",
        "metrics.jsonl",
    ]
    assert (target / "metrics.jsonl").read_text() == (run / "metrics.jsonl").read_text()
    export_run(run, target, extra={"eval.json": "{}"})  # an earlier export is replaced, not refused
    mine = tmp_path / "data" / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    with pytest.raises(RunFolderError, match="notes.txt"):
        export_run(run, mine)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
