"""The supervisor gemlab puts first on PATH, as ``python`` and ``bwrap``, while GEM's python tool runs.

gemlab/tool_sandbox.py copies this file into a folder of its own under the system temp dir, with the
real interpreter's shebang, beside a ``config.json`` (limits, and what it found the OS allows) and
two links to it, ``bwrap`` and ``confine``. Standard library only: it never imports gemlab.

Called as ``python ARGS`` (GEM's "none" sandbox): runs ``[unshare ...] confine ARGS`` in a fresh temp
folder; ``confine`` applies Landlock where the kernel has it, then execs the real interpreter with
ARGS. Called as ``bwrap ARGS`` (GEM's "bwrap" sandbox): runs the real bwrap with ``--die-with-parent``
and ARGS. Either way the child gets rlimits (CPU seconds, address space, file size, open files,
processes, no core dumps), its own session, a pids/memory cgroup where one can be made, and stdin
from /dev/null; its stdout and stderr are passed on up to a cap, as valid UTF-8 (GEM decodes them
strictly); at the timeout or the cap every process it started is killed, and its folder removed.
"""

from __future__ import annotations

import codecs
import ctypes
import json
import os
import resource
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 38, 36
LINUX = sys.platform.startswith("linux")
LIBC = ctypes.CDLL(None, use_errno=True) if LINUX else None


def prctl(option: int, value: int) -> None:
    if LIBC is not None and LIBC.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def load_config() -> dict:
    with open(os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "config.json")) as file:
        return json.load(file)


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
        left = descendants()
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
        if child.poll() is not None and LINUX:  # what it left running would hold the pipes open
            for pid in descendants():
                if pid != child.pid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
    return ""


# Landlock (Linux 5.13+): the rights of each ABI version, and those that apply to a file.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


def landlock(abi: int, writable: str, readable: list[str]) -> None:
    """Let this process and its children write only below ``writable``, read and run only below
    ``readable``, make no TCP connection (ABI 4+) and signal no process outside (ABI 6+)."""
    handled = (1 << 13) - 1 | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0) | (IOCTL_DEV if abi >= 5 else 0)
    attr = struct.pack("=QQQ", handled, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    ruleset = LIBC.syscall(ctypes.c_long(444), ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    rules = [(path, READ_FILE | READ_DIR | EXECUTE) for path in readable] + [(writable, handled), (os.devnull, READ_FILE | WRITE_FILE | TRUNCATE)]
    for path, access in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        if not os.path.isdir(path):
            access &= FILE_RIGHTS
        rule = struct.pack("=Qi", access & handled, fd)
        added = LIBC.syscall(ctypes.c_long(445), ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.c_char_p(rule), ctypes.c_uint32(0))
        os.close(fd)
        if added != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if LIBC.syscall(ctypes.c_long(446), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")


def confine(config: dict, args: list[str]) -> None:
    """Inside the namespaces: apply Landlock where the config says the kernel has it, then become
    the real interpreter running ``args``."""
    if config["landlock"]:
        script = [os.path.abspath(args[0])] if args and not args[0].startswith("-") else []  # GEM's file for long code
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        landlock(config["landlock"], os.getcwd(), sorted(prefixes) + config["system_dirs"] + script)
    os.execv(sys.executable, [sys.executable, *args])


def main() -> int:
    config = load_config()
    name = os.path.basename(sys.argv[0])
    try:
        if name == "confine":
            confine(config, sys.argv[1:])
        if name == "bwrap":
            return supervise(config, [config["bwrap"], "--die-with-parent", *sys.argv[1:]])
        here = os.path.join(config["folder"], "confine")
        return supervise(config, [*config["namespaces"], sys.executable, "-I", "-S", here, *sys.argv[1:]])
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a sandbox that cannot be set up runs nothing
        os.write(2, f"\n[sandbox failed: {error}]\n".encode())
        return 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
