"""The last step before the model's code runs in gemlab's "none" sandbox: ``confine ARGS``.

Run by gemlab's supervisor (tool_sandbox_supervisor.py) inside the namespaces, in the run's own
folder: applies Landlock where the kernel has it (gemlab/tool_sandbox.py probed the ABI version and
wrote it into ``CONFIG``), then becomes the real interpreter with ARGS. A Landlock it cannot apply
stops the run (the supervisor reports it): the code never runs with less than it was promised.
Standard library only, and few modules: it starts before every run.
"""

import ctypes
import os
import struct
import sys

CONFIG: dict = {}  # gemlab/tool_sandbox.py writes this folder's settings here

# Landlock's file-system rights, the later ABI versions' additions, and those that apply to a file.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
CREATE_RULESET, ADD_RULE, RESTRICT_SELF, PATH_BENEATH = 444, 445, 446, 1


def landlock(abi: int, writable: str, readable: list[str]) -> None:
    """Let this process and what it starts write only below ``writable``, read and run only below
    ``readable``, make no TCP connection (ABI 4+) and signal no process outside (ABI 6+). Needs no
    new privileges, which the supervisor set."""
    libc = ctypes.CDLL(None, use_errno=True)
    handled = (1 << 13) - 1 | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0) | (IOCTL_DEV if abi >= 5 else 0)
    attr = struct.pack("=QQQ", handled, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    ruleset = libc.syscall(ctypes.c_long(CREATE_RULESET), ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
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
        added = libc.syscall(ctypes.c_long(ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(PATH_BENEATH), ctypes.c_char_p(rule), ctypes.c_uint32(0))
        os.close(fd)
        if added != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    if libc.syscall(ctypes.c_long(RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")


def main(args: list[str]) -> None:
    if CONFIG["landlock"]:
        script = [os.path.abspath(args[0])] if args and not args[0].startswith("-") else []  # GEM's file for long code
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        landlock(CONFIG["landlock"], os.getcwd(), sorted(prefixes) + CONFIG["system_dirs"] + script)
    os.execv(sys.executable, [sys.executable, *args])


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except OSError as error:
        sys.stderr.write(f"\n[sandbox failed: {error}]\n")
        sys.exit(1)
