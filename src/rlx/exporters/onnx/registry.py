"""The Call → ONNX registry and the graph builder that emitters append nodes through.

An emitter is registered next to its definition, one small function per Call family::

    @emits(C.Softmax, widen=True)
    def softmax(g: OnnxGraph, c: C.Softmax, out: Instr, x: T) -> T: ...

It receives its operands as ``T`` (an ONNX tensor name with the rlx dtype and, when known, the
shape), already widened from float16/bfloat16 to float32 when ``widen`` is set (PyTorch's CPU
kernels compute half precision in float32 and round once), and returns the result; the driver
casts it to the instruction's declared dtype when they differ, so the declared dtypes of the
Program are what the ONNX graph computes. Every node an instruction adds carries the
instruction's provenance note as its ``doc_string`` and the instruction's result in its name.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlx.errors import RlxError, UsageError
from rlx.ir import dtypes
from rlx.ir.program import Call, Instr, Lit, Program, Ref
from rlx.ir.symbolic import Dim, Shape, Sym

OPSET = 21  # ai.onnx: Reduce* take axes as an input (18), Gelu (20), GridSample-20, Resize antialias (18)


class EmitError(RlxError):
    """A Program (or one of its Calls, with these arguments) the ONNX emitter cannot express."""


def require_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise EmitError("ONNX emission needs the onnx package: pip install 'rlx[onnx]'") from None
    return onnx


# rlx dtype token → onnx.TensorProto data type (the numbers are fixed by the ONNX standard).
ONNX_TYPES = {
    "f32": 1, "u8": 2, "i8": 3, "i16": 5, "i32": 6, "i64": 7, "bool": 9, "f16": 10, "f64": 11,
    "c64": 14, "bf16": 16, "u16": 4, "u32": 12, "u64": 13, "c128": 15,
}  # fmt: skip
HALF = ("f16", "bf16")


@dataclass(frozen=True)
class T:
    """A tensor of the ONNX graph: its name, rlx dtype and (when known) its shape."""

    name: str
    dtype: str
    shape: Shape | None = None

    @property
    def rank(self) -> int:
        if self.shape is None:
            raise EmitError(f"internal: rank of {self.name} is not known")
        return len(self.shape)

    def static_shape(self, what: str) -> tuple[int, ...]:
        if self.shape is None or not all(isinstance(d, int) for d in self.shape):
            raise EmitError(f"{what} needs static extents, {self.name} has shape {self.shape}; specialise it first")
        return tuple(int(d) for d in self.shape)  # type: ignore[arg-type]


Emitter = Callable[..., T]


@dataclass(frozen=True)
class Registered:
    fn: Emitter
    widen: bool


EMITTERS: dict[type[Call], Registered] = {}


def emits(*calls: type[Call], widen: bool = False) -> Callable[[Emitter], Emitter]:
    """Register ``fn`` as the ONNX emitter of ``calls``. ``widen``: half-precision float operands
    arrive as float32 (computed in float32, rounded once to the declared dtype)."""

    def register(fn: Emitter) -> Emitter:
        for cls in calls:
            if cls in EMITTERS:
                raise RuntimeError(f"two ONNX emitters for {cls.__name__}")
            EMITTERS[cls] = Registered(fn, widen)
        return fn

    return register


# onnxruntime's contrib operators (domain com.microsoft) an emitter may use instead of standard ones.
CONTRIB_DOMAIN = "com.microsoft"
# "attention": Attention → MultiHeadAttention; "gelu": x·x·x as Pow(x, 3), the pattern of the tanh GELU
# that onnxruntime's optimizer fuses into FastGelu; "causal_attention" (with "attention"): causal and
# grouped-query attention as MultiHeadAttention too; "transposed_weights": Linear as FusedMatMul
# with transB, which reads the weight in its stored [out, in] layout (a Transpose node would be
# folded into a transposed copy of every weight at load). DEFAULT_CONTRIB: the ones the
# onnxruntime engine uses unless told otherwise (all of them).
CONTRIB_FUSIONS = ("attention", "gelu", "causal_attention", "transposed_weights")
DEFAULT_CONTRIB = CONTRIB_FUSIONS


def check_contrib(contrib: Collection[str]) -> frozenset[str]:
    """The contrib fusions asked for, each one known (else one line naming the choices)."""
    unknown = set(contrib) - set(CONTRIB_FUSIONS)
    if unknown:
        raise UsageError(f"unknown contrib fusion(s) {sorted(unknown)}; choose from {', '.join(CONTRIB_FUSIONS)}")
    return frozenset(contrib)


@dataclass(frozen=True)
class GraphOptions:
    """What an engine's graph may do differently from the portable export (``PORTABLE``, every
    field at its default), which is what ``rlx build --write onnx`` writes.

    ``io_bf16_as_f32``: bfloat16 inputs and outputs cross the graph's boundary as float32 (exact
    both ways), for runtimes whose Python side has no bfloat16. ``external_weights``: weight
    initializers are declared as external data (the engine hands its own arrays over) instead of
    holding bytes. ``pooling_nan``: onnxruntime's MaxPool skips NaN where PyTorch's propagates it;
    True keeps PyTorch's rule in the graph (a second pooling of the NaN mask, which also breaks
    onnxruntime's NCHWc conv/pool chains); "check" runs the plain MaxPool and adds an output
    ``nan_check``, not finite on a run where a pooled input held NaN or inf (the engine then reruns
    the exact graph), and names in the model's ``rlx/finite_inputs`` metadata the graph inputs the
    engine must find finite before running it (a pooled value that only they can make NaN);
    False takes onnxruntime's rule. ``contrib``: onnxruntime's com.microsoft
    fusions to use (``CONTRIB_FUSIONS``). ``weight_values``: the weights' arrays, so that emitters
    can use what they hold (a pooled input's NaN traced to graph inputs, ``nan_sources``; values
    fixed on every run, ``static_values``). ``blocked_layout``: shape the graph for onnxruntime's
    blocked channel layout (NCHWc), where it has one: a squeeze-excitation scale is upsampled to
    the image before its product, which that layout takes (a broadcast product leaves it).
    ``top_k_orders_nan``: the runtime's TopK orders NaN above every number, as PyTorch does
    (onnxruntime's does; ONNX leaves it open, and OpenVINO's put NaN anywhere); otherwise a float
    sort or top-k takes its candidates with NaN read as +inf, then orders them by is-NaN. ``fmod_by_infinity``: the
    runtime's float ``Mod(fmod=1)`` by ±inf gives the dividend, as C's fmod and ONNX say
    (onnxruntime's does; OpenVINO's gave NaN); otherwise the dividend is selected there.
    ``unique_sort_keys``: the runtime's stable TopK is slow (OpenVINO's takes time quadratic in k:
    7.8 s to sort 50 257 values, 7 ms unstable), so a sort orders its ties by position in unstable
    TopKs on unique integer keys, and a top-k orders its candidates by is-NaN the same way (those
    TopKs are named in ``unordered_ties``; a lane shorter than 128 or not static still sorts in
    one stable TopK). ``extremes_of_infinities``: the runtime's ReduceMax of a lane holding only
    -inf gives -inf, and ReduceMin of only +inf gives +inf, as ONNX says (onnxruntime's do;
    OpenVINO's gave -3.4e38 and 3.4e38, its float range's ends: a masked max over a fully masked
    row read as a number); otherwise an amax/amin's NaN mask reduction also marks such lanes.
    ``kernels_keep_nan``: the runtime's exp, relu, clamp, softmax … keep a NaN operand NaN
    (onnxruntime's do; OpenVINO's give a number); otherwise, where a NaN can be made inside the
    model on the way to one (``nan_sources``: a division, a log …), NaN is selected back in."""

    io_bf16_as_f32: bool = False
    external_weights: bool = False
    pooling_nan: bool | str = True
    contrib: Collection[str] = frozenset()
    weight_values: Mapping[str, np.ndarray] | None = field(default=None, compare=False, repr=False)
    blocked_layout: bool = False
    top_k_orders_nan: bool = False
    fmod_by_infinity: bool = True
    unique_sort_keys: bool = False
    extremes_of_infinities: bool = True
    kernels_keep_nan: bool = True

    def __post_init__(self) -> None:
        if self.pooling_nan not in (True, False, "check"):
            raise UsageError(f"pooling_nan must be True, False or 'check', got {self.pooling_nan!r}")
        object.__setattr__(self, "contrib", check_contrib(self.contrib))


PORTABLE = GraphOptions()
# What OpenVINO's CPU kernels compute wrongly, worked around in the graph: every graph OpenVINO
# runs (its engine's, and int8-static's, which onnxruntime runs too) starts from these.
OPENVINO_FIXES = GraphOptions(fmod_by_infinity=False, extremes_of_infinities=False, kernels_keep_nan=False)

# Comparisons written as their mirror image, which means the same in IEEE arithmetic: OpenVINO's
# CPU plugin says NaN > y and NaN >= y are true (its Less and LessOrEqual are right).
_MIRRORED = {"Greater": "Less", "GreaterOrEqual": "LessOrEqual"}


# What a refusal tells the user to do instead.
OTHER_ENGINES = "use the numpy or JAX engine"
# Calls with no faithful ONNX form at this opset → why (checked before anything is emitted).
NO_ONNX_FORM: dict[type[Call], str] = {}
# Calls whose emitter writes only some of their functions (``call.fn``): those it writes, and each
# other one → why it has no faithful ONNX form (also checked before anything is emitted).
FUNCTIONS: dict[type[Call], frozenset[str]] = {}
NO_ONNX_FUNCTION: dict[type[Call], dict[str, str]] = {}


def emits_functions(call: type[Call], written: Collection[str], missing: Mapping[str, str]) -> None:
    """Declare the functions of ``call`` its emitter writes, and why each of ``missing`` has no ONNX form."""
    if set(written) & set(missing):
        raise RuntimeError(f"{call.__name__} functions both written and refused: {sorted(set(written) & set(missing))}")
    FUNCTIONS[call] = frozenset(written)
    NO_ONNX_FUNCTION[call] = dict(missing)


def no_function_form(call: type[Call], fn: str) -> EmitError:
    """The one-line error for a function of ``call`` the emitter does not write."""
    why = NO_ONNX_FUNCTION.get(call, {}).get(fn, "no emitter yet")
    return EmitError(f"the ONNX emitter has no form for {call.__name__} {fn!r}: {why}; {OTHER_ENGINES}")


def no_onnx_form(why: str, *calls: type[Call]) -> None:
    """Declare ``calls`` as having no ONNX form, for the reason ``why`` (said to the user)."""
    for cls in calls:
        if cls in EMITTERS or cls in NO_ONNX_FORM:
            raise RuntimeError(f"{cls.__name__} is declared twice in the ONNX emitter")
        NO_ONNX_FORM[cls] = why


class OnnxGraph:
    """Nodes and initializers being built for one Program (onnx protos are made at the end)."""

    def __init__(self, program: Program, opset: int = OPSET, options: GraphOptions | None = None) -> None:
        self.program = program
        self.opset = opset
        self.options = options = options or PORTABLE
        self.contrib = options.contrib
        self.blocked_layout = options.blocked_layout
        self.pooling_nan = options.pooling_nan
        self.nan_checks: list[T] = []  # pooling_nan="check": the pooled inputs' sums
        self.weight_values = options.weight_values
        self.finite_inputs: set[str] = set()  # pooling_nan="check": inputs the engine checks before a run
        # TopK index outputs whose equal values may come in any order (a top-k's, as in PyTorch):
        # OpenVINO runs those unstable, its stable TopK being quadratic in the lane
        self.unordered_ties: set[str] = set()
        self.weight_slices: dict[str, tuple[str, int]] = {}  # initializer → (weight, index on its first axis)
        self._nan_sources: Any = None
        self._static_values: Any = None
        self._literal_values: Any = None
        self._producers: dict[str, Instr] | None = None
        self._consumers: dict[str, list[Instr]] | None = None
        self.nodes: list[tuple[str, list[str], list[str], dict[str, Any], str, str, str]] = []
        self.constants: dict[str, np.ndarray] = {}  # small constants made while emitting
        # tensor name → the higher-rank tensor it is a row-major reshape of (static shapes only):
        # PyTorch's decompositions flatten a Linear's input to 2-d and a batched product's to 3-d;
        # the emitter runs those products and their elementwise followers on the original N-d
        # tensor instead, as torch.onnx's graphs do (fewer Reshapes, and MatMul + scale stays one
        # pattern for onnxruntime's fusions).
        self.reshaped: dict[str, T] = {}
        # Keepdim reductions emitted without their unit axes, because their only reader is a
        # reshape that drops those axes (``reduce``): that reshape then needs no node.
        self.units_dropped: set[str] = set()
        self._const_ids: dict[tuple[str, tuple[int, ...], bytes], str] = {}
        self.values = program.values()
        # fresh names count per instruction: an instruction's tensors are named the same in every
        # graph emitted of the program (int8-static's calibration ranges are looked up by name)
        self._counts: Counter[str] = Counter()
        self._owner = "graph"  # the instruction whose nodes are being added (names them)
        self._note = ""
        self._dims: dict[str, str] = {}  # symbol / expression → 1-element int64 tensor
        self.symbol_sources: dict[str, tuple[str, int]] = {}
        # (an input's axis; a size that depends on the data, such as nonzero's count: the first
        # value that has it, read after its instruction ran)
        for v in self.values.values():  # (inputs first, then weights, then results in program order)
            for axis, d in enumerate(v.shape or ()):
                if isinstance(d, Sym) and d.expr.isidentifier():
                    self.symbol_sources.setdefault(d.expr, (v.name, axis))

    def consumers(self, name: str) -> list[Instr]:
        """The instructions that read value ``name``."""
        if self._consumers is None:
            self._consumers = {}
            for ins in self.program.instrs:
                for ref in {r.name for r in ins.call.refs()}:
                    self._consumers.setdefault(ref, []).append(ins)
        return self._consumers.get(name, [])

    def is_output(self, name: str) -> bool:
        return any(isinstance(o, Ref) and o.name == name for o in self.program.outputs)

    def nan_sources(self, name: str) -> frozenset[str] | None:
        """The graph inputs whose finiteness rules out NaN in value ``name`` (None: unknown;
        see ``rlx.exporters.onnx.nan_sources``). Needs the weights' values: None without them."""
        if self.weight_values is None:
            return None
        if self._nan_sources is None:
            from rlx.exporters.onnx.nan_sources import NanSources

            self._nan_sources = NanSources(self.program, self.weight_values.get)
        result: frozenset[str] | None = self._nan_sources.inputs(name)
        return result

    def check_finite(self, name: str) -> bool:
        """Whether the engine can check before each run that value ``name`` holds no NaN: at
        ``pooling_nan="check"``, where only float graph inputs can make one (``nan_sources``). If
        so, those inputs join ``finite_inputs``, the ones the engine checks."""
        sources = self.nan_sources(name) if self.pooling_nan == "check" else None
        if sources is None or any(self.values[s].dtype not in ("f32", "f64") for s in sources):
            return False
        self.finite_inputs.update(sources)
        return True

    def static_value(self, name: str) -> np.ndarray | None:
        """The value ``name`` has on every run when it derives from weights and literals only
        (``rlx.exporters.onnx.static_values``); None when unknown or without the weights' values."""
        if self.weight_values is None:
            return None
        if self._static_values is None:
            from rlx.exporters.onnx.static_values import StaticValues

            self._static_values = StaticValues(self.program, self.weight_values.get)
        result: np.ndarray | None = self._static_values.value(name)
        return result

    def literal_value(self, name: str) -> np.ndarray | None:
        """The value ``name`` has on every run when it derives from literals only (no input, no
        weight: an ``arange`` and the index arithmetic on it), or None."""
        if self._literal_values is None:
            from rlx.exporters.onnx.static_values import StaticValues

            self._literal_values = StaticValues(self.program, lambda _: None)
        result: np.ndarray | None = self._literal_values.value(name)
        return result

    def weight_slice(self, weight: str, index: int) -> T:
        """``weight[index]`` as an initializer of its own, made of the weight's bytes in place
        (external data at an offset into the same file, or those bytes embedded): a runtime has no
        Split or Gather of the weight to fold into a copy of it."""
        name = f"{weight}[{index}]"
        self.weight_slices[name] = (weight, index)
        v = self.values[weight]
        assert v.shape is not None
        return T(name, v.dtype, tuple(v.shape[1:]))

    def producer(self, name: str) -> Instr | None:
        """The instruction whose result ``name`` is (None for inputs, weights and constants)."""
        if self._producers is None:
            self._producers = {ins.result: ins for ins in self.program.instrs}
        return self._producers.get(name)

    # ── provenance ───────────────────────────────────────────────────────────
    def begin(self, owner: str, note: str) -> None:
        self._owner, self._note = owner, note

    def fresh(self, hint: str = "t") -> str:
        self._counts[self._owner] += 1
        return f"{self._owner}/{hint}{self._counts[self._owner]}"

    # ── nodes ────────────────────────────────────────────────────────────────
    def node(
        self,
        op_type: str,
        inputs: Sequence[T | str | None],
        n_out: int = 1,
        *,
        domain: str = "",
        outputs: Sequence[str] | None = None,
        **attrs: Any,
    ) -> list[str]:
        """Append one node; returns its output names (fresh unless given)."""
        names = [("" if i is None else i.name if isinstance(i, T) else i) for i in inputs]
        if op_type in _MIRRORED:  # y < x for x > y (OpenVINO: NaN > y was true)
            op_type, names = _MIRRORED[op_type], names[::-1]
        while names and names[-1] == "":
            names.pop()  # trailing omitted optional inputs
        outs = list(outputs) if outputs is not None else [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append((op_type, names, outs, {k: v for k, v in attrs.items() if v is not None}, domain,
                           f"{self._owner}:{op_type}:{len(self.nodes)}", self._note))  # fmt: skip
        return outs

    def op(self, op_type: str, inputs: Sequence[T | str | None], dtype: str, shape: Shape | None = None,
           **attrs: Any) -> T:  # fmt: skip
        """One node with one output of ``dtype``."""
        return T(self.node(op_type, inputs, **attrs)[0], dtype, shape)

    # ── constants ────────────────────────────────────────────────────────────
    def const(self, value: Any, dtype: str) -> T:
        """A constant tensor (deduplicated): a scalar, a list or an array, in rlx dtype ``dtype``."""
        arr = np.array(value, dtype=dtypes.to_numpy(dtype), order="C")  # (ascontiguousarray makes 0-d 1-d)
        if arr.size == 0:
            # An empty initializer is valid ONNX, but OpenVINO's reader makes it a scalar (a [0, 3]
            # constant came back as shape ()); a scalar expanded to the empty shape reads right
            # everywhere, and engines fold it back into a constant. (Expanded in float32, then
            # cast: onnxruntime has no Expand kernel for some types.)
            empty = self.op("Expand", [self.const(0.0, "f32"), self.ints(arr.shape)], "f32", arr.shape)
            return self.cast(empty, dtype)
        key = (dtype, arr.shape, arr.tobytes())
        name = self._const_ids.get(key)
        if name is None:
            name = f"const/{len(self._const_ids)}"
            self._const_ids[key] = name
            self.constants[name] = arr
        return T(name, dtype, arr.shape)

    def ints(self, values: Sequence[int] | int) -> T:
        """An int64 constant: a 1-d tensor from a sequence, a 0-d one from an int."""
        return self.const(np.asarray(values if isinstance(values, int) else list(values), dtype=np.int64), "i64")

    def scalar_like(self, value: bool | int | float, like: T) -> T:
        return self.const(value, like.dtype)

    # ── dtypes ───────────────────────────────────────────────────────────────
    def cast(self, x: T, dtype: str) -> T:
        if x.dtype == dtype:
            return x
        if dtype == "bool" and dtypes.is_float(x.dtype):
            # x != 0, which holds for NaN as in PyTorch (OpenVINO's Cast made NaN false); halves
            # widened first (onnxruntime has no half Equal; widening is exact)
            wide = self.widen(x)
            zero = self.const(0, wide.dtype)
            return self.op("Not", [self.op("Equal", [wide, zero], "bool", x.shape)], "bool", x.shape)
        return self.op("Cast", [x], dtype, x.shape, to=ONNX_TYPES[dtype])

    def where(self, cond: T, x: T, y: T) -> T:
        """``Where`` of any dtype: onnxruntime has no kernel for half, 8/16-bit and bool data, which
        select in a wider type (exactly) and come back."""
        y = self.cast(y, x.dtype)
        wider = {"f16": "f32", "bf16": "f32", "i8": "i32", "i16": "i32", "bool": "u8"}.get(x.dtype)
        if wider:
            return self.cast(self.where(cond, self.cast(x, wider), self.cast(y, wider)), x.dtype)
        return self.op("Where", [self.cast(cond, "bool"), x, y], x.dtype)

    def widen(self, x: T) -> T:
        return self.cast(x, "f32") if x.dtype in HALF else x

    # ── dims: static ints, or int64 tensors computed from the inputs' shapes ──
    def dims(self, shape: Sequence[Dim | T]) -> T:
        """A 1-d int64 tensor holding ``shape`` (a constant when every extent is static)."""
        if all(isinstance(d, int) for d in shape):
            return self.ints([int(d) for d in shape])  # type: ignore[arg-type]
        parts = [self.dim(d) for d in shape]
        return T(self.node("Concat", parts, axis=0)[0], "i64", (len(parts),))

    def dim(self, d: Dim | T) -> T:
        """A 1-element int64 tensor holding one extent."""
        if isinstance(d, T):
            return d
        if isinstance(d, int):
            return self.ints([d])
        cached = self._dims.get(d.expr)
        if cached is None:
            with_owner = self._owner, self._note
            self.begin("shape", f"extent {d.expr}")
            cached = self._expr(ast.parse(d.expr, mode="eval").body, d.expr).name
            self._owner, self._note = with_owner
            self._dims[d.expr] = cached
        return T(cached, "i64", (1,))

    def _expr(self, node: ast.AST, text: str) -> T:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return self.ints([node.value])
        if isinstance(node, ast.Name):
            return self._symbol(node.id, text)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return self.op("Neg", [self._expr(node.operand, text)], "i64", (1,))
        if isinstance(node, ast.BinOp):
            a, b = self._expr(node.left, text), self._expr(node.right, text)
            return self._int_binop(type(node.op), a, b, text)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = [self._expr(a, text) for a in node.args]
            fn = node.func.id
            if fn in ("Max", "Min") and args:
                return self.op(fn, args, "i64", (1,))
            if fn in ("FloorDiv", "CeilDiv", "Mod", "PythonMod") and len(args) == 2:
                if fn == "CeilDiv":
                    neg = self.op("Neg", [args[0]], "i64", (1,))
                    return self.op("Neg", [self._int_binop(ast.FloorDiv, neg, args[1], text)], "i64", (1,))
                return self._int_binop(ast.FloorDiv if fn == "FloorDiv" else ast.Mod, args[0], args[1], text)
        raise EmitError(f"symbolic extent {text!r}: cannot express it in ONNX; specialise the program first")

    def _int_binop(self, op: type, a: T, b: T, text: str) -> T:
        simple = {ast.Add: "Add", ast.Sub: "Sub", ast.Mult: "Mul"}
        if op in simple:
            return self.op(simple[op], [a, b], "i64", (1,))
        if op in (ast.FloorDiv, ast.Mod):
            mod = self.op("Mod", [a, b], "i64", (1,), fmod=0)  # Python's sign rule, so the division is exact
            if op is ast.Mod:
                return mod
            return self.op("Div", [self.op("Sub", [a, mod], "i64", (1,)), b], "i64", (1,))
        raise EmitError(f"symbolic extent {text!r}: cannot express it in ONNX; specialise the program first")

    def _symbol(self, name: str, text: str) -> T:
        source = self.symbol_sources.get(name)
        if source is None:
            raise EmitError(f"symbolic extent {text!r}: symbol {name} is no input's axis; specialise the program first")
        value, axis = source
        return self.op("Shape", [value], "i64", (1,), start=axis, end=axis + 1)

    # ── operands ─────────────────────────────────────────────────────────────
    def lit(self, v: Lit) -> T:
        if isinstance(v.value, Sym):
            d = self.dim(v.value)
            scalar = self.op("Squeeze", [d, self.ints([0])], "i64", ())
            return self.cast(scalar, v.dtype)
        return self.const(v.value, v.dtype)


def new_graph_value(g: OnnxGraph, ref: Ref) -> T:
    v = g.values[ref.name]
    return T(ref.name, v.dtype, v.shape)


def unsupported(c: Call, why: str) -> EmitError:
    """The one-line refusal of a Call the emitter has no faithful form for (as ``why`` says), naming
    the engines that run it."""
    return EmitError(f"the ONNX emitter cannot express {c.op} {why}; {OTHER_ENGINES}")


def out_static(out: Instr, what: str) -> tuple[int, ...]:
    if not all(isinstance(d, int) for d in out.shape):
        raise EmitError(f"{what} needs static extents, {out.result} has shape {out.shape}; specialise it first")
    return tuple(int(d) for d in out.shape)  # type: ignore[arg-type]
