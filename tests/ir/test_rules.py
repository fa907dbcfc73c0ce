"""The shape/dtype rule of every Call: coverage, agreement with converted programs, refusal of a
damaged program.json at load, and unit cases against PyTorch's own shape and dtype results."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rlx
from rlx.errors import RlxError, SchemaError
from rlx.formats.bundle import write_bundle
from rlx.frontends.torch.tensors import tensor_to_numpy
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import CALL_TYPES, Call, Instr, Lit, Program, Ref, Value
from rlx.ir.rules import RULES, RuleError, TensorType, broadcast, infer, norm_axis, operand_types, promote
from rlx.ir.symbolic import Sym
from rlx.ir.validate import check_program
from rlx.runtime.numpy_engine.fused_calls import Fused, Gemm

from helpers import convert, exported_example

CALL_CLASSES = sorted(
    (c for c in vars(C).values() if isinstance(c, type) and issubclass(c, Call) and c is not Call),
    key=lambda c: c.__name__,
)
ENGINE_CALLS = (Gemm, Fused)  # the numpy engine's own, made by its load-time passes


# ── (a) every Call has a rule ────────────────────────────────────────────────
def test_every_call_has_a_rule():
    missing = [c.__name__ for c in (*CALL_CLASSES, *ENGINE_CALLS) if c not in RULES]
    assert not missing, f"Calls without a type rule in rlx.ir.rules: {missing}"
    assert len(CALL_CLASSES) >= 68  # the portable vocabulary (Gemm/Fused are the numpy engine's)


# ── (b) converted programs agree with the rules ──────────────────────────────
def _elementwise(x: torch.Tensor, m: torch.Tensor) -> Any:
    y = torch.where(m, x, -x).clamp(-1, 1)
    z = F.leaky_relu(x, 0.1) + torch.special.erfcx(x) + torch.lgamma(x.abs() + 1)
    return y, z.isnan(), torch.hash_tensor(x), (x > 0).to(torch.int64), torch.full((2, 3), 7.0), torch.arange(5)


def _movement(x: torch.Tensor, idx: torch.Tensor) -> Any:
    a = x.reshape(4, 6).permute(1, 0).expand(2, 6, 4)[:, 1:5:2]
    b = torch.cat([x[0], x[1]], 0)
    c = F.pad(x, (1, 2), value=3.0)
    d = x.index_select(1, idx), torch.gather(x, 2, idx.view(1, 1, 2).expand(2, 3, 2)), x[:, idx]
    return a, b, c, *d, x.flip(0), x.roll(1, 2), torch.diagonal(x, 1, 1, 2)


def _reductions(x: torch.Tensor, s: torch.Tensor) -> Any:
    values = torch.cummax(x, 1)
    return (
        x.sum(1, keepdim=True),
        x.var(0),
        x.argmax(1),
        x.cumsum(0),
        values.indices,
        x.argsort(1),
        x.topk(2, 1).indices,
        torch.searchsorted(s, x.reshape(-1)),
    )


class _Blocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.deconv = torch.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.gn = torch.nn.GroupNorm(2, 4)
        self.ln = torch.nn.LayerNorm(8)
        self.rms = torch.nn.RMSNorm(8)

    def forward(self, img: torch.Tensor, seq: torch.Tensor, grid: torch.Tensor) -> Any:
        h = self.gn(self.bn(self.conv(img)))
        pooled, where = F.max_pool2d(h, 2, ceil_mode=True, return_indices=True)
        q = self.rms(self.ln(seq)).view(2, 2, 5, 4)
        return (
            self.deconv(h),
            pooled,
            where,
            F.avg_pool2d(h, 3, 1, 1),
            F.adaptive_avg_pool2d(h, (3, 2)),
            F.scaled_dot_product_attention(q, q, q, is_causal=True),
            F.softmax(seq, -1),
            F.interpolate(img, size=(5, 7), mode="bilinear"),
            F.grid_sample(img, grid, align_corners=False),
        )


def _linalg(a: torch.Tensor, rhs: torch.Tensor) -> Any:
    spd = a @ a.mT + 4 * torch.eye(4)
    lu, piv = torch.linalg.lu_factor(a)
    ld, ldpiv = torch.linalg.ldl_factor(spd)
    return (
        torch.linalg.svd(a, full_matrices=False),
        torch.linalg.det(a),
        torch.linalg.slogdet(a),
        lu,
        piv,
        torch.linalg.lu(a),
        torch.linalg.solve_triangular(a.triu() + 4 * torch.eye(4), rhs, upper=True),
        torch.linalg.cholesky(spd),
        torch.linalg.qr(a),
        torch.linalg.eigh(spd),
        torch.geqrf(a),
        torch.linalg.eigvals(a),
        torch.linalg.ldl_solve(ld, ldpiv, rhs),
        torch.linalg.matrix_exp(a * 0.1),
    )


def _selection(x: torch.Tensor, i: torch.Tensor) -> Any:
    y = x.clone()
    y[i] = 1.0
    return (
        torch.nonzero(x > 0),
        torch.nonzero_static(x > 0, size=5),
        torch.masked_select(x, x > 0),
        torch.unique(i, return_inverse=True, return_counts=True),
        torch.bincount(i),
        torch.histc(x, 4, -1.0, 1.0),
        y,
        torch.zeros(6, 4).scatter_add(0, i.view(1, -1).expand(3, -1)[:, :4], x[:3, :4]),
    )


def _spectral_random(x: torch.Tensor) -> Any:
    spectrum = torch.fft.rfft(x)
    return torch.fft.irfft(spectrum, n=8), torch.fft.fft(x).conj_physical(), torch.rand(3, 2) * 0 + x[:3, :2]


class _AtenLevel(torch.nn.Module):
    """Ops that the default decomposition level rewrites before they reach their own Call."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> Any:
        return self.fc(x), x.roll((1, -1), (0, 1))


class _Dynamic(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:
        return torch.cat([x, y], 0).sum(-1), (x @ y.mT)[1:], x.flatten(), F.pad(y, (0, 0, 1, 1))


# name → (callable, inputs, export options)
FAMILIES: dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...], dict[str, Any]]] = {
    "elementwise": (_elementwise, (torch.randn(2, 3), torch.rand(2, 3) > 0.5), {}),
    "movement": (_movement, (torch.randn(2, 3, 4), torch.tensor([2, 0])), {}),
    "reductions": (_reductions, (torch.randn(3, 4), torch.linspace(-2, 2, 5)), {}),
    "blocks": (_Blocks(), (torch.randn(1, 3, 8, 8), torch.randn(2, 5, 8), torch.rand(1, 4, 6, 2) * 2 - 1), {}),
    "linalg": (_linalg, (torch.randn(4, 4), torch.randn(4, 2)), {}),
    "selection": (_selection, (torch.randn(6, 5), torch.tensor([1, 3, 3, 0, 5])), {}),
    "spectral_random": (_spectral_random, (torch.randn(4, 8),), {}),
    "aten_level": (_AtenLevel(), (torch.randn(2, 4),), {"decomposition": "aten"}),
    "dynamic": (
        _Dynamic(),
        (torch.randn(3, 4), torch.randn(5, 4)),
        {"dynamic_shapes": {"x": {0: torch.export.Dim("a", min=3)}, "y": {0: torch.export.Dim("b", min=2)}}},
    ),
}
EXAMPLES = ("mlp", "transformer", "cnn", "decoder_lm")


def _onnx_program() -> tuple[Program, dict[str, np.ndarray]]:
    """Calls only the ONNX front-end emits: NonMaxSuppression, Expand of a literal, Recurrent (an
    LSTM over a sequence whose length is a dynamic dimension) and ReduceAxes (axes a model input)."""
    from onnx import TensorProto, helper, numpy_helper

    from rlx.app.onnx_convert import lower_graph
    from rlx.app.pipeline import finish_program
    from rlx.frontends.onnx import reader

    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "most", "iou"], ["selected"]),
        helper.make_node("Expand", ["one", "shape"], ["ones"]),
        helper.make_node("LSTM", ["seq", "W", "R"], ["y"], hidden_size=3),
        helper.make_node("ReduceSum", ["scores", "axes"], ["summed"], keepdims=0),
    ]
    inits = {"most": np.array([3], np.int64), "iou": np.array([0.4], np.float32),
             "one": np.array(1.0, np.float32), "shape": np.array([2, 3], np.int64),
             "W": np.ones((1, 12, 2), np.float32), "R": np.ones((1, 12, 3), np.float32)}  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "nms",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 6, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, 6]),
            helper.make_tensor_value_info("seq", TensorProto.FLOAT, ["t", 1, 2]),
            helper.make_tensor_value_info("axes", TensorProto.INT64, [1]),
        ],  # fmt: skip
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in ("selected", "ones", "y", "summed")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    program, weights = lower_graph(
        reader.read(proto, {"boxes": (1, 6, 4), "scores": (1, 2, 6), "seq": (4, 1, 2), "axes": (1,)})
    )
    return finish_program(program), weights


@pytest.fixture(scope="module")
def programs() -> dict[str, tuple[Program, dict[str, np.ndarray]]]:
    """The op-family programs with their weights by key (the example models: ``test_example_models_…``)."""
    out = {}
    for name, (fn, inputs, options) in FAMILIES.items():
        _, program, exported = convert(fn, inputs, **options)
        out[name] = (program, exported.weights)
    out["onnx"] = _onnx_program()
    return out


# Calls these programs must keep exercising (GroupedMatMul exists only with torch._grouped_mm,
# which has no CPU kernel to export with).
NOT_IN_PROGRAMS = {"GroupedMatMul"}
COVERED = sorted(c.__name__ for c in CALL_CLASSES if c.__name__ not in NOT_IN_PROGRAMS)


def test_converted_programs_agree_with_their_rules(programs):
    seen: set[str] = set()
    for name, (program, _) in programs.items():
        check_program(program, name)  # raises on the first instruction that disagrees
        seen |= {ins.call.op for ins in program.instrs}
    missing = sorted(set(COVERED) - seen)
    assert not missing, f"no program of this test exercises {missing}: extend FAMILIES"


def test_numpy_engine_rewrites_agree_with_their_rules(bundles):
    """The numpy engine's load-time passes build Gemm and Fused: their results keep to the rules too."""
    seen: set[str] = set()
    for name, path in bundles.items():
        model = rlx.load(path)
        if model.program.is_dynamic:
            continue
        rewritten = model.executor_for([]).program  # a static program has one plan
        check_program(rewritten, name)
        seen |= {ins.call.op for ins in rewritten.instrs}
    assert {"Gemm", "Fused"} <= seen


def test_bundles_hold_portable_calls_only(bundles):
    """A written program.json names only portable Calls (never the numpy engine's Gemm/Fused), and
    one naming an engine's own Call is refused in one line, as an unknown Call."""
    assert not {c.__name__ for c in ENGINE_CALLS} & set(CALL_TYPES)
    for name, path in bundles.items():
        ops = {ins["op"] for ins in json.loads((path / "program.json").read_text())["instrs"]}
        assert ops <= set(CALL_TYPES), (name, sorted(ops - set(CALL_TYPES)))
    docs = [json.loads((path / "program.json").read_text()) for path in bundles.values()]
    doc, k = next((d, i) for d in docs for i, ins in enumerate(d["instrs"]) if ins["op"] == "MatMul")
    x, y = doc["instrs"][k]["args"]["x"], doc["instrs"][k]["args"]["y"]
    doc["instrs"][k] = {**doc["instrs"][k], "op": "Gemm", "args": {"x": x, "w": y, "bias": None, "activation": ""}}
    with pytest.raises(SchemaError, match=rf"^program\.json\.instrs\[{k}\]\.op: unknown call 'Gemm'"):
        Program.from_json(doc)


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_models_agree_with_their_rules(name, tmp_path):
    """examples/*.py as converted, as written to a bundle and loaded, and as the numpy engine rewrites them."""
    exported, program = exported_example(name, "high")
    check_program(program, name)
    path = write_bundle(program, {k: _numpy(v) for k, v in exported.weights.items()}, tmp_path / name)
    model = rlx.load(path)
    check_program(model.executor_for([]).program, f"{name} (numpy engine)")
    assert {ins.call.op for ins in program.instrs} <= set(COVERED)


# ── (c) a damaged program.json is refused at load ────────────────────────────
@pytest.fixture(scope="module")
def bundles(programs, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bundles")
    return {
        name: write_bundle(p, {k: _numpy(v) for k, v in w.items()}, root / name) for name, (p, w) in programs.items()
    }


def _numpy(v: Any) -> np.ndarray:
    return tensor_to_numpy(v) if isinstance(v, torch.Tensor) else np.asarray(v)


def _first_use(programs: dict[str, tuple[Program, Any]], op: str) -> tuple[str, int, Instr]:
    for name, (program, _) in programs.items():
        for k, ins in enumerate(program.instrs):
            if ins.call.op == op:
                return name, k, ins
    pytest.fail(f"no program of this test uses {op}")


def _damaged_shape(program: Program, ins: Instr) -> list[int | str]:
    """The declared shape with one extent the rule decides changed (or, where it decides none —
    a data-dependent size — one axis more)."""
    rule = infer(ins.call, operand_types(program.values()))
    shape: list[int | str] = [d if isinstance(d, int) else d.expr for d in ins.shape]
    for axis, d in enumerate(rule.shape):
        if d is not None:
            shape[axis] = d + 1 if isinstance(d, int) else f"{d.expr} + 1"
            return shape
    return [*shape, 2]


@pytest.mark.parametrize("what", ["shape", "dtype"])
@pytest.mark.parametrize("op", [op for op in COVERED if op not in ("Full",)] + ["Full"])
def test_damaged_instruction_is_refused_at_load(op, what, programs, bundles, tmp_path):
    name, k, ins = _first_use(programs, op)
    target = shutil.copytree(bundles[name], tmp_path / name)
    doc = json.loads((target / "program.json").read_text())
    entry = doc["instrs"][k]
    assert entry["result"] == ins.result and entry["op"] == op
    if what == "shape":
        entry["shape"] = _damaged_shape(programs[name][0], ins)
    else:
        entry["dtype"] = "f64" if entry["dtype"] != "f64" else "f32"
    (target / "program.json").write_text(json.dumps(doc))
    with pytest.raises(RlxError) as err:
        rlx.load(target)
    message = str(err.value)
    assert f"instrs[{k}] ({ins.result} = {op})" in message, message
    assert "\n" not in message and message.startswith("program.json")


def test_intact_bundles_load(bundles):
    for path in bundles.values():
        assert rlx.load(path).program.instrs


# ── (d) rules against PyTorch's own shapes and dtypes ────────────────────────
def _infer(call: Call, **operands: tuple[tuple[int, ...], str]) -> TensorType:
    return infer(call, operand_types({n: Value(n, s, t) for n, (s, t) in operands.items()}))


BROADCASTS = [((2, 1, 4), (3, 1)), ((), (5,)), ((1,), (7, 1)), ((4, 3), (4, 3)), ((0, 1), (1, 5))]


@pytest.mark.parametrize("a,b", BROADCASTS)
def test_broadcast_like_torch(a, b):
    want = tuple(torch.broadcast_shapes(a, b))
    assert broadcast(a, b) == want
    got = _infer(C.Binary("add", Ref("x"), Ref("y")), x=(a, "f32"), y=(b, "f32"))
    assert got == TensorType(want, "f32")


def test_broadcast_refuses_what_torch_refuses():
    with pytest.raises(RuntimeError):
        torch.broadcast_shapes((2, 3), (4, 3))
    with pytest.raises(RuleError, match="do not broadcast"):
        broadcast((2, 3), (4, 3))


def test_broadcast_of_symbols():
    s, t = Sym("s0"), Sym("s1")
    assert broadcast((s, 1), (1, 4)) == (s, 4)
    assert broadcast((s,), (5,)) == (5,)  # valid only when s0 is 1 or 5: 5 either way
    assert broadcast((s,), (t,)) == (s,)  # either may be 1: builders take the first …
    assert _infer(C.Binary("mul", Ref("x"), Ref("y")), x=((s,), "f32"), y=((t,), "f32")).shape == (
        None,
    )  # … rules say undecided


MATMULS = [
    ((3,), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((5, 2, 3), (3, 4)),
    ((2, 1, 2, 3), (4, 3, 6)),
    ((1, 2, 3), (7, 3, 1)),
]


@pytest.mark.parametrize("a,b", MATMULS)
def test_matmul_batch_dims_like_torch(a, b):
    want = torch.matmul(torch.zeros(a, device="meta"), torch.zeros(b, device="meta"))
    assert _infer(C.MatMul(Ref("x"), Ref("y")), x=(a, "f32"), y=(b, "f32")) == TensorType(tuple(want.shape), "f32")


def test_matmul_inner_dimension_is_required():
    with pytest.raises(RuleError, match="inner dimensions differ"):
        _infer(C.MatMul(Ref("x"), Ref("y")), x=((2, 3), "f32"), y=((4, 5), "f32"))
    # a symbolic inner dimension cannot be decided: accepted
    assert _infer(C.MatMul(Ref("x"), Ref("y")), x=((2, Sym("s0")), "f32"), y=((3, 5), "f32")).shape == (2, 5)


REDUCTIONS = [
    ((2, 3, 4), (1,), True),
    ((2, 3, 4), (0, 2), False),
    ((2, 3, 4), (), False),
    ((2, 3, 4), (), True),
    ((), (), False),
]


@pytest.mark.parametrize("shape,axes,keepdim", REDUCTIONS)
@pytest.mark.parametrize("fn", ["sum", "amax"])
def test_reduction_shapes_like_torch(shape, axes, keepdim, fn):
    x = torch.zeros(shape)
    want = getattr(torch, fn)(x, dim=axes or None, keepdim=keepdim) if axes or keepdim else getattr(torch, fn)(x)
    got = _infer(C.Reduce(fn, Ref("x"), axes, keepdim), x=(shape, "f32"))
    assert got == TensorType(tuple(want.shape), "f32")


@pytest.mark.parametrize("axis,keepdim", [(None, False), (None, True), (1, False), (1, True)])
def test_argmax_shapes_like_torch(axis, keepdim):
    want = torch.zeros(2, 3, 4).argmax(dim=axis, keepdim=keepdim)
    got = _infer(C.ArgReduce("argmax", Ref("x"), axis, keepdim), x=((2, 3, 4), "f32"))
    assert got == TensorType(tuple(want.shape), dtypes.from_numpy(want.numpy().dtype))


CONVS = [  # input, weight, stride, padding, dilation, groups
    ((1, 3, 9, 9), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1), 1),
    ((2, 4, 10, 7), (4, 1, 3, 2), (1, 3), (0, 2), (2, 1), 4),
    ((1, 2, 11), (5, 2, 4), (3,), (2,), (2,), 1),
]


@pytest.mark.parametrize("x,w,stride,padding,dilation,groups", CONVS)
def test_conv_output_like_torch(x, w, stride, padding, dilation, groups):
    conv = {1: F.conv1d, 2: F.conv2d}[len(x) - 2]
    want = conv(torch.zeros(x), torch.zeros(w), None, stride, padding, dilation, groups)
    call = C.Conv(Ref("x"), Ref("w"), None, stride, padding, dilation, groups, False, (0,) * len(stride))
    assert _infer(call, x=(x, "f32"), w=(w, "f32")) == TensorType(tuple(want.shape), "f32")


@pytest.mark.parametrize(
    "stride,padding,output_padding,groups", [((2, 2), (1, 1), (1, 0), 1), ((3, 1), (0, 1), (2, 0), 2)]
)
def test_transposed_conv_output_like_torch(stride, padding, output_padding, groups):
    x, w = (1, 4, 5, 6), (4, 3, 3, 2)
    want = F.conv_transpose2d(torch.zeros(x), torch.zeros(w), None, stride, padding, output_padding, groups)
    call = C.Conv(Ref("x"), Ref("w"), None, stride, padding, (1, 1), groups, True, output_padding)
    assert _infer(call, x=(x, "f32"), w=(w, "f32")) == TensorType(tuple(want.shape), "f32")


POOLS = [  # input, kernel, stride, padding, dilation, ceil_mode
    ((1, 2, 9, 9), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((1, 2, 10, 7), (3, 2), (2, 2), (1, 0), (1, 1), True),
    ((1, 1, 6, 6), (2, 2), (3, 3), (0, 0), (2, 2), True),
    ((2, 3, 11), (4,), (3,), (2,), (1,), True),
]


@pytest.mark.parametrize("x,kernel,stride,padding,dilation,ceil_mode", POOLS)
def test_pool_output_like_torch(x, kernel, stride, padding, dilation, ceil_mode):
    max_pool = {1: F.max_pool1d, 2: F.max_pool2d}[len(kernel)]
    avg_pool = {1: F.avg_pool1d, 2: F.avg_pool2d}[len(kernel)]
    values, indices = max_pool(torch.zeros(x), kernel, stride, padding, dilation, ceil_mode, return_indices=True)
    for want_indices in (False, True):
        call = C.MaxPool(Ref("x"), kernel, stride, padding, dilation, ceil_mode, want_indices)
        want = indices if want_indices else values
        assert _infer(call, x=(x, "f32")) == TensorType(tuple(want.shape), "i64" if want_indices else "f32")
    avg = avg_pool(torch.zeros(x), kernel, stride, padding, ceil_mode)
    call = C.AvgPool(Ref("x"), kernel, stride, padding, ceil_mode, True, None)
    assert _infer(call, x=(x, "f32")) == TensorType(tuple(avg.shape), "f32")


TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
                "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8,
                "bool": torch.bool, "c64": torch.complex64, "c128": torch.complex128}  # fmt: skip


@pytest.mark.parametrize("a", list(TORCH_DTYPES))
def test_promotion_like_torch(a):
    for b in TORCH_DTYPES:
        want = torch.promote_types(TORCH_DTYPES[a], TORCH_DTYPES[b])
        assert TORCH_DTYPES[promote(a, b)] == want, (a, b)


@pytest.mark.parametrize("fn,dtype", [("eq", "bool"), ("logical_and", "bool"), ("add", "f32"), ("complex", "c64")])
def test_binary_dtypes_like_torch(fn, dtype):
    x = torch.ones(2, 3)
    want = {"eq": torch.eq, "logical_and": torch.logical_and, "add": torch.add, "complex": torch.complex}[fn](x, x)
    assert TORCH_DTYPES[dtype] == want.dtype
    assert _infer(C.Binary(fn, Ref("x"), Ref("y")), x=((2, 3), "f32"), y=((2, 3), "f32")) == TensorType((2, 3), dtype)


def test_norm_axis_like_torch():
    x = torch.zeros(2, 3, 4)
    for axis in range(-3, 3):
        assert x.shape[norm_axis(axis, 3)] == x.shape[axis]
    with pytest.raises(RuleError, match="out of range"):
        norm_axis(3, 3)


def test_check_program_names_the_instruction_and_accepts_symbols():
    s = Sym("s0")
    program = Program(
        "p",
        [Value("x", (s, 3), "f32")],
        [],
        [
            Instr("y", C.Binary("mul", Ref("x"), Lit(2.0, "f32")), (s, 3), "f32"),
            Instr("z", C.Slice(Ref("y"), 0, 1, s, 1), (Sym("s0 - 1"), 3), "f32"),  # spelled another way: accepted
            Instr("w", C.Reduce("sum", Ref("z"), (1,), False), (s, 3), "f32"),
        ],
        [Ref("w")],
    )
    from rlx.ir.symbolic import Symbol

    program.symbols = [Symbol("s0", 2, None, 5)]
    with pytest.raises(SchemaError) as err:
        check_program(program, "program.json")
    assert str(err.value).startswith("program.json: instrs[2] (w = Reduce) declares [s0, 3] f32, its rule gives [")
    program.instrs[2] = Instr("w", C.Reduce("sum", Ref("z"), (1,), False), (Sym("-1 + s0"),), "f32")
    check_program(program, "program.json")


_I = torch.tensor([[0, 1, 2], [3, 2, 1]])  # an int64 index [2, 3]
_M = torch.rand(4, 5) > 0.5  # a bool mask
# (torch result from x [4, 5, 6], the Call, its extra operands' types, the extents only the data decides)
SHAPE_CASES = {
    "index-adjacent": (lambda x: x[:, _I], C.Index(Ref("x"), (None, Ref("i"))), {"i": ((2, 3), "i64")}, ()),
    "index-apart": (lambda x: x[_I, :, _I[0]], C.Index(Ref("x"), (Ref("i"), None, Ref("j"))),
                    {"i": ((2, 3), "i64"), "j": ((3,), "i64")}, ()),
    "index-mask": (lambda x: x[_M], C.Index(Ref("x"), (Ref("m"),)), {"m": ((4, 5), "bool")}, (0,)),
    "index-select": (lambda x: x.index_select(2, _I[0]), C.IndexSelect(Ref("x"), 2, Ref("i")), {"i": ((3,), "i64")}, ()),
    "gather": (lambda x: x.gather(1, torch.zeros(2, 3, 4, dtype=torch.long)), C.Gather(Ref("x"), 1, Ref("i")),
               {"i": ((2, 3, 4), "i64")}, ()),
    "diagonal": (lambda x: torch.diagonal(x, -1, 0, 2), C.Diagonal(Ref("x"), -1, 0, 2), {}, ()),
    "diagonal-past-the-end": (lambda x: torch.diagonal(x, 7, 1, 2), C.Diagonal(Ref("x"), 7, 1, 2), {}, ()),
    "rfft": (lambda x: torch.fft.rfft(x, dim=1), C.Fft(Ref("x"), "r2c", (1,), "none", True), {}, ()),
    "slice-step": (lambda x: x[:, 1:5:3], C.Slice(Ref("x"), 1, 1, 5, 3), {}, ()),
    "pad-crop": (lambda x: F.pad(x, (-1, 2)), C.Pad(Ref("x"), ((0, 0), (0, 0), (-1, 2)), 0.0), {}, ()),
    "grouped-matmul": (lambda x: torch.bmm(x[0][:, None, :], torch.zeros(5, 6, 2)).squeeze(1),
                       C.GroupedMatMul(Ref("x0"), Ref("w"), Ref("o")),
                       {"x0": ((5, 6), "f32"), "w": ((3, 6, 2), "f32"), "o": ((3,), "i32")}, ()),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SHAPE_CASES))
def test_indexing_and_spectral_shapes_like_torch(case):
    fn, call, extra, data_axes = SHAPE_CASES[case]
    want = fn(torch.randn(4, 5, 6))
    got = _infer(call, x=((4, 5, 6), "f32"), **extra)
    expected = tuple(None if k in data_axes else d for k, d in enumerate(want.shape))
    assert got == TensorType(expected, dtypes.from_numpy(tensor_to_numpy(want).dtype))
