"""The onnxruntime engine (``engine="onnxruntime"``: the Program emitted as ONNX, run by one
onnxruntime session per input-shape binding) against PyTorch.

The same table of cases as the JAX engine (tests/runtime/test_jax_engine.py): every core Call in a
real lowered program, values, shapes, dtypes (int64/float64/bool/f16/bf16) and NaN/inf; errors.
The examples, conv/norm modules, dynamic shapes and threads: tests/runtime/test_engines_shared.py.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from rlx.errors import UsageError

from helpers import (
    assert_arrays_match,
    block_imports,
    convert,
    optimized_op_types,
    pooling_specials,
    rand,
    sweep,
    with_specials,
)

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
from runtime.test_jax_engine import CASES, _params, check_case  # noqa: E402

F32 = torch.float32


# onnxruntime computes these only in float32: float64 goes through float32 (a documented limit,
# held to float32 precision by test_float64_via_float32_is_float32_accurate).
F64_VIA_F32 = [torch.tan, torch.asin, torch.acos, torch.atan, torch.sinh, torch.cosh, torch.asinh, torch.acosh,
               torch.atanh, torch.erf]  # fmt: skip


def _ort_cases():
    for name, calls, variants, *rest in CASES:
        if name.startswith("unary-f64"):  # (the lambdas of the table are the two GELUs)
            variants = [v for v in variants if v not in F64_VIA_F32 and getattr(v, "__name__", "") != "<lambda>"]
        yield (name, calls, variants, *rest)


@pytest.mark.parametrize("name,calls,variants,inputs,dtypes,levels", _params(list(_ort_cases())))
def test_calls_match_torch(name, calls, variants, inputs, dtypes, levels):
    check_case("onnxruntime", name, calls, variants, inputs, dtypes, levels)


def test_float64_via_float32_is_float32_accurate():
    x = rand((3, 40), torch.float64, low=-0.9, high=0.9, seed=5)
    fn, data = sweep(F64_VIA_F32 + [torch.nn.functional.gelu], (lambda d: x,), (torch.float64,))
    model, _, _ = convert(fn, data, engine="onnxruntime")
    got = model(x.numpy())
    with torch.no_grad():
        want = fn(x)
    for g, w in zip(got, want):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w.numpy(), rtol=2e-6, atol=1e-7)


def test_missing_onnxruntime_names_the_extra(tmp_path):
    script = block_imports("onnxruntime") + textwrap.dedent(
        """
        import rlx
        import rlx.runtime.engines
        try:
            rlx.runtime.engines.check_engine("onnxruntime")
        except rlx.RlxError as e:
            print("ERR", e)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "ERR" in out and "rlx[onnxruntime]" in out


def _sdpa_variants(q, k, v, bool_mask, add_mask):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return (
        sdpa(q, k, v),
        sdpa(q, k, v, attn_mask=bool_mask),  # query 0 of batch 1 may attend nowhere: zeros
        sdpa(q, k, v, attn_mask=add_mask, scale=0.3),
        sdpa(q, k, v, attn_mask=bool_mask[0, 0]),  # [L, S]
        sdpa(q, k, v, is_causal=True),  # (stays in standard operators)
    )


@pytest.mark.parametrize("contrib", [("attention",), ()])
def test_multi_head_attention_fusion_matches_torch(contrib):
    from rlx.exporters.onnx import GraphOptions, to_onnx

    q, k, v = rand((2, 4, 6, 8), F32, seed=1), rand((2, 4, 7, 8), F32, seed=2), rand((2, 4, 7, 8), F32, seed=3)
    bool_mask = torch.rand(2, 1, 6, 7, generator=torch.Generator().manual_seed(0)) > 0.3
    bool_mask[1, 0, 0] = False
    add_mask = torch.zeros(2, 1, 1, 7).masked_fill(torch.arange(7) >= 5, float("-inf"))
    inputs = (q, k, v, bool_mask, add_mask)
    model, program, _ = convert(_sdpa_variants, inputs, engine="onnxruntime", engine_options={"contrib": contrib})
    with torch.no_grad():
        want = _sdpa_variants(*inputs)
    for k_, (g, w) in enumerate(zip(model(*(t.numpy() for t in inputs)), want)):
        assert g.shape == tuple(w.shape) and g.dtype == np.float32
        assert_arrays_match(g, w.numpy(), f"sdpa variant {k_}", rtol=1e-5, atol=1e-6)
    ops = [n.op_type for n in to_onnx(program, {}, options=GraphOptions(contrib=contrib)).graph.node]
    assert ops.count("MultiHeadAttention") == (4 if contrib else 0)


def _decoder_sdpa_variants(q, k, v, kv2, bool_mask):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return (
        sdpa(q, q, q, is_causal=True),  # L == S: onnxruntime's own causal triangle (unidirectional)
        sdpa(q, k, v, is_causal=True),  # L < S: the top-left triangle as a bias
        sdpa(q, q, q, attn_mask=bool_mask[..., :6], is_causal=True, scale=0.3),  # row 0 of batch 1: zeros
        sdpa(q, kv2, kv2, enable_gqa=True),  # 2 key/value heads serve 4 query heads
        sdpa(q, kv2[:, :, :6], kv2[:, :, :6], is_causal=True, enable_gqa=True),
    )


# MultiHeadAttention nodes per contrib choice: causal / grouped ones only with "causal_attention".
DECODER_FUSIONS = {("attention", "causal_attention"): 5, ("attention",): 0, ("causal_attention",): 0, (): 0}


@pytest.mark.parametrize("contrib", list(DECODER_FUSIONS))
def test_causal_attention_fusion_matches_torch(contrib):
    from rlx.exporters.onnx import GraphOptions, to_onnx

    q, k, v = rand((2, 4, 6, 8), F32, seed=4), rand((2, 4, 7, 8), F32, seed=5), rand((2, 4, 7, 8), F32, seed=6)
    kv2 = rand((2, 2, 7, 8), F32, seed=8)
    bool_mask = torch.rand(2, 1, 6, 7, generator=torch.Generator().manual_seed(1)) > 0.3
    bool_mask[1, 0, 0, 0] = False  # with the triangle, query 0 of batch 1 may attend nowhere
    inputs = (q, k, v, kv2, bool_mask)
    model, program, _ = convert(_decoder_sdpa_variants, inputs, engine="onnxruntime", engine_options={"contrib": contrib})  # fmt: skip
    with torch.no_grad():
        want = _decoder_sdpa_variants(*inputs)
    for k_, (g, w) in enumerate(zip(model(*(t.numpy() for t in inputs)), want)):
        assert g.shape == tuple(w.shape) and g.dtype == np.float32
        assert_arrays_match(g, w.numpy(), f"decoder sdpa variant {k_}", rtol=1e-5, atol=1e-6)
    nodes = to_onnx(program, {}, options=GraphOptions(contrib=contrib)).graph.node
    fused = [n for n in nodes if n.op_type == "MultiHeadAttention"]
    assert len(fused) == DECODER_FUSIONS[contrib]
    causal = [n for n in fused if any(a.name == "unidirectional" and a.i == 1 for a in n.attribute)]
    assert len(causal) == (2 if fused else 0)  # the L == S causal calls without a mask


def test_unknown_contrib_fusion_is_one_line():
    with pytest.raises(UsageError, match="unknown contrib fusion"):
        convert(lambda x: x + 1, (torch.ones(2),), engine="onnxruntime", engine_options={"contrib": ("bogus",)})


class ConvPools(torch.nn.Module):
    """conv → relu → max pool (onnxruntime's NCHWc chain; onnxruntime has no float64 Conv: relu
    alone there), overlapping padded windows, ceil mode, 1-d."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, dtype=dtype) if dtype == F32 else torch.nn.Identity()

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return (
            torch.nn.functional.max_pool2d(y, 2),
            torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1),
            torch.nn.functional.max_pool2d(x, 2, stride=2, ceil_mode=True),
            torch.nn.functional.max_pool1d(x.flatten(2), 4),
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", ["finite", "nan", "inf"])
def test_max_pool_propagates_nan_like_torch(dtype, case):
    x = rand((2, 3, 9, 9), dtype, seed=4)
    module = ConvPools(dtype)
    model, _, _ = convert(module, (x,), engine="onnxruntime")
    inputs = pooling_specials(x, case)
    got = model(inputs.numpy())
    with torch.no_grad():
        want = module(inputs)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_arrays_match(g, w.numpy(), f"{case} pool {k}", rtol=1e-5, atol=1e-6)
    if case == "nan":
        assert np.isnan(got[1]).sum() == np.isnan(want[1].numpy()).sum() > 0
    executor = model.executor_for([inputs.numpy()])
    # The plain MaxPool session ran alone unless a pooled input held NaN or inf.
    assert (executor._exact is not None) == (case != "finite")


def test_pooling_nan_switch():
    from rlx.exporters.onnx import GraphOptions, to_onnx

    x = rand((2, 3, 9, 9), F32, seed=4)
    _, program, _ = convert(ConvPools(F32), (x,), engine="onnxruntime")
    graphs = {
        mode: to_onnx(program, {}, options=GraphOptions(external_weights=True, pooling_nan=mode)).graph
        for mode in (True, False, "check")
    }
    ops = {mode: [n.op_type for n in graph.node] for mode, graph in graphs.items()}
    assert ops[True].count("MaxPool") == 8 and ops[True].count("IsNaN") == 4  # the NaN mask pooled too
    assert ops[False].count("MaxPool") == 4 and "IsNaN" not in ops[False] and "GlobalAveragePool" not in ops[False]
    assert ops["check"].count("MaxPool") == 4 and ops["check"].count("GlobalAveragePool") == 4
    assert [o.name for o in graphs["check"].output][-1] == "rlx/nan_check"
    assert "rlx/nan_check" not in [o.name for o in graphs[True].output]
    model, _, _ = convert(ConvPools(F32), (x,), engine="onnxruntime", engine_options={"pooling_nan": False})
    assert not model.executor_for([x.numpy()])._check  # onnxruntime's rule: no check, no rerun
    with pytest.raises(UsageError, match="pooling_nan"):
        convert(ConvPools(F32), (x,), engine="onnxruntime", engine_options={"pooling_nan": "check"})


class NanMakers(torch.nn.Module):
    """Pooled inputs that can hold NaN although the image is finite: a log of negative values, a
    division, a conv whose weight holds NaN, a BatchNorm whose running variance is negative; and a
    plain conv → BatchNorm → relu → pool chain beside them."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bad_conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.norm, self.bad_norm = torch.nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
        with torch.no_grad():
            for m in (self.conv, self.bad_conv):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g))
            self.bad_conv.weight[1, 0, 1, 1] = float("nan")
            self.bad_norm.running_var.copy_(torch.tensor([1.0, -2.0, 0.5]))

    def forward(self, x, y):
        pool = torch.nn.functional.max_pool2d
        return (
            pool(torch.log(x), 2),
            pool(x / y, 2),
            pool(self.bad_conv(x), 2),
            pool(self.bad_norm(x), 2),
            pool(torch.relu(self.conv(self.norm(x))), 2),
        )


def test_max_pool_nan_made_inside_the_graph_like_torch():
    """Where a step on the way can make NaN of finite values, the pooled tensor itself is checked
    (not the image): PyTorch's NaN still propagates through the pools; a chain that cannot is
    checked through its image once."""
    from rlx.exporters.onnx import FINITE_INPUTS, GraphOptions, to_onnx

    x, y = rand((2, 3, 8, 8), F32, seed=6), rand((2, 3, 8, 8), F32, seed=7)
    y[0, 1, 2, 3] = 0.0  # with x's value there: ±inf, NaN where x is 0 too
    x[0, 1, 2, 3] = 0.0
    module = NanMakers().eval()
    model, program, _ = convert(module, (x, y), engine="onnxruntime")
    got = model(x.numpy(), y.numpy())
    with torch.no_grad():
        want = module(x, y)
    for k, (g, w) in enumerate(zip(got, want)):
        assert np.isnan(w.numpy()).any() == (k < 4), f"pool {k}: the case makes no NaN"
        assert_arrays_match(g, w.numpy(), f"pool {k}", rtol=1e-5, atol=1e-5)
    graph_model = to_onnx(
        program, {}, options=GraphOptions(external_weights=True, pooling_nan="check", weight_values=dict(model.weights))
    )
    graph = graph_model.graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("GlobalAveragePool") == 4  # the four that can make NaN: checked themselves
    sums = [n for n in graph.node if n.op_type == "ReduceSum"]
    assert len(sums) == 4 and all(n.input[0] != "x" for n in sums)
    # the plain chain: no node; its image is named for the engine to check before the run
    assert {p.key: p.value for p in graph_model.metadata_props}[FINITE_INPUTS] == '["x"]'
    clean = NanMakers().eval()
    clean.bad_conv.weight.data[1, 0, 1, 1] = 0.0
    model, _, _ = convert(lambda x: torch.nn.functional.max_pool2d(torch.relu(clean.bad_conv(x)), 2), (x,),
                          engine="onnxruntime")  # fmt: skip
    nan_x = x.clone()
    nan_x[1, 2, 4, 4] = float("nan")
    for inputs in (x, nan_x):
        with torch.no_grad():
            want = torch.nn.functional.max_pool2d(torch.relu(clean.bad_conv(inputs)), 2)
        assert_arrays_match(model(inputs.numpy()), want.numpy(), "image-checked pool", rtol=1e-5, atol=1e-5)
    executor = model.executor_for([nan_x.numpy()])
    assert executor._finite_inputs == (0,) and not executor._check  # the image checked, no check node
    assert executor._exact is not None  # the NaN image was run exactly


class TanhGelu(torch.nn.Module):
    """GPT-2's MLP with its GELU (transformers' NewGELUActivation), and a cube used elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.proj = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        h = self.fc(x)
        gelu = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return self.proj(gelu), torch.pow(x, 3.0) + 1


@pytest.mark.parametrize("contrib", [("gelu",), ()])
def test_tanh_gelu_fusion_matches_torch(contrib, tmp_path):
    import onnxruntime as ort

    from rlx.exporters.onnx import GraphOptions, to_onnx

    x = rand((2, 8, 16), F32, seed=7)
    module = TanhGelu()
    model, program, _ = convert(module, (x,), engine="onnxruntime", engine_options={"contrib": contrib})
    with torch.no_grad():
        want = module(x)
    for k, (g, w) in enumerate(zip(model(x.numpy()), want)):
        assert_arrays_match(g, w.numpy(), f"output {k}", rtol=1e-5, atol=1e-6)
    onnx_model = to_onnx(program, dict(model.weights), options=GraphOptions(contrib=contrib))
    assert [n.op_type for n in onnx_model.graph.node].count("Pow") == (2 if contrib else 0)  # both cubes
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(onnx_model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    import onnx

    fused = [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert ("FastGelu" in fused) == bool(contrib)


class Flattened(torch.nn.Module):
    """What PyTorch's decompositions flatten: a Linear's input to 2-d (``view → mm → view``, with
    and without bias), batched products to 3-d (``view → bmm → view``, scores then scaled), heads
    merged then projected, a product also read flattened, and a flattened activation, cast and bias."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(11)
        self.w = torch.nn.Parameter(torch.randn(16, 8, generator=g, dtype=dtype))
        self.b = torch.nn.Parameter(torch.randn(16, generator=g, dtype=dtype))
        self.o = torch.nn.Parameter(torch.randn(8, 32, generator=g, dtype=dtype))

    def forward(self, x, q, k):
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        merged = torch.matmul(scores.softmax(-1), k).transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)
        flat = torch.mm(x.reshape(-1, 8), self.w.t())
        return (
            torch.nn.functional.linear(x, self.w),
            torch.nn.functional.linear(x, self.w, self.b),
            scores,
            torch.nn.functional.linear(merged, self.o),
            flat.view(2, 5, 16),
            flat,
            (torch.relu(x.reshape(-1, 8)) + self.b[:8]).to(torch.float64).view(2, 5, 8),
        )


@pytest.mark.parametrize("dtype", [F32, torch.float64])
@pytest.mark.parametrize("case", ["finite", "specials"])
def test_flattened_products_match_torch(dtype, case, tmp_path):
    """The emitter runs these products (and a flattened activation, cast and bias) on the N-d
    tensors the flattening reshapes read: values, shapes, dtypes and NaN/inf as PyTorch's."""
    import onnx
    import onnxruntime as ort

    from rlx.exporters.onnx import to_onnx

    x, q, k = rand((2, 5, 8), dtype, seed=1), rand((2, 4, 6, 8), dtype, seed=2), rand((2, 4, 6, 8), dtype, seed=3)
    if case == "specials":
        x, q = with_specials(x), with_specials(q)
    module = Flattened(dtype)
    model, program, _ = convert(module, (x, q, k), engine="onnxruntime")
    with torch.no_grad():
        want = module(x, q, k)
    got = model(x.numpy(), q.numpy(), k.numpy())
    for n, (g, w) in enumerate(zip(got, want)):
        assert_arrays_match(g, w.numpy(), f"output {n}", rtol=1e-5, atol=1e-5)
    if dtype != F32 or case != "finite":
        return
    onnx_model = to_onnx(program, dict(model.weights))
    products = [n for n in onnx_model.graph.node if n.op_type == "MatMul"]
    values = {v.name: v for v in program.inputs}
    assert products[0].input[0] == "q" and values["q"].shape == (2, 4, 6, 8)  # no 3-d detour
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(onnx_model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    fused = [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert "FusedMatMul" in fused and "Div" not in fused  # the scores' scale joined their product


class Linears(torch.nn.Module):
    """``nn.Linear`` as PyTorch's decompositions leave it: on rows (``addmm``), on a flattened N-d
    input (``view → addmm → view``), with and without bias, and a product its bias add shares."""

    def __init__(self, case: str) -> None:
        super().__init__()
        self.case = case
        self.fc = torch.nn.Linear(16, 8, bias="bias" in case)

    def forward(self, x):
        if self.case.startswith("shared"):
            product = torch.mm(x, self.fc.weight.t())
            return product + self.fc.bias, product * 2
        return self.fc(x)


# case → (input shape, the optimized graph's product nodes, nodes it must not have, must have)
LINEARS = {
    "rows+bias": ((4, 16), ["Gemm"], {"Add", "FusedMatMul"}, set()),
    "rows": ((4, 16), ["Gemm"], {"FusedMatMul"}, set()),
    "nd+bias": ((2, 5, 16), ["Gemm"], {"Add", "FusedMatMul"}, set()),
    "nd": ((2, 5, 16), ["FusedMatMul"], {"Reshape", "Gemm"}, set()),
    "shared+bias": ((4, 16), ["Gemm"], {"FusedMatMul"}, {"Add", "Mul"}),
}


@pytest.mark.parametrize("case", list(LINEARS))
@pytest.mark.parametrize("values", ["finite", "specials"])
def test_linears_read_weights_in_place(case, values, tmp_path):
    """A Linear multiplies by its weight in the stored [out, in] layout (no transposed copy): rows
    with their bias as one Gemm (transB), a flattened N-d input unflattened into one FusedMatMul
    with no Reshape; a product also read elsewhere keeps its Add. Values, dtypes and NaN/inf as PyTorch's."""
    import onnx
    import onnxruntime as ort

    from rlx.exporters.onnx import GraphOptions, to_onnx
    from rlx.exporters.onnx.registry import DEFAULT_CONTRIB
    from rlx.runtime.onnxruntime_engine.weights_in_place import read_weights_in_place

    shape, products, absent, present = LINEARS[case]
    x = rand(shape, F32, seed=3)
    if values == "specials":
        x = with_specials(x)
    module = Linears(case)
    model, program, _ = convert(module, (x,), engine="onnxruntime")
    with torch.no_grad():
        want = module(x)
    got, want = model(x.numpy()), want if isinstance(want, tuple) else (want,)
    for k, (g, w) in enumerate(zip(got if isinstance(got, tuple) else (got,), want, strict=True)):
        assert_arrays_match(g, w.numpy(), f"output {k}", rtol=1e-5, atol=1e-5)
    graph = to_onnx(read_weights_in_place(program), dict(model.weights), options=GraphOptions(contrib=DEFAULT_CONTRIB))
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(graph.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    ops = [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]
    assert [op for op in ops if op in ("Gemm", "FusedMatMul", "MatMul")] == products, ops
    assert not absent & set(ops) and present <= set(ops), ops
    assert "Transpose" not in ops  # (no transposed copy of the weight)


def _avg_pools(x):
    F = torch.nn.functional
    return (
        F.avg_pool2d(x, 4, ceil_mode=True),  # partial windows at the end, no padding (EfficientNet's head)
        F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
        F.avg_pool2d(x, (2, 3), stride=(3, 2), padding=(1, 1), count_include_pad=False),
        F.avg_pool1d(x.flatten(2), 5, ceil_mode=True),
        F.avg_pool3d(x.unsqueeze(1), 2, ceil_mode=True),
        F.avg_pool2d(x, 20, ceil_mode=True),  # one window larger than the input
    )


def test_average_pools_of_input_elements_match_torch():
    """Pools whose divisor is each window's count of input elements run as one AveragePool with
    count_include_pad=0 (no multiply back and divide): values, dtypes and NaN/inf as PyTorch's.
    (onnxruntime has no float64 AveragePool.)"""
    from rlx.exporters.onnx import to_onnx

    x = with_specials(rand((2, 3, 9, 11), F32, seed=9))
    model, program, _ = convert(_avg_pools, (x,), engine="onnxruntime")
    with torch.no_grad():
        want = _avg_pools(x)
    for k, (g, w) in enumerate(zip(model(x.numpy()), want)):
        assert_arrays_match(g, w.numpy(), f"pool {k}", rtol=1e-6, atol=1e-7)
    nodes = to_onnx(program, {}).graph.node
    pools = [n for n in nodes if n.op_type == "AveragePool"]
    assert len(pools) == 6 and all(a.i == 0 for n in pools for a in n.attribute if a.name == "count_include_pad")
    assert not any(n.op_type == "Div" for n in nodes)


class GroupNorms(torch.nn.Module):
    """One group, one channel per group (wav2vec2's feature extractor), no affine; 3-d and 4-d."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.norms = torch.nn.ModuleList(
            [torch.nn.GroupNorm(1, 6), torch.nn.GroupNorm(6, 6), torch.nn.GroupNorm(2, 6, affine=False, eps=1e-3)]
        ).to(dtype)
        with torch.no_grad():
            for m in self.norms[:2]:
                m.weight.copy_(torch.randn(6, generator=g))
                m.bias.copy_(torch.randn(6, generator=g))

    def forward(self, x):
        return tuple(m(x) for m in self.norms) + tuple(m(x.flatten(2)) for m in self.norms)


@pytest.mark.parametrize("dtype", [F32, torch.float64])
@pytest.mark.parametrize("case", ["finite", "specials"])
def test_group_norm_matches_torch(dtype, case):
    """float32 GroupNorm runs as InstanceNormalization over [N, groups, rest]: values, dtypes, and
    NaN/inf confined to the groups that hold them, as PyTorch's."""
    from rlx.exporters.onnx import to_onnx

    x = rand((2, 6, 4, 5), dtype, seed=12)
    if case == "specials":
        x[1, 4, 2, 2] = float("nan")
        x[0, 1, 0, 3] = float("inf")
    module = GroupNorms(dtype).eval()
    model, program, _ = convert(module, (x,), engine="onnxruntime")
    with torch.no_grad():
        want = module(x)
    for k, (g, w) in enumerate(zip(model(x.numpy()), want)):
        assert_arrays_match(g, w.numpy(), f"group norm {k}", rtol=1e-5, atol=1e-5)
    ops = [n.op_type for n in to_onnx(program, dict(model.weights)).graph.node]
    assert ops.count("InstanceNormalization") == (6 if dtype == F32 else 0)


class ConstantMasks(torch.nn.Module):
    """Attention masks built from ``arange`` (the same on every run, as transformers' decoders build
    them): the causal triangle as booleans and as a 0/-inf bias, a mask allowing everything, one
    with a row that may attend nowhere, an irregular one, and the triangle with GQA."""

    def forward(self, q, k, v, kv2):
        sdpa = torch.nn.functional.scaled_dot_product_attention
        rows, cols = torch.arange(q.shape[-2]), torch.arange(k.shape[-2])
        triangle = (cols[None, :] <= rows[:, None])[None, None]
        bias = torch.zeros(triangle.shape).masked_fill(~triangle, float("-inf"))
        everything = cols[None, :] >= 0
        dead = triangle & (rows[:, None] != 2)  # query 2 may attend nowhere: zeros
        irregular = (rows[:, None] + cols[None, :]) % 3 != 1
        return (
            sdpa(q, k, v, attn_mask=triangle),
            sdpa(q, k, v, attn_mask=bias),
            sdpa(q, k, v, attn_mask=everything),
            sdpa(q, k, v, attn_mask=dead),
            sdpa(q, k, v, attn_mask=irregular),
            sdpa(q, kv2, kv2, attn_mask=triangle, enable_gqa=True),
            sdpa(q, k, v, attn_mask=triangle, is_causal=False, scale=0.2),
        )


@pytest.mark.parametrize("contrib", [("attention", "causal_attention"), ()])
def test_constant_attention_masks_match_torch(contrib):
    """A mask known at load is simplified (the triangle → onnxruntime's own causal attention, an
    all-allowing one dropped, no zeroing of dead rows where there are none) with PyTorch's values."""
    from rlx.exporters.onnx import GraphOptions, to_onnx

    q, k, v = rand((2, 4, 6, 8), F32, seed=21), rand((2, 4, 6, 8), F32, seed=22), rand((2, 4, 6, 8), F32, seed=23)
    kv2 = rand((2, 2, 6, 8), F32, seed=24)
    module = ConstantMasks()
    inputs = (q, k, v, kv2)
    model, program, _ = convert(module, inputs, engine="onnxruntime", engine_options={"contrib": contrib})
    with torch.no_grad():
        want = module(*inputs)
    got = model(*(t.numpy() for t in inputs))
    for n, (g, w) in enumerate(zip(got, want)):
        assert_arrays_match(g, w.numpy(), f"mask {n}", rtol=1e-5, atol=1e-6)
    assert not np.any(got[3][:, :, 2]) and np.all(np.isfinite(got[3]))
    nodes = to_onnx(
        program, {}, options=GraphOptions(contrib=contrib, external_weights=True, weight_values=dict(model.weights))
    ).graph.node
    fused = [n for n in nodes if n.op_type == "MultiHeadAttention"]
    causal = [n for n in fused if any(a.name == "unidirectional" and a.i == 1 for a in n.attribute)]
    assert len(fused) == (7 if contrib else 0) and len(causal) == (4 if contrib else 0)
    assert sum(n.op_type == "ReduceMin" for n in nodes) == 1  # dead rows zeroed for the one mask with them
    plain = to_onnx(
        program, {}, options=GraphOptions(contrib=contrib)
    ).graph.node  # (no weights' values: nothing known)
    assert sum(n.op_type == "ReduceMin" for n in plain) == 7


class MixedOutputs(torch.nn.Module):
    """Three inputs and three outputs of three dtypes (float32, int64, bool), and a fourth output
    ``wide`` of ``width`` floats a row."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def forward(self, x, index, mask):
        picked = torch.gather(x, 1, index)
        wide = x.sum(1, keepdim=True).expand(x.shape[0], self.width) * 2.0
        return torch.where(mask, picked, -picked), index * 3 - 1, picked > 0, wide


def _mixed_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 6, generator=g), torch.randint(0, 6, (4, 3), generator=g), torch.rand(4, 3, generator=g) > 0.5


def _bound_in_this_thread(executor) -> bool:
    import threading

    runs = executor._bound_runs
    return runs is not None and runs.get(threading.get_ident()) is not None


@pytest.mark.parametrize("width", [8, 16 * 1024])  # outputs of 0.3 KB in all (bound) and 256 KB (unbound)
def test_bound_runs_return_fresh_outputs_that_match_torch(width):
    """Small outputs are written into arrays bound to the session and copied out: each call's
    outputs are its own (the next call does not overwrite them), of every dtype, equal to PyTorch's."""
    module = MixedOutputs(width)
    model, _, _ = convert(module, _mixed_inputs(0), engine="onnxruntime")
    calls = [_mixed_inputs(seed) for seed in (1, 2, 3)]
    got = [model(*(t.numpy() for t in inputs)) for inputs in calls]
    for inputs, outputs in zip(calls, got):  # (checked after every call has run)
        with torch.no_grad():
            want = module(*inputs)
        for n, (g, w) in enumerate(zip(outputs, want)):
            assert_arrays_match(g, w.numpy(), f"output {n}")
            assert g.flags.writeable
    for first, later in zip(got[0], got[2]):
        assert not np.shares_memory(first, later)
    executor = model.executor_for([t.numpy() for t in calls[0]])
    assert _bound_in_this_thread(executor) == (width == 8)


def test_bound_runs_keep_threads_apart():
    """Every thread runs on a binding of its own (at most BOUND_THREADS of them, the rest
    unbound): threads calling one model at once each get their own inputs' outputs."""
    import threading

    from rlx.runtime.onnxruntime_engine.executor import BOUND_THREADS

    module = MixedOutputs(8)
    model, _, _ = convert(module, _mixed_inputs(0), engine="onnxruntime")
    n_threads = BOUND_THREADS + 4
    cases = [_mixed_inputs(seed) for seed in range(n_threads)]
    wants = [model(*(t.numpy() for t in inputs)) for inputs in cases]  # one at a time
    for inputs, outputs in zip(cases, wants):
        with torch.no_grad():
            for n, (g, w) in enumerate(zip(outputs, module(*inputs))):
                assert_arrays_match(g, w.numpy(), f"output {n}")
    start = threading.Barrier(n_threads)
    wrong: list[str] = []

    def work(k: int) -> None:
        arrays = [t.numpy() for t in cases[k]]
        start.wait()
        for _ in range(200):
            for n, (g, w) in enumerate(zip(model(*arrays), wants[k])):
                if not np.array_equal(g, w):
                    wrong.append(f"thread {k}, output {n}")
                    return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often, between any two steps of a call
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not wrong, wrong[:3]
    executor = model.executor_for([t.numpy() for t in cases[0]])
    assert len(executor._bound_runs) == BOUND_THREADS


class ConvActConv(torch.nn.Module):
    """conv 3×3 (8 → 16) → ``act`` → conv 3×3 (16 → 16): channels on every block."""

    def __init__(self, act) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.a, self.b, self.act = torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.Conv2d(16, 16, 3, padding=1), act

    def forward(self, x):
        return self.b(self.act(self.a(x)))


ACTIVATIONS = {  # name: (module, the node the engine's graph computes it with)
    "hardswish": (torch.nn.Hardswish(), "HardSwish"),
    "leaky-relu": (torch.nn.LeakyReLU(0.2), "LeakyRelu"),
    "relu6": (torch.nn.ReLU6(), "Clip"),
    "hardtanh": (torch.nn.Hardtanh(-0.5, 2.0), "Clip"),
    "hardsigmoid": (torch.nn.Hardsigmoid(), "HardSigmoid"),
}
GUARDED = ("Clip", "HardSigmoid")  # (their NaN is not PyTorch's on every kernel: the input is checked)


@pytest.mark.parametrize("values", ["finite", "specials"])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_onnxruntime_fuses_into_convolutions(name, values, tmp_path):
    """PyTorch's hardswish (decomposed to five nodes), hardsigmoid, leaky relu and clamps between
    constants are the single nodes onnxruntime fuses into the convolution before them, so the chain
    stays in its blocked layout (one layout change back at the end); Clip and HardSigmoid only where
    the engine checks their input for NaN (the exact graph, run on an input holding one, keeps Max
    and Min), and hardswish's clamps, which HardSwish replaces, add no check. Values, shapes,
    dtypes, NaN and inf as PyTorch's."""
    from rlx.runtime.onnxruntime_engine.executor import emit_model
    from rlx.runtime.onnxruntime_engine.pad_channels import channel_block

    module, op = ACTIVATIONS[name]
    module = ConvActConv(module).eval()
    x = rand((2, 8, 6, 6), seed=4)
    inputs = with_specials(x) if values == "specials" else x
    model, program, _ = convert(module, (inputs,), engine="onnxruntime")
    with torch.no_grad():
        want = module(inputs)
    got = model(inputs.numpy())
    assert got.dtype == np.float32
    assert_arrays_match(got, want.numpy(), name, rtol=1e-5, atol=1e-5)
    if values == "specials":
        return
    graph, exact = emit_model(program, model.engine), emit_model(program, model.engine, exact=True)
    assert [n.op_type for n in graph.graph.node].count(op) == 1
    assert (op in GUARDED) == any(n.op_type in ("Max", "Min") for n in exact.graph.node)
    assert (op in GUARDED) == (model.executor_for([x.numpy()])._finite_inputs != ())
    optimized = optimized_op_types(model, graph, tmp_path / "optimized.onnx")
    if channel_block() > 1:
        assert optimized.count("ReorderOutput") == 1, optimized


class SqueezeExcitation(torch.nn.Module):
    """conv 3×3 (8 → 16) → SiLU → x · sigmoid(excite(silu(squeeze(mean(x))))) → conv 3×3: an
    EfficientNet block's scale per channel, channels on every block."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(8)
        self.a, self.b = torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.Conv2d(16, 16, 3, padding=1)
        self.squeeze, self.excite = torch.nn.Conv2d(16, 16, 1), torch.nn.Conv2d(16, 16, 1)

    def forward(self, x):
        h = torch.nn.functional.silu(self.a(x))
        s = self.excite(torch.nn.functional.silu(self.squeeze(h.mean((2, 3), keepdim=True))))
        return self.b(h * torch.sigmoid(s))


@pytest.mark.parametrize("values", ["finite", "specials"])
def test_a_scale_per_channel_keeps_the_blocked_layout(values, tmp_path):
    """The engine's graph upsamples a squeeze-excitation scale to the image before the product
    (an exact copy), which onnxruntime runs in its blocked layout with the product: the block
    changes layout once, at the end, where the broadcast product cost a change each way. The
    portable export keeps the broadcast product. Values, NaN and inf as PyTorch's."""
    from rlx.exporters.onnx import to_onnx
    from rlx.runtime.onnxruntime_engine.executor import emit_model
    from rlx.runtime.onnxruntime_engine.pad_channels import channel_block

    module = SqueezeExcitation().eval()
    x = rand((2, 8, 6, 6), seed=6)
    inputs = with_specials(x) if values == "specials" else x
    model, program, _ = convert(module, (inputs,), engine="onnxruntime")
    with torch.no_grad():
        want = module(inputs)
    assert_arrays_match(model(inputs.numpy()), want.numpy(), "squeeze-excitation", rtol=1e-5, atol=1e-5)
    if values == "specials" or channel_block() <= 1:
        return
    assert "Resize" not in [n.op_type for n in to_onnx(program, dict(model.weights)).graph.node]
    optimized = optimized_op_types(model, emit_model(program, model.engine), tmp_path / "optimized.onnx")
    assert optimized.count("ReorderOutput") == 1 and "Upsample" in optimized, optimized


class OffBlock(torch.nn.Module):
    """conv 1×1 (16 → ``mid``, off the channel block) → ``act`` → conv 3×3 (``mid`` → 32)."""

    def __init__(self, mid: int, act) -> None:
        super().__init__()
        torch.manual_seed(mid)
        self.a, self.b, self.act = torch.nn.Conv2d(16, mid, 1), torch.nn.Conv2d(mid, 32, 3, padding=1), act

    def forward(self, x):
        return self.b(self.act(self.a(x)))


@pytest.mark.parametrize("mid", [20, 40])
@pytest.mark.parametrize("act", [torch.nn.Tanh(), torch.nn.Sigmoid(), torch.nn.Hardtanh()], ids=str)
def test_inf_through_a_convolution_off_the_channel_block_matches_torch(mid, act):
    """onnxruntime pads a convolution's output to its channel block itself, with zero filters, so
    ±inf in the convolution's input makes NaN in that padding (0 × inf), which the reading
    convolution's zero weights spread, where PyTorch's tanh, sigmoid or clamp made the real
    channels finite. The engine checks such inputs and runs them without the blocked layout."""
    module = OffBlock(mid, act).eval()
    x = rand((2, 16, 7, 7), seed=mid)
    model, _, _ = convert(module, (x,), engine="onnxruntime")
    for inputs in (x, with_specials(x)):
        with torch.no_grad():
            want = module(inputs)
        assert_arrays_match(model(inputs.numpy()), want.numpy(), f"{act} {mid}", rtol=1e-5, atol=1e-5)
