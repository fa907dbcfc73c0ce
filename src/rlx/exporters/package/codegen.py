"""Program → readable Python: one ``forward(params, *inputs)`` of straight-line array code.

Generated from the same Calls the runtime executes. Simple Calls become numpy (or ``jax.numpy``)
expressions (``a + b``, ``x.reshape(2, 8, 64)``, ``x[:, 1:5]``); the rest call the runtime's own
kernels, vendored into the package as ``_ops``. Every statement carries its source aten op as a
comment. Two styles: ``NumpyWriter`` (numpy + the numpy kernels) and ``JaxWriter`` (``jax.numpy``
+ the JAX engine's kernels; jit-compatible, since every kernel traces).
"""

from __future__ import annotations

import dataclasses
import keyword
import math
import re
from collections.abc import Sequence
from typing import Any

from rlx.ir import calls as C
from rlx.ir.program import Call, Instr, Lit, Program, Ref
from rlx.ir.symbolic import Sym, format_shape
from rlx.kernels import elementwise
from rlx.version import __version__

_FLOAT_NP = {"f32": "np.float32", "f64": "np.float64", "f16": "np.float16", "bf16": "_ops.bfloat16"}
_NP_TYPE = {**_FLOAT_NP, "i64": "np.int64", "i32": "np.int32", "i16": "np.int16", "i8": "np.int8", "u8": "np.uint8",
            "bool": "np.bool_", "c64": "np.complex64", "c128": "np.complex128", "u16": "np.uint16",
            "u32": "np.uint32", "u64": "np.uint64"}  # fmt: skip
_LOW_BIT_NP = {
    "f8e4m3fn": "float8_e4m3fn",
    "f8e4m3fnuz": "float8_e4m3fnuz",
    "f8e5m2": "float8_e5m2",
    "f8e5m2fnuz": "float8_e5m2fnuz",
    "f8e8m0": "float8_e8m0fnu",
    "f4e2m1": "float4_e2m1fn",
    "i4": "int4",
    "u4": "uint4",
    "i2": "int2",
    "u2": "uint2",
}  # ml_dtypes names; fmt: skip
_NP_TYPE.update({tok: f"_ops.{name}" for tok, name in _LOW_BIT_NP.items()})
SYMBOLIC_FUNCS = ("Max", "Min", "Mod", "PythonMod", "FloorDiv", "CeilDiv", "floor", "ceiling", "FloorToInt",
                  "CeilToInt", "TruncToInt", "IntTrueDiv", "ToFloat", "Abs")  # fmt: skip


def snake(name: str) -> str:
    """``DecoderLM`` → ``decoder_lm``, ``MaxPool`` → ``max_pool``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def identifier(name: str) -> str:
    """A value name as a Python identifier that shadows nothing the generated code uses."""
    ident = re.sub(r"\W", "_", name)
    if not ident or ident[0].isdigit():
        ident = f"v_{ident}"
    if keyword.iskeyword(ident) or ident in ("np", "jnp", "jax", "params", "_ops"):
        ident += "_"
    return ident


class NumpyWriter:
    """The numpy style; ``JaxWriter`` overrides the spelling tables and the imports."""

    TYPES = _NP_TYPE
    IMPORTS = {"np": "import numpy as np"}  # name used in the code → its import

    def __init__(self, program: Program) -> None:
        self.program = program
        self.weights = {w.name: w.key for w in program.weights}
        self.values = program.values()
        self.symbolic_funcs: set[str] = set()
        self.kernels: set[str] = set()  # Calls the code runs through _ops (their wrappers go in _ops/__init__.py)

    # ── operands and attributes ──────────────────────────────────────────────
    def ref(self, r: Ref) -> str:
        if r.name in self.weights:
            return f"params[{self.weights[r.name]!r}]"
        return identifier(r.name)

    def dim(self, d: Any) -> str:
        if isinstance(d, Sym):
            self.symbolic_funcs.update(f for f in SYMBOLIC_FUNCS if re.search(rf"\b{f}\(", d.expr))
            return d.expr if d.expr.isidentifier() else f"({d.expr})"
        return repr(d)

    def literal(self, v: Any) -> str:
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else f"float({str(v)!r})"
        if isinstance(v, Sym):
            return self.dim(v)
        if isinstance(v, tuple):
            inner = ", ".join(self.literal(x) for x in v)
            return f"({inner},)" if len(v) == 1 else f"({inner})"
        return repr(v)

    def operand(self, v: Any) -> str:
        if isinstance(v, Ref):
            return self.ref(v)
        if isinstance(v, Lit):
            return f"{self.TYPES[v.dtype]}({self.literal(v.value)})"
        if v is None:
            return "None"
        if isinstance(v, tuple):
            return "[" + ", ".join(self.operand(x) for x in v) + "]"
        return self.literal(v)

    def dtype_of(self, v: Any) -> str:
        return v.dtype if isinstance(v, Lit) else self.values[v.name].dtype

    # ── one Call → one expression ────────────────────────────────────────────
    def expression(self, ins: Instr) -> str:
        c = ins.call
        if isinstance(c, C.Cast) and self.casts_through_kernel(c):
            return self.kernel_call(c)
        half = ins.dtype in ("f16", "bf16") or any(
            isinstance(r, (Ref, Lit)) and self.dtype_of(r) in ("f16", "bf16") for r in _operands(c)
        )
        # Half precision computes in float32 and rounds once: only the kernels do that.
        spelled = None if half else self.arithmetic(c)
        return spelled or self.structural(c) or self.kernel_call(c)

    def casts_through_kernel(self, c: C.Cast) -> bool:
        """Whether ``astype`` would differ from the Cast kernel: a half float to an integer (the
        kernel goes through float32, as PyTorch does; ml_dtypes' own cast does not)."""
        return self.dtype_of(c.x) in ("f16", "bf16") and c.dtype[0] in "iu"

    def arithmetic(self, c: Call) -> str | None:
        """Elementwise functions and products as array expressions (float32/float64, integers, bools)."""
        if isinstance(c, (C.Unary, C.Binary)):
            # The shared table's spelling, which is the very expression the engines run.
            table = elementwise.UNARY if isinstance(c, C.Unary) else elementwise.BINARY
            spelling = table[c.fn].spelling
            operands = [self.operand(v) for v in ((c.x,) if isinstance(c, C.Unary) else (c.x, c.y))]
            return spelling.format(*operands, xp=self.array_module) if spelling else None
        if isinstance(c, C.MatMul):
            return self.matmul(self.operand(c.x), self.operand(c.y))
        if isinstance(c, C.Linear):
            out = self.matmul(self.operand(c.x), f"{self.operand(c.weight)}.T")
            return out if c.bias is None else f"{out} + {self.operand(c.bias)}"
        return None

    def structural(self, c: Call) -> str | None:
        """Casts, producers and data movement as array expressions (exact in every dtype)."""
        xp, arg = self.array_module, self.operand
        match c:
            case C.Cast(x, dtype):
                return f"{arg(x)}.astype({self.TYPES[dtype]})"
            case C.Slice(x, axis, start, stop, step):
                bounds = f"{'' if start == 0 else self.dim(start)}:{'' if stop == 2**63 - 1 else self.dim(stop)}"
                return f"{arg(x)}[{':, ' * axis}{bounds}{'' if step == 1 else f':{step}'}]"
            case C.Reshape(x, shape):
                return f"{arg(x)}.reshape({', '.join(self.dim(d) for d in shape) or '()'})"
            case C.Where(cond, x, y):
                return f"{xp}.where({arg(cond)}, {arg(x)}, {arg(y)})"
            case C.Permute(x, perm):
                return f"{arg(x)}.transpose({', '.join(map(str, perm))})"
            case C.Full(value, shape, dtype):
                return f"{xp}.full({self.literal(tuple(shape))}, {self.literal(value)}, {self.TYPES[dtype]})"
            case C.Expand(x, shape):
                return f"{xp}.broadcast_to({arg(x)}, {self.literal(tuple(shape))})"
            case C.Concat(xs, axis):
                return f"{xp}.concatenate({arg(xs)}, axis={axis})"
        return None

    array_module = "np"

    def matmul(self, x: str, y: str) -> str:
        return f"np.matmul({x}, {y})"

    def kernel_call(self, c: Call) -> str:
        """``_ops.<call>(operands…, attr=…)``: the runtime's own kernel for this Call."""
        operand_fields = c.operand_fields()
        args = [self.operand(getattr(c, f)) for f in operand_fields]
        attrs = [f"{f}={self.literal(getattr(c, f))}" for f in _fields(c) if f not in operand_fields]
        self.kernels.add(c.op)
        return f"_ops.{snake(c.op)}({', '.join(args + attrs)})"

    # ── the module ───────────────────────────────────────────────────────────
    def module(self, decomposition: str) -> str:
        p = self.program
        state = [v for v in p.inputs if v.name in {s.name for s in p.state}]
        signature = ", ".join(["params"] + [identifier(v.name) for v in [*p.user_inputs, *state]])
        body = [f"def forward({signature}):"]
        doc_inputs = ", ".join(f"{v.name} {format_shape(v.shape)} {v.dtype}" for v in p.user_inputs)
        doc = f"Inputs: {doc_inputs}. ``params`` maps state_dict names to arrays."
        if state:
            doc += f" State (current values in, new values out): {', '.join(identifier(v.name) for v in state)}."
        if p.input_updates:
            doc += " Last result: the new values of the inputs updated in place, by position."
        body.append(f'    """{doc}"""')
        body += self.bind_symbols()
        data_symbols = {s.name for s in p.data_symbols}
        last_node = None
        for ins in p.instrs:
            if ins.node != last_node and ins.note:
                body.append(f"    # {ins.note}")
                last_node = ins.node
            body.append(f"    {identifier(ins.result)} = {self.expression(ins)}")
            for axis, d in enumerate(ins.shape):  # a size the data decides, known from here on
                if isinstance(d, Sym) and d.expr in data_symbols:
                    body.append(f"    {d.expr} = {identifier(ins.result)}.shape[{axis}]")
                    data_symbols.discard(d.expr)
        result = self.output(p.output_tree)
        if p.state:
            updates = ", ".join(f"{identifier(s.name)!r}: {self.operand(p.outputs[s.output])}" for s in p.state)
            result = f"{result}, {{{updates}}}"
        if p.input_updates:  # new values of inputs the model updates in place, by input position
            positions = {v.name: k for k, v in enumerate(p.user_inputs)}
            updates = ", ".join(f"{positions[n]}: {self.operand(p.outputs[k])}" for n, k in p.input_updates.items())
            result = f"{result}, {{{updates}}}"
        body.append(f"    return {result}")
        hist = "\n".join(f"#   {n:>5}  {op}" for op, n in p.source_histogram.items())
        code = "\n".join(body)
        # Import only what the code uses, so the module stays ruff-clean (F401) for any program.
        imports = [line for name, line in self.IMPORTS.items() if re.search(rf"\b{name}\.", code)]
        local = ["from . import _ops"] if re.search(r"\b_ops\.", code) else []
        if self.symbolic_funcs:
            local.append(f"from ._ops import {', '.join(sorted(self.symbolic_funcs))}")
        imports += [""] + local if imports and local else local
        header = [
            f'"""{p.name}: generated by rlx {__version__} from a PyTorch model. Do not edit by hand: re-run rlx."""',
            "",
            f"# Source model: {p.name} ({p.source_format})",
            f"# Decomposition level: {decomposition or 'unknown'}",
            f"# Source aten ops ({sum(p.source_histogram.values())} nodes):",
            hist,
            "",
        ]
        return "\n".join(header + imports + ["", ""] + body) + "\n"

    def bind_symbols(self) -> list[str]:
        lines, bound = [], set()
        for v in self.program.inputs:
            for axis, d in enumerate(v.shape):
                if isinstance(d, Sym) and d.expr.isidentifier() and d.expr not in bound:
                    lines.append(f"    {d.expr} = {identifier(v.name)}.shape[{axis}]")
                    bound.add(d.expr)
        return lines

    def output(self, tree: Any) -> str:
        if tree is None:
            return "None"
        if "out" in tree:
            return self.operand(self.program.outputs[tree["out"]])
        if "const" in tree:
            return repr(tree["const"])
        if "tuple" in tree:
            items = [self.output(t) for t in tree["tuple"]]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if "list" in tree:
            return "[" + ", ".join(self.output(t) for t in tree["list"]) + "]"
        return "{" + ", ".join(f"{k!r}: {self.output(t)}" for k, t in tree["dict"]) + "}"


def _fields(c: Call) -> Sequence[str]:
    return [f.name for f in dataclasses.fields(c)]


def _operands(c: Call) -> list[Any]:
    out: list[Any] = []
    for f in c.operand_fields():
        v = getattr(c, f)
        out.extend(v if isinstance(v, tuple) else [v])
    return out


def numpy_module(program: Program, decomposition: str = "") -> str:
    return NumpyWriter(program).module(decomposition)


def writer(program: Program, style: str) -> NumpyWriter:
    return JaxWriter(program) if style == "jax" else NumpyWriter(program)


class JaxWriter(NumpyWriter):
    """The JAX style: ``jax.numpy`` expressions and the JAX engine's kernels. Matmuls ask for
    ``precision="highest"`` as the kernels do (float32 stays float32 on GPUs and TPUs too)."""

    TYPES = {tok: t.replace("np.", "jnp.").replace("_ops.", "jnp.") for tok, t in _NP_TYPE.items()}
    IMPORTS = {"jax": "import jax", "jnp": "import jax.numpy as jnp"}
    array_module = "jnp"

    def matmul(self, x: str, y: str) -> str:
        return f'jnp.matmul({x}, {y}, precision="highest")'

    def casts_through_kernel(self, c: C.Cast) -> bool:
        # Every float → integer cast: PyTorch's out-of-range rule is not XLA's saturation.
        return self.dtype_of(c.x) in ("f16", "bf16", "f32", "f64") and c.dtype[0] in "iu"


def jax_module(program: Program, decomposition: str = "") -> str:
    return JaxWriter(program).module(decomposition)


_SYMBOLIC_HELPERS = [
    "# Functions that symbolic shape expressions use (torch.export's sympy spelling).",
    "Max, Min, Abs = max, min, abs",
    "Mod = PythonMod = lambda a, b: a % b",
    "FloorDiv = lambda a, b: a // b",
    "CeilDiv = lambda a, b: -(-a // b)",
    "floor = FloorToInt = math.floor",
    "ceiling = CeilToInt = math.ceil",
    "TruncToInt = math.trunc",
    "IntTrueDiv = lambda a, b: a / b",
    "ToFloat = float",
]


def ops_init(kernel_names: Sequence[str], style: str = "numpy") -> str:
    """``_ops/__init__.py``: one plain function per kernel the forward calls, plus what generated
    code refers to. The kernels are the engine's table, vendored under ``_ops/kernels/``."""
    jax = style == "jax"
    whose = "the rlx JAX engine's" if jax else "the rlx runtime's"
    # The numpy style names ml_dtypes' types (bfloat16 …) for the generated casts; the JAX style
    # names them through jnp, and runs the model in the kernels' 64-bit scope.
    dtype_names = ["", "bfloat16 = ml_dtypes.bfloat16", *(f"{n} = ml_dtypes.{n}" for n in _LOW_BIT_NP.values())]
    x64_line = "from .kernels.jax.kernels import x64  # noqa: F401  (the 64-bit scope load() runs the model in)"
    head = [
        f'"""Helpers for the generated forward: {whose} kernels, callable with plain arguments."""',
        "",
        "import math",
        "from types import SimpleNamespace",
        "",
        *([] if jax else ["import ml_dtypes", ""]),
        "from .kernels.random import fork_state, seed_state  # noqa: F401  (the generator's state, for load())",
        f"from .kernels.{style}.kernels import KERNELS",
        *([x64_line] if jax else []),
        "from .formats.safetensors_io import read as read_safetensors  # noqa: F401  (used by the package's load())",
        *([] if jax else dtype_names),
    ]
    lines = [*head, "", *_SYMBOLIC_HELPERS]
    lines += [
        "",
        "",
        "def _kernel(call_name):",
        "    kernel = KERNELS[call_name]",
        "",
        "    def run(*operands, **attributes):",
        "        return kernel(SimpleNamespace(**attributes), *operands)",
        "",
        "    run.__name__ = call_name",
        "    return run",
        "",
        "",
    ]
    lines += [f"{snake(name)} = _kernel({name!r})" for name in kernel_names]
    return "\n".join(lines) + "\n"
