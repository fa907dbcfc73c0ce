"""Selection ops whose result size depends on the data (nonzero, argwhere, masked_select, boolean-mask
indexing, unique*, bincount) and the fixed-size ones beside them (nonzero_static, histc, grouped mm),
against eager PyTorch.

Each case is exported once and then run on several inputs: the data-dependent sizes (torch's
unbacked symbols u0 …) must follow the data at run time, with the shapes downstream of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree

from rlx.errors import RlxError
from rlx.frontends.torch.tensors import tensor_to_numpy
from rlx.runtime.model import Model

from helpers import as_module, assert_arrays_match, assert_converts_and_matches, convert

F32, F64, I64, I32, BOOL = torch.float32, torch.float64, torch.int64, torch.int32, torch.bool


def _ints(shape: tuple[int, ...], high: int, seed: int, dtype: torch.dtype = I64) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _floats(shape: tuple[int, ...], seed: int, dtype: torch.dtype = F32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _assign(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[y > 0] = 0.5
    return y


# name → (function, inputs for seed k): the export uses seed 0, the runs seeds 0..2.
CASES: dict[str, tuple[Callable[..., Any], Callable[[int], tuple[torch.Tensor, ...]]]] = {
    "nonzero": (lambda x: torch.nonzero(x > 0), lambda k: (_floats((3, 4), k),)),
    "nonzero_int_1d": (lambda x: torch.nonzero(x), lambda k: (_ints((9,), 3, k, I32),)),
    "nonzero_downstream": (
        lambda x: torch.nonzero(x > 0).float().sum(0) * torch.nonzero(x > 0).shape[0],
        lambda k: (_floats((4, 5), k),),
    ),
    "argwhere": (lambda x: torch.argwhere(x > 0.3), lambda k: (_floats((2, 3, 4), k, F64),)),
    "where_tuple": (lambda x: torch.where(x > 0), lambda k: (_floats((3, 5), k),)),
    "nonzero_static_pad": (lambda x: torch.nonzero_static(x > 0, size=20), lambda k: (_floats((3, 4), k),)),
    "nonzero_static_cut": (
        lambda x: torch.nonzero_static(x > 0, size=2, fill_value=7),
        lambda k: (_floats((3, 4), k),),
    ),
    "masked_select": (lambda x, m: torch.masked_select(x, m), lambda k: (_floats((3, 4), k), _floats((4,), k + 9) > 0)),
    "bool_index": (lambda x: x[x > 0] * 2, lambda k: (_floats((3, 4), k),)),
    "bool_index_rows": (lambda x, m: x[m], lambda k: (_floats((5, 3), k), _floats((5,), k + 5) > 0)),
    "bool_assign": (_assign, lambda k: (_floats((3, 4), k),)),
    "unique_sorted": (
        lambda x: torch.unique(x, sorted=True, return_inverse=True, return_counts=True),
        lambda k: (_ints((4, 5), 6, k),),
    ),
    "unique_values_only": (lambda x: torch.unique(x) * 10, lambda k: (_floats((12,), k).round(),)),
    "unique_dim": (
        lambda x: torch.unique(x, dim=0, return_inverse=True, return_counts=True),
        lambda k: (_ints((7, 2), 2, k),),
    ),
    "unique_consecutive": (
        lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True),
        lambda k: (_ints((12,), 3, k),),
    ),
    "bincount": (lambda x: torch.bincount(x), lambda k: (_ints((10,), 6, k),)),
    "bincount_weights_minlength": (
        lambda x, w: torch.bincount(x, weights=w, minlength=9),
        lambda k: (_ints((10,), 6, k), _floats((10,), k)),
    ),
    "histc_range": (lambda x: torch.histc(x, bins=5, min=-1.0, max=1.0), lambda k: (_floats((40,), k),)),
    "histc_data_range": (lambda x: torch.histc(x, bins=7), lambda k: (_floats((6, 5), k, F64),)),
    "histc_expert_counts": (
        lambda i: torch.histc(i.float(), bins=4, min=0, max=3),
        lambda k: (_ints((10, 2), 4, k),),
    ),
}


def _flat_numpy(result: Any) -> list[np.ndarray]:
    return [tensor_to_numpy(t) for t in pytree.tree_flatten(result)[0]]


def _check_run(model: Model, fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], what: str) -> None:
    with torch.no_grad():
        want = _flat_numpy(fn(*inputs))
    got = pytree.tree_flatten(model(*[tensor_to_numpy(t) for t in inputs]))[0]
    assert len(got) == len(want), f"{what}: {len(got)} outputs, torch has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert_arrays_match(g, w, f"{what} output {i}")


# One case per Call runs by default; the rest of the table is slow-marked (each case is an export).
DEFAULT = {"nonzero_downstream", "nonzero_static_pad", "masked_select", "bool_index", "unique_sorted",
           "unique_consecutive", "bincount_weights_minlength", "histc_range"}  # fmt: skip


@pytest.mark.parametrize(
    "name", [n if n in DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in sorted(CASES)]
)
def test_matches_torch_on_new_data(name: str) -> None:
    fn, make = CASES[name]
    module = as_module(fn).eval()
    model, _, _ = convert(module, make(0))
    for seed in range(3):  # other data: other sizes, the same export
        _check_run(model, module, make(seed), f"{name} seed {seed}")


@pytest.mark.parametrize("dtype", [F32, I64, BOOL, torch.float16])
def test_nonzero_of_a_zero_d_tensor(dtype: torch.dtype) -> None:
    """A 0-d input has [n, 0] coordinates: one empty row when it is non-zero, none when it is zero."""
    model, _, _ = convert(torch.nonzero, (torch.tensor(1).to(dtype),))
    for value in (1, 0, 1):
        x = torch.tensor(value).to(dtype)
        got = model(tensor_to_numpy(x))
        assert got.shape == (value, 0) and got.dtype == np.int64
        assert_arrays_match(got, tensor_to_numpy(torch.nonzero(x)), f"value {value}")


def _histograms(x: torch.Tensor, w: torch.Tensor, edges: torch.Tensor, points: torch.Tensor) -> tuple:
    """Counts over the data's range, a given range (with entries outside it and a NaN), weights,
    density, explicit edges, and one-point data (the range widened by 0.5 each way)."""
    flat_w = w.reshape(-1)[: x.numel()].reshape(x.shape)
    return (
        *torch.histogram(x, 5),
        *torch.histogram(x, 4, range=(-1.0, 1.5), weight=flat_w, density=True),
        *torch.histogram(x, edges, weight=flat_w),
        *torch.histogram(x, edges, density=True),
        *torch.histogram(points, 3),
        *torch.histogramdd(w, [3, 2]),
        *torch.histogramdd(w, [2, 4], range=[-1.0, 1.0, 0.0, 2.0], weight=w[:, 0].abs(), density=True),
        *torch.histogramdd(w, [edges, edges[1:]]),
    )


HISTOGRAM_INPUTS = (
    torch.cat([_floats((3, 7), 0).reshape(-1), torch.tensor([float("nan"), 2.0, -1.0])]),  # -1 and 2 edges-exact
    _floats((11, 2), 1),
    torch.tensor([-2.0, -0.5, 0.25, 0.5, 3.0]),
    torch.full((4,), 2.5),
)


@pytest.mark.parametrize("engine", ["numpy", "jax"])
def test_histogram_matches_torch(engine: str) -> None:
    if engine == "jax":
        pytest.importorskip("jax")
    x = HISTOGRAM_INPUTS[0][:-3]  # torch refuses NaN when it takes the range from the data
    inputs = (x, *HISTOGRAM_INPUTS[1:])
    # The aten level keeps histogramdd whole (aten.histogramdd, a list of edges among its results): not lowered.
    assert_converts_and_matches(_histograms, inputs, levels=("high", "core"), engine=engine)
    nan = (HISTOGRAM_INPUTS[0],)
    assert_converts_and_matches(
        lambda t: torch.histogram(t, 4, range=(-1.0, 2.0)), nan, levels=("aten",), engine=engine
    )


def test_sizes_stay_symbolic_downstream() -> None:
    _, program, exported = convert(lambda x: torch.nonzero(x > 0).float() * 2, (_floats((3, 4), 0),))
    assert [s.name for s in exported.ir.data_symbols] == ["u0"]
    assert exported.ir.data_symbols[0].hint == int((_floats((3, 4), 0) > 0).sum())
    shapes = [ins.shape for ins in program.instrs if ins.call.op != "Binary" or ins.shape != (3, 4)]
    assert shapes and all(str(s[0]) == "u0" for s in shapes), shapes


def test_empty_selection() -> None:
    model, _, _ = convert(lambda x: torch.nonzero(x > 0).float() + 1, (_floats((3, 4), 0),))
    out = model(-np.ones((3, 4), np.float32))
    assert out.shape == (0, 2) and out.dtype == np.float32


@pytest.mark.slow
def test_grouped_mm_fallback_matches_torch() -> None:
    pytest.importorskip("transformers")
    import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

    def grouped(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch.ops.transformers.grouped_mm_fallback(x, w, offs)

    x, w = _floats((9, 4), 0), _floats((3, 4, 5), 1)
    offs = torch.tensor([2, 2, 7], dtype=torch.int32)  # an empty group; rows 7, 8 belong to none
    model, program, _ = convert(grouped, (x, w, offs))
    assert "GroupedMatMul" in program.call_histogram()
    for counts in ([2, 2, 7], [0, 9, 9], [3, 5, 9]):
        _check_run(model, grouped, (x, w, torch.tensor(counts, dtype=torch.int32)), f"offs {counts}")


ENGINE_LIBRARIES = {"numpy": "numpy", "jax": "jax", "onnxruntime": "onnxruntime", "openvino": "openvino"}
HISTC_EDGES = torch.tensor([-1.0, 1.0, 0.2, -0.6, 2.0, -3.0, float("nan"), 0.9999999, float("inf")])


def _histc_cases(x: torch.Tensor, y: torch.Tensor, point: torch.Tensor, experts: torch.Tensor) -> tuple:
    """A given range (values on its edges, outside it, NaN, inf), the data's range (float64), one-point
    data (the range widened by 1 each way), and MoE expert counts."""
    return (
        torch.histc(x, bins=5, min=-1.0, max=1.0),
        torch.histc(y, bins=7),
        torch.histc(point, bins=3),
        torch.histc(experts.float(), bins=4, min=0, max=3),
    )


@pytest.mark.parametrize("engine", list(ENGINE_LIBRARIES))
def test_histc_on_every_engine(engine: str) -> None:
    pytest.importorskip(ENGINE_LIBRARIES[engine])
    make = lambda k: (  # noqa: E731
        torch.cat([_floats((30,), k), HISTC_EDGES]),
        _floats((6, 5), k, F64),
        torch.full((4,), 2.5 + k),
        _ints((10, 2), 4, k),
    )
    model, _, _ = convert(_histc_cases, make(0), engine=engine)
    for seed in range(3):
        _check_run(model, _histc_cases, make(seed), f"{engine} seed {seed}")


@pytest.mark.parametrize("engine", list(ENGINE_LIBRARIES))
def test_grouped_mm_on_every_engine(engine: str) -> None:
    """Each row times its group's matrix, the rows past the last offset zero; groups of any size
    (none, all, empty in the middle) on the same export, NaN and inf rows kept where they are."""
    pytest.importorskip(ENGINE_LIBRARIES[engine])
    pytest.importorskip("transformers")
    import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

    def grouped(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch.ops.transformers.grouped_mm_fallback(x, w, offs)

    x, w = _floats((9, 4), 0), _floats((3, 4, 5), 1)
    model, _, _ = convert(grouped, (x, w, torch.tensor([2, 2, 7], dtype=torch.int32)), engine=engine)
    special = x.clone()
    special[1, 2], special[8, 0], special[5, 1] = float("nan"), float("inf"), float("-inf")
    for rows, counts in ((x, [2, 2, 7]), (x, [0, 9, 9]), (x, [3, 5, 9]), (x, [0, 0, 0]), (special, [2, 6, 7])):
        _check_run(model, grouped, (rows, w, torch.tensor(counts, dtype=torch.int32)), f"{engine} offs {counts}")


class StoredExperts(torch.nn.Module):
    """Experts as weights: ``[experts, out, in]`` read transposed (transformers' layout), or
    ``[experts, in, out]`` read as they are."""

    def __init__(self, transposed: bool) -> None:
        super().__init__()
        self.transposed = transposed
        shape = (3, 5, 4) if transposed else (3, 4, 5)
        self.weight = torch.nn.Parameter(torch.randn(shape, generator=torch.Generator().manual_seed(4)))

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        w = self.weight.transpose(1, 2) if self.transposed else self.weight
        return torch.ops.transformers.grouped_mm_fallback(x, w, offs)


@pytest.mark.parametrize("transposed", [True, False])
@pytest.mark.parametrize("engine", list(ENGINE_LIBRARIES))
def test_grouped_mm_of_stored_experts_on_every_engine(engine: str, transposed: bool) -> None:
    """The graph engines read each expert's matrix where the weight lies (an initializer of its own)."""
    pytest.importorskip(ENGINE_LIBRARIES[engine])
    pytest.importorskip("transformers")
    import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

    module = StoredExperts(transposed).eval()
    x = _floats((9, 4), 0)
    model, _, _ = convert(module, (x, torch.tensor([2, 2, 7], dtype=torch.int32)), engine=engine)
    for counts in ([2, 2, 7], [0, 9, 9], [3, 5, 9], [0, 0, 0]):
        _check_run(model, module, (x, torch.tensor(counts, dtype=torch.int32)), f"{engine} offs {counts}")


def test_jax_refuses_data_dependent_sizes_in_one_line() -> None:
    pytest.importorskip("jax")
    with pytest.raises(RlxError) as err:
        convert(lambda x: torch.nonzero(x > 0), (_floats((3, 4), 0),), engine="jax")
    message = str(err.value)
    assert "\n" not in message and "depend on the data" in message and "Nonzero" in message


def test_data_sizes_mixed_with_dynamic_input_sizes() -> None:
    from torch.export import Dim

    def select(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.nonzero(x > 0)
        return rows.float().sum(0) * rows.shape[0] + x.shape[0], x[x > 0.5].reshape(-1, 1) * x.shape[0]

    dynamic = {"args": ({0: Dim("batch", min=1, max=10)},)}  # Wrap's forward takes *args
    model, program, _ = convert(select, (_floats((3, 4), 0),), dynamic_shapes=dynamic)
    assert [s.name for s in program.symbols] == ["batch"] and len(program.data_symbols) == 2
    for seed, batch in enumerate((1, 7, 5, 7)):  # one plan per batch size; the data sizes vary within each
        _check_run(model, select, (_floats((batch, 4), seed),), f"batch {batch}")


@pytest.mark.parametrize("engine", ["numpy", "jax"])
@pytest.mark.parametrize(
    "x",
    [torch.tensor(3.5), torch.tensor([-7]), torch.tensor(True), torch.tensor([[False]]), torch.tensor(-2.0)],
    ids=["f32", "i64", "bool", "bool_2d", "f32_neg"],
)
def test_item_is_a_zero_d_tensor(x: torch.Tensor, engine: str) -> None:
    """``item()`` reads data: a 0-d tensor of the input's dtype, run again at other values (a bool's
    0 ≤ u0 ≤ 1 assertions are facts about the data, not guards on sizes)."""
    if engine == "jax":
        pytest.importorskip("jax")
    model, _, _ = convert(lambda t: t.item(), (x,), engine=engine)
    for value in (x, x.logical_not() if x.dtype == torch.bool else x * 3 - 1):
        got = np.asarray(model(tensor_to_numpy(value)))
        assert got.shape == () and got.dtype == tensor_to_numpy(value).dtype
        assert got.item() == value.item()


def test_item_in_arithmetic() -> None:
    x = _floats((3, 4), 1)
    model, _, _ = convert(lambda t: t * t[0, 1].item() + t[1, 2].item(), (x,))
    _check_run(model, lambda t: t * t[0, 1].item() + t[1, 2].item(), (x * 2,), "x * 2")


def test_sizes_read_with_item_are_refused_in_one_line() -> None:
    with pytest.raises(RlxError) as err:
        convert(lambda t, i: torch.tensor_split(t, i, 1), (_floats((5, 6), 0), torch.tensor([1, 3])))
    assert "\n" not in str(err.value)
