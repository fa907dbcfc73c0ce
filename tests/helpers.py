"""Shared test helpers: convert a torch callable, run it torch-free, compare with eager PyTorch."""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from rlx.app.convert import build_program
from rlx.errors import RlxError, UsageError
from rlx.formats.bundle import bind_weights
from rlx.frontends.torch import capture
from rlx.frontends.torch.levels import HIGH_LEVEL_OPS
from rlx.frontends.torch.tensors import tensor_to_numpy
from rlx.ir import dtypes
from rlx.ir.program import Program
from rlx.runtime.model import Model

LEVELS = ("aten", "high", "core")

# The engine ``convert`` binds to where a test names none: numpy, or the one ``pytest --engine``
# names (tests/conftest.py), which runs the lowering tests on another engine; a program that engine
# refuses (no ONNX form, no JAX kernel) is then skipped with the engine's reason.
DEFAULT_ENGINE = "numpy"

# Per-dtype tolerances for comparing against eager PyTorch (rtol, atol).
TOLERANCES = {
    "f64": (1e-10, 1e-12),
    "f32": (1e-5, 1e-6),
    "f16": (2e-3, 1e-3),
    "bf16": (2e-2, 1e-2),
}


class Wrap(torch.nn.Module):
    """Turn a plain function into a module so torch.export can capture it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def as_module(fn: Callable[..., Any] | torch.nn.Module) -> torch.nn.Module:
    return fn if isinstance(fn, torch.nn.Module) else Wrap(fn)


def convert(
    fn: Callable[..., Any] | torch.nn.Module,
    inputs: Sequence[Any],
    *,
    kwargs: Mapping[str, Any] | None = None,
    decomposition: str = "high",
    dynamic_shapes: Any = None,
    engine: str | None = None,
    engine_options: Mapping[str, Any] | None = None,
) -> tuple[Model, Program, Any]:
    """Export, lower and bind: returns (runtime model on ``engine``, program, exported); no
    ``engine``: ``DEFAULT_ENGINE``."""
    module = as_module(fn).eval()
    exported = capture(
        module, tuple(inputs), example_kwargs=kwargs, decomposition=decomposition, dynamic_shapes=dynamic_shapes
    )
    program = build_program(exported.ir)
    weights = bind_weights(program, exported.weights, "weights")
    chosen = engine or DEFAULT_ENGINE
    try:
        model = Model(program, weights, engine=chosen, engine_options=engine_options)
    except RlxError as e:
        if engine is not None or chosen == "numpy" or not is_refusal(e):
            raise
        import pytest

        pytest.skip(f"{chosen} refuses this program: {e}")
    return model, program, exported


def is_refusal(e: Exception) -> bool:
    """Whether ``e`` is an engine's declared refusal of a program (a Call or function it has no form
    or kernel for), not a failure."""
    return isinstance(e, UsageError) or type(e).__name__ == "EmitError" and "cannot express" in str(e)


def assert_arrays_match(
    got: np.ndarray, want: np.ndarray, what: str = "output", rtol: float | None = None, atol: float | None = None
) -> None:
    """Shape, dtype, NaN/inf pattern and values (exact for integers and bools)."""
    assert isinstance(got, np.ndarray), f"{what}: expected an ndarray, got {type(got).__name__}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != torch {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != torch {want.dtype}"
    tok = dtypes.from_numpy(want.dtype)
    if dtypes.is_complex(tok):  # real and imaginary parts, each like a float32 output
        for part, g, w in (("real", got.real, want.real), ("imag", got.imag, want.imag)):
            assert_arrays_match(np.ascontiguousarray(g), np.ascontiguousarray(w), f"{what} ({part})", rtol, atol)
        return
    if not dtypes.is_float(tok):
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{what}: NaN positions differ")
    np.testing.assert_array_equal(np.isposinf(g), np.isposinf(w), err_msg=f"{what}: +inf positions differ")
    np.testing.assert_array_equal(np.isneginf(g), np.isneginf(w), err_msg=f"{what}: -inf positions differ")
    default_rtol, default_atol = TOLERANCES[tok]
    finite = np.isfinite(w)
    np.testing.assert_allclose(g[finite], w[finite], rtol=rtol or default_rtol, atol=atol or default_atol, err_msg=what)


def align_column_signs(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """``got`` with each column (last axis) negated where it points against ``want``'s at
    ``want``'s entry of largest magnitude (real or complex: ``Re(g·w̄) < 0``)."""
    if got.shape != want.shape or got.size == 0:
        return got
    at = np.argmax(np.abs(want), axis=-2)[..., None, :]
    g, w = np.take_along_axis(got, at, -2), np.take_along_axis(want, at, -2)
    return got * np.where(np.real(g * np.conj(w)) < 0, -1, 1).astype(got.dtype)


def assert_converts_and_matches(
    fn: Callable[..., Any] | torch.nn.Module,
    inputs: Sequence[Any],
    *,
    kwargs: Mapping[str, Any] | None = None,
    levels: Sequence[str] = LEVELS,
    rtol: float | None = None,
    atol: float | None = None,
    engine: str | None = None,
    engine_options: Mapping[str, Any] | None = None,
) -> Program:
    """Convert at each decomposition level, run on ``engine`` (``DEFAULT_ENGINE`` unless told)
    with ``engine_options``, compare every output with eager torch."""
    module = as_module(fn).eval()
    with torch.no_grad():
        expected = module(*inputs, **(kwargs or {}))
    want_flat, want_spec = pytree.tree_flatten(expected)
    program, high = None, None
    for level in levels:
        if level == "core" and high is not None and high_is_core(high):
            continue
        model, program, exported = convert(
            module, inputs, kwargs=kwargs, decomposition=level, engine=engine, engine_options=engine_options
        )
        if level == "high":
            high = exported
        np_inputs = [tensor_to_numpy(t) if isinstance(t, torch.Tensor) else t for t in inputs]
        np_kwargs = {k: tensor_to_numpy(v) for k, v in (kwargs or {}).items()}
        got = model(*[a for a in np_inputs if isinstance(a, np.ndarray)], **np_kwargs)
        got_flat, got_spec = pytree.tree_flatten(got)
        assert len(got_flat) == len(want_flat), f"[{level}] {len(got_flat)} outputs, torch has {len(want_flat)}"
        for i, (g, w) in enumerate(zip(got_flat, want_flat)):
            if isinstance(w, torch.Tensor):
                assert_arrays_match(g, tensor_to_numpy(w), f"[{level}] output {i}", rtol, atol)
            else:
                assert g == w, f"[{level}] output {i}: {g!r} != {w!r}"
    assert program is not None
    return program


_KEPT_AT_HIGH = {f"aten.{name}" for name in HIGH_LEVEL_OPS}


def high_is_core(exported: Any) -> bool:
    """Whether the ``core`` conversion would repeat this ``high`` one: the two decomposition tables
    differ only by the ops ``high`` keeps whole, so a ``high`` graph holding none of them is the
    ``core`` graph too. torch's ``run_decompositions`` costs ~0.15 s a call whatever the graph, most
    of the aten tests' time; ``RLX_TEST_ALL_LEVELS=1`` converts at every level regardless."""
    if os.environ.get("RLX_TEST_ALL_LEVELS"):
        return False
    return not any(n.op in _KEPT_AT_HIGH for n in exported.ir.nodes)


def rand(
    shape: Sequence[int], dtype: torch.dtype = torch.float32, *, low: float = -3, high: float = 3, seed: int = 0
) -> torch.Tensor:
    """Deterministic random tensor of any dtype (bools and ints included)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(tuple(shape), generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(low), int(high) + 1, tuple(shape), generator=g, dtype=dtype)
    return (torch.rand(tuple(shape), generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)


def with_specials(t: torch.Tensor) -> torch.Tensor:
    """A float tensor with NaN, +inf, -inf and ±0 planted in it (flat positions 0..4)."""
    t = t.clone()
    flat = t.view(-1)
    specials = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0]
    for i, v in enumerate(specials[: flat.numel()]):
        flat[i] = v
    return t


def pooling_specials(x: torch.Tensor, case: str) -> torch.Tensor:
    """``x`` ([2, ≥3, ≥8, ≥8]) for a max-pooling test: unchanged (``"finite"``), a NaN at every
    position of a 2×2 window somewhere (``"nan"``: ONNX's MaxPool skips some), or ±inf and no NaN
    (``"inf"``: a checked engine flags the run and reruns it, with the same values)."""
    x = x.clone()
    if case == "nan":
        x[0, 0, 0, 0] = x[0, 1, 2, 3] = x[1, 2, 5, 4] = x[1, 0, 7, 7] = float("nan")
    elif case == "inf":
        x[0, 0, 0, 0], x[1, 2, 5, 4] = float("inf"), float("-inf")
    return x


EXAMPLES = Path(__file__).parent.parent / "examples"


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def convert_example(tmp_path_factory: Any, name: str, **options: Any) -> tuple[Path, Any, tuple[Any, ...]]:
    """``examples/<name>.py`` converted by ``rlx.from_torch`` (``options``) into a fresh temporary OUT
    directory, its parity checked: the OUT directory, the module and its example inputs (for the
    module-scoped fixtures that convert once and share the result)."""
    import rlx

    out = tmp_path_factory.mktemp(name) / name
    model, inputs = load_example(name).get_model()
    report = rlx.from_torch(model, inputs, out, **options)
    assert report.parity.passed, report.parity.table()
    return out, model, inputs


@functools.cache
def exported_example(name: str, level: str) -> tuple[Any, Program]:
    """``examples/<name>.py`` exported in memory at ``level`` and lowered: (exported, program).

    Cached per process, so test files that each need every example at every level (engines,
    generated packages) pay for one export each. Treat the result as read-only.
    """
    model, inputs = load_example(name).get_model()
    exported = capture(model.eval(), tuple(inputs), decomposition=level)
    return exported, build_program(exported.ir)


def block_imports(*packages: str) -> str:
    """Python source to prepend to a subprocess script: importing any of ``packages`` (or their
    submodules) fails there, proving a code path does without them."""
    return textwrap.dedent(
        f"""
        import sys

        class _Blocked:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {packages!r}:
                    raise ImportError(name + " is blocked in this test")
                return None

        sys.meta_path.insert(0, _Blocked())
        """
    )


BLOCK_TORCH = block_imports("torch")
BLOCK_SCIPY = block_imports("scipy")


def sweep(
    variants: Callable[..., Any] | list[Callable[..., Any]], inputs: Sequence[Any], dtypes: Sequence[torch.dtype]
) -> tuple[Callable[..., tuple], tuple[torch.Tensor, ...]]:
    """One function running every variant over every dtype, and its inputs, so a whole dtype sweep
    costs one export. An input is a shape (random data of each dtype) or a callable
    ``dtype -> tensor``; tuple results are flattened into the outputs."""
    variants = variants if isinstance(variants, list) else [variants]
    data = tuple(a(d) if callable(a) else rand(a, d, seed=i) for d in dtypes for i, a in enumerate(inputs))
    n = len(inputs)

    def run(*args: torch.Tensor) -> tuple:
        out: list[Any] = []
        for k in range(len(dtypes)):
            for v in variants:
                y = v(*args[k * n : (k + 1) * n])
                out.extend(y if isinstance(y, tuple) else (y,))
        return tuple(out)

    return run, data


class SmallConvNet(torch.nn.Module):
    """Conv, BatchNorm, ReLU, max pooling, a second conv and a linear head: what static int8
    quantizes (seeded weights, a batch norm with live statistics)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c1, self.bn = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.c2, self.fc = torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.Linear(32, 10)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        return self.fc(torch.relu(self.c2(x)).mean((2, 3)))


class CancellingLinear(torch.nn.Module):
    """Two Linears, the first with zero-sum weight rows: on inputs near a large constant (100 ± 0.1)
    its products cancel that constant, so rounding the input to bfloat16 (steps of 0.5 there) loses
    most of the answer, while float32 keeps it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin, self.out = torch.nn.Linear(64, 16), torch.nn.Linear(16, 8)
        with torch.no_grad():
            self.lin.weight -= self.lin.weight.mean(dim=1, keepdim=True)

    def forward(self, x):
        return self.out(torch.relu(self.lin(x)))


class GroupedConv(torch.nn.Module):
    """A grouped Conv1d over a sequence (as wav2vec2's positional convolution) and a Linear: on
    AMX, OpenVINO's bf16 loses the most on the grouped convolution (cosine about 0.95); at
    ``channels=128, kernel=128`` (8 channels a group, as in a small wav2vec2) OpenVINO's bf16 runs it
    on a slow fallback kernel on CPUs without AMX."""

    def __init__(self, channels: int = 64, kernel: int = 16, groups: int = 16) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv1d(channels, channels, kernel, padding=kernel // 2, groups=groups)
        self.lin = torch.nn.Linear(channels, 64)

    def forward(self, x):
        y = self.conv(x.transpose(1, 2))[:, :, : x.shape[1]].transpose(1, 2)
        return self.lin(x + torch.nn.functional.gelu(y))


def optimized_op_types(model: Any, graph: Any, path: Path) -> list[str]:
    """The op types of ``graph`` (an ``onnx.ModelProto`` of ``model``'s onnxruntime engine, weights
    external) as onnxruntime's optimizer leaves it, with the engine's own session options."""
    import onnx
    import onnxruntime as ort

    opts = model.engine.session_options()
    opts.optimized_model_filepath = str(path)
    names = [t.name for t in graph.graph.initializer if t.data_location == 1]
    opts.add_external_initializers(names, model.engine.weight_values(names))
    ort.InferenceSession(graph.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]
