"""The numpy safetensors reader/writer: round trips every dtype and refuses damaged headers."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from rlx.errors import WeightsError
from rlx.formats import safetensors_io
from rlx.frontends.torch.tensors import numpy_to_tensor, tensor_to_numpy
from rlx.ir import dtypes


@pytest.mark.parametrize("tok", sorted(safetensors_io.TOKEN_TO_ST))
def test_round_trip_every_dtype(tok, tmp_path):
    arr = (np.arange(12).reshape(3, 4) % 5).astype(dtypes.to_numpy(tok))
    scalar = arr[1, 2][()]  # 0-d: e.g. BatchNorm's num_batches_tracked, a scalar model output
    safetensors_io.write(
        tmp_path / "t.safetensors", {"a": arr, "empty": np.zeros((0, 2), arr.dtype), "scalar": np.asarray(scalar)}
    )
    got, _ = safetensors_io.read(tmp_path / "t.safetensors")
    assert got["a"].dtype == arr.dtype and got["a"].shape == (3, 4)
    np.testing.assert_array_equal(got["a"].view(np.uint8), arr.view(np.uint8))
    assert got["empty"].shape == (0, 2)
    assert got["scalar"].shape == () and got["scalar"].dtype == arr.dtype
    assert got["scalar"].tobytes() == np.asarray(scalar).tobytes()


@pytest.mark.parametrize("tok", sorted(set(dtypes.DTYPES) - set(safetensors_io.TOKEN_TO_ST)))
def test_dtypes_safetensors_cannot_name_are_refused(tok, tmp_path):
    assert dtypes.is_low_bit(tok)  # every other rlx dtype has a safetensors name
    with pytest.raises(WeightsError, match=f"is {tok}, which safetensors has no name for"):
        safetensors_io.write(tmp_path / "t.safetensors", {"a": np.zeros(4, dtypes.to_numpy(tok))})
    assert not (tmp_path / "t.safetensors").exists()


def test_interoperates_with_the_safetensors_package(tmp_path):
    tensors = {"w": torch.randn(3, 2), "b": torch.randn(4).to(torch.bfloat16), "i": torch.arange(5)}
    save_file(tensors, tmp_path / "theirs.safetensors")
    got, _ = safetensors_io.read(tmp_path / "theirs.safetensors")
    for k, t in tensors.items():
        assert torch.equal(numpy_to_tensor(np.array(got[k])), t), k
    safetensors_io.write(tmp_path / "ours.safetensors", {k: tensor_to_numpy(t) for k, t in tensors.items()})
    back = load_file(tmp_path / "ours.safetensors")
    for k, t in tensors.items():
        assert torch.equal(back[k], t), k


def raw_file(path, header, data=b""):
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)
    return path


@pytest.mark.parametrize(
    "header,data,message",
    [
        ({"a": {"dtype": "F32", "shape": [10**15], "data_offsets": [0, 4]}}, b"\0" * 4, "needs"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "outside the file"),
        ({"a": {"dtype": "Q8", "shape": [1], "data_offsets": [0, 1]}}, b"\0", "unsupported dtype 'Q8'"),
        ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "non-negative"),
        (
            {
                "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]},
            },
            b"\0" * 6,
            "overlap",
        ),
        ({"a": "nope"}, b"", "header entry must be an object"),
    ],
)
def test_damaged_headers_raise_weights_error(tmp_path, header, data, message):
    with pytest.raises(WeightsError) as info:
        safetensors_io.read(raw_file(tmp_path / "bad.safetensors", header, data))
    assert message in str(info.value)


def test_truncated_and_garbage_files(tmp_path):
    (tmp_path / "short").write_bytes(b"\1\2")
    with pytest.raises(WeightsError, match="too short"):
        safetensors_io.read(tmp_path / "short")
    (tmp_path / "huge").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(WeightsError, match="header claims"):
        safetensors_io.read(tmp_path / "huge")
    (tmp_path / "garbage").write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{]")
    with pytest.raises(WeightsError, match="not valid JSON"):
        safetensors_io.read(tmp_path / "garbage")
