"""Decoding ``/forward_backward`` bodies (tinker_emulator/workshop_server/wire.py): what the SDK sends decodes to
the datums it encoded; a corrupt compressed body, a tensor whose data does not fill its declared
shape, an ill-formed sparse tensor, or one declaring more elements than the server allows, is a
``ValueError`` (HTTP 400) raised before anything of its declared size is allocated."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.proto.request_conv import forward_backward_request_to_proto

from tinker_emulator.workshop_server import wire

LIMIT = 2**20  # elements a request's tensors may hold once dense, in these tests


def request(target: pb.Tensor, tokens: int = 6) -> bytes:
    """A one-datum protobuf request: ``tokens`` input tokens, ``target`` as its weights."""
    msg = pb.ForwardBackwardRequest(model_id="m", seq_id=1, loss_fn="cross_entropy")
    datum = msg.data.add()
    datum.model_input.add().encoded_text.tokens = np.arange(1, tokens + 1, dtype=np.int32).tobytes()
    datum.loss_fn_inputs["target_tokens"].CopyFrom(
        pb.Tensor(dense=np.arange(tokens, dtype=np.int64).tobytes(), dtype=pb.DTYPE_INT64, shape=[tokens])
    )
    datum.loss_fn_inputs["weights"].CopyFrom(target)
    return msg.SerializeToString()


def csr(shape: list[int], crow: list[int], col: list[int], values: list[float]) -> pb.Tensor:
    return pb.Tensor(
        sparse_csr=pb.SparseCsr(
            values=np.asarray(values, np.float32).tobytes(),
            crow_indices=np.asarray(crow, np.int64).tobytes(),
            col_indices=np.asarray(col, np.int64).tobytes(),
        ),
        dtype=pb.DTYPE_FLOAT32,
        shape=shape,
    )


def floats(count: int, shape: list[int]) -> pb.Tensor:
    return pb.Tensor(dense=np.ones(count, np.float32).tobytes(), dtype=pb.DTYPE_FLOAT32, shape=shape)


def test_what_the_sdk_encodes_decodes_to_the_same_datums_sparse_included() -> None:
    weights = torch.zeros(4, 3)
    weights[1, 2], weights[3, 0] = 0.5, 2.0
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([5, 6, 7, 8]),
        loss_fn_inputs={"target_tokens": [6, 7, 8, 9], "weights": types.TensorData.from_torch_sparse(weights)},
    )
    assert datum.loss_fn_inputs["weights"].sparse_crow_indices is not None  # the SDK sent it sparse
    sent = types.ForwardBackwardInput(data=[datum], loss_fn="cross_entropy", loss_fn_config=None)
    sdk_request = types.ForwardBackwardRequest(forward_backward_input=sent, model_id="model-1", seq_id=3)
    body = forward_backward_request_to_proto(sdk_request).SerializeToString()
    decoded = wire.decode_forward_backward(body, max_elements=LIMIT)
    assert (decoded.model_id, decoded.seq_id, decoded.loss_fn) == ("model-1", 3, "cross_entropy")
    assert decoded.data[0].model_input.to_ints() == [5, 6, 7, 8]
    assert decoded.data[0].loss_fn_inputs["target_tokens"].tolist() == [6, 7, 8, 9]
    assert torch.equal(decoded.data[0].loss_fn_inputs["weights"].to_torch(), weights)


def test_a_sparse_tensor_declaring_hundreds_of_millions_of_elements_is_refused_before_allocation() -> None:
    body = request(csr([6, 100_000_000], [0, 0, 0, 0, 0, 0, 0], [], []))
    assert len(body) < 300  # a small request...
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=f"declare 600000006 elements once dense; at most {LIMIT}"):
            wire.decode_forward_backward(body, max_elements=LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 2**20  # ...that allocated nothing of its declared 2.4 GB


@pytest.mark.parametrize(
    "tensor, message",
    [
        (csr([6, 4], [0, 5], [0, 1, 2], [1, 1, 1]), "needs 7 row pointers"),  # crow of a 1-row matrix
        (csr([6, 4], [0, 1, 1, 1, 1, 1, 2], [0, 9], [1, 1]), r"column indices must be in 0\.\.3"),
        (csr([6, 4], [0, 2, 2, 2, 2, 2, 2], [2, 1], [1, 1]), "column indices must rise within each row"),
        (csr([6, 4], [0, 3, 2, 2, 2, 2, 2], [0, 1], [1, 1]), "row pointers must rise"),
        (csr([6], [0, 0, 0, 0, 0, 0, 0], [], []), "a sparse tensor is 2-D"),
        (floats(5, shape=[6]), r"declares shape \[6\] \(6 values\) but carries 5"),
        (floats(8, shape=[8]), r"its datum has 6 tokens, so it must be \[6\] or \[6, K\]"),
        (pb.Tensor(dense=b"", dtype=pb.DTYPE_FLOAT32, shape=[-1]), r"has shape \[-1\]"),
        (pb.Tensor(dense=np.ones(6, np.float32).tobytes(), dtype=99, shape=[6]), "dtype 99 is not a tensor dtype"),
    ],
)
def test_a_tensor_that_does_not_fit_its_declared_shape_is_a_value_error_naming_it(
    tensor: pb.Tensor, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        wire.decode_forward_backward(request(tensor), max_elements=LIMIT)
    assert "data[0].loss_fn_inputs['weights']" in str(raised.value)


def test_token_bytes_that_are_not_int32_are_a_value_error() -> None:
    msg = pb.ForwardBackwardRequest(model_id="m", loss_fn="cross_entropy")
    msg.data.add().model_input.add().encoded_text.tokens = b"\x01\x00\x00"
    with pytest.raises(ValueError, match="tokens are int32"):
        wire.decode_forward_backward(msg.SerializeToString(), max_elements=LIMIT)
