"""GEM's python tool run through gemlab's sandbox, as a hostile model would use it: in each mode
("none" always; "bwrap" where bubblewrap works here), the code's files, network, processes, output
and memory stay inside, and nothing of it reaches the trainer. A case the OS cannot enforce in
"none" mode here is skipped with the reason."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

import gem
import pytest

from gemlab import tool_sandbox
from gemlab.envs import make_envs
from gemlab.tool_sandbox import MAX_TIMEOUT, MODE_VARIABLE, describe_sandbox, python_tool_env, sandbox_in_force

TIMEOUT = 2  # for the code that runs until it is stopped


class Question(gem.Env):
    """One question; an answer without code ends the episode."""

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        return "What is 123 * 45?", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        return "", 0.0, True, False, {}


@pytest.fixture(params=["none", "bwrap"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Each sandbox mode, with the trainer's current folder an empty ``tmp_path/trainer``."""
    (tmp_path / "trainer").mkdir()
    monkeypatch.chdir(tmp_path / "trainer")
    if request.param == "bwrap" and tool_sandbox._bwrap_problem():
        pytest.skip(tool_sandbox._bwrap_problem())
    monkeypatch.setenv(MODE_VARIABLE, request.param)
    return request.param


def run_code(code: str, timeout: int = MAX_TIMEOUT) -> str:
    """The observation GEM's tool returns for ``code``, run through ``python_tool_env``. Code that
    ends by itself gets the longest timeout, so that a loaded machine's slow start cannot fail it."""
    env = python_tool_env(Question(), timeout=timeout)
    env.reset()
    observation, _, terminated, _, info = env.step(f"```python\n{code}\n```")
    assert not terminated and info["tool_use_counter"] == 1
    return observation


def skip_unless(held: bool, mode: str, what: str) -> None:
    if mode == "none" and not held:
        pytest.skip(f"this OS lets the 'none' sandbox enforce no {what} here (no namespaces or Landlock); bwrap does")


def processes_with(token: str) -> list[int]:
    """The processes whose command line holds ``token``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_plain_code_runs_and_the_sandbox_is_named(mode: str) -> None:
    assert run_code("print(123*45)").startswith("Code execution result: 5535\n")
    assert describe_sandbox().startswith(f"python tool sandbox: {mode} ")


@pytest.mark.slow
def test_long_code_runs_from_gems_file(mode: str) -> None:
    """Code of 3 KB or more reaches ``python`` as a file GEM writes to the temp dir, not as ``-c``."""
    assert run_code("# " + "x" * 3100 + "\nprint(6 * 7)").startswith("Code execution result: 42\n")


@pytest.mark.slow
def test_relative_writes_stay_out_of_the_trainers_folder(mode: str, tmp_path: Path) -> None:
    code = "import os\nprint(os.getcwd())\nfor path in ('f', '../f', '../../f'):\n    try:\n        open(path, 'w').write('x')\n    except OSError:\n        pass"
    run_folder = Path(run_code(code).removeprefix("Code execution result: ").splitlines()[0])
    assert sorted(os.listdir(tmp_path)) == ["trainer"] and os.listdir(tmp_path / "trainer") == []
    if mode == "none":  # bwrap's folder is inside its own throwaway root
        assert run_folder.is_relative_to(tempfile.gettempdir()) and not run_folder.exists()


@pytest.mark.slow
def test_absolute_writes_do_not_land(mode: str, tmp_path: Path) -> None:
    skip_unless(bool(tool_sandbox._landlock_abi()), mode, "file confinement")
    target = tmp_path / "outside"
    target.mkdir()
    observation = run_code(f"open({str(target / 'f')!r}, 'w').write('x')\nprint('wrote')")
    assert "wrote" not in observation and os.listdir(target) == []


@pytest.mark.slow
def test_no_network(mode: str) -> None:
    skip_unless(bool(tool_sandbox._namespaces()) or tool_sandbox._landlock_abi() >= 4, mode, "network cut")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        observation = run_code(f"s = __import__('socket').socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', {port}))\nprint('connected')")
        assert "connected" not in observation and "Error" in observation
        with pytest.raises(BlockingIOError):
            listener.accept()


@pytest.mark.slow
def test_the_trainer_and_its_secrets_are_out_of_reach(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    namespaces = tool_sandbox._namespaces()
    skip_unless(("--pid" in namespaces and "--mount-proc" in namespaces) or tool_sandbox._landlock_abi() >= 6, mode, "process isolation")
    monkeypatch.setenv("TINKER_API_KEY", "tml-not-a-real-key")
    pid = os.getpid()
    code = (
        "import os\nprint(os.environ.get('TINKER_API_KEY'))\n"
        f"try:\n    print(open('/proc/{pid}/environ').read())\nexcept OSError as error:\n    print('no environ', error)\n"
        f"try:\n    getattr(os, 'ki' + 'll')({pid}, 0)\n    print('trainer reachable')\nexcept OSError as error:\n    print('no signal', error)"
    )
    observation = run_code(code)
    assert "None\nno environ" in observation and "no signal" in observation
    assert "tml-not-a-real-key" not in observation and "trainer reachable" not in observation


@pytest.mark.slow
def test_an_endless_loop_is_stopped_at_the_tools_timeout(mode: str) -> None:
    assert f"Execution timed out after {TIMEOUT} seconds (stopped by the sandbox)" in run_code("while True:\n    pass", TIMEOUT)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds leftover processes through /proc")
def test_a_fork_bomb_leaves_no_process_behind(mode: str) -> None:
    if os.getuid() == 0 and not any("pids.max" in limits for _, limits in tool_sandbox._cgroups()):
        pytest.skip("as root without a pids cgroup nothing bounds a fork bomb's count until the timeout: not tried on a shared machine")
    token = uuid.uuid4().hex
    code = f"# {token}\nwhile True:\n    try:\n        __import__('os').fork()\n    except OSError:\n        pass"
    assert "stopped by the sandbox" in run_code(code, TIMEOUT)
    for _ in range(50):  # SIGKILLed processes may take a moment to be reaped; bounded
        if not processes_with(token):
            break
        time.sleep(0.1)
    assert processes_with(token) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "timeout", "stopped_by"),
    [
        ("while True:\n    print('x' * 1000)", MAX_TIMEOUT, ["[output cut at 2048 bytes]"]),
        ("print('x' * 10**9)", TIMEOUT, ["MemoryError", "stopped by the sandbox"]),  # whichever comes first
    ],
)
def test_output_is_bounded(mode: str, code: str, timeout: int, stopped_by: list[str]) -> None:
    observation = run_code(code, timeout)
    assert len(observation) < 70_000 and any(reason in observation for reason in stopped_by)


@pytest.mark.slow
def test_a_memory_hog_is_stopped(mode: str) -> None:
    assert "MemoryError" in run_code("data = bytes(8 * 2**30)\nprint(len(data))")


@pytest.mark.slow
def test_stray_bytes_reach_the_trainer_as_text(mode: str, capfd: pytest.CaptureFixture[str]) -> None:
    """GEM decodes the output strictly: a byte that is not UTF-8 would raise inside the trainer."""
    observation = run_code("import sys\nsys.stdout.buffer.write(b'ok\\xff')\nraise ValueError('boom')")
    assert observation.startswith("Code execution result: ok\ufffd") and "ValueError: boom" in observation
    assert capfd.readouterr() == ("", "")


@pytest.mark.slow
def test_the_wrapper_name_works_through_make_envs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (env,) = make_envs("game:GuessTheNumber-v0-easy", 1, env_wrappers=f"{tool_sandbox.WRAPPER_NAME},concat")
    env.reset()
    observation, *_ = env.step("<python>print(6 * 7)</python>")
    assert "Code execution result: 42" in observation


def test_path_changes_only_during_the_step_and_comes_back_on_errors() -> None:
    before = os.environ["PATH"]
    with pytest.raises(RuntimeError, match="inside"), sandbox_in_force(TIMEOUT):
        assert os.environ["PATH"] != before and os.environ["PATH"].endswith(before)
        raise RuntimeError("inside")
    assert os.environ["PATH"] == before


def test_bad_settings_say_what_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="from 1 to 8"):
        python_tool_env(Question(), timeout=10)
    monkeypatch.setenv(MODE_VARIABLE, "docker")
    with pytest.raises(ValueError, match="must be auto, bwrap or none"):
        python_tool_env(Question())
