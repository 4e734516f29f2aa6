"""Checks on what a client sends, made before the server allocates or queues anything for it:
ids and names short, JSON bodies small, numbers finite, each tensor the shape its datum's length
allows and no more data than its shape declares, the tensors of a request no larger once dense than
a dense body of the server's size limit, sequences within the served model's context and token
ids within its vocabulary. Each failure is a ``ValueError`` that names the bound (HTTP 400 in
Tinker's error JSON, ``errors.py``).

The routes run the checks on a protobuf body, and its decoding, off the event loop
(``asyncio.to_thread``), so ``/healthz`` answers while a large body is read. JSON is parsed by
pydantic holding the GIL, where a thread would not free the loop, so JSON bodies are capped instead
(``MAX_JSON``: 4 MiB parse in about 0.2 s; Tinker's JSON requests are a few kB, a prompt of
100,000 tokens under 1 MiB).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import pydantic
from tinker import types
from tinker.proto import tinker_public_pb2 as pb

from tinker_emulator.workshop_server.errors import TooLarge

MAX_NAME = 1024  # characters in an id, name or path a client sends
MAX_JSON = 4 * 2**20  # bytes of a JSON request body
_ITEMSIZE = {pb.DTYPE_FLOAT32: 4, pb.DTYPE_INT64: 8, pb.DTYPE_INT32: 4, pb.DTYPE_BFLOAT16: 2}


class Model(Protocol):
    """What the checks need of a local training or sampling client."""

    @property
    def context_length(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...


def json_body(raw: bytes) -> bytes:
    """``raw`` if it is no larger than ``MAX_JSON`` (else HTTP 413)."""
    if len(raw) > MAX_JSON:
        raise TooLarge(f"a JSON request body is at most {MAX_JSON} bytes; this one has {len(raw)}")
    return raw


def name(value: Any, field: str) -> None:
    """``ValueError`` when ``value`` is a string longer than ``MAX_NAME`` (it is never echoed)."""
    if isinstance(value, str) and len(value) > MAX_NAME:
        raise ValueError(f"{field} has {len(value)} characters; ids, names and paths have at most {MAX_NAME}")


def names(body: pydantic.BaseModel) -> None:
    """Every top-level string of a request (its ids, model names and paths) within ``MAX_NAME``."""
    for field, value in body:
        name(value, field)


def finite(value: Any, where: str = "") -> None:
    """``ValueError`` naming the first NaN or infinite number in ``value`` (a request, walked through
    its fields, dicts and lists; JSON's ``NaN`` and ``Infinity`` parse as floats)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where or 'the body'} is {value}: numbers must be finite")
    elif isinstance(value, pydantic.BaseModel):
        for field, item in value:
            finite(item, f"{where}.{field}" if where else field)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            finite(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            if not isinstance(item, int):  # token lists: nothing to check, and long
                finite(item, f"{where}[{index}]")


def finite_config(config: Mapping[str, float | str] | None) -> Mapping[str, float | str] | None:
    """``config`` (a ``loss_fn_config``) if every number in it is finite."""
    for key, value in (config or {}).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue  # not a number: the loss says what it takes
        if not math.isfinite(number):
            raise ValueError(f"loss_fn_config[{key!r}] is {number}: numbers must be finite")
    return config


def tensor(msg: pb.Tensor, where: str, rows: int, key: str = "") -> int:
    """The elements protobuf tensor ``msg`` holds once dense, checked before any is allocated: its
    shape is ``[rows]`` or ``[rows, K]`` (``rows``: its datum's tokens), dense data fills exactly
    that shape, and sparse CSR indices are well formed and inside it. ``target_tokens`` (``key``)
    are token ids: an integer dtype."""
    itemsize = _ITEMSIZE.get(msg.dtype)
    if itemsize is None:
        raise ValueError(f"{where}: dtype {msg.dtype} is not a tensor dtype (float32, int64, int32, bfloat16)")
    if key == "target_tokens" and msg.dtype not in (pb.DTYPE_INT64, pb.DTYPE_INT32):
        raise ValueError(f"{where} holds floats; target_tokens are token ids (int64 or int32)")
    sparse = msg.WhichOneof("encoding") == "sparse_csr"
    shape = list(msg.shape) or ([] if sparse else [len(msg.dense) // itemsize])
    if not 1 <= len(shape) <= 2 or shape[0] != rows or min(shape) < 1:
        raise ValueError(
            f"{where} has shape {shape}; its datum has {rows} tokens, so it must be [{rows}] or [{rows}, K]"
        )
    elements = math.prod(shape)
    if not sparse:
        if len(msg.dense) != elements * itemsize:
            raise ValueError(
                f"{where} declares shape {shape} ({elements} values) but carries {len(msg.dense) // itemsize}"
            )
        return elements
    _csr(msg.sparse_csr, itemsize, shape, where)
    return elements


def _csr(csr: pb.SparseCsr, itemsize: int, shape: list[int], where: str) -> None:
    bad = f"{where} is not a valid sparse CSR tensor of shape {shape}"
    if len(shape) != 2:
        raise ValueError(f"{bad}: a sparse tensor is 2-D")
    nnz = len(csr.values) // itemsize
    if len(csr.values) % itemsize or len(csr.crow_indices) != 8 * (shape[0] + 1) or len(csr.col_indices) != 8 * nnz:
        raise ValueError(f"{bad}: it needs {shape[0] + 1} row pointers and one column index per value")
    crow, col = np.frombuffer(csr.crow_indices, np.int64), np.frombuffer(csr.col_indices, np.int64)
    per_row = np.diff(crow)
    if crow[0] != 0 or crow[-1] != nnz or (per_row < 0).any():
        raise ValueError(f"{bad}: row pointers must rise from 0 to the number of values ({nnz})")
    if nnz and (col.min() < 0 or col.max() >= shape[1]):
        raise ValueError(f"{bad}: column indices must be in 0..{shape[1] - 1}")
    same_row = np.repeat(np.arange(shape[0]), per_row)
    if ((np.diff(col) <= 0) & (np.diff(same_row) == 0)).any():
        raise ValueError(f"{bad}: column indices must rise within each row")


def elements(total: int, limit: int) -> None:
    """``ValueError`` when a request's tensors hold more than ``limit`` elements once dense."""
    if total > limit:
        raise ValueError(
            f"the request's tensors declare {total} elements once dense; at most {limit} per request "
            "(what a dense body of the server's size limit holds)"
        )


def request_tokens(total: int, limit: int | None, what: str, flag: str) -> None:
    """``ValueError`` when one ``what`` request carries more than ``limit`` tokens (the server's
    bound on one request's work, set by ``flag``)."""
    if limit is not None and total > limit:
        raise ValueError(
            f"this {what} request has {total} tokens; the server takes at most {limit} per request "
            f"(its {flag}): split it into smaller requests"
        )


def tokens(values: Sequence[int] | np.ndarray, where: str, model: Model) -> None:
    """``values`` no longer than ``model``'s context, each a token id of its vocabulary."""
    if len(values) > model.context_length:
        raise ValueError(f"{where} has {len(values)} tokens; the model's context holds {model.context_length}")
    vocabulary(values, where, model)


def vocabulary(values: Sequence[int] | np.ndarray, where: str, model: Model) -> None:
    """Each of ``values`` a token id of ``model``'s vocabulary."""
    ids = np.asarray(values, dtype=np.int64)
    outside = ids[(ids < 0) | (ids >= model.vocab_size)]
    if outside.size:
        raise ValueError(
            f"{where} has token ids outside the vocabulary (0..{model.vocab_size - 1}): {outside[:5].tolist()}"
        )


def prompt(value: types.ModelInput, model: Model) -> None:
    """A sampling prompt that fits ``model``: shorter than its context (room for one new token),
    each token in its vocabulary."""
    length = value.length
    if length >= model.context_length:
        raise ValueError(
            f"the prompt has {length} tokens; the model's context holds {model.context_length} "
            f"(prompt and answer together, so at most {model.context_length - 1})"
        )
    tokens(value.to_ints(), "the prompt", model)
