"""Large training requests as bounded units of work, so that keys share the training worker fairly.

A ``forward_backward`` is split into units of at most ``unit_tokens`` tokens (whole datums; a
datum longer than that is a unit of its own), each queued on the worker as its own job in the
key's lane. The worker serves lanes round-robin one job at a time, so another key's small request
waits for the unit running and one unit per other key due in the round, not a whole request.
Gradients add up over a step's ``forward_backward`` calls anyway, so running a request as units
changes nothing but the order of the sums. ``cancel_future`` (the request's task cancelled)
cancels every unit not yet started: running work stops at its next unit, and the gradients of the
units already run stay in the adapter, as they would from a smaller request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from tinker import types

from tinker_emulator import memory
from tinker_emulator.futures import TRAINING, get_worker


def split(data: Sequence[types.Datum], unit_tokens: int) -> list[list[types.Datum]]:
    """``data`` in order, in runs of whole datums of at most ``unit_tokens`` tokens each."""
    units: list[list[types.Datum]] = []
    size = 0
    for datum in data:
        length = datum.model_input.length
        if not units or size + length > unit_tokens:
            units.append([])
            size = 0
        units[-1].append(datum)
        size += length
    return units


def combine(outputs: Sequence[types.ForwardBackwardOutput]) -> types.ForwardBackwardOutput:
    """One ``ForwardBackwardOutput`` of units' outputs: per-datum outputs in order, ``:sum``
    metrics added, ``:max``/``:min`` taken over units, others averaged by datums."""
    if len(outputs) == 1:
        return outputs[0]
    metrics: dict[str, float] = {}
    datums = sum(len(out.loss_fn_outputs) for out in outputs)
    for key in outputs[0].metrics:
        values = [(float(out.metrics[key]), len(out.loss_fn_outputs)) for out in outputs if key in out.metrics]
        if key.endswith(":sum"):
            metrics[key] = sum(v for v, _ in values)
        elif key.endswith(":max"):
            metrics[key] = max(v for v, _ in values)
        elif key.endswith(":min"):
            metrics[key] = min(v for v, _ in values)
        else:
            metrics[key] = sum(v * n for v, n in values) / max(1, datums)
    return types.ForwardBackwardOutput(
        loss_fn_output_type=outputs[0].loss_fn_output_type,
        loss_fn_outputs=[item for out in outputs for item in out.loss_fn_outputs],
        metrics=metrics,
    )


def submit(
    units: Sequence[Sequence[types.Datum]], start: Callable[[list[types.Datum]], Future[Any]]
) -> list[Future[Any]]:
    """``start(unit)`` for every unit, in order (each queues one job); if one cannot start, those
    already queued are cancelled and its error raised."""
    futures: list[Future[Any]] = []
    try:
        for unit in units:
            futures.append(start(list(unit)))
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    return futures


async def gathered(
    futures: Sequence[Future[types.ForwardBackwardOutput]], large: bool = False
) -> types.ForwardBackwardOutput:
    """The units' outputs combined, awaited in order. Cancelled (``cancel_future``), or failed in
    one unit: every unit not yet started is cancelled. After a ``large`` request, the memory it
    freed is handed back to the system (``memory.trim``), as a job of the training worker in this
    key's lane: after the unit still running when the request was cancelled, whose memory is freed
    only when it ends (trimmed at once, from here, that memory stayed: the sweep's server held
    1.34x its RSS after warm-up)."""
    try:
        return combine([await asyncio.wrap_future(future) for future in futures])
    finally:
        for future in futures:
            future.cancel()  # a no-op on a unit already done or running
        if large:
            get_worker(TRAINING).submit(memory.trim)
