"""Out of memory is known in every shape it reaches Python in, and said with what a run needs and
what this process may use."""

from __future__ import annotations

import errno
import resource

import numpy as np
import pytest
import torch

from gemlab import memory


def _raised(make) -> BaseException:
    try:
        make()
    except BaseException as error:  # noqa: BLE001 (the test inspects whatever it was)
        return error
    raise AssertionError("nothing was raised")


def test_every_shape_of_out_of_memory_is_known() -> None:
    numpy_error = _raised(lambda: np.empty(2**60, dtype=np.float32))  # NumPy's _ArrayMemoryError, at once
    torch_error = _raised(lambda: torch.empty(2**60, dtype=torch.float32))  # the CPU allocator's RuntimeError
    assert isinstance(numpy_error, MemoryError) and isinstance(torch_error, RuntimeError)
    for error in (numpy_error, torch_error, MemoryError(), OSError(errno.ENOMEM, "Cannot allocate memory")):
        assert memory.is_out_of_memory(error), error
    try:
        try:
            raise MemoryError()
        except MemoryError as cause:
            raise ValueError("a step failed") from cause
    except ValueError as wrapped:
        assert memory.is_out_of_memory(wrapped)  # raised from one: still memory


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("every episode of a rollout round failed"),
        OSError(errno.ENOSPC, "No space left on device"),
        ValueError("x"),
    ],
)
def test_other_failures_are_not_memory(error: BaseException) -> None:
    assert not memory.is_out_of_memory(error)


def test_the_address_space_limit_is_what_this_process_may_use(monkeypatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda which: (3 * 2**30, resource.RLIM_INFINITY))
    monkeypatch.setattr(memory, "CGROUP_LIMIT", memory.Path("/no/such/file"))
    assert memory.usable_gb() == (
        3 * 2**30 / 1e9,
        "ulimit -v, which counts address space reserved, not only memory used",
    )


def test_a_run_needs_its_models_measured_peak() -> None:
    line = memory.out_of_memory("HuggingFaceTB/SmolLM2-135M-Instruct", "in step 3")
    assert line.startswith(
        "out of memory in step 3: a HuggingFaceTB/SmolLM2-135M-Instruct run needs about 3.1 GB (preset=smollm2 "
        "peaked at"
    )
    unmeasured = memory.run_need("acme/big")
    assert unmeasured.startswith("acme/big's need was not measured (measured peaks: gemlab/tiny: 1.2 GB; ")
