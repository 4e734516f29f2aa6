"""GEM's python tool run through gemlab's sandbox, as a hostile model would use it: in each mode
("none" always; "bwrap" where bubblewrap works here), the code's files, network, processes, keys,
output and memory stay inside, and nothing of it reaches the trainer. A case the OS cannot enforce
in "none" mode here is skipped with the reason."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import gem
import pytest

from gemlab import tool_sandbox
from gemlab.envs import make_envs
from gemlab.tool_sandbox import (
    MAX_TIMEOUT,
    MODE_VARIABLE,
    RUN_BYTES,
    SandboxError,
    check_sandbox,
    describe_sandbox,
    python_tool_env,
    sandbox_in_force,
)

TIMEOUT = 2  # for the code that runs until it is stopped
LINUX = sys.platform.startswith("linux")
GEM_BWRAP = [
    "--unshare-all",
    "--ro-bind",
    "{prefix}",
    "/python_env",
    "--setenv",
    "PATH",
    "/python_env/bin:/usr/bin:/bin",
]
GEM_BWRAP += [
    "--ro-bind",
    "/lib",
    "/lib",
    "--ro-bind",
    "/lib64",
    "/lib64",
    "--ro-bind",
    "/usr/lib",
    "/usr/lib",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
]


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


def isolated(mode: str) -> bool:
    return mode == "bwrap" or tool_sandbox._isolation()[0]


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


def run_folders() -> set[str]:
    return {
        name
        for name in os.listdir(tempfile.gettempdir())
        if "-run-" in name and name.startswith(tool_sandbox.ROOT_PREFIX)
    }


@pytest.mark.slow
def test_plain_code_runs_and_the_sandbox_is_named(mode: str) -> None:
    assert run_code("print(123*45)").startswith("Code execution result: 5535\n")
    assert describe_sandbox().startswith(f"python tool sandbox: {mode} ")


@pytest.fixture(scope="module")
def interpreters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A ``python -m venv`` venv, a conda-like one (``--copies``: a real interpreter binary in the
    prefix), the same reached through a link, and the base install they come from (the system's Python)."""
    base = os.path.realpath(sys.executable)
    folder = tmp_path_factory.mktemp("pythons")
    for name, options in (("venv", []), ("copies", ["--copies"])):
        subprocess.run(
            [base, "-m", "venv", "--without-pip", *options, str(folder / name)],
            check=True,
            capture_output=True,
            timeout=120,
        )
    (folder / "link").symlink_to(folder)  # an env reached through a linked folder (/home -> var/home)
    return {
        "venv": str(folder / "venv/bin/python"),
        "copies": str(folder / "copies/bin/python"),
        "linked": str(folder / "link/copies/bin/python"),
        "base": base,
    }


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="venvs made here, bwrap")
@pytest.mark.parametrize("kind", ["venv", "copies", "linked", "base"])
def test_the_tool_runs_from_any_python(mode: str, kind: str, interpreters: dict[str, str], tmp_path: Path) -> None:
    """The supervisor, written for each interpreter, runs GEM's command (``python -c`` under "none";
    GEM's bwrap command, the prefix at /python_env, under "bwrap")."""
    interpreter = interpreters[kind]
    folder = tmp_path / "shim"
    config = tool_sandbox.shim_config(folder, MAX_TIMEOUT, interpreter)
    assert config["isolated"] == tool_sandbox._isolation()[0]  # never less confinement for another interpreter
    tool_sandbox._write_shim(folder, config, interpreter)
    prefix = subprocess.run(
        [interpreter, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    gem_options = [part.format(prefix=prefix) for part in GEM_BWRAP] if mode == "bwrap" else []
    ran = subprocess.run(
        [
            str(folder / mode.replace("none", "python")),
            *gem_options,
            *(["python"] if gem_options else []),
            "-c",
            "print(6*7)",
        ],
        capture_output=True,
        timeout=60,
    )
    assert ran.stdout == b"42\n", ran.stderr.decode()


@pytest.mark.slow
def test_the_preflight_runs_the_tool_as_training_does(mode: str) -> None:
    check_sandbox()


@pytest.fixture
def broken_sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A sandbox whose interpreter cannot start (no system libraries in its root), in a fresh folder."""
    if not tool_sandbox._isolation()[0]:  # probed (and remembered) before anything is broken
        pytest.skip("no private root here to break")
    monkeypatch.setenv(MODE_VARIABLE, "none")
    monkeypatch.setattr(tool_sandbox, "_checked", set())
    monkeypatch.setattr(tool_sandbox, "_shim_root", lambda: tmp_path)
    monkeypatch.setattr(tool_sandbox, "SYSTEM_DIRS", [])
    monkeypatch.setattr(tool_sandbox, "python_prefixes", lambda interpreter=sys.executable: [])


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="breaks the private root")
def test_a_broken_sandbox_stops_the_run_before_training_in_one_line(
    broken_sandbox: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(
        SandboxError, match=r"sandbox \(none\) cannot run code here: .*sandbox failed.*gemlab.doctor"
    ) as raised:
        check_sandbox()
    assert "\n" not in str(raised.value)
    from gemlab.train import main

    assert main(["preset=smollm2-tool", f"log_dir={tmp_path / 'runs'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "gemlab.train: the python tool's sandbox (none) cannot run code here: "
    ), err
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_long_code_runs_from_gems_file(mode: str) -> None:
    """Code of 3 KB or more reaches ``python`` as a file GEM writes to the temp dir, not as ``-c``."""
    assert run_code("# " + "x" * 3100 + "\nprint(6 * 7)").startswith("Code execution result: 42\n")


@pytest.mark.slow
def test_relative_writes_stay_out_of_the_trainers_folder(mode: str, tmp_path: Path) -> None:
    code = (
        "import os\nprint(os.getcwd())\nfor path in ('f', '../f', '../../f'):\n    try:\n        open(path, "
        "'w').write('x')\n    except OSError:\n        pass"
    )
    run_folder = Path(run_code(code).removeprefix("Code execution result: ").splitlines()[0])
    assert sorted(os.listdir(tmp_path)) == ["trainer"] and os.listdir(tmp_path / "trainer") == []
    if not isolated(mode):  # an isolated run's folder is a tmpfs in its own mount namespace
        assert run_folder.is_relative_to(tempfile.gettempdir()) and not run_folder.exists()


@pytest.mark.slow
def test_absolute_writes_do_not_land(mode: str, tmp_path: Path) -> None:
    skip_unless(isolated(mode) or bool(tool_sandbox._landlock_abi()), mode, "file confinement")
    target = tmp_path / "outside"
    target.mkdir()
    observation = run_code(f"open({str(target / 'f')!r}, 'w').write('x')\nprint('wrote')")
    assert "wrote" not in observation and os.listdir(target) == []


@pytest.mark.slow
def test_outside_files_are_neither_changed_nor_seen(mode: str, tmp_path: Path) -> None:
    """chmod, utime, chown and setxattr (which Landlock does not cover), stat and inotify on a file
    the trainer's user owns."""
    skip_unless(isolated(mode) or tool_sandbox.confine.supported(), mode, "metadata confinement")
    target = tmp_path / "mine"
    target.write_text("x")
    target.chmod(0o600)
    os.utime(target, (1_000_000, 1_000_000))
    before = target.stat()
    calls = [
        f"o.chmod({str(target)!r}, 0o777)", f"o.utime({str(target)!r}, (0, 0))", f"o.chown({str(target)!r}, 1, 1)",
        f"o.setxattr({str(target)!r}, 'user.x', b'1')", f"print('size', o.stat({str(target)!r}).st_size)",
        "print('inotify fd', __import__('ctypes').CDLL(None).inotify_init1(0))",
    ]
    code = "o = __import__('os')\n" + "\n".join(
        f"try:\n    {call}\nexcept OSError as error:\n    print('refused', error)" for call in calls
    )
    observation = run_code(code)
    after = target.stat()
    assert (after.st_mode, after.st_mtime, after.st_uid) == (before.st_mode, before.st_mtime, before.st_uid)
    assert os.listxattr(target) == [] and "size" not in observation
    assert "inotify fd -1" in observation, observation


@pytest.mark.slow
def test_no_network(mode: str) -> None:
    skip_unless(isolated(mode) or tool_sandbox._landlock_abi() >= 4, mode, "network cut")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        observation = run_code(
            f"s = __import__('socket').socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', {port}))\nprint('connected')"
        )
        assert "connected" not in observation and "Error" in observation
        with pytest.raises(BlockingIOError):
            listener.accept()


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="a Unix socket path under the trainer's folder")
def test_no_unix_socket_by_path(mode: str, tmp_path: Path) -> None:
    """D-Bus, docker.sock and gpg-agent listen on Unix sockets by path; none is reachable."""
    skip_unless(isolated(mode) or tool_sandbox.confine.supported(), mode, "socket confinement")
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen()
        listener.setblocking(False)
        observation = run_code(f"s = __import__('socket').socket(1)\ns.connect({path!r})\nprint('connected')")
        assert "connected" not in observation and "Error" in observation
        with pytest.raises(BlockingIOError):
            listener.accept()


@pytest.fixture
def trainer_key() -> tuple[int, str]:
    """A key in the trainer's session keyring: its id and its secret."""
    libc = ctypes.CDLL(None, use_errno=True)
    secret = uuid.uuid4().hex
    # add_key, KEY_SPEC_SESSION_KEYRING
    key = libc.syscall(248, b"user", f"gemlab-test-{secret}".encode(), secret.encode(), len(secret), -3)
    if key < 0:
        pytest.skip(f"no session keyring here (add_key: {os.strerror(ctypes.get_errno())})")
    yield key, secret
    libc.syscall(250, 21, key)  # keyctl(KEYCTL_INVALIDATE)


@pytest.mark.slow
@pytest.mark.skipif(not LINUX or os.uname().machine != "x86_64", reason="system call numbers of x86_64")
def test_the_trainers_keys_are_out_of_reach(mode: str, trainer_key: tuple[int, str]) -> None:
    skip_unless(tool_sandbox.confine.supported(), mode, "keyring isolation")
    key, secret = trainer_key
    code = (
        "c = __import__('ctypes')\nlibc = c.CDLL(None)\nbuffer = c.create_string_buffer(100)\n"
        f"found = libc.syscall(250, 10, -3, b'user', b'gemlab-test-{secret}', 0)\n"  # KEYCTL_SEARCH
        f"for key in (found, {key}):\n    size = libc.syscall(250, 11, key, buffer, 100)\n    "
        "print('read', size, buffer.value)\n"  # KEYCTL_READ
        # the descriptions of the keys root may view
        "try:\n    print(open('/proc/keys').read())\nexcept OSError as error:\n    print(error)"
    )
    observation = run_code(code)
    assert "read -1" in observation and secret not in observation, observation


@pytest.mark.slow
def test_the_kernels_settings_stay_read_only(mode: str) -> None:
    """/proc/sys is the whole machine's (core_pattern runs a program as root on the next crash): the
    code's uid may be root's when the trainer's is, and no setting opens for writing."""
    skip_unless(isolated(mode) or bool(tool_sandbox._landlock_abi()), mode, "file confinement")
    paths = ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sys/kernel/hostname"]
    code = "import os\n" + "\n".join(
        f"try:\n    os.close(os.open({path!r}, os.O_WRONLY))\n    print('writable', {path!r})\nexcept "
        "OSError:\n    pass"
        for path in paths
    )
    assert "writable" not in run_code(code)


@pytest.mark.slow
def test_the_trainer_and_its_secrets_are_out_of_reach(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    skip_unless(isolated(mode) or tool_sandbox._landlock_abi() >= 6, mode, "process isolation")
    monkeypatch.setenv("TINKER_API_KEY", "tml-not-a-real-key")
    pid = os.getpid()
    code = (
        "import os\nprint(os.environ.get('TINKER_API_KEY'))\n"
        f"try:\n    print(open('/proc/{pid}/environ').read())\nexcept OSError as error:\n    print('no "
        "environ', error)\n"
        f"try:\n    getattr(os, 'ki' + 'll')({pid}, 0)\n    print('trainer reachable')\nexcept OSError as "
        "error:\n    print('no signal', error)"
    )
    observation = run_code(code)
    assert "None\nno environ" in observation and "no signal" in observation
    assert "tml-not-a-real-key" not in observation and "trainer reachable" not in observation


@pytest.mark.slow
def test_an_endless_loop_is_stopped_at_the_tools_timeout(mode: str) -> None:
    assert f"Execution timed out after {TIMEOUT} seconds (stopped by the sandbox)" in run_code(
        "while True:\n    pass", TIMEOUT
    )


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="finds leftover processes through /proc")
def test_a_fork_bomb_and_a_daemon_leave_no_process_behind(mode: str) -> None:
    if os.getuid() == 0 and not any("pids.max" in limits for _, limits in tool_sandbox._cgroups()):
        pytest.skip(
            "as root without a pids cgroup nothing bounds a fork bomb's count until the timeout: not tried on "
            "a shared machine"
        )
    token = uuid.uuid4().hex
    daemon = (
        f"# {token}\nimport os, time\nif getattr(os, 'fo' + 'rk')() == 0:\n    os.setsid()\n    "
        "time.sleep(60)\nprint('parent done')"
    )
    assert "parent done" in run_code(daemon)
    code = f"# {token}\nwhile True:\n    try:\n        __import__('os').fork()\n    except OSError:\n        pass"
    assert "stopped by the sandbox" in run_code(code, TIMEOUT)
    assert gone(token)


KILLED_TRAINER = """
import os, sys
from gemlab.tool_sandbox import python_tool_env, _Question
env = python_tool_env(_Question(), timeout=2)
env.reset()
print("stepping", flush=True)
env.step(
    "```python\\n# " + os.environ["TOKEN"] + "\\nimport time\\nopen('/tmp/f', 'wb').write(bytes(1 << 20))"
    "\\ntime.sleep(60)\\n```"
)
"""


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="finds leftover processes through /proc")
def test_a_killed_trainer_leaves_nothing_behind(mode: str, tmp_path: Path) -> None:
    """The trainer SIGKILLed while the code runs: by the tool's timeout at the latest, no process of
    the run is left, nor a run folder or a cgroup."""
    token = uuid.uuid4().hex
    before = run_folders()
    # only the code's command line holds it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TOKEN": token}
    trainer = subprocess.Popen(
        [sys.executable, "-c", KILLED_TRAINER], stdout=subprocess.PIPE, env=env, cwd=tmp_path / "trainer"
    )
    assert trainer.stdout.readline() == b"stepping\n"
    for _ in range(100):  # until the code runs
        if processes_with(token):
            break
        time.sleep(0.1)
    assert processes_with(token)
    (root,) = Path(tempfile.gettempdir()).glob(f"{tool_sandbox.ROOT_PREFIX}{trainer.pid}-*")  # its supervisors' scripts
    trainer.kill()
    trainer.wait()
    assert gone(token)
    for _ in range(100):  # the supervisor removes its cgroups once the code is gone
        cgroups = [
            cgroup for parent, _ in tool_sandbox._cgroups() for cgroup in Path(parent).glob("gemlab-tool-sandbox-*")
        ]
        if not cgroups:
            break
        time.sleep(0.1)
    assert cgroups == [] and run_folders() <= before
    tool_sandbox._remove_stale_roots(root.parent)  # what the next trainer's first tool step does
    assert not root.exists()


def gone(token: str) -> bool:
    """Whether no process holds ``token`` within 10 s (the tool's timeout and the kill)."""
    for _ in range(100):
        if not processes_with(token):
            return True
        time.sleep(0.1)
    return False


FILL_AND_NEST = (
    "import os\nwritten = 0\nfor index in range(48):\n    try:\n        with open(f'big{index}', 'wb') as file:\n"
    "            file.write(bytes(16 << 20))\n        written += 16 << 20\n    except OSError:\n        break\n"
    "for _ in range(1200):\n    os.mkdir('d')\n    os.chdir('d')\nopen('last', "
    "'w').write('x')\nos.chmod('.', 0)\nprint('written', written)"
)


@pytest.mark.slow
def test_disk_use_is_bounded_and_any_folder_is_removed(mode: str) -> None:
    """48 files of 16 MiB and 1,200 nested folders, the last one closed: the run holds at most its
    tmpfs's size, and its removal neither recurses nor leaves anything behind."""
    before = run_folders()
    observation = run_code(FILL_AND_NEST)
    assert "written" in observation and "sandbox failed" not in observation and "recursion" not in observation, (
        observation
    )
    if isolated(mode):
        assert int(observation.split("written ")[1].split()[0]) <= RUN_BYTES
    assert run_folders() <= before


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="the supervisor without namespaces, on Linux")
def test_a_deep_folder_is_removed_without_namespaces(tmp_path: Path) -> None:
    """Where the kernel gives no namespaces the run's folder is on disk: removed however deep."""
    folder = tmp_path / "shim"
    tool_sandbox._write_shim(folder, tool_sandbox.shim_config(folder, MAX_TIMEOUT, isolated=False), sys.executable)
    before = run_folders()
    code = FILL_AND_NEST.replace("range(48)", "range(1)").replace("16 << 20", "1 << 10")
    if tool_sandbox.confine.supported():  # seccomp refuses chmod here (the user's files are in reach)
        code = code.replace("os.chmod('.', 0)", "pass")
    ran = subprocess.run([str(folder / "python"), "-c", code], capture_output=True, timeout=60)
    assert b"written 1024" in ran.stdout and ran.stderr == b"", ran.stderr
    assert run_folders() <= before


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


@pytest.mark.slow
def test_tool_steps_run_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two envs' tool steps are inside the sandbox together (each waits at a barrier for the other)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(MODE_VARIABLE, "none")
    envs = [python_tool_env(Question(), timeout=MAX_TIMEOUT) for _ in range(2)]
    both_inside = threading.Barrier(2, timeout=60)
    code = "print(6 * 7)"

    class Waiting(tool_sandbox.SandboxedTool):
        def step(self, action: str, **kwargs: object) -> tuple:
            with sandbox_in_force(self.timeout):
                both_inside.wait()
                return self.env.step(action, **kwargs)

    observations: list[str] = []
    threads = [
        threading.Thread(
            target=lambda env=env: observations.append(
                Waiting(env.env, env.timeout).step(f"<python>{code}</python>")[0]
            )
        )
        for env in envs
    ]
    for env in envs:
        env.reset()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert [observation.startswith("Code execution result: 42\n") for observation in observations] == [True, True]


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
