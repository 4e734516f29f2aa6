"""The supervisor gemlab puts first on PATH, as ``python`` and ``bwrap``, while GEM's python tool runs.

gemlab/tool_sandbox.py copies this file (and tool_sandbox_confine.py) into a folder of its own under
the system temp dir, with the real interpreter's shebang and this folder's ``CONFIG`` filled in (the
limits, and what it found the OS allows), and links ``bwrap`` to it. Standard library only, never
gemlab, and few modules: it starts before every run of the model's code.

Called as ``python ARGS`` (GEM's "none" sandbox): runs ``[unshare ...] confine ARGS`` in a fresh temp
folder; ``confine`` applies Landlock where the kernel has it, then becomes the real interpreter with
ARGS. Called as ``bwrap ARGS`` (GEM's "bwrap" sandbox): runs the real bwrap with
``--die-with-parent`` and ARGS. Either way the child gets rlimits (CPU seconds, address space, file
size, open files, processes, no core dumps), no new privileges, its own session, a pids/memory
cgroup where one can be made, and stdin from /dev/null; its stdout and stderr are passed on up to a
cap, as valid UTF-8 (GEM decodes them strictly); at the end (its exit, the timeout or the cap) every
process of the run is killed, and its folder removed.
"""

import codecs
import ctypes
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CONFIG: dict = {}  # gemlab/tool_sandbox.py writes this folder's settings here
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 38, 36
LINUX = sys.platform.startswith("linux")
LIBC = ctypes.CDLL(None, use_errno=True) if LINUX else None


def prctl(option: int, value: int) -> None:
    if LIBC is not None and LIBC.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def user_tasks() -> int:
    """How many tasks (threads) this user runs, as RLIMIT_NPROC counts them (0 where /proc is absent)."""
    total, uid = 0, os.getuid()
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
        try:
            with open(f"/proc/{pid}/status") as file:
                fields = dict(line.split(":", 1) for line in file if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                total += int(fields["Threads"])
        except (OSError, KeyError, ValueError):
            continue
    return total


def make_cgroups(config: dict, made: list[str]) -> None:
    """A cgroup of this run's own in each hierarchy the config names, with its limits written (each
    added to ``made`` as soon as it exists, so that it is removed whatever happens next)."""
    for parent, limits in config["cgroups"]:
        folder = os.path.join(parent, f"{config['prefix']}-{os.getpid()}")
        os.mkdir(folder)
        made.append(folder)
        for name, value in limits.items():
            with open(os.path.join(folder, name), "w") as file:
                file.write(value)


def limits_in_child(config: dict, cgroups: list[str], tasks: int) -> None:
    """Runs in the child between fork and exec: cgroups, rlimits, death with this supervisor."""
    for folder in cgroups:
        with open(os.path.join(folder, "cgroup.procs"), "w") as file:
            file.write(str(os.getpid()))
    cpu = config["timeout"] + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    for name, value in (("RLIMIT_AS", config["memory_bytes"]), ("RLIMIT_FSIZE", config["file_bytes"]), ("RLIMIT_NOFILE", 64), ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))
    if os.getuid() != 0 and tasks:  # root is exempt from RLIMIT_NPROC; the cgroup bounds it there
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks + config["processes"],) * 2)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # no setuid program (su, sudo) gains anything inside


def descendants() -> list[int]:
    """Every process below this one (orphans come back here: it is their subreaper)."""
    children: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as file:
                children.setdefault(int(file.read().rsplit(")", 1)[1].split()[1]), []).append(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def has_children() -> bool:
    """Whether any process is left below this one: all of them descend from a child of this one
    (their subreaper), so none is left once it has no child (zombies are reaped on the way)."""
    try:
        while True:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return True
    except ChildProcessError:
        return False


def kill_all(child: subprocess.Popen) -> None:
    """Kill the child's session and, on Linux, every process below this one, until none is left."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    child.wait()
    if not LINUX:
        return
    for _ in range(200):
        left = descendants() if has_children() else []
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.01)


def remove(folder: str) -> None:
    """Remove the run's folder, even where the code took its folders' permissions away."""
    os.chmod(folder, 0o700)
    for root, folders, _ in os.walk(folder):
        for name in folders:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), 0o700)
    shutil.rmtree(folder, ignore_errors=True)


def supervise(config: dict, command: list[str]) -> int:
    """Run ``command`` with the limits in a fresh folder; pass its output on up to the cap."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    folder = tempfile.mkdtemp(prefix=f"{config['prefix']}-run-")
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(part for part in env.get("PATH", "").split(os.pathsep) if part != config["folder"])
    env.update(HOME=folder, TMPDIR=folder, TEMP=folder, TMP=folder)
    cgroups: list[str] = []
    tasks = user_tasks() if LINUX and os.getuid() != 0 else 0
    try:
        make_cgroups(config, cgroups)
        child = subprocess.Popen(
            command, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, preexec_fn=lambda: limits_in_child(config, cgroups, tasks),
        )
        try:
            ending = relay(child, config)
        finally:
            kill_all(child)
        status = child.returncode
        if ending:
            os.write(2, ending.encode())
            return 1
        if status < 0:
            os.write(2, f"\n[killed by {signal.Signals(-status).name}]\n".encode())
            return 1
        return status
    finally:
        for cgroup in cgroups:
            for _ in range(100):  # a cgroup can be removed once its last process is reaped
                try:
                    os.rmdir(cgroup)
                    break
                except OSError:
                    time.sleep(0.01)
        remove(folder)


def relay(child: subprocess.Popen, config: dict) -> str:
    """Copy the child's stdout/stderr to ours until both close, the timeout, or the cap; returns the
    line that says why it stopped early ('' when it did not)."""
    selector = selectors.DefaultSelector()
    streams = {child.stdout.fileno(): 1, child.stderr.fileno(): 2}
    decoders = {fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in streams}
    sent = dict.fromkeys(streams, 0)
    for fd in streams:
        selector.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + config["timeout"]
    cap = config["output_bytes"]
    while selector.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            return f"\nExecution timed out after {config['timeout']} seconds (stopped by the sandbox).\n"
        for key, _ in selector.select(min(left, 0.1)):
            data = os.read(key.fd, 65536)
            if not data:
                selector.unregister(key.fd)
                os.write(streams[key.fd], decoders[key.fd].decode(b"", final=True).encode())
                continue
            room = cap - sent[key.fd]
            os.write(streams[key.fd], decoders[key.fd].decode(data[:room], final=len(data) > room).encode())
            sent[key.fd] += len(data)
            if len(data) > room:
                return f"\n[output cut at {cap} bytes]\n"
        if child.poll() is not None and LINUX and has_children():  # what it left running holds the pipes open
            for pid in descendants():
                if pid != child.pid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
    return ""


def main() -> int:
    try:
        if os.path.basename(sys.argv[0]) == "bwrap":
            return supervise(CONFIG, [CONFIG["bwrap"], "--die-with-parent", *sys.argv[1:]])
        confine = os.path.join(CONFIG["folder"], "confine")
        return supervise(CONFIG, [*CONFIG["namespaces"], sys.executable, "-I", "-S", confine, *sys.argv[1:]])
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a sandbox that cannot be set up runs nothing
        os.write(2, f"\n[sandbox failed: {error}]\n".encode())
        return 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
