"""The driver: a Program and its weights → an ONNX model, instruction by instruction."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rlx.errors import first_line
from rlx.exporters.onnx.reduce import lane_code
from rlx.exporters.onnx.registry import (
    CONTRIB_DOMAIN,
    EMITTERS,
    FUNCTIONS,
    HALF,
    NO_ONNX_FORM,
    NO_ONNX_FUNCTION,
    ONNX_TYPES,
    OPSET,
    OTHER_ENGINES,
    PORTABLE,
    EmitError,
    GraphOptions,
    OnnxGraph,
    T,
    require_onnx,
)
from rlx.formats.layout import ONNX_DATA_FILE, ONNX_FILE
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Instr, Lit, Program, Ref
from rlx.ir.symbolic import Dim, Sym, static_shape

NAN_CHECK = "rlx/nan_check"  # the output of pooling_nan="check"
FINITE_INPUTS = "rlx/finite_inputs"  # metadata of pooling_nan="check": the inputs to check, as JSON
UNORDERED_TIES = "rlx/unordered_ties"  # metadata: TopK index outputs whose ties may come in any order, as JSON
# metadata: initializers that are one index of a weight's first axis (an expert's matrix), as JSON
# {initializer: [weight, index]}; an engine hands them over as views of the weight
WEIGHT_SLICES = "rlx/weight_slices"
EXTERNAL_DATA_THRESHOLD = 2 * 1024**3  # protobuf's limit on one message


def check_coverage(program: Program) -> None:
    """Every Call of ``program`` must have an emitter: say which ones do not (and why), all at once;
    and no value may be of a low-bit storage type (float8, int4 …) or complex, which the emitter does
    not write (onnxruntime has almost no complex kernels: a complex cast failed to load)."""
    values = program.values().values()
    low = sorted({v.dtype for v in values if dtypes.is_low_bit(v.dtype)})
    if low:
        raise EmitError(f"the ONNX emitter does not write {', '.join(low)} values yet; use the numpy engine")
    complex_ = sorted({v.dtype for v in values if dtypes.is_complex(v.dtype)})
    if complex_:
        raise EmitError(f"the ONNX emitter does not write complex ({', '.join(complex_)}) values; {OTHER_ENGINES}")
    missing: dict[str, list[str]] = {}
    reasons: dict[str, str] = {}
    for ins in program.instrs:
        kind = type(ins.call)
        if kind not in EMITTERS:
            missing.setdefault(ins.call.op, []).append(ins.result)
            reasons[ins.call.op] = NO_ONNX_FORM.get(kind, "no emitter yet")
        elif kind in FUNCTIONS and (fn := str(getattr(ins.call, "fn", None))) not in FUNCTIONS[kind]:
            missing.setdefault(f"{ins.call.op} {fn}", []).append(ins.result)
            reasons[f"{ins.call.op} {fn}"] = NO_ONNX_FUNCTION[kind].get(fn, "no emitter yet")
    if missing:
        listed = "; ".join(f"{op} ×{len(r)} (first: {r[0]}): {reasons[op]}" for op, r in sorted(missing.items()))
        raise EmitError(f"the program has Calls with no ONNX form: {listed}; {OTHER_ENGINES}")


@dataclass
class Emitted:
    """A Program's graph, before it becomes protos: what the engine and the writer both start from."""

    graph: OnnxGraph
    inputs: list[T]  # graph inputs, in program order
    outputs: list[T]  # graph outputs, one per program output
    weights: list[str] = field(default_factory=list)  # program weights the graph reads
    nan_check: T | None = None  # pooling_nan="check": a last float32 output, finite when pooling was exact
    finite_inputs: list[str] = field(default_factory=list)  # pooling_nan="check": inputs to check before a run
    unordered_ties: list[str] = field(default_factory=list)  # TopK index outputs whose ties may come in any order
    weight_slices: dict[str, tuple[str, int]] = field(default_factory=dict)  # OnnxGraph.weight_slices the graph reads


def emit(program: Program, options: GraphOptions = PORTABLE) -> Emitted:
    """Emit every instruction, as ``options`` asks (``GraphOptions``: what an engine's graph may
    do differently from the portable export)."""
    check_coverage(program)
    g = OnnxGraph(program, options=options)
    io_bf16_as_f32 = options.io_bf16_as_f32
    env: dict[str, T] = {}
    inputs = []
    for v in program.inputs:
        if io_bf16_as_f32 and v.dtype == "bf16":
            outer = T(f"{v.name}/f32", "f32", v.shape)
            g.begin(v.name, f"input {v.name} as bfloat16")
            g.node("Cast", [outer], outputs=[v.name], to=ONNX_TYPES["bf16"])
            inputs.append(outer)
        else:
            inputs.append(T(v.name, v.dtype, v.shape))
        env[v.name] = T(v.name, v.dtype, v.shape)
    for w in program.weights:
        env[w.name] = T(w.name, w.dtype, w.shape)
    for ins in program.instrs:
        env[ins.result] = _emit_instr(g, ins, env)
    outputs = _outputs(g, program, env, io_bf16_as_f32)
    check = None
    if g.nan_checks:
        g.begin(NAN_CHECK, "sum of every max-pooled input (NaN or inf: rerun with PyTorch's NaN rule)")
        check = T(NAN_CHECK, "f32", ())
        if len(g.nan_checks) == 1:  # one check: the output of its own node (no Sum, no Identity)
            only = g.nan_checks[0].name
            k = next(k for k, node in enumerate(g.nodes) if only in node[2])
            op, i, o, attrs, domain, name, doc = g.nodes[k]
            g.nodes[k] = (op, i, [NAN_CHECK if n == only else n for n in o], attrs, domain, name, doc)
        else:
            g.node("Sum", g.nan_checks, outputs=[NAN_CHECK])
    _prune(g, [t.name for t in outputs] + ([NAN_CHECK] if check else []))
    used = {name for node in g.nodes for name in node[1]}
    weights = [w.name for w in program.weights if w.name in used]
    slices = {name: part for name, part in g.weight_slices.items() if name in used}
    return Emitted(g, inputs, outputs, weights, check, sorted(g.finite_inputs), sorted(g.unordered_ties), slices)


def _prune(g: OnnxGraph, roots: list[str]) -> None:
    """Drop the nodes no output depends on (what an emitter's fused form left behind, such as
    the x·x of a cube spelt Pow(x, 3): onnxruntime's fusions want no stray consumers) and the
    constants no node reads."""
    needed = set(roots)
    kept = []
    for node in reversed(g.nodes):
        if any(o in needed for o in node[2]):
            kept.append(node)
            needed.update(node[1])
    g.nodes[:] = kept[::-1]
    for name in [n for n in g.constants if n not in needed]:
        del g.constants[name]


def _operand(g: OnnxGraph, v: Any, env: Mapping[str, T]) -> Any:
    if isinstance(v, Ref):
        return env[v.name]
    if isinstance(v, Lit):
        return g.lit(v)
    if isinstance(v, tuple):
        return [_operand(g, x, env) for x in v]
    return None


# Elementwise functions whose OpenVINO kernels turn a NaN operand into a number.
NAN_DROPPING_UNARY = frozenset({"exp", "expm1", "relu", "relu6", "hardsigmoid", "elu", "selu", "gelu_tanh"})


def _drops_nan(g: OnnxGraph, call: C.Call) -> bool:
    """Whether the runtime's kernel for ``call`` may turn a NaN of its operand, made inside the
    model, into a number (``GraphOptions.kernels_keep_nan`` off; ``nan_sources`` cannot rule such
    a NaN out; one from the inputs the engine checks before the run)."""
    drops = (isinstance(call, C.Unary) and call.fn in NAN_DROPPING_UNARY) or isinstance(call, (C.Clamp, C.Softmax))
    if g.options.kernels_keep_nan or not drops:
        return False
    operand = call.x  # type: ignore[attr-defined]
    return (
        isinstance(operand, Ref)
        and dtypes.is_float(g.values[operand.name].dtype)
        and g.nan_sources(operand.name) is None
    )


def _keep_nan(g: OnnxGraph, call: C.Call, x: T, y: T) -> T:
    """``y``, the result of ``call`` on ``x``, with NaN where PyTorch's has it (``_drops_nan``)."""
    if not _drops_nan(g, call) or x.dtype != y.dtype:
        return y
    if not isinstance(call, C.Softmax):
        return g.op("Where", [g.op("IsNaN", [x], "bool"), x, y], y.dtype)
    # A row holding NaN or +inf, or only -inf, is NaN all through in PyTorch (inf - inf).
    special = g.op("Or", [g.op("IsNaN", [x], "bool"), g.op("Equal", [x, g.const(math.inf, x.dtype)], "bool")], "bool")
    row = lane_code(g, x, special, -math.inf, [call.axis], keepdim=True)
    bad = g.op("Not", [g.op("Equal", [row, g.const(1, "i32")], "bool")], "bool")
    return g.op("Where", [bad, g.const(math.nan, y.dtype), y], y.dtype)


def _emit_instr(g: OnnxGraph, ins: Instr, env: Mapping[str, T]) -> T:
    entry = EMITTERS[type(ins.call)]
    g.begin(ins.result, f"{ins.note or ins.call.op} [{ins.node}]" if ins.node else (ins.note or ins.call.op))
    first = len(g.nodes)
    operands = [_operand(g, getattr(ins.call, f), env) for f in ins.call.operand_fields()]
    plain = operands
    if entry.widen:
        operands = [_widen(g, o) for o in operands]
    shape = _ints(ins.shape)
    # (a NaN selected back in reads the operand's own tensor: no N-d detour around it)
    lift = (not entry.widen or operands == plain) and not _drops_nan(g, ins.call)
    try:
        if shape is not None and 0 in shape:
            # An empty result has no values to compute, and engines fail on some empty steps
            # (OpenVINO refuses a TopK of k = 0, misshapes empty diagonals and scans): a constant.
            result = g.const(np.zeros(shape, dtypes.to_numpy(ins.dtype)), ins.dtype)
        elif (folded := _literal_constant(g, ins, shape)) is not None:
            result = folded
        elif (lifted := _lift(g, ins, operands) if lift else None) is not None:
            result = lifted
        else:
            result = entry.fn(g, ins.call, ins, *operands)
            result = _keep_nan(g, ins.call, operands[0] if operands else result, result)
    except EmitError:
        raise
    except Exception as e:  # an emitter failure is reported with the instruction
        raise EmitError(
            f"ONNX emission failed at {ins.result} = {ins.call.op} [{ins.note}]: {type(e).__name__}: {e}"
        ) from e
    result = g.cast(result, ins.dtype)
    produced = {out for node in g.nodes[first:] for out in node[2]}
    if result.name in produced:  # name the instruction's own tensor after its result (debugging)

        def rename(names: list[str]) -> list[str]:
            return [ins.result if n == result.name else n for n in names]

        for k in range(first, len(g.nodes)):
            op, i, o, attrs, domain, name, doc = g.nodes[k]
            g.nodes[k] = (op, rename(i), rename(o), attrs, domain, name, doc)
    else:  # the result is an existing tensor (a no-op instruction): alias it
        g.node("Identity", [result], outputs=[ins.result])
    return T(ins.result, ins.dtype, ins.shape)


# Values from literals only up to this many elements become constants of the graph.
MAX_FOLDED = 1 << 16


def _literal_constant(g: OnnxGraph, ins: Instr, shape: tuple[int, ...] | None) -> T | None:
    """A small value computed from literals only (index arithmetic on an ``arange``, a mask), as a
    constant evaluated by the numpy kernels: engines' own folding of such chains can be wrong
    (OpenVINO folded |2 − arange(−1, 5)| to 2 − arange(−1, 5), so reflection padding read zeros),
    and the constant costs them nothing. Random draws are left to the graph. An ``abs`` of a value
    fixed by weights too (where the graph is given their values): OpenVINO computed |2 − w| of a
    1-d weight as 2 − w where its own constant folding did not run first (the int8-static graph,
    which that folding would turn back to float32 weights)."""
    if shape is None or math.prod(shape) > MAX_FOLDED or isinstance(ins.call, C.RandomBits) or not ins.call.refs():
        return None
    value = g.literal_value(ins.result)
    if value is None and isinstance(ins.call, C.Unary) and ins.call.fn == "abs":
        value = g.static_value(ins.result)
    return None if value is None else g.const(value, ins.dtype)


def _lift(g: OnnxGraph, ins: Instr, operands: list[Any]) -> T | None:
    """``ins`` run on the N-d tensors its flattened operands are reshapes of (``g.reshaped``),
    then reshaped to its own shape (a node the next reshape back folds away); None where it does
    not apply. Static shapes only, and only where every reader of the result is a reshape or
    another such step (else the N-d detour would cost a Reshape of its own)."""
    shape = _ints(ins.shape)
    if isinstance(ins.call, C.Linear):
        if operands[2] is not None:  # (with a bias: one 2-d Gemm)
            return None
        operands = operands[:2]  # (the product of two operands)
    if shape is None or any(not isinstance(o, T) or _ints(o.shape) is None for o in operands):
        return None
    if g.is_output(ins.result) or not all(isinstance(user.call, _LIFTED) for user in g.consumers(ins.result)):
        return None
    # (a source of higher rank: flattened, not unsqueezed)
    known = [s if (s := g.reshaped.get(o.name)) is not None and _ints(s.shape) and s.rank > o.rank else None
             for o in operands]  # fmt: skip
    if isinstance(ins.call, C.MatMul):
        lifted = _lift_product(g, ins, operands[0], operands[1], known[0], known[1])
    elif isinstance(ins.call, C.Linear):
        full, args = _lift_product(g, ins, operands[0], _transposed(operands[1]), known[0], None)
        lifted = full, [*args[:1], operands[1]]  # (the weight [out, in] as it is)
    elif isinstance(ins.call, (C.Unary, C.Cast)) and known[0] is not None:
        lifted = _ints(known[0].shape), [known[0]]
    elif isinstance(ins.call, C.Binary):
        lifted = _lift_binary(shape, operands, known)
    else:
        return None
    full, args = lifted
    if full is None:
        return None
    no_bias = [None] if isinstance(ins.call, C.Linear) else []
    result = g.cast(EMITTERS[type(ins.call)].fn(g, ins.call, replace(ins, shape=full), *args, *no_bias), ins.dtype)
    whole = T(result.name, ins.dtype, full)
    g.reshaped[ins.result] = whole
    return g.op("Reshape", [whole, g.ints(shape)], ins.dtype, shape, allowzero=1)


_LIFTED = (C.Reshape, C.MatMul, C.Unary, C.Cast, C.Binary)


def _transposed(w: T) -> T:
    """The shape ``w`` has read transposed (a Linear's weight [out, in] as the product's [in, out])."""
    shape = _ints(w.shape)
    return T(w.name, w.dtype, None if shape is None else shape[::-1])


_NO_LIFT: tuple[None, list[T]] = (None, [])


def _lift_product(
    g: OnnxGraph, ins: Instr, x: T, y: T, xs: T | None, ys: T | None
) -> tuple[tuple[int, ...] | None, list[T]]:
    """A Linear's ``view → mm → view`` (without bias: with one, onnxruntime's MatMul + Add → Gemm
    fusion wants the 2-d product) as one N-d MatMul; a batched ``view → bmm`` whose operands
    merge the same batch axes as the N-d MatMul (scores then scaled stay MatMul + Mul, which
    onnxruntime fuses)."""
    xf, yf = _ints(x.shape), _ints(y.shape)
    sx = _ints(xs.shape) if xs is not None else None
    sy = _ints(ys.shape) if ys is not None else None
    if xs is None or sx is None or xf is None or yf is None:
        return _NO_LIFT
    if len(xf) == len(yf) == 2 and (lead := _lead(g, ins.result, xf[0])) is not None:
        rows = xs
        if sx != (*lead, xf[1]):  # (attention heads merged, then projected)
            rows = g.op("Reshape", [xs, g.ints([*lead, xf[1]])], x.dtype, (*lead, xf[1]))
        return (*lead, yf[1]), [rows, y]
    if len(xf) == len(yf) == 3 and ys is not None and sy is not None and len(sx) == len(sy) > 3:
        if sx[:-2] == sy[:-2] and sx[-2:] == xf[-2:] and sy[-2:] == yf[-2:]:
            return (*sx[:-1], yf[-1]), [xs, ys]
    return _NO_LIFT


def _lift_binary(
    shape: tuple[int, ...], operands: list[T], known: list[T | None]
) -> tuple[tuple[int, ...] | None, list[T]]:
    """One flattened operand with a scalar or a row (a bias): the same broadcast on the N-d tensor
    when the flattening kept the last axis."""
    for k in (0, 1):
        t, s, other = operands[k], known[k], operands[1 - k]
        if s is None or known[1 - k] is not None or other.rank > 1 or _ints(t.shape) != shape:
            continue
        full = _ints(s.shape)
        if full is not None and full[-1:] == shape[-1:]:
            return full, ([s, other] if k == 0 else [other, s])
    return _NO_LIFT


def _lead(g: OnnxGraph, name: str, rows: int) -> tuple[int, ...] | None:
    """The leading axes every reader of the [rows, n] value ``name`` reshapes it to, when they
    are all reshapes that agree; else None."""
    found = set()
    for user in g.consumers(name):
        target = _ints(user.shape)
        if not isinstance(user.call, C.Reshape) or target is None or math.prod(target[:-1]) != rows:
            return None
        found.add(target[:-1])
    return found.pop() if len(found) == 1 else None


def _ints(shape: Any) -> tuple[int, ...] | None:
    """A static shape as ints (None when unknown or symbolic)."""
    return None if shape is None else static_shape(shape)


def _widen(g: OnnxGraph, o: Any) -> Any:
    if isinstance(o, T):
        return g.cast(o, "f32") if o.dtype in HALF else o
    if isinstance(o, list):
        return [_widen(g, x) for x in o]
    return o


def _outputs(g: OnnxGraph, program: Program, env: Mapping[str, T], io_bf16_as_f32: bool) -> list[T]:
    outputs: list[T] = []
    instr_results = {ins.result for ins in program.instrs}
    taken: set[str] = set()
    for k, o in enumerate(program.outputs):
        g.begin(f"output{k}", f"output {k}")
        value = env[o.name] if isinstance(o, Ref) else g.lit(o)
        if io_bf16_as_f32 and value.dtype == "bf16":
            value = g.cast(value, "f32")
        elif value.name not in instr_results or value.name in taken:  # an input, weight, literal or repeat
            value = g.op("Identity", [value], value.dtype, value.shape)
        taken.add(value.name)
        outputs.append(T(value.name, value.dtype, value.shape))
    return outputs


# ── protos ───────────────────────────────────────────────────────────────────
def _value_info(onnx: Any, t: T) -> Any:
    shape: list[int | str | None] | None = None
    if t.shape is not None:
        shape = [d if isinstance(d, int) else (d.expr if isinstance(d, Sym) else None) for d in t.shape]
    return onnx.helper.make_tensor_value_info(t.name, ONNX_TYPES[t.dtype], shape)


def _tensor(onnx: Any, name: str, arr: np.ndarray, dtype: str) -> Any:
    arr = np.asarray(arr, order="C")
    tensor = onnx.TensorProto()
    tensor.name = name
    tensor.data_type = ONNX_TYPES[dtype]
    tensor.dims.extend(arr.shape)
    tensor.raw_data = arr.tobytes()
    return tensor


def _nodes(onnx: Any, g: OnnxGraph) -> list[Any]:
    return [
        onnx.helper.make_node(op, inputs, outputs, name=name, doc_string=doc, domain=domain or None, **attrs)
        for op, inputs, outputs, attrs, domain, name, doc in g.nodes
    ]


def to_onnx(
    program: Program, weights: Mapping[str, np.ndarray], *, options: GraphOptions = PORTABLE, doc: str = ""
) -> Any:
    """The ONNX model of ``program``: the portable graph, or an engine's (``options``). Weights
    become initializers holding ``weights``' bytes, or external data with ``external_weights``."""
    onnx = require_onnx()
    emitted = emit(program, options)
    external_weights = options.external_weights
    g = emitted.graph
    values = program.values()
    initializers = []
    for name in emitted.weights:
        if external_weights and values[name].shape:  # (0-d values are embedded: tiny, and rejected as external)
            initializers.append(_external(onnx, name, values[name].shape, values[name].dtype))
        else:
            initializers.append(_tensor(onnx, name, np.asarray(weights[name]), values[name].dtype))
    for name, (weight, index) in emitted.weight_slices.items():
        if external_weights:
            initializers.append(_external(onnx, name, values[weight].shape[1:], values[weight].dtype))
        else:
            initializers.append(_tensor(onnx, name, np.asarray(weights[weight])[index], values[weight].dtype))
    # (0-d weights of an engine graph are embedded from the engine's arrays, passed as `weights`)
    from rlx.ir import dtypes

    initializers += [_tensor(onnx, n, a, dtypes.from_numpy(a.dtype)) for n, a in g.constants.items()]
    graph = onnx.helper.make_graph(
        _nodes(onnx, g),
        program.name or "model",
        [_value_info(onnx, t) for t in emitted.inputs],
        [_value_info(onnx, t) for t in emitted.outputs + ([emitted.nan_check] if emitted.nan_check else [])],
        initializer=initializers,
        doc_string=doc,
    )
    from rlx.version import __version__

    opsets = [onnx.helper.make_opsetid("", OPSET)]
    if any(node[4] == CONTRIB_DOMAIN for node in g.nodes):
        opsets.append(onnx.helper.make_opsetid(CONTRIB_DOMAIN, 1))
    model = onnx.helper.make_model(graph, opset_imports=opsets,
                                   producer_name="rlx", producer_version=__version__)  # fmt: skip
    model.ir_version = 10  # onnxruntime ≥ 1.18 reads IR 10 (opset 21)
    props: dict[str, Any] = {FINITE_INPUTS: emitted.finite_inputs, UNORDERED_TIES: emitted.unordered_ties,
                             WEIGHT_SLICES: emitted.weight_slices}  # fmt: skip
    if any(props.values()):
        onnx.helper.set_model_props(model, {key: json.dumps(names) for key, names in props.items() if names})
    return model


def _external(onnx: Any, name: str, shape: tuple[Dim, ...], dtype: str) -> Any:
    tensor = onnx.TensorProto()
    tensor.name = name
    tensor.data_type = ONNX_TYPES[dtype]
    tensor.dims.extend(d for d in shape if isinstance(d, int))  # (a specialised program: all static)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "rlx-weights"
    return tensor


def write_onnx(program: Program, weights: Mapping[str, np.ndarray], out_dir: str | Path, *, check: bool = True) -> Path:
    """Write ``out_dir/model.onnx`` (weights above 2 GB in ``model.onnx.data`` beside it) and
    check it with ``onnx.checker.check_model(full_check=True)``. Returns the model's path."""
    onnx = require_onnx()
    model = to_onnx(program, weights, doc=f"converted by rlx from {program.source_format}")
    path = Path(out_dir) / ONNX_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    total = sum(int(np.asarray(weights[w.name]).nbytes) for w in program.weights if w.name in weights)
    if total > EXTERNAL_DATA_THRESHOLD:
        onnx.save_model(model, os.fspath(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=ONNX_DATA_FILE, size_threshold=1024)  # fmt: skip
    else:
        onnx.save_model(model, os.fspath(path))
    if check:
        try:
            onnx.checker.check_model(os.fspath(path), full_check=True)
        except Exception as e:  # onnx's ValidationError / InferenceError
            raise EmitError(f"{path}: the emitted model fails onnx's checker: {first_line(e)}") from e
    return path
