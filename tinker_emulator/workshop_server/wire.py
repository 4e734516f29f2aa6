"""Tinker's protobuf payloads: ``forward_backward`` requests in, ``ForwardBackwardOutput`` and
``SampleResponse`` results out (the SDK accepts only protobuf for those two results).

The message classes and the tensor decoder are the SDK's own (``tinker.proto``); this module
writes the inverse of the SDK's ``request_conv`` and ``response_conv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.proto.response_conv import _tensor_data_from_proto

from tinker_emulator import asgi_limits
from tinker_emulator.workshop_server import validate

PROTOBUF = "application/x-protobuf"
_DTYPES = {"float32": (pb.DTYPE_FLOAT32, np.float32), "int64": (pb.DTYPE_INT64, np.int64)}
_STOP = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}


@dataclass
class ForwardBackward:
    """A decoded ``/forward_backward`` request."""

    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str] | None
    forward_only: bool
    data: list[types.Datum]


def read_forward_backward(body: bytes, encoding: str, limit: int) -> pb.ForwardBackwardRequest:
    """A ``/forward_backward`` body as sent (``encoding``: its ``Content-Encoding``), decompressed
    within the server's body ``limit`` and parsed, its tensors not yet decoded; slow on a large
    body, so run off the event loop."""
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(asgi_limits.decompress(body, encoding, limit))
    except DecodeError as exc:
        raise ValueError("the body is not a protobuf ForwardBackwardRequest") from exc
    validate.name(msg.model_id, "model_id")
    validate.name(msg.loss_fn, "loss_fn")
    return msg


def decode_forward_backward(
    body: bytes | pb.ForwardBackwardRequest,
    max_elements: int,
    model: validate.Model | None = None,
    max_tokens: int | None = None,
) -> ForwardBackward:
    """The SDK's protobuf ``ForwardBackwardRequest`` as tinker types; ``ValueError`` on anything else.
    Before any tensor is built: each datum's token count against ``model``'s context and all of
    them against ``max_tokens`` (counted from the bytes sent), every tensor's declared shape
    (``validate.tensor``) and their elements once dense against ``max_elements``; then each
    datum's token ids against ``model``'s vocabulary, from a view of the bytes."""
    if isinstance(body, bytes):
        msg = pb.ForwardBackwardRequest()
        try:
            msg.ParseFromString(body)
        except DecodeError as exc:
            raise ValueError("the body is not a protobuf ForwardBackwardRequest") from exc
    else:
        msg = body
    config: dict[str, float | str] = {key: float(value) for key, value in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    validate.name(msg.model_id, "model_id")
    validate.name(msg.loss_fn, "loss_fn")
    counts, total = [], 0
    for index, datum in enumerate(msg.data):
        count = 0
        for chunk in datum.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise ValueError(f"data[{index}]: only text tokens are served here (no images or audio)")
            if len(chunk.encoded_text.tokens) % 4:
                raise ValueError(f"data[{index}].model_input: tokens are int32, 4 bytes each")
            count += len(chunk.encoded_text.tokens) // 4
        if model is not None and count > model.context_length:
            raise ValueError(
                f"data[{index}].model_input has {count} tokens; the model's context holds {model.context_length}"
            )
        for name, tensor in datum.loss_fn_inputs.items():
            validate.name(name, f"data[{index}].loss_fn_inputs key")
            total += validate.tensor(tensor, f"data[{index}].loss_fn_inputs[{name!r}]", count, name)
        validate.elements(total, max_elements)
        counts.append(count)
    validate.request_tokens(sum(counts), max_tokens, "forward_backward", "--max-train-tokens")
    data = []
    for index, datum in enumerate(msg.data):
        arrays = [np.frombuffer(chunk.encoded_text.tokens, np.int32) for chunk in datum.model_input]
        if model is not None:
            validate.tokens(
                np.concatenate(arrays) if arrays else np.zeros(0, np.int32), f"data[{index}].model_input", model
            )
        inputs = {name: _tensor_data_from_proto(tensor) for name, tensor in datum.loss_fn_inputs.items()}
        if model is not None and "target_tokens" in inputs:
            validate.vocabulary(
                inputs["target_tokens"].to_numpy().ravel(), f"data[{index}].loss_fn_inputs['target_tokens']", model
            )
        chunks: list[types.ModelInputChunk] = [types.EncodedTextChunk(tokens=array.tolist()) for array in arrays]
        data.append(types.Datum(model_input=types.ModelInput(chunks=chunks), loss_fn_inputs=inputs))
    return ForwardBackward(
        model_id=msg.model_id,
        seq_id=msg.seq_id,
        loss_fn=msg.loss_fn,
        loss_fn_config=config or None,
        forward_only=msg.forward_only,
        data=data,
    )


def _batched(tensor: types.TensorData) -> pb.BatchedTensor:
    proto_dtype, np_dtype = _DTYPES[tensor.dtype]
    array = np.asarray(tensor.data, dtype=np_dtype)
    shape = list(tensor.shape) if tensor.shape else [array.size]
    offsets = np.asarray([0, array.nbytes], dtype=np.int64)
    return pb.BatchedTensor(
        data=array.tobytes(), offsets=offsets.tobytes(), dtype=proto_dtype, trailing_shape=shape[1:]
    )


def encode_forward_backward_output(output: types.ForwardBackwardOutput) -> bytes:
    """``output`` as the SDK's protobuf (one ``ArrayRecord`` per datum, so ragged outputs need nothing special)."""
    msg = pb.ForwardBackwardOutput(loss_fn_output_type=output.loss_fn_output_type or "ArrayRecord")
    msg.metrics.update({key: float(value) for key, value in output.metrics.items()})
    for datum in output.loss_fn_outputs:
        record = msg.loss_fn_outputs.add(num_datums=1)
        for name, tensor in datum.items():
            record.fields[name].CopyFrom(_batched(tensor))
    return msg.SerializeToString()


def encode_sample_response(response: types.SampleResponse) -> bytes:
    """``response`` as the SDK's protobuf (tokens as int32, logprobs as float32, NaN where there is none,
    top-k alternatives as dense ``(tokens, k)`` matrices)."""
    msg = pb.SampleResponse()
    for sequence in response.sequences:
        item = msg.sequences.add(
            stop_reason=_STOP[sequence.stop_reason], tokens=np.asarray(sequence.tokens, dtype=np.int32).tobytes()
        )
        if sequence.logprobs is not None:
            item.logprobs = np.asarray(sequence.logprobs, dtype=np.float32).tobytes()
        top = sequence.topk_logprobs_np
        if top is not None:
            length, k = top.token_ids.shape
            item.topk_sampled_logprobs.CopyFrom(
                pb.TopkLogprobs(
                    token_ids=top.token_ids.astype(np.int32).tobytes(),
                    logprobs=top.logprobs.astype(np.float32).tobytes(),
                    k=k,
                    length=length,
                )
            )
    if response.prompt_logprobs is not None:
        values: list[Any] = [np.nan if x is None else x for x in response.prompt_logprobs]
        msg.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    return msg.SerializeToString()
