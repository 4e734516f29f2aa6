"""GEM's python tool, run sandboxed: ``python_tool_env(env)`` and the wrapper name ``python_tool_sandboxed``.

The model's code runs on the learner's own machine, so gemlab wraps GEM's ``ToolEnvWrapper`` and
``PythonCodeTool`` (both unmodified) in a step that puts a folder of gemlab's own first on ``PATH``.
GEM runs ``python -c CODE`` (sandbox "none") or ``bwrap ... python -c CODE`` (sandbox "bwrap") by
name from a copy of ``os.environ``, so it finds gemlab's supervisor (supervisor.py, with confine.py)
under either name. ``PATH`` is process-wide: the first tool step sets it and the last one in flight
puts it back (steps of one timeout run at once; one of another timeout waits), and a thread of the
trainer that starts ``python`` meanwhile meets the supervisor too. docs/tool-sandbox.md has the
table of what holds in each mode, and the hostile sweep's results.

Both modes (Linux), for every call: the interpreter that runs the trainer (a venv's, a conda env's
or the system's); rlimits (CPU seconds, 1 GiB of address space a process, 16 MiB a file, 64 open
files, no core dumps); 64 processes and 2 GiB in all where a pids/memory cgroup can be made (as
root), else RLIMIT_NPROC; its own session and an empty session keyring; a seccomp filter refusing
what the code never needs (sockets, keys, inotify/fanotify, mount and namespace calls, ptrace,
io_uring, bpf, chown and xattrs); the tool's ``timeout`` (1 to 8 s: GEM kills a run at 10 s whatever
it is); at most 2 KiB of stdout and of stderr (the rest becomes ``[output cut at 2048 bytes]``: it
goes back into the model's context), as valid UTF-8; at the end every process of the run is killed.

"bwrap" (bubblewrap installed and able to run GEM's command here): GEM's command (no network, its
own processes and /proc, only the Python install and system libraries visible, read-only) plus
``--die-with-parent``, the base install a venv links to, a 64 MiB tmpfs as /tmp under a read-only
root, and the seccomp filter.

"none" (no working bubblewrap): where the kernel lets a user create namespaces (probed once), the
supervisor makes new user, pid, network, IPC, UTS and mount namespaces whose root is a read-only
tmpfs holding only the Python install and the system folders (read-only binds), /dev's harmless
nodes, its own /proc, and /tmp, a 64 MiB tmpfs that is the run's folder: nothing of the user's files,
/run, /home or /etc is there, nothing is written to disk, and all of it vanishes with the run's
first process. Without namespaces: a fresh folder under the system temp dir (removed after,
however deep), Landlock (Linux 5.13+: writes only there, reads only Python and /usr), the seccomp
filter (chmod and utime refused too), GEM's import blocklist. macOS has only the rlimits, the temp
folder, the timeout and the output cap. ``describe_sandbox()`` says which of these hold here;
``check_sandbox()`` runs ``print(6*7)`` through it before training and stops the run in one line if
it does not print 42: a sandbox that cannot give what it promises runs nothing.

GEM itself still makes (and removes) an empty ``tmp*`` folder in the trainer's current folder for
each run (``tempfile.mkdtemp(dir=".")``), as it always does.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, SupportsFloat

import gem
from gem.core import Env, EnvWrapper
from gem.tools.python_code_tool import PythonCodeTool
from gem.tools.tool_env_wrapper import ToolEnvWrapper
from gem.utils.sandbox import DEFAULT_TIMEOUT, run_python

from gemlab.envs import WRAPPER_CHECKS, WRAPPER_NOTES
from gemlab.tool_sandbox import confine

#: The name ``Config.env_wrappers`` knows this wrapper by (registered with GEM on import).
WRAPPER_NAME = "python_tool_sandboxed"
#: Chooses the mode: unset or ``auto`` (bwrap where it works, else none), ``bwrap``, or ``none``.
MODE_VARIABLE = "GEMLAB_TOOL_SANDBOX"
MEMORY_BYTES = 1 << 30
#: The memory cgroup's bound on a run's processes together: above one process's, so that a single
#: process meets its address-space limit (a MemoryError) before the cgroup's reclaim slows it down.
RUN_MEMORY_BYTES = 2 * MEMORY_BYTES
FILE_BYTES = 16 << 20
#: The run's folder (/tmp inside, a tmpfs in memory) holds at most this much in all.
RUN_BYTES = 64 << 20
OUTPUT_BYTES = 2 << 10  # per stream; at most ~4k tokens back into an 8k-token context (SmolLM2's)
PROCESSES = 64
#: The longest tool timeout: GEM's ``run_python`` kills a run at its own DEFAULT_TIMEOUT (10 s) whatever
#: the tool's timeout, and the supervisor needs a moment to start and to clean up before that.
MAX_TIMEOUT = DEFAULT_TIMEOUT - 2
#: What the code may read and run, besides the Python install.
SYSTEM_DIRS = ["/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin"]
SUPERVISOR = Path(__file__).with_name("supervisor.py")
CONFINE = Path(__file__).with_name("confine.py")
INSTALL_BWRAP = "Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap; Arch: pacman -S bubblewrap"
LINUX = sys.platform.startswith("linux")


class SandboxError(ValueError):
    """The sandbox cannot run the tool's code here (the message says why and what to do). A
    ``ValueError``, as a missing data set is (``check_env_id``): the setting cannot work on this machine,
    and every caller that checks settings (the CLI, the lab, the cookbook adapter) says it in one line."""


def python_prefixes(interpreter: str = sys.executable) -> list[str]:
    """The folders ``interpreter`` reads when it starts: its prefix (a venv's, with pyvenv.cfg) and
    the base install's, where its binary really is (a venv's ``bin/python`` links there)."""
    script = (
        "import os, sys; print(sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, "
        "os.path.realpath(sys.executable), sep='\\n')"
    )
    if interpreter == sys.executable:
        lines = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.path.realpath(sys.executable)]
    else:
        lines = subprocess.run(
            [interpreter, "-c", script], capture_output=True, text=True, timeout=60, check=True
        ).stdout.splitlines()
    return sorted({*lines[:4], os.path.dirname(os.path.dirname(lines[4]))})


@functools.cache
def _landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 where it has none)."""
    if not LINUX:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    return max(0, libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


@functools.cache
def _cgroups() -> list[tuple[str, dict[str, str]]]:
    """The cgroup folders below which a run can get its own pids/memory limits (usually only as root):
    each ``(parent folder, {limit file: value})`` that was tried here (made, limited, joined, removed)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    in_all = str(RUN_MEMORY_BYTES)
    wanted = {"pids": {"pids.max": str(PROCESSES)}, "memory": {"memory.limit_in_bytes": in_all}}
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():  # cgroup v2
            candidates.append((f"/sys/fs/cgroup{path}", {"pids.max": str(PROCESSES), "memory.max": in_all}))
        for controller in set(controllers.split(",")) & set(wanted):  # cgroup v1
            candidates.append((f"/sys/fs/cgroup/{controller}{path}", wanted[controller]))
    return [(parent, limits) for parent, limits in candidates if _cgroup_works(parent, limits)]


def _cgroup_works(parent: str, limits: dict[str, str]) -> bool:
    trial = Path(parent) / f"gemlab-tool-trial-{os.getpid()}"
    try:
        trial.mkdir()
    except OSError:
        return False
    try:
        for name, value in limits.items():
            (trial / name).write_text(value)
        joined = subprocess.run(
            ["sh", "-c", 'echo $$ > "$0/cgroup.procs"', str(trial)], capture_output=True, timeout=10
        )
        return joined.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        for _ in range(100):  # a cgroup can be removed once its last process is reaped
            try:
                trial.rmdir()
                break
            except OSError:
                time.sleep(0.01)


def _remove_tree(folder: Path) -> None:
    """Remove ``folder`` however deep and whatever its permissions (coreutils walk without recursion)."""
    subprocess.run(["chmod", "-R", "u+rwx", str(folder)], capture_output=True, check=False)
    subprocess.run(["rm", "-rf", str(folder)], capture_output=True, check=False)


ROOT_PREFIX = "gemlab-tool-sandbox-"


def _remove_root(root: Path) -> None:
    """A trainer's folder of supervisors, what its supervisors left (run folders a supervisor killed
    mid-run, by GEM's own 10 s limit say, could not remove) and its empty cgroups."""
    shutil.rmtree(root, ignore_errors=True)
    for run_folder in root.parent.glob(f"{root.name}-run-*"):
        _remove_tree(run_folder)
    for parent, _ in _cgroups():
        for cgroup in Path(parent).glob(f"{root.name}-*"):
            try:
                cgroup.rmdir()
            except OSError:
                pass


def _remove_stale_roots(temp: Path) -> None:
    """Remove the folders of supervisors of this user's trainers that are gone (killed: no atexit)."""
    for root in temp.glob(f"{ROOT_PREFIX}*"):
        owner = root.name.removeprefix(ROOT_PREFIX).split("-")[0]
        try:
            if "-run-" in root.name or not owner.isdigit() or root.stat().st_uid != os.getuid():
                continue
            os.kill(int(owner), 0)
        except ProcessLookupError:
            _remove_root(root)
        except OSError:  # alive under another user, or gone meanwhile
            continue


@functools.cache
def _shim_root() -> Path:
    """gemlab's folder for the supervisors, made once per process under the system temp dir (the
    folders of trainers that were killed are removed first)."""
    owner = os.getpid()
    _remove_stale_roots(Path(tempfile.gettempdir()))
    root = Path(tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{owner}-"))

    def remove() -> None:  # in this process only, not in a forked child
        if os.getpid() == owner:
            _remove_root(root)

    atexit.register(remove)
    return root


def _write_shim(folder: Path, config: dict[str, Any], interpreter: str) -> None:
    """The supervisor as ``folder/python`` (and ``bwrap``) with ``config`` written in, and confine.py."""
    if any(character.isspace() for character in interpreter) or len(interpreter) > 200:
        raise SandboxError(
            f"the python tool's sandbox needs an interpreter path without spaces, under 200 characters: {interpreter!r}"
        )
    folder.mkdir(mode=0o700)
    source = SUPERVISOR.read_text()
    marker = "CONFIG: dict = {}"
    if source.count(marker) != 1:
        raise RuntimeError(f"{SUPERVISOR} must hold the line {marker!r} exactly once")
    (folder / "python").write_text(f"#!{interpreter} -IS\n" + source.replace(marker, f"CONFIG: dict = {config!r}"))
    (folder / "python").chmod(0o500)
    shutil.copyfile(CONFINE, folder / "confine.py")
    (folder / "bwrap").symlink_to("python")


def shim_config(
    folder: Path, timeout: int, interpreter: str = sys.executable, isolated: bool | None = None
) -> dict[str, Any]:
    """The settings of the supervisors in ``folder``: the limits and what this OS allows."""
    prefixes = python_prefixes(interpreter)
    if isolated is None:
        isolated, proc = _isolation(interpreter)
    else:
        proc = isolated
    return {
        "folder": str(folder),
        "timeout": timeout,
        "memory_bytes": MEMORY_BYTES,
        "file_bytes": FILE_BYTES,
        "run_bytes": RUN_BYTES,
        "output_bytes": OUTPUT_BYTES,
        "processes": PROCESSES,
        "isolated": isolated,
        "proc": proc,
        "landlock": _landlock_abi(),
        "seccomp": LINUX and confine.supported(),
        "system_dirs": SYSTEM_DIRS,
        "prefixes": prefixes,
        "cgroups": _cgroups(),
        "prefix": _shim_root().name,
        "bwrap": shutil.which("bwrap") or "bwrap",
        "interpreter": interpreter,
        "tempdir": tempfile.gettempdir(),
    }


@functools.cache
def _isolation(interpreter: str = sys.executable) -> tuple[bool, bool]:
    """Whether the supervisor's namespaces and private root (with a /proc of its own, or without
    one where a container forbids it) run ``print(6*7)`` here; checked once."""
    if not LINUX or not confine.supported():
        return False, False
    failure = ""
    for proc in (True, False):
        folder = Path(tempfile.mkdtemp(dir=_shim_root(), prefix="trial-")) / "shim"
        config = shim_config(folder, MAX_TIMEOUT, interpreter, isolated=True) | {"proc": proc}
        _write_shim(folder, config, interpreter)
        try:
            ran = subprocess.run(
                [str(folder / "python"), "-c", "print(6*7)"], capture_output=True, timeout=30, cwd=folder
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            failure = str(error)
            continue
        if ran.stdout == b"42\n":
            return True, proc
        failure = _last_line(ran.stderr.decode(errors="replace"))
    probe = f"import sys; sys.path.insert(0, {str(CONFINE.parent)!r}); import confine; confine.namespaces_allowed()"
    if subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, timeout=30).returncode == 0:
        raise SandboxError(
            f"the python tool's sandbox cannot confine code with {interpreter} although this kernel allows "
            f"namespaces: {failure}"
        )
    return False, False  # the kernel refuses namespaces: the folder, Landlock and seccomp are what holds


_shim_lock = threading.Lock()


def _shim_folder(timeout: int) -> str:
    """The folder put first on PATH for tools of this ``timeout``: the supervisor as ``python`` and
    ``bwrap``, with this folder's settings written in."""
    with _shim_lock:
        folder = _shim_root() / f"timeout-{timeout}"
        if not folder.exists():
            _write_shim(folder, shim_config(folder, timeout), sys.executable)
        return str(folder)


class _PathGate:
    """Who holds PATH: the tool steps in flight (any number at once, all of one timeout)."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.timeout: int | None = None
        self.steps = 0
        self.before: str | None = None


_gate = _PathGate()


@contextmanager
def sandbox_in_force(timeout: int) -> Iterator[None]:
    """While inside, GEM's python tool finds gemlab's supervisor as ``python`` and ``bwrap``. Steps of
    the same timeout run at once (PATH is set by the first, put back by the last); one of another
    timeout waits until they are done."""
    folder = _shim_folder(timeout)
    with _gate.changed:
        while _gate.steps and _gate.timeout != timeout:
            _gate.changed.wait()
        if not _gate.steps:
            _gate.before, _gate.timeout = os.environ.get("PATH"), timeout
            os.environ["PATH"] = os.pathsep.join(filter(None, (folder, _gate.before)))
        _gate.steps += 1
    try:
        yield
    finally:
        with _gate.changed:
            _gate.steps -= 1
            if not _gate.steps:
                if _gate.before is None:
                    os.environ.pop("PATH", None)
                else:
                    os.environ["PATH"] = _gate.before
                _gate.changed.notify_all()


@functools.cache
def _bwrap_problem() -> str:
    """'' where GEM's bwrap sandbox runs this interpreter here, else why not."""
    if shutil.which("bwrap") is None:
        return f"bubblewrap is not installed ({INSTALL_BWRAP})"
    try:
        with sandbox_in_force(MAX_TIMEOUT):
            ran, stdout, stderr = run_python("print(1)", "bwrap")
    except OSError as error:
        return f"bubblewrap could not run GEM's command here: {error}"
    if (ran, stdout) != (True, "1\n"):
        return f"bubblewrap is installed but GEM's command fails here: {_last_line(stderr or stdout)}"
    return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def sandbox_mode() -> str:
    """``"bwrap"`` where bubblewrap is installed and runs GEM's command (checked once), else
    ``"none"``; ``GEMLAB_TOOL_SANDBOX=none`` or ``=bwrap`` forces one."""
    wanted = os.environ.get(MODE_VARIABLE, "auto").strip() or "auto"
    if wanted not in ("auto", "bwrap", "none"):
        raise ValueError(f"{MODE_VARIABLE} must be auto, bwrap or none, got {wanted!r}")
    if wanted == "none":
        return "none"
    problem = _bwrap_problem()
    if wanted == "bwrap" and problem:
        raise ValueError(f"{MODE_VARIABLE}=bwrap but {problem}")
    return "none" if problem else "bwrap"


def describe_sandbox() -> str:
    """One line: which sandbox runs the python tool's code here, what it enforces and what not."""
    try:
        return _describe()
    except SandboxError as error:
        return f"python tool sandbox: BROKEN, the tool cannot run here ({error})"


def _describe() -> str:
    limits = (
        f"limits: the tool's timeout, {MEMORY_BYTES >> 30} GiB a process, {FILE_BYTES >> 20} MiB a file, "
        f"{OUTPUT_BYTES >> 10} KiB of output"
    )
    cgroup_files = {name for _, files in _cgroups() for name in files}
    if "pids.max" in cgroup_files or (LINUX and os.getuid() != 0):
        limits += f", {PROCESSES} processes"
    if cgroup_files - {"pids.max"}:
        limits += f", {RUN_MEMORY_BYTES >> 30} GiB in all"
    seccomp = LINUX and confine.supported()
    common = (["seccomp: no sockets, keys, inotify, mounts, ptrace"] if seccomp else []) + (
        ["an empty session keyring"] if LINUX else []
    )
    if sandbox_mode() == "bwrap":
        held = [
            "no network, sees only the Python install and system libraries, read-only",
            f"a {RUN_BYTES >> 20} MiB tmpfs as /tmp",
            *common,
        ]
        return f"python tool sandbox: bwrap ({'; '.join(held)}; dies with the trainer); {limits}"
    why = _bwrap_problem() if os.environ.get(MODE_VARIABLE, "auto") != "none" else f"{MODE_VARIABLE}=none"
    if _isolation()[0]:
        held = [
            "namespaces: no network, its own processes, sees only the Python install and system folders, read-only",
            f"a {RUN_BYTES >> 20} MiB tmpfs as its folder",
            *common,
        ]
        return f"python tool sandbox: none ({why}); {'; '.join(held)}; {limits}"
    held = ["GEM's import blocklist", "a temp folder outside your files", *common]
    if _landlock_abi():
        held.append("writes only in its folder, reads only Python and /usr (Landlock)")
    missing = [
        "can read your files by absolute path" if _landlock_abi() else "can read and write your files by absolute path"
    ]
    if _landlock_abi() < 4 and not seccomp:
        missing.append("has network")
    if _landlock_abi() < 6:
        missing.append("can signal your processes")
    if not LINUX:
        missing.append(
            "only the limits, the temp folder, the timeout and the output cap hold (no namespaces, Landlock or "
            "seccomp on macOS)"
        )
    return f"python tool sandbox: none ({why}); {'; '.join(held)}; {limits}; NOT held: {', '.join(missing)}"


class _Question(gem.Env):
    """The preflight's env: one question; an answer without code ends it."""

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return "What is 6 * 7?", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", 0.0, True, False, {}


_checked: set[str] = set()


def check_sandbox() -> None:
    """Run ``print(6*7)`` through the sandboxed tool exactly as training does (checked once per mode
    and process); raise ``SandboxError`` with one line saying why and what to do unless it prints 42."""
    mode = sandbox_mode()
    if mode in _checked:
        return
    env = python_tool_env(_Question(), timeout=MAX_TIMEOUT)
    env.reset()
    observation = str(env.step("```python\nprint(6*7)\n```")[0])
    if not observation.startswith("Code execution result: 42\n"):
        result = observation.removeprefix("Code execution result: ").split("\n\nReached the maximum")[0]
        other = (
            f"install bubblewrap ({INSTALL_BWRAP}) and set {MODE_VARIABLE}=bwrap"
            if mode == "none"
            else f"set {MODE_VARIABLE}=none"
        )
        raise SandboxError(
            f"the python tool's sandbox ({mode}) cannot run code here: {_last_line(result)}; nothing was "
            f"trained on it. See `python -m gemlab.doctor`; or {other}"
        )
    _checked.add(mode)


class SandboxedTool(EnvWrapper):
    """Runs the wrapped env's ``step`` (and only it) with gemlab's supervisor on PATH."""

    #: gemlab's episode loop steps this env in a worker thread: a tool call waits on its process,
    #: and the other episodes' calls run meanwhile (``gemlab.episodes``).
    steps_in_a_thread = True

    def __init__(self, env: Env, timeout: int):
        super().__init__(env)
        self.timeout = timeout

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return self.env.reset(seed=seed)

    def step(self, action: str, **kwargs: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        with sandbox_in_force(self.timeout):
            return self.env.step(action, **kwargs)


def python_tool_env(
    env: Env, *, timeout: int = 5, max_tool_uses: int = 1, tool_reward: float = 0.0, tool_success_reward: float = 0.0
) -> Env:
    """``env`` with GEM's python tool (``ToolEnvWrapper`` + ``PythonCodeTool``), its code run sandboxed."""
    if os.name != "posix":
        raise RuntimeError(
            "the sandboxed python tool needs Linux or macOS: GEM would run the model's code unconfined here"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= MAX_TIMEOUT:
        raise ValueError(
            f"timeout must be a whole number of seconds from 1 to {MAX_TIMEOUT} (GEM kills the tool at "
            f"{DEFAULT_TIMEOUT} s), got {timeout!r}"
        )
    tool = PythonCodeTool(timeout=timeout, sandbox_type=sandbox_mode())
    tools = ToolEnvWrapper(
        env, tools=[tool], tool_reward=tool_reward, tool_success_reward=tool_success_reward, max_tool_uses=max_tool_uses
    )
    return SandboxedTool(tools, timeout)


def register_wrapper() -> None:
    """Let GEM's wrapper lists (``Config.env_wrappers``) name ``python_tool_sandboxed``, checked by
    ``check_sandbox`` before a Trainer (or ``make_envs``) builds anything."""
    from gem.wrappers.wrapper_factory import WRAPPER_FACTORY

    WRAPPER_FACTORY.setdefault(WRAPPER_NAME, python_tool_env)
    WRAPPER_CHECKS.setdefault(WRAPPER_NAME, check_sandbox)
    WRAPPER_NOTES.setdefault(WRAPPER_NAME, describe_sandbox)


register_wrapper()
