"""The supervisor gemlab puts first on PATH, as ``python`` and ``bwrap``, while GEM's python tool runs.

gemlab/tool_sandbox/__init__.py copies this file and confine.py into a folder of its own under the
system temp dir, with the real interpreter's shebang and this folder's ``CONFIG`` filled in (the
limits, and what it found the OS allows), and links ``bwrap`` to it. Standard library only, never
gemlab, and few modules: it starts before every run of the model's code.

Called as ``python ARGS`` (GEM's "none" sandbox): runs the real interpreter with ARGS in new
namespaces (user, pid, network, IPC, UTS, mount) whose root holds only the Python install and the
system folders, read-only, and the run's folder, a bounded tmpfs (``confine.private_root``); where
the kernel allows no namespaces, in a fresh folder under the system temp dir with Landlock. Called
as ``bwrap ARGS`` (GEM's "bwrap" sandbox): runs the real bwrap with ARGS plus ``--die-with-parent``,
the Python install's base (a venv's interpreter links there), a bounded tmpfs as /tmp, a read-only
root and the seccomp filter. Either way the code gets rlimits (CPU seconds, address space, file
size, open files, processes, no core dumps), no new privileges, its own session and an empty
session keyring, a pids/memory cgroup where one can be made, the seccomp filter, and stdin from
/dev/null; its stdout and stderr are passed on up to a cap, as valid UTF-8 (GEM decodes them
strictly); at the end (its exit, the timeout or the cap) every process of the run is killed.
"""

import codecs
import os
import resource
import select
import signal
import sys
import time

CONFIG: dict = {}  # gemlab/tool_sandbox/__init__.py writes this folder's settings here
LINUX = sys.platform.startswith("linux")
if LINUX:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import confine  # type: ignore[import-not-found]  # this folder, put on sys.path just above
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 38, 36
#: GEM's bwrap options (name -> how many values follow); anything else is refused.
BWRAP_OPTIONS = {"--unshare-all": 0, "--ro-bind": 2, "--setenv": 2, "--proc": 1, "--dev": 1}
INSIDE_UID = 1000  # what the trainer's uid is called inside the user namespace: never root there


def prctl(option: int, value: int) -> None:
    if LINUX and confine.LIBC.prctl(option, confine.ctypes.c_ulong(value), 0, 0, 0) != 0:
        raise OSError(confine.ctypes.get_errno(), f"prctl({option}) failed")


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


def make_cgroups(made: list) -> None:
    """A cgroup of this run's own in each hierarchy the config names, with its limits written (each
    added to ``made`` as soon as it exists, so that it is removed whatever happens next)."""
    for parent, limits in CONFIG["cgroups"]:
        folder = os.path.join(parent, f"{CONFIG['prefix']}-{os.getpid()}")
        os.mkdir(folder)
        made.append(folder)
        for name, value in limits.items():
            with open(os.path.join(folder, name), "w") as file:
                file.write(value)


def bwrap_command(args: list, seccomp_fd: int) -> list:
    """The real bwrap's command for GEM's ``args``: GEM's options, then gemlab's, then GEM's command."""
    index = 0
    while index < len(args) and args[index] in BWRAP_OPTIONS:
        index += 1 + BWRAP_OPTIONS[args[index]]
    if index >= len(args) or args[index].startswith("-"):
        raise ValueError(f"unexpected bwrap argument {args[index] if index < len(args) else 'end'!r}")
    binds = [part for prefix in CONFIG["prefixes"] for part in ("--ro-bind", prefix, prefix)]
    seccomp = ["--seccomp", str(seccomp_fd)] if seccomp_fd >= 0 else []
    ours = ["--die-with-parent", "--new-session", *seccomp, "--size", str(CONFIG["run_bytes"]), "--tmpfs", "/tmp"]
    after = ["--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--remount-ro", "/"]
    # the kernel's settings, read-only, and what root could read of the machine and of the trainer's
    # keys, hidden (the code runs as the trainer's uid, which may be root's: bwrap covers /proc/irq only)
    after += [
        part
        for name in confine.PROC_READ_ONLY
        if os.path.exists(f"/proc/{name}")
        for part in ("--ro-bind", f"/proc/{name}", f"/proc/{name}")
    ]
    after += [
        part
        for name in confine.PROC_HIDDEN
        if os.path.exists(f"/proc/{name}")
        for part in ("--ro-bind", "/dev/null", f"/proc/{name}")
    ]
    after += ["--remount-ro", "/proc"]  # nothing in it is the code's to change
    return [CONFIG["bwrap"], *ours, *binds, *args[:index], *after, *args[index:]]


def in_child(
    command: list, env: dict, outputs: tuple, cgroups: list, tasks: int, folder: str | None, files: dict, program: bytes
) -> None:
    """Runs in the forked child: cgroups, session, limits, confinement, then the command (never returns)."""
    for cgroup in cgroups:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as file:
            file.write("0")
    os.setsid()
    stdin = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((stdin, 0), *zip(outputs, (1, 2), strict=True)):
        os.dup2(fd, target)
    cpu = CONFIG["timeout"] + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    for name, value in (
        ("RLIMIT_AS", CONFIG["memory_bytes"]),
        ("RLIMIT_FSIZE", CONFIG["file_bytes"]),
        ("RLIMIT_NOFILE", 64),
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
    if tasks:  # root is exempt from RLIMIT_NPROC; the cgroup bounds it there
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks + CONFIG["processes"],) * 2)
    if LINUX:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        confine.fresh_keyring()
    if CONFIG["isolated"] and folder is None and command[0] != CONFIG["bwrap"]:
        confine.private_root(CONFIG["prefixes"] + CONFIG["system_dirs"], CONFIG["run_bytes"], files, CONFIG["proc"])
    elif folder is not None:
        os.chdir(folder)
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # no setuid program (su, sudo) gains anything inside
    if folder is not None and CONFIG["landlock"]:
        confine.landlock(
            CONFIG["landlock"],
            [folder, os.devnull],
            CONFIG["prefixes"] + CONFIG["system_dirs"] + [os.devnull.replace("null", "urandom")],
        )
    if program:
        confine.install_seccomp(program)
    os.execve(command[0], command, env)


def start(command: list, env: dict, cgroups: list, folder: "str | None", files: dict, program: bytes) -> tuple:
    """Fork the child that becomes ``command``; returns its pid and the read ends of its stdout and
    stderr, or raises with the reason the child gave for not starting."""
    tasks = user_tasks() if LINUX and os.getuid() != 0 else 0
    if CONFIG["isolated"] and folder is None and command[0] != CONFIG["bwrap"]:
        confine.enter_user_namespace(INSIDE_UID if os.getuid() == 0 else os.getuid())
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    fail_r, fail_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(fail_r)
            in_child(command, env, (out_w, err_w), cgroups, tasks, folder, files, program)
        except BaseException as error:  # noqa: BLE001 - whatever stops the child is reported, never raised here
            os.write(fail_w, str(error).encode(errors="replace")[:2000])
        os._exit(127)
    for fd in (out_w, err_w, fail_w):
        os.close(fd)
    with os.fdopen(fail_r, "rb") as failure:
        reason = failure.read().decode(errors="replace")
    if reason:
        os.waitpid(pid, 0)
        for fd in (out_r, err_r):
            os.close(fd)
        raise OSError(reason)
    return pid, out_r, err_r


def relay(pid: int, fds: tuple, watch_orphans: bool) -> str:
    """Copy the child's stdout/stderr to ours until both close, the timeout, or the cap; returns the
    line that says why it stopped early ('' when it did not)."""
    poller = select.poll()
    streams = dict(zip(fds, (1, 2), strict=True))
    decoders = {fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in fds}
    sent = dict.fromkeys(fds, 0)
    for fd in fds:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + CONFIG["timeout"]
    cap = CONFIG["output_bytes"]
    open_fds = set(fds)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"\nExecution timed out after {CONFIG['timeout']} seconds (stopped by the sandbox).\n"
        for fd, _ in poller.poll(int(min(left, 0.1 if watch_orphans else left) * 1000) + 1):
            data = os.read(fd, 65536)
            if not data:
                poller.unregister(fd)
                open_fds.discard(fd)
                os.write(streams[fd], decoders[fd].decode(b"", final=True).encode())
                continue
            room = cap - sent[fd]
            os.write(streams[fd], decoders[fd].decode(data[:room], final=len(data) > room).encode())
            sent[fd] += len(data)
            if len(data) > room:
                return f"\n[output cut at {cap} bytes]\n"
        # what it left holds the pipes
        if watch_orphans and os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
            for other in descendants():
                if other != pid:
                    try:
                        os.kill(other, signal.SIGKILL)
                    except OSError:
                        pass
    return ""


def descendants() -> list:
    """Every process below this one (orphans come back here: it is their subreaper)."""
    children: dict = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as file:
                children.setdefault(int(file.read().rsplit(")", 1)[1].split()[1]), []).append(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    found: list[int] = []
    todo = list(children.get(os.getpid(), []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def reap() -> bool:
    """Reap what has ended; whether any child is left."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        return False
    return True


def kill_below() -> None:
    """Kill every process below this one (their subreaper) until none is left."""
    for _ in range(500):
        if not reap():
            return
        for pid in descendants():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)


def remove(folder: str) -> None:
    """Remove the run's folder however deep it goes and whatever permissions the code left on it:
    bottom-up, one folder at a time (no recursion), each made accessible before it is read."""
    os.chmod(folder, 0o700)
    os.chdir(folder)
    path: list = []
    while True:
        entries = list(os.scandir("."))
        below = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
        for entry in entries:
            if entry.name not in below:
                os.unlink(entry.name)
        if below:
            os.chmod(below[0], 0o700)
            os.chdir(below[0])
            path.append(below[0])
        elif path:
            os.chdir("..")
            os.rmdir(path.pop())
        else:
            break
    os.chdir("/")
    os.rmdir(folder)


def supervise(args: list, bwrap: bool) -> int:
    """Run GEM's command with the limits and confinement; pass its output on up to the cap."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(part for part in env.get("PATH", "").split(os.pathsep) if part != CONFIG["folder"])
    program = (
        confine.seccomp_program(metadata=not (bwrap or CONFIG["isolated"])) if LINUX and CONFIG["seccomp"] else b""
    )
    folder, files, seccomp_fd = None, {}, -1
    if bwrap:
        if program:
            seccomp_fd, seccomp_w = os.pipe()
            os.write(seccomp_w, program)
            os.close(seccomp_w)
            os.set_inheritable(seccomp_fd, True)
        command, program = bwrap_command(args, seccomp_fd), b""  # bwrap installs it, after its own setup
        env.update(HOME="/tmp", TMPDIR="/tmp")
    else:
        if args and not args[0].startswith("-") and CONFIG["isolated"]:  # GEM's file for long code: copied in
            with open(args[0], "rb") as script:
                files[os.path.basename(args[0])] = script.read()
            args = ["/tmp/" + os.path.basename(args[0]), *args[1:]]
        command = [CONFIG["interpreter"], *args]
        if not CONFIG["isolated"]:
            folder = os.path.join(CONFIG["tempdir"], f"{CONFIG['prefix']}-run-{os.getpid()}")
            os.mkdir(folder, 0o700)
            if args and not args[0].startswith("-"):
                CONFIG["prefixes"].append(os.path.abspath(args[0]))
        env.update({name: folder or "/tmp" for name in ("HOME", "TMPDIR", "TEMP", "TMP")})
    cgroups: list = []
    watch_orphans = LINUX and (bwrap or not CONFIG["isolated"])
    if watch_orphans:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        make_cgroups(cgroups)
        pid, out_r, err_r = start(command, env, cgroups, folder, files, program)
        if seccomp_fd >= 0:
            os.close(seccomp_fd)
        try:
            ending = relay(pid, (out_r, err_r), watch_orphans)
        finally:
            try:
                os.killpg(pid, signal.SIGKILL)  # in a pid namespace of its own, the rest dies with it
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
            if watch_orphans:
                kill_below()
        if ending:
            os.write(2, ending.encode())
            return 1
        code = os.waitstatus_to_exitcode(status)
        if code < 0:
            os.write(2, f"\n[killed by {signal.Signals(-code).name}]\n".encode())
            return 1
        return code
    finally:
        for cgroup in cgroups:
            for _ in range(500):  # a cgroup can be removed once its last process is reaped
                try:
                    os.rmdir(cgroup)
                    break
                except OSError:
                    time.sleep(0.002)
        if folder is not None:
            remove(folder)


def main() -> int:
    try:
        return supervise(sys.argv[1:], os.path.basename(sys.argv[0]) == "bwrap")
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # a sandbox that cannot be set up runs nothing
        os.write(2, f"\n[sandbox failed: {error}]\n".encode())
        return 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    os._exit(main())  # all it wrote went out through os.write: nothing to flush, no interpreter teardown to wait for
