"""The Linux confinement the supervisor (supervisor.py) applies before the model's code runs.

Copied next to the supervisor into gemlab's folder under the system temp dir and imported by it:
standard library only, never gemlab, and few modules (it loads before every run). Each function
raises ``OSError`` when the kernel refuses, so that the code never runs with less than it was
promised; the supervisor reports that as ``[sandbox failed: ...]``.

- ``enter_user_namespace``: a new user namespace (and with it new pid, network, IPC and UTS ones),
  the trainer's uid mapped to an unprivileged uid inside;
- ``private_root``: a new mount namespace whose root is a small read-only tmpfs holding only the
  Python install and the system folders (read-only binds), a few devices, the run's own /proc, and
  ``/tmp``, a size-bounded tmpfs, the run's folder: it vanishes with the run's last process;
- ``fresh_keyring``: a new, empty session keyring (the trainer's keys are out of reach);
- ``landlock``: writes only below the run's folder, reads only below the given folders;
- ``seccomp_program`` / ``install_seccomp``: a BPF filter refusing the system calls the code never
  needs (sockets, keys, inotify/fanotify, mount and namespace calls, ptrace, io_uring, bpf, chown
  and extended attributes; chmod and utime too where there is no private root).
"""

import ctypes
import os
import struct

LIBC = ctypes.CDLL(None, use_errno=True)
ARCH = os.uname().machine

# System call numbers: x86_64, aarch64 (None where the call does not exist there).
CALLS = {
    "socket": (41, 198),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "inotify_init": (253, None),
    "inotify_init1": (294, 26),
    "fanotify_init": (300, 262),
    "setxattr": (188, 5),
    "lsetxattr": (189, 6),
    "fsetxattr": (190, 7),
    "removexattr": (197, 14),
    "lremovexattr": (198, 15),
    "fremovexattr": (199, 16),
    "setxattrat": (463, 463),
    "removexattrat": (466, 466),
    "chown": (92, None),
    "fchown": (93, 55),
    "lchown": (94, None),
    "fchownat": (260, 54),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "unshare": (272, 97),
    "setns": (308, 268),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
    "kexec_load": (246, 104),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "acct": (163, 89),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "reboot": (169, 142),
}
#: Refused where the run has no private root (its files are the user's): metadata changes.
METADATA_CALLS = {
    "chmod": (90, None), "fchmod": (91, 52), "fchmodat": (268, 53), "fchmodat2": (452, 452),
    "utime": (132, None), "utimes": (235, None), "futimesat": (261, None), "utimensat": (280, 88),
}
SETUP_CALLS = {"pivot_root": (155, 41), "clone3": (435, 435), "clone": (56, 220)}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x20000,
    0x4000000,
    0x8000000,
    0x10000000,
    0x20000000,
    0x40000000,
)
CLONE_NEWCGROUP, CLONE_NEWTIME = 0x2000000, 0x80
CLONE_NEW_ANY = (
    CLONE_NEWNS
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
    | CLONE_NEWCGROUP
    | CLONE_NEWTIME
)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    16384,
    1 << 18,
)
MNT_DETACH = 2
DEVICES = ["null", "zero", "full", "random", "urandom"]
PROC_READ_ONLY = ["sys", "sysrq-trigger", "irq", "bus", "fs"]
PROC_HIDDEN = ["keys", "key-users", "kcore", "timer_list", "sched_debug", "latency_stats"]


def supported() -> bool:
    """Whether this machine's architecture has the system call numbers above."""
    return ARCH in AUDIT_ARCH


def _number(name: str, table: dict) -> "int | None":
    return table[name][0 if ARCH == "x86_64" else 1]


def _required(name: str, table: dict) -> int:
    """The number of a call every supported architecture has."""
    number = _number(name, table)
    assert number is not None, name
    return number


def _check(result: int, what: str) -> int:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")
    return result


def enter_user_namespace(inside_uid: int) -> None:
    """Move this (single-threaded) process into new user, pid, network, IPC and UTS namespaces, with
    its uid and gid mapped to ``inside_uid``; its next child is the first process of the pid one."""
    uid, gid = os.geteuid(), os.getegid()
    _check(LIBC.unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{inside_uid} {uid} 1"),
        ("gid_map", f"{inside_uid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as file:
            file.write(text)


def namespaces_allowed() -> None:
    """Raise unless this kernel lets this user make the namespaces and mount the tmpfs a private
    root needs (run in a throwaway process: it changes the caller's namespaces)."""
    enter_user_namespace(os.geteuid())
    _check(LIBC.unshare(CLONE_NEWNS), "unshare(mount)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m")


def _mount(source: "str | None", target: str, kind: "str | None", flags: int, data: "str | None" = None) -> None:
    source_b, kind_b, data_b = (None if text is None else text.encode() for text in (source, kind, data))
    _check(LIBC.mount(source_b, target.encode(), kind_b, ctypes.c_ulong(flags), data_b), f"mount {target}")


def _locked_flags(path: str) -> int:
    """The flags a read-only remount of a bind of ``path`` must keep (those its mount has)."""
    flags = os.statvfs(path).f_flag
    kept = (
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NOATIME, 1024),
        (os.ST_NODIRATIME, 2048),
        (os.ST_RELATIME, 1 << 21),
    )
    return sum(ms for st, ms in kept if flags & st)


def private_root(readable: list, run_bytes: int, files: dict, with_proc: bool) -> None:
    """In a new mount namespace, make this process's root a read-only tmpfs holding ``readable``
    (folders, bound read-only at their own paths; missing ones are left out), /dev's harmless
    devices, the run's own /proc (``with_proc``) and ``/tmp``, a tmpfs of ``run_bytes`` holding
    ``files`` (name -> bytes); the current folder becomes /tmp."""
    _check(LIBC.unshare(CLONE_NEWNS), "unshare(mount)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    sources, links = {}, {}
    for path in readable:
        path, real = os.path.normpath(path), os.path.realpath(path)
        if os.path.exists(real) and real not in sources:
            sources[real] = os.open(real, os.O_PATH | os.O_CLOEXEC)
        if real != path and real in sources:  # reached through a link (/lib -> usr/lib, /home -> var/home)
            links[path] = real
    devices = {
        name: os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC) for name in DEVICES if os.path.exists(f"/dev/{name}")
    }
    new = "/tmp"  # any folder will do: the tmpfs over it is seen only in this namespace
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    os.makedirs(new + "/tmp")  # first: a Python install under /tmp is bound inside it, not hidden by it
    _mount("tmpfs", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={run_bytes},mode=1777")
    for name, data in files.items():
        with open(f"{new}/tmp/{name}", "wb") as file:
            file.write(data)
    for real, fd in sorted(sources.items()):
        target = new + real
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "w").close()
        _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _locked_flags(target))
        os.close(fd)
    for path, real in links.items():
        if not os.path.lexists(new + path):
            os.makedirs(os.path.dirname(new + path), exist_ok=True)
            os.symlink(real, new + path)
    os.makedirs(new + "/dev")
    for name, fd in devices.items():
        open(f"{new}/dev/{name}", "w").close()
        _mount(f"/proc/self/fd/{fd}", f"{new}/dev/{name}", None, MS_BIND)
        os.close(fd)
    os.symlink("/tmp", new + "/dev/shm")  # POSIX semaphores (multiprocessing) live in the run's folder
    if with_proc:
        os.makedirs(new + "/proc")
        # nothing in it is the code's to change
        _mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
        for name in PROC_READ_ONLY:  # the kernel's settings (owned by root, which the trainer may be): as bwrap does
            if os.path.exists(f"{new}/proc/{name}"):
                _mount(f"{new}/proc/{name}", f"{new}/proc/{name}", None, MS_BIND | MS_REC)
                _mount(
                    None,
                    f"{new}/proc/{name}",
                    None,
                    MS_REMOUNT | MS_BIND | MS_RDONLY | _locked_flags(f"{new}/proc/{name}"),
                )
        for name in PROC_HIDDEN:  # what root could read of the machine and of the trainer's keys: as Docker does
            if os.path.exists(f"{new}/proc/{name}"):
                _mount(f"{new}/dev/null", f"{new}/proc/{name}", None, MS_BIND)
    os.chdir(new)
    _check(LIBC.syscall(ctypes.c_long(_required("pivot_root", SETUP_CALLS)), b".", b"."), "pivot_root")
    _check(LIBC.umount2(b".", MNT_DETACH), "umount the old root")
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/tmp")


def fresh_keyring() -> None:
    """Join a new, empty session keyring (KEYCTL_JOIN_SESSION_KEYRING with no name)."""
    _check(
        LIBC.syscall(ctypes.c_long(_required("keyctl", CALLS)), ctypes.c_long(1), None), "keyctl(join session keyring)"
    )


def landlock(abi: int, writable: list, readable: list) -> None:
    """Let this process and what it starts write only below ``writable``, read and run only below
    ``readable``, make no TCP connection (ABI 4+) and signal no process outside (ABI 6+). Needs no
    new privileges, which the supervisor set."""
    execute, write_file, read_file, read_dir = 1, 2, 4, 8
    refer, truncate, ioctl_dev = 1 << 13, 1 << 14, 1 << 15
    file_rights = execute | write_file | read_file | truncate | ioctl_dev
    handled = (
        (1 << 13) - 1 | (refer if abi >= 2 else 0) | (truncate if abi >= 3 else 0) | (ioctl_dev if abi >= 5 else 0)
    )
    attr = struct.pack("=QQQ", handled, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)[
        : 8 if abi < 4 else 16 if abi < 6 else 24
    ]
    ruleset = _check(
        LIBC.syscall(ctypes.c_long(444), ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)),
        "landlock_create_ruleset",
    )
    rules = [(path, read_file | read_dir | execute) for path in readable] + [(path, handled) for path in writable]
    for path, access in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        if not os.path.isdir(path):
            access &= file_rights
        rule = struct.pack("=Qi", access & handled, fd)
        added = LIBC.syscall(
            ctypes.c_long(445), ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.c_char_p(rule), ctypes.c_uint32(0)
        )
        os.close(fd)
        _check(added, f"landlock_add_rule {path}")
    _check(LIBC.syscall(ctypes.c_long(446), ctypes.c_int(ruleset), ctypes.c_uint32(0)), "landlock_restrict_self")
    os.close(ruleset)


def seccomp_program(metadata: bool) -> bytes:
    """The BPF program (``struct sock_filter`` array) refusing ``CALLS`` with EPERM (and
    ``METADATA_CALLS`` too when ``metadata``), clone3 with ENOSYS (C libraries fall back to clone),
    clone with a namespace flag with EPERM, and any other architecture's calls by killing."""
    ld_abs, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, errno_base, kill = 0x7FFF0000, 0x00050000, 0x80000000
    table = {**CALLS, **(METADATA_CALLS if metadata else {})}
    refused = sorted({n for name in table if (n := _number(name, table)) is not None})
    code = [(ld_abs, 0, 0, 4), (jeq, 1, 0, AUDIT_ARCH[ARCH]), (ret, 0, 0, kill), (ld_abs, 0, 0, 0)]
    if ARCH == "x86_64":  # the x32 ABI's numbers
        code += [(0x35, 0, 1, 0x40000000), (ret, 0, 0, errno_base | 1)]
    for number in refused:
        code += [(jeq, 0, 1, number), (ret, 0, 0, errno_base | 1)]
    code += [(jeq, 0, 1, _required("clone3", SETUP_CALLS)), (ret, 0, 0, errno_base | 38)]
    code += [
        (jeq, 0, 3, _required("clone", SETUP_CALLS)),
        (ld_abs, 0, 0, 16),
        (jset, 0, 1, CLONE_NEW_ANY),
        (ret, 0, 0, errno_base | 1),
    ]
    code += [(ret, 0, 0, allow)]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in code)


def install_seccomp(program: bytes) -> None:
    """Install ``program`` on this process (and what it starts); needs no new privileges."""

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    fprog = Program(len(program) // 8, program)
    _check(LIBC.prctl(22, 2, ctypes.byref(fprog), 0, 0), "seccomp")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
