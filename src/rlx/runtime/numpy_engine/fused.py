"""Kernels of the fused Calls (``Gemm``, ``Fused``) and the pre-bound fast paths of the executor.

Why these two fused Calls and no more: at the sizes rlx runs, a step costs its numpy calls plus a
fixed dispatch (about a microsecond each), so what pays is fewer steps, not new arithmetic.
``Gemm`` (matmul + bias or residual + activation) covers Linear, addmm and MatMul-by-a-weight
epilogues; ``Fused`` is any elementwise chain — residual adds, RMSNorm's scale, the scale + mask of
attention — optionally closed by a softmax. Conv keeps its own Call: its bias is already inside
it, a BatchNorm after it is folded into its weights (``rlx.runtime.numpy_engine.passes.fusion``), and the activation
after it is one ufunc call either way (in place on the conv's buffer when the buffer-reuse pass
hands it over). In-place writes (``out=``) are used only from ``INPLACE_MIN_BYTES`` up: below it,
numpy's allocation cache makes a fresh array cheaper than the ``out=`` argument.

A *binder* turns one instruction into a plain callable at load, once: it sees the Call and the
shape/dtype of the result and of every operand, picks a fast path (a bare ufunc, a collapsed GEMM,
a norm with its bookkeeping done at load) and returns ``None`` to leave the instruction to the
generic kernel (half precision, integer corner cases, symbolic shapes). A fast path runs the same
numpy operations in the same order as the generic kernel; only a product's BLAS blocking may
differ. The parity tests run every example with the passes on and off.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from rlx.errors import BundleError
from rlx.ir import calls as C
from rlx.ir import dtypes
from rlx.ir.program import Call, Ref
from rlx.kernels import geometry
from rlx.kernels.elementwise import BINARY as SHARED_BINARY
from rlx.kernels.elementwise import UNARY as SHARED_UNARY
from rlx.kernels.numpy.kernels import KERNELS, NUMPY
from rlx.kernels.numpy.namespace import erf64, gelu_float32, relu, sigmoid_float32, silu_float32
from rlx.kernels.numpy.nn import (
    INPLACE_MIN_BYTES,
    avg_pool_plan,
    conv_output_shape,
    conv_plan,
    max_pool_plan,
    norm_plan,
)
from rlx.kernels.precision import HALF
from rlx.kernels.registry import Kernel, overrides
from rlx.runtime.numpy_engine.fused_calls import Fused, Gemm

Fn = Callable[..., np.ndarray]
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_FAST_FLOATS = (_F32, _F64)


@dataclass(frozen=True)
class TensorType:
    """Static type of one operand: its shape and numpy dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype


CallT = TypeVar("CallT", bound=Call)


@dataclass(frozen=True)
class Site(Generic[CallT]):
    """One instruction as a binder sees it: the call, its result type, and its operands' types in
    the executor's flat order (operand fields in order, tuples spread, ``None`` for an absent one)."""

    call: CallT
    shape: tuple[int, ...]
    dtype: np.dtype
    operands: tuple[TensorType | None, ...]

    def operand(self, i: int) -> TensorType:
        """The type of operand ``i``, which the Call requires (present by the program's validation)."""
        t = self.operands[i]
        if t is None:
            raise BundleError(f"{self.call.op}: operand {i} is missing")
        return t


Binder = Callable[[Site[Any]], Fn | None]
BINDERS: dict[str, Binder] = {}
# Generic kernels of the fused Calls (constant folding and the debugger run a rewritten program
# through them). Kept apart from the engine's KERNELS, which lists what program.json may hold and
# what a generated package vendors: fused Calls never reach either.
FUSED_KERNELS: dict[str, Kernel] = {}
fused_kernel = overrides(FUSED_KERNELS)
binds = overrides(BINDERS)


def kernel_for(op: str) -> Kernel | None:
    """The generic kernel of a plain or fused Call, by Call name."""
    return KERNELS.get(op) or FUSED_KERNELS.get(op)


def _static(shape: Sequence[Any]) -> bool:
    return all(isinstance(d, int) for d in shape)


# ── elementwise functions writing into ``out`` ───────────────────────────────
# Each one computes exactly what the engine's function for ``fn`` computes (``NUMPY.unary``: the shared
# definition, or the engine's float32 override held to it) and is safe with ``out`` being ``x`` itself.
# Only for float32/float64.
def _sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    if x.dtype == _F32 and x.ndim:
        return sigmoid_float32(x, out)
    out = np.negative(x, out=out)
    np.exp(out, out=out)
    np.add(1, out, out=out)
    return np.divide(1, out, out=out)


def _silu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    if x.dtype == _F32 and x.ndim:
        return silu_float32(x, out)
    return np.multiply(x, _sigmoid(x), out=out)


def _gelu_tanh(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    t = np.multiply(0.044715, x)
    np.multiply(t, x, out=t)
    np.multiply(t, x, out=t)
    np.add(x, t, out=t)
    np.multiply(math.sqrt(2 / math.pi), t, out=t)
    np.tanh(t, out=t)
    np.add(1, t, out=t)
    out = np.multiply(0.5, x, out=out)
    return np.multiply(out, t, out=out)


def _gelu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    if x.dtype == _F32:
        return gelu_float32(x, out)
    e = erf64(np.multiply(x, 1 / math.sqrt(2)))
    np.add(1, e, out=e)
    out = np.multiply(x, 0.5, out=out)
    return np.multiply(out, e, out=out)


def _rsqrt(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    out = np.sqrt(x, out=out)
    return np.divide(1, out, out=out)


def _clip(lo: float, hi: float, shift: float = 0.0) -> Fn:
    def run(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        out = np.add(x, shift, out=out) if shift else np.maximum(lo, x, out=out)  # lo first: x on a tie (−0 stays −0)
        if shift:
            np.maximum(lo, out, out=out)
        return np.minimum(hi, out, out=out)

    return run


def _hardsigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    out = _clip(0, 6, 3)(x, out)
    return np.divide(out, 6, out=out)


def _hardswish(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    t = _clip(0, 6, 3)(x)
    np.multiply(x, t, out=t)
    return np.divide(t, 6, out=out)


_UFUNC_UNARY = {
    "neg": np.negative, "abs": np.absolute, "exp": np.exp, "expm1": np.expm1, "exp2": np.exp2,
    "log": np.log, "log1p": np.log1p, "log2": np.log2, "log10": np.log10, "sqrt": np.sqrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "floor": np.floor, "ceil": np.ceil,
    "round": np.rint, "trunc": np.trunc,
}  # fmt: skip
FLOAT_UNARY: dict[str, Fn] = {
    **_UFUNC_UNARY,
    "rsqrt": _rsqrt, "reciprocal": lambda x, out=None: np.divide(1, x, out=out),
    "sigmoid": _sigmoid, "relu": relu, "silu": _silu, "gelu": _gelu, "gelu_tanh": _gelu_tanh,
    "square": lambda x, out=None: np.multiply(x, x, out=out), "relu6": _clip(0, 6),
    "hardsigmoid": _hardsigmoid, "hardswish": _hardswish,
}  # fmt: skip
# Binary functions that are one ufunc in the generic kernel, by the dtype kinds they are exact for.
_UFUNC_BINARY: dict[str, tuple[np.ufunc, str]] = {
    "add": (np.add, "fiu"), "sub": (np.subtract, "fiu"), "mul": (np.multiply, "fiub"),
    "div": (np.true_divide, "f"), "maximum": (np.maximum, "fiub"), "minimum": (np.minimum, "fiub"),
    "fmax": (np.fmax, "f"), "fmin": (np.fmin, "f"), "atan2": (np.arctan2, "f"),
    "remainder": (np.remainder, "f"), "fmod": (np.fmod, "f"), "floor_divide": (np.floor_divide, "f"),
    "eq": (np.equal, "fiub"), "ne": (np.not_equal, "fiub"), "lt": (np.less, "fiub"),
    "le": (np.less_equal, "fiub"), "gt": (np.greater, "fiub"), "ge": (np.greater_equal, "fiub"),
    "logical_and": (np.logical_and, "fiub"), "logical_or": (np.logical_or, "fiub"),
    "logical_xor": (np.logical_xor, "fiub"), "bitwise_and": (np.bitwise_and, "iub"),
    "bitwise_or": (np.bitwise_or, "iub"), "bitwise_xor": (np.bitwise_xor, "iub"),
}  # fmt: skip


def fast_unary(fn: str, dtype: np.dtype) -> Fn | None:
    """``f(x, out=None)`` computing Unary ``fn`` on ``dtype`` exactly as the generic kernel, or None."""
    return FLOAT_UNARY.get(fn) if dtype in _FAST_FLOATS else None


def fast_binary(fn: str, a: np.dtype, b: np.dtype, result: np.dtype) -> np.ufunc | None:
    """The ufunc computing Binary ``fn`` for these dtypes exactly as the generic kernel, or None.
    Tests hold each ufunc to the shared definition of ``fn`` on every dtype kind it is listed for."""
    ufunc, kinds = _UFUNC_BINARY.get(fn, (None, ""))
    if ufunc is None or a != b or a.kind not in kinds or a in HALF:
        return None
    return ufunc if ufunc.resolve_dtypes((a, b, None))[2] == result else None


# ── Gemm ─────────────────────────────────────────────────────────────────────
def reuse_buffer(buf: np.ndarray | None, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    """``buf`` viewed as ``shape`` when its storage can take a result of that type, else None."""
    if buf is None or buf.dtype != dtype or not buf.flags.c_contiguous or not buf.flags.writeable:
        return None
    if buf.shape == shape:
        return buf
    return buf.reshape(shape) if buf.size == math.prod(shape) else None


@fused_kernel("Gemm")
def gemm(c: Gemm, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, reuse: np.ndarray | None) -> np.ndarray:
    """The generic kernel: exactly the unfused MatMul → add → Unary sequence."""
    fast = _bind_gemm(
        c,
        TensorType(x.shape, x.dtype),
        TensorType(w.shape, w.dtype),
        None if bias is None else TensorType(bias.shape, bias.dtype),
    )
    if fast is not None:
        return fast(x, w, bias, reuse)
    out = KERNELS["MatMul"](C.MatMul(c.x, c.w), x, w)
    if bias is not None:
        out = KERNELS["Binary"](C.Binary("add", c.x, c.x), out, bias).astype(out.dtype, copy=False)
    if c.activation:
        out = KERNELS["Unary"](C.Unary(c.activation, c.x), out).astype(out.dtype, copy=False)
    return out


def _gemm_shape(x: TensorType, w: TensorType, bias: TensorType | None) -> tuple[int, ...] | None:
    """The product's shape when the fast GEMM applies: static float32/float64 operands of one
    dtype, both at least 2-d, a bias that broadcasts to the product without growing it."""
    dt = x.dtype
    if dt not in _FAST_FLOATS or w.dtype != dt or (bias is not None and bias.dtype != dt):
        return None
    if len(x.shape) < 2 or len(w.shape) < 2 or not _static(x.shape) or not _static(w.shape):
        return None
    try:
        out_shape = np.broadcast_shapes(x.shape[:-2], w.shape[:-2]) + (x.shape[-2], w.shape[-1])
        if bias is not None and np.broadcast_shapes(out_shape, bias.shape) != out_shape:
            return None
    except ValueError:
        return None
    return out_shape


def _bind_gemm(
    c: Gemm | C.MatMul | C.Linear, x: TensorType, w: TensorType, bias: TensorType | None, transposed: bool = False
) -> Fn | None:
    """One GEMM over the merged leading axes of ``x`` when ``w`` is a matrix; bias and activation
    applied in place on the product. Float32/float64 operands of one dtype only."""
    dt = x.dtype
    act_name = getattr(c, "activation", "")
    act = fast_unary(act_name, dt) if act_name else None
    if act_name and act is None:
        return None
    if transposed:
        w = TensorType(w.shape[:-2] + (w.shape[-1], w.shape[-2]), w.dtype)
    out_shape = _gemm_shape(x, w, bias)
    if out_shape is None:
        return None
    collapse = len(w.shape) == 2 and len(x.shape) > 2
    k, n = x.shape[-1], w.shape[-1]
    m = math.prod(x.shape[:-1])
    flat_shape = (m, n) if collapse else out_shape
    # Small results: fresh arrays (numpy's allocation cache beats ``out=``); large ones in place.
    inplace = dt.itemsize * math.prod(out_shape) >= INPLACE_MIN_BYTES

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, reuse: np.ndarray | None = None) -> np.ndarray:
        if transposed:
            w = w.T if w.ndim == 2 else np.swapaxes(w, -1, -2)
        if collapse:
            x = x.reshape(m, k)
        buf = reuse_buffer(reuse, flat_shape, dt) if reuse is not None else None
        out = np.matmul(x, w) if buf is None else np.matmul(x, w, buf)
        if collapse:
            out = out.reshape(out_shape)
        if inplace:
            if b is not None:
                out += b
            return out if act is None else act(out, out)
        if b is not None:
            out = out + b
        return out if act is None else act(out)

    return run


@binds("Gemm")
def bind_gemm(site: Site[Gemm]) -> Fn | None:
    return _bind_gemm(site.call, site.operand(0), site.operand(1), site.operands[2])


@binds("MatMul")
def bind_matmul(site: Site[C.MatMul]) -> Fn | None:
    return _bind_gemm(site.call, site.operand(0), site.operand(1), None)


@binds("Linear")
def bind_linear(site: Site[C.Linear]) -> Fn | None:
    return _bind_gemm(site.call, site.operand(0), site.operand(1), site.operands[2], transposed=True)


# ── Fused elementwise chains ─────────────────────────────────────────────────


@dataclass(frozen=True)
class CheckedStep:
    """One step of a ``Fused`` chain, checked, with its numpy dtype."""

    fn: str
    param: float | int | None  # leaky_relu's slope, softmax's axis
    args: tuple[int | None, ...]  # register indices (None: an open clamp bound)
    dtype: np.dtype


def check_steps(c: Fused) -> list[CheckedStep]:
    """The chain's steps, refusing one that reads a register it cannot see."""
    if not c.steps:
        raise BundleError("Fused: a chain needs at least one step")
    out = []
    for k, st in enumerate(c.steps):
        if not st.args or any(r is not None and not 0 <= r < len(c.inputs) + k for r in st.args):
            raise BundleError(f"Fused: step {k} ({st.fn} {st.args}) reads a register it cannot see")
        out.append(CheckedStep(st.fn, st.param, st.args, dtypes.to_numpy(dtypes.check(st.dtype, "Fused.steps.dtype"))))
    return out


def step_param(step: CheckedStep) -> float | int:
    if step.param is None:
        raise BundleError(f"Fused: step {step.fn!r} needs its parameter")
    return step.param


def _generic_step(step: CheckedStep) -> Fn:
    """The step through the generic kernel of the Call it came from (exact for every dtype)."""
    r = Ref("_")  # the generic kernels read only the Call's attributes, never its operands
    call: Call
    if step.fn == "where":
        call, kern = C.Where(r, r, r), KERNELS["Where"]
    elif step.fn == "clamp":
        call = C.Clamp(r, None if step.args[1] is None else r, None if step.args[2] is None else r)
        kern = KERNELS["Clamp"]
    elif step.fn == "leaky_relu":
        call, kern = C.LeakyRelu(r, float(step_param(step))), KERNELS["LeakyRelu"]
    elif step.fn == "cast":
        call, kern = C.Cast(r, dtypes.from_numpy(step.dtype)), KERNELS["Cast"]
    elif step.fn in ("softmax", "log_softmax"):
        call, kern = C.Softmax(r, int(step_param(step)), step.fn == "log_softmax"), KERNELS["Softmax"]
    elif step.fn in SHARED_UNARY and len(step.args) == 1:
        call, kern = C.Unary(step.fn, r), KERNELS["Unary"]
    elif step.fn in SHARED_BINARY and len(step.args) == 2:
        call, kern = C.Binary(step.fn, r, r), KERNELS["Binary"]
    else:
        raise BundleError(f"Fused: unknown step {step.fn!r} with {len(step.args)} operands")
    dt = step.dtype

    def run(*xs: np.ndarray | None) -> np.ndarray:
        res = kern(call, *xs)
        if res.dtype != dt:
            return res.astype(dt)
        # The chain may overwrite what its steps return: never hand back an operand itself.
        return res.copy() if any(res is x for x in xs) else res

    return run


# A softmax over a trailing axis this short or shorter takes its row maxima from a transposed copy
# (from this many elements up): numpy reduces a short contiguous axis one row at a time, about 3×
# slower than the copy plus one reduction across rows. Longer rows: the copy stops paying.
_SHORT_ROW = 32
_SHORT_ROW_MIN_SIZE = 4096


def _row_max(x: np.ndarray, axis: int) -> np.ndarray:
    """``np.max(x, axis, keepdims=True)``, the same values (NaN propagates), taken across the rows
    of a transposed copy when ``axis`` is a short trailing one."""
    n = x.shape[axis] if x.ndim else 0
    if axis % max(x.ndim, 1) != x.ndim - 1 or not 1 < n <= _SHORT_ROW or x.size < _SHORT_ROW_MIN_SIZE:
        return np.maximum.reduce(x, axis=axis, keepdims=True)
    columns = np.ascontiguousarray(x.reshape(-1, n).T)
    return np.maximum.reduce(columns, axis=0).reshape(x.shape[:-1] + (1,))


def _softmax_inplace(axis: int, log: bool) -> Fn:
    """The shared softmax definition on float32/float64, overwriting ``out`` (which may be ``x``)."""

    def run(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if out is None:
            out = np.empty_like(x)
        np.subtract(x, _row_max(x, axis), out=out)
        if log:
            return np.subtract(out, np.log(np.add.reduce(np.exp(out), axis=axis, keepdims=True)), out=out)
        np.exp(out, out=out)
        return np.divide(out, np.add.reduce(out, axis=axis, keepdims=True), out=out)

    return run


def _fast_step(step: CheckedStep, types: list[TensorType]) -> Fn | None:
    ins = [types[a] for a in step.args if a is not None]
    dt = step.dtype
    if step.fn in ("softmax", "log_softmax"):
        return (
            _softmax_inplace(int(step_param(step)), step.fn == "log_softmax")
            if ins[0].dtype == dt in _FAST_FLOATS
            else None
        )
    if step.fn == "clamp":
        if any(t.dtype != dt for t in ins) or dt in HALF:
            return None
        lo, hi = step.args[1] is not None, step.args[2] is not None

        def clamp(x: np.ndarray, a: Any = None, b: Any = None, out: np.ndarray | None = None) -> np.ndarray:
            if lo:
                out = np.maximum(x, a, out=out)
                return np.minimum(out, b, out=out) if hi else out
            return np.minimum(x, b, out=out)

        return clamp
    if len(step.args) == 1 and step.fn in SHARED_UNARY:
        return fast_unary(step.fn, ins[0].dtype) if ins[0].dtype == dt else None
    if len(step.args) == 2 and step.fn in SHARED_BINARY:
        return fast_binary(step.fn, ins[0].dtype, ins[1].dtype, dt)
    return None


def register_types(
    steps: list[CheckedStep], inputs: Sequence[TensorType | None]
) -> tuple[list[TensorType], dict[int, int]]:
    """The type of every register (inputs, then one per step) and the step that reads each last."""
    types: list[TensorType] = []
    for t in inputs:
        if t is None:
            raise BundleError("Fused: an input of the chain is missing")
        types.append(t)
    last_read: dict[int, int] = {}
    for k, st in enumerate(steps):
        shapes = [types[a].shape for a in st.args if a is not None]
        shape = shapes[0] if st.fn in ("softmax", "log_softmax") else np.broadcast_shapes(*shapes)
        types.append(TensorType(tuple(shape), st.dtype))
        for a in st.args:
            if a is not None:
                last_read[a] = k
    return types, last_read


def _bind_fused(c: Fused, operands: Sequence[TensorType | None]) -> Fn:
    """Run the chain over a register file: the inputs, the ``reuse`` buffer, one register per step,
    and one that holds None. Each step is a closure of fixed arity over it. A step with a fast path
    on a large result writes into a register of its shape and dtype that the chain created and no
    longer needs (the last step: into the ``reuse`` buffer); everything else allocates."""
    steps = check_steps(c)
    n_in, n_steps = len(c.inputs), len(steps)
    types, last_read = register_types(steps, operands[:n_in])
    final = types[-1]
    reuse, none = n_in, n_in + 1 + n_steps  # register layout: inputs, reuse, steps, None

    def reg(i: int | None) -> int:
        return none if i is None else (i if i < n_in else i + 1)

    plan = []
    free: list[int] = []  # step registers (chain numbering) the chain owns and no longer reads
    for k, st in enumerate(steps):
        res = n_in + k
        # 0-d: ufuncs return numpy scalars, which cannot take ``out=``; the generic kernels wrap them.
        fast = _fast_step(st, types) if types[res].shape else None
        dest = None
        if fast is not None and types[res].dtype.itemsize * math.prod(types[res].shape) >= INPLACE_MIN_BYTES:
            if k == n_steps - 1:
                dest = reuse
                # softmax needs its input only until it reads it: in place on the chain's own buffer.
                source = st.args[0]
                if st.fn in ("softmax", "log_softmax") and source is not None and source >= n_in:
                    dest = reg(source)
            else:
                # A register the chain made and no longer needs — or one this step reads for the last time.
                dying = [a for a in st.args if a is not None and a >= n_in and last_read[a] == k]
                pick = next((r for r in free + dying if types[r] == types[res]), None)
                if pick is not None:
                    dest = reg(pick)
                    if pick in free:
                        free.remove(pick)
        plan.append((_caller(fast or _generic_step(st), tuple(reg(a) for a in st.args), dest), reg(res)))
        free += [a for a in st.args if a is not None and a >= n_in and last_read[a] == k and reg(a) != dest]
    steps_plan = tuple(plan)
    out_shape, out_dtype, scalar = final.shape, final.dtype, final.shape == ()
    pad = (None,) * (n_steps + 1)
    last = reg(n_in + n_steps - 1)

    def run(*args: Any) -> np.ndarray:
        regs = [*args, *pad] if len(args) > n_in else [*args, None, *pad]
        if regs[reuse] is not None:
            regs[reuse] = reuse_buffer(regs[reuse], out_shape, out_dtype)
        for op, res in steps_plan:
            regs[res] = op(regs)
        return np.asarray(regs[last]) if scalar else regs[last]

    return run


def _caller(fn: Fn, args: tuple[int, ...], dest: int | None) -> Callable[[list[Any]], np.ndarray]:
    """``regs -> fn(*regs[args])``, writing into ``regs[dest]`` (when not None) as the positional out."""
    if dest is None:
        if len(args) == 1:
            (a,) = args
            return lambda r: fn(r[a])
        if len(args) == 2:
            a, b = args
            return lambda r: fn(r[a], r[b])
        return lambda r: fn(*[r[i] for i in args])
    if len(args) == 1:
        (a,) = args
        return lambda r: fn(r[a], r[dest])
    if len(args) == 2:
        a, b = args
        return lambda r: fn(r[a], r[b], r[dest])
    return lambda r: fn(*[r[i] for i in args], r[dest])


@binds("Fused")
def bind_fused(site: Site[Fused]) -> Fn | None:
    if not all(t is not None and _static(t.shape) for t in site.operands[: len(site.call.inputs)]):
        return None
    return _bind_fused(site.call, site.operands)


@fused_kernel("Fused")
def fused(c: Fused, inputs: list[np.ndarray], reuse: np.ndarray | None) -> np.ndarray:
    return _bind_fused(c, [TensorType(x.shape, x.dtype) for x in inputs])(*inputs, reuse)


# ── fast paths for the plain Calls that dominate a step count ────────────────
@binds("Binary")
def bind_binary(site: Site[C.Binary]) -> Fn | None:
    x, y = site.operand(0), site.operand(1)
    if not site.shape:
        return None  # a 0-d result: the generic kernel keeps it an array
    return fast_binary(site.call.fn, x.dtype, y.dtype, site.dtype)


@binds("Unary")
def bind_unary(site: Site[C.Unary]) -> Fn | None:
    """The engine's function for ``fn`` (looked up now, at load), minus the kernel's dispatch: for a
    float32/float64 operand of the result's dtype that is all the generic kernel does."""
    x = site.operand(0)
    if not site.shape or x.dtype != site.dtype or x.dtype not in _FAST_FLOATS:
        return None
    return NUMPY.unary.get(site.call.fn)


@binds("Reduce")
def bind_reduce(site: Site[C.Reduce]) -> Fn | None:
    """sum / mean / amax / amin of a float32/float64 tensor to a non-0-d result: the generic
    kernel's ``np.sum`` is ``np.add.reduce``, its mean that sum divided by the count."""
    c = site.call
    x = site.operand(0)
    if x.dtype not in _FAST_FLOATS or site.dtype != x.dtype or not x.shape or not site.shape:
        return None
    axes = c.axes or None
    keep = c.keepdim
    if c.fn in ("sum", "amax", "amin"):
        ufunc: Any = {"sum": np.add, "amax": np.maximum, "amin": np.minimum}[c.fn]
        if c.fn != "sum" and 0 in x.shape:
            return None  # the generic kernel raises numpy's error
        return lambda x: ufunc.reduce(x, axis=axes, keepdims=keep)
    if c.fn == "mean":
        n = math.prod(x.shape) if axes is None else math.prod(x.shape[a] for a in axes)
        add: Any = np.add
        return lambda x: add.reduce(x, axis=axes, keepdims=keep) / n
    return None


@binds("LayerNorm", "RmsNorm")
def bind_norm(site: Site[C.LayerNorm | C.RmsNorm]) -> Fn | None:
    """LayerNorm / RmsNorm of float32/float64 with weight and bias of the normalised shape: the
    generic kernel's own plan, built once."""
    c = site.call
    x, w = site.operand(0), site.operands[1]
    b = site.operands[2] if isinstance(c, C.LayerNorm) else None
    trailing = x.shape[len(x.shape) - c.ndim :] if c.ndim else ()
    if x.dtype not in _FAST_FLOATS or site.dtype != x.dtype or c.ndim < 1 or not x.shape or 0 in x.shape:
        return None
    if any(a is not None and (a.dtype != x.dtype or a.shape != trailing) for a in (w, b)):
        return None
    return norm_plan(x.shape, x.dtype, c.ndim, c.eps, rms=isinstance(c, C.RmsNorm))


@binds("Softmax")
def bind_softmax(site: Site[C.Softmax]) -> Fn | None:
    c = site.call
    x = site.operand(0)
    if x.dtype not in _FAST_FLOATS or site.dtype != x.dtype or not x.shape or 0 in x.shape:
        return None
    return _softmax_inplace(c.axis, c.log)


@binds("Reshape")
def bind_reshape(site: Site[C.Reshape]) -> Fn | None:
    return operator.methodcaller("reshape", site.shape) if _static(site.shape) else None


@binds("Permute")
def bind_permute(site: Site[C.Permute]) -> Fn | None:
    return operator.methodcaller("transpose", site.call.perm)


@binds("Slice")
def bind_slice(site: Site[C.Slice]) -> Fn | None:
    c = site.call
    if not all(isinstance(v, int) for v in (c.start, c.stop)):
        return None
    return operator.itemgetter((slice(None),) * c.axis + (slice(c.start, c.stop, c.step),))


@binds("Expand")
def bind_expand(site: Site[C.Expand]) -> Fn | None:
    shape = site.shape
    return (lambda x: np.broadcast_to(x, shape)) if _static(shape) else None


@binds("Conv")
def bind_conv(site: Site[C.Conv]) -> Fn | None:
    """A float32/float64 forward convolution with its geometry worked out at load."""
    c = site.call
    x, w, b = site.operand(0), site.operand(1), site.operands[2]
    if c.transposed or x.dtype not in _FAST_FLOATS or w.dtype != x.dtype or site.dtype != x.dtype:
        return None
    if (b is not None and b.dtype != x.dtype) or len(x.shape) != len(w.shape):
        return None
    if site.shape != conv_output_shape(c, x.shape, w.shape):
        return None  # a shape the program declares wrongly: the generic kernel reports it
    plan = conv_plan(c, x.shape, w.shape, x.dtype)
    return lambda x, w, b=None: plan(x, w, b)


@binds("MaxPool")
def bind_max_pool(site: Site[C.MaxPool]) -> Fn | None:
    """Float32/float64 max pooling (values, not indices) with its geometry worked out at load."""
    x = site.operand(0)
    c = site.call
    if c.indices or x.dtype not in _FAST_FLOATS or site.dtype != x.dtype:
        return None
    out = geometry.pool_output(x.shape, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
    if site.shape != x.shape[: len(x.shape) - len(out)] + out:
        return None  # a shape the program declares wrongly: the generic kernel reports it
    return max_pool_plan(c, x.shape, x.dtype)


@binds("AvgPool")
def bind_avg_pool(site: Site[C.AvgPool]) -> Fn | None:
    """Float32/float64 average pooling with its geometry and divisor table worked out at load."""
    x = site.operand(0)
    c = site.call
    if x.dtype not in _FAST_FLOATS or site.dtype != x.dtype:
        return None
    out = geometry.pool_output(x.shape, c.kernel, c.stride, c.padding, (1,) * len(c.kernel), c.ceil_mode)
    if site.shape != x.shape[: len(x.shape) - len(out)] + out:
        return None  # a shape the program declares wrongly: the generic kernel reports it
    return avg_pool_plan(c, x.shape, x.dtype)
