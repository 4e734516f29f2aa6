"""The local backend holds glibc's allocator to two heaps (arenas): by default every thread that
allocates gets one of its own, up to 8 per core, and keeps what it freed there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tinker_emulator.memory import ALLOCATOR_ENV, ARENAS, _libc

# Eight threads allocate at the same time, then glibc describes its heaps (malloc_info) into a file.
PROGRAM = """
import ctypes, sys, threading
from tinker_emulator import memory
held = memory.hold_down_allocator() if sys.argv[1] == "held" else None
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
start, end = threading.Barrier(8), threading.Barrier(8)
def allocate():
    start.wait()
    blocks = [libc.malloc(4096) for _ in range(64)]
    end.wait()  # every thread's blocks alive at once
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
out = libc.fopen(sys.argv[2].encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(out))
libc.fclose(ctypes.c_void_p(out))
print(held)
"""


def heaps(mode: str, tmp_path: Path, **extra_env: str) -> tuple[int, str]:
    """The number of heaps glibc reports after eight threads allocated, and what hold_down_allocator said."""
    info = tmp_path / f"{mode}.xml"
    env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_ENV} | extra_env
    command = [sys.executable, "-c", PROGRAM, mode, str(info)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return info.read_text().count("<heap nr="), done.stdout.strip()


@pytest.mark.skipif(_libc() is None or sys.platform != "linux", reason="glibc's allocator only")
def test_the_backend_holds_the_allocator_to_two_heaps_unless_the_user_set_it(tmp_path: Path) -> None:
    held, said = heaps("held", tmp_path)
    assert said == "True" and held <= ARENAS
    default, _ = heaps("default", tmp_path)
    assert default > ARENAS  # what it prevents: a heap per thread
    kept, said = heaps("held", tmp_path, MALLOC_ARENA_MAX="4")  # the user's own setting stands
    assert said == "False" and ARENAS < kept <= 4


@pytest.mark.parametrize("large", [True, False])
def test_a_large_models_training_pass_hands_freed_memory_back_before_and_after(
    large: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sampler and the learner free into different heaps; trimmed around the pass, their peaks do not add up.
    from tinker import types

    from tinker_emulator import LocalServiceClient, memory
    from tinker_emulator import training_client as training

    calls: list[str] = []
    monkeypatch.setattr(memory, "trim", lambda: calls.append("trim"))
    monkeypatch.setattr(training, "worth_sharing", lambda model: large)
    client = LocalServiceClient().create_lora_training_client(base_model="gemlab/tiny", rank=4, seed=0)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([1, 2, 3]),
        loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [1.0, 1.0, 1.0]},
    )
    client.forward_backward([datum], "cross_entropy").result()  # waited for: the worker has finished
    assert calls == (["trim", "trim"] if large else [])
