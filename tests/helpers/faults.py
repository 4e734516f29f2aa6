"""Fault injection for the run-safety tests: do something (SIGKILL, Ctrl-C) at an exact point of a run.

As a script, it runs ``python -m gemlab.train`` with a real SIGKILL at the chosen point:

    python tests/helpers/faults.py POINT:STEP key=value ...

POINT is ``sample`` (the 3rd sampling request of step STEP), ``forward_backward`` or
``optim_step`` (of step STEP), ``save_state`` (inside the local backend's write of the checkpoint
at step STEP, after its weights file is written and before the folder is renamed into place), or
``metrics_rewrite`` (the STEP-th rewrite of ``metrics.jsonl``: resume's truncation, after the new
text is written and before it replaces the old file).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import gemlab.run_folder
import gemlab.saved_runs
import gemlab.trainer
import tinker_emulator.checkpoints


class FaultySampler:
    """A sampler whose ``on_call`` may fire a fault; the request that fired it then never returns
    (the interrupt or kill it sent must land while sampling, however loaded the machine is)."""

    def __init__(self, client: Any, on_call: Callable[[int], bool]) -> None:
        self.client, self.on_call, self.calls = client, on_call, 0

    async def sample(self, **request: Any) -> Any:
        self.calls += 1
        if self.on_call(self.calls):
            await asyncio.sleep(3600)  # cancelled by the interrupt's rollback
        return await self.client.sample(**request)


class FaultyTraining:
    """A training client that calls ``action`` at ``point`` of step ``step``; otherwise the real one."""

    def __init__(self, client: Any, point: str, step: int, action: Callable[[], None]) -> None:
        self.client, self.point, self.step, self.action = client, point, step, action
        self.snapshots = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def _hit(self, point: str, step: int) -> bool:
        if point == self.point and step == self.step:
            self.action()
            return True
        return False

    async def save_weights_and_get_sampling_client(self, *args: Any, **kwargs: Any) -> Any:
        step = self.snapshots + self._start
        self.snapshots += 1
        sampler = await self.client.save_weights_and_get_sampling_client(*args, **kwargs)
        return FaultySampler(sampler, lambda call: call == 3 and self._hit("sample", step))

    def forward_backward(self, *args: Any, **kwargs: Any) -> Any:
        self._hit("forward_backward", self.snapshots - 1 + self._start)
        return self.client.forward_backward(*args, **kwargs)

    def optim_step(self, *args: Any, **kwargs: Any) -> Any:
        self._hit("optim_step", self.snapshots - 1 + self._start)
        return self.client.optim_step(*args, **kwargs)

    _start = 0  # the step the run resumed from: snapshots count from there


class FaultyService:
    def __init__(self, service: Any, point: str, step: int, action: Callable[[], None]) -> None:
        self.service, self.point, self.step, self.action = service, point, step, action

    def __getattr__(self, name: str) -> Any:
        return getattr(self.service, name)

    async def create_lora_training_client(self, **kwargs: Any) -> FaultyTraining:
        client = await self.service.create_lora_training_client(**kwargs)
        return FaultyTraining(client, self.point, self.step, self.action)

    async def create_training_client_from_state_with_optimizer(self, path: str, **kwargs: Any) -> FaultyTraining:
        client = FaultyTraining(
            await self.service.create_training_client_from_state_with_optimizer(path, **kwargs),
            self.point,
            self.step,
            self.action,
        )
        client._start = int(path.rsplit("step", 1)[-1])
        return client


def install(point: str, step: int, action: Callable[[], None]) -> None:
    """Make every Trainer created from now on in this process hit ``action`` at ``point``/``step``."""
    if point == "save_state":
        real_save_file = tinker_emulator.checkpoints.save_file

        def save_file(tensors: Any, path: Any) -> None:
            real_save_file(tensors, path)
            folder = os.path.basename(os.path.dirname(path))  # the save's staging folder
            if folder.startswith(tinker_emulator.checkpoints.STAGING_PREFIX) and folder.endswith(f"-step{step:06d}"):
                action()

        tinker_emulator.checkpoints.save_file = save_file
    elif point == "metrics_rewrite":
        real_replace, count = gemlab.run_folder.os.replace, [0]

        def replace(source: Any, target: Any) -> None:
            if str(target).endswith(gemlab.saved_runs.METRICS_FILE):
                count[0] += 1
                if count[0] == step:
                    action()
            real_replace(source, target)

        gemlab.run_folder.os = type(sys)("os_with_faults")
        gemlab.run_folder.os.__dict__.update({**os.__dict__, "replace": replace})
    else:
        real = gemlab.trainer.Trainer._default_service_client
        gemlab.trainer.Trainer._default_service_client = lambda self: FaultyService(real(self), point, step, action)


if __name__ == "__main__":
    where, _, at = sys.argv[1].partition(":")
    install(where, int(at), lambda: os.kill(os.getpid(), signal.SIGKILL))
    from gemlab.train import main

    sys.exit(main(sys.argv[2:]))
