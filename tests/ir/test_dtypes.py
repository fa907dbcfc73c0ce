"""complex64/complex128 and uint16/uint32/uint64 end to end: PyTorch's promotion rules, and a model
carrying them through torch-ir.json, weights.safetensors, the numpy and JAX runtimes, the parity
report and a generated package."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import rlx
from rlx.formats import safetensors_io
from rlx.frontends.torch.tensors import numpy_to_tensor, tensor_to_numpy, torch_dtype_token
from rlx.ir import dtypes

from helpers import BLOCK_TORCH, assert_arrays_match

NEW = (torch.complex64, torch.complex128, torch.uint16, torch.uint32, torch.uint64)
PROMOTABLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)


@pytest.mark.parametrize("a", NEW, ids=str)
def test_promotion_matches_torch(a):
    # PyTorch promotes uint16/32/64 only with themselves and floats; complex with every float.
    for b in (a, *PROMOTABLE):
        if a.is_complex or b.is_floating_point or b == a:
            want = torch_dtype_token(torch.promote_types(a, b))
            assert dtypes.promote_types(torch_dtype_token(a), torch_dtype_token(b)) == want, (a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_complex_scalar_promotion_matches_torch(dtype):
    want = torch.result_type(torch.ones(2, dtype=dtype), 1j)
    assert dtypes.result_type([torch_dtype_token(dtype)], (), ["c64"]) == torch_dtype_token(want)


@pytest.mark.parametrize("dtype", NEW, ids=str)
def test_safetensors_and_numpy_round_trip(tmp_path, dtype):
    info = torch.iinfo(dtype) if not dtype.is_complex else None
    values = (
        torch.tensor([1 + 2j, -0.0 - 3.5j, complex("inf+nanj"), 1e-30j], dtype=dtype)
        if dtype.is_complex
        else torch.tensor([0, 1, info.max, info.max // 3], dtype=dtype)  # the top bit set: not an int64
    )
    arr = tensor_to_numpy(values)
    assert arr.dtype == dtypes.to_numpy(torch_dtype_token(dtype))
    safetensors_io.write(tmp_path / "t.safetensors", {"t": arr})
    back, _ = safetensors_io.read(tmp_path / "t.safetensors")
    assert back["t"].dtype == arr.dtype and back["t"].tobytes() == arr.tobytes()
    assert torch.equal(numpy_to_tensor(back["t"]).view(torch.uint8), values.view(torch.uint8))


class Mixed(torch.nn.Module):
    """complex128 and unsigned values as inputs, parameters and outputs, through ops PyTorch
    supports on them (its unsigned 16/32/64-bit types have few: mul, bitwise, ==, sum, sort, casts)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("phase", torch.tensor([1 - 1j, 0.5j, -2.0, 3 + 0.25j], dtype=torch.complex128))
        self.register_buffer("mask32", torch.tensor([0xFFFF0000, 0x0F0F0F0F, 7, 2**32 - 1], dtype=torch.uint32))

    def forward(self, z, u16, u32, u64):
        w = z * self.phase + z
        return (
            w,
            torch.view_as_real(w),
            (u32 & self.mask32) ^ u32,
            u64 * u64,  # wraps modulo 2**64
            u16.sum(),
            (u64 == u64[torch.tensor([1, 0, 3, 2])]),
            u32.to(torch.float64) * 0.5,
            torch.sort(u16).values,
            torch.view_as_complex(torch.stack([u16.float(), u32.float()], -1)),
        )


def _inputs() -> list[torch.Tensor]:
    return [
        torch.tensor([1 + 1j, -2.5 + 0j, 0.125 - 4j, 3e100 + 1j], dtype=torch.complex128),
        torch.tensor([65535, 0, 12, 40000], dtype=torch.uint16),
        torch.tensor([2**32 - 1, 5, 2**31, 77], dtype=torch.uint32),
        torch.tensor([2**64 - 1, 2**63 + 5, 3, 2**63 + 5], dtype=torch.uint64),
    ]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("dtypes") / "out"
    report = rlx.from_torch(Mixed(), _inputs(), out, write=("bundle", "package"))
    with torch.no_grad():
        want = [tensor_to_numpy(t) for t in Mixed()(*_inputs())]
    return out, report, want


def test_bundle_declares_and_runs_the_dtypes(converted):
    out, report, want = converted
    assert report.passed, report.parity
    ir = json.loads((out / "torch-ir.json").read_text())
    assert [i["dtype"] for i in ir["inputs"]] == ["c128", "u16", "u32", "u64"]
    assert {"c128", "u32"} <= {w["dtype"] for w in ir["weights"]}
    assert [o.dtype for o in report.parity.outputs] == ["c128", "f64", "u32", "u64", "i64", "bool", "f64", "u16", "c64"]
    for engine in ("numpy", "jax"):
        model = rlx.load(out / "bundle", engine=engine)
        got = model(*[tensor_to_numpy(t) for t in _inputs()])
        for k, (g, w) in enumerate(zip(got, want)):
            assert_arrays_match(np.asarray(g), w, f"[{engine}] output {k}")


def test_generated_package_runs_the_dtypes(converted, tmp_path):
    out, _, want = converted
    (pkg,) = [p for p in out.iterdir() if p.name.startswith("rlx_")]
    np.savez(tmp_path / "in.npz", *[tensor_to_numpy(t) for t in _inputs()])
    script = BLOCK_TORCH + textwrap.dedent(
        f"""
        import numpy as np
        sys.path.insert(0, {str(pkg)!r})
        import {pkg.name} as m
        data = np.load({str(tmp_path / "in.npz")!r})
        got = m.load()(*[data[f"arr_{{i}}"] for i in range(4)])
        np.savez({str(tmp_path / "got.npz")!r}, *got)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(tmp_path / "got.npz")
    for k, w in enumerate(want):
        assert_arrays_match(got[f"arr_{k}"], w, f"package output {k}")
