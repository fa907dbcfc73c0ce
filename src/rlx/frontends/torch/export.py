"""``torch.export`` → ``torch-ir.json`` + ``weights.safetensors`` + ``reference.safetensors``.

The only module that imports torch at module level. It records the exported graph as is, in the
schema of ``rlx.formats.torch_ir``: one entry per FX node, arguments encoded losslessly, every
result's shape and dtype from torch's own fake-tensor metadata.
"""

from __future__ import annotations

import inspect
import operator
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sympy
import torch
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils import _pytree as pytree
from torch.utils._sympy.numbers import int_oo

import rlx
from rlx.errors import ExportError, RlxError, UsageError
from rlx.formats import safetensors_io
from rlx.formats.atomic import atomic_write_text
from rlx.formats.layout import REFERENCE_FILE, TORCH_IR_FILE, WEIGHTS_FILE, input_key, output_key
from rlx.formats.torch_ir import DtypeArg, Input, Node, Output, ScalarMeta, TensorMeta, TorchIR, TorchWeight
from rlx.frontends.torch.hf_caches import register_transformers_caches
from rlx.frontends.torch.levels import LEVELS, decompose
from rlx.frontends.torch.tensors import tensor_to_numpy, torch_dtype_token
from rlx.ir import dtypes
from rlx.ir.program import Ref
from rlx.ir.symbolic import Dim, Sym, Symbol


@dataclass
class Exported:
    """What ``export`` produced, in memory as well as on disk."""

    ir: TorchIR
    weights: dict[str, np.ndarray]  # by state_dict key
    inputs: dict[str, np.ndarray]  # by input id
    outputs: list[np.ndarray | None]  # eager outputs, flat; None for non-tensor leaves
    exported_program: ExportedProgram
    auto_decomposed: list[str] = field(default_factory=list)  # ops torch decomposed for us


def export(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    out_dir: str | Path,
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    decomposition: str = "high",
    dynamic_shapes: Any = None,
    model_name: str | None = None,
    strict: bool = False,
) -> Exported:
    """Export ``model`` and write ``torch-ir.json``, ``weights.safetensors``, ``reference.safetensors``."""
    result = capture(
        model,
        example_inputs,
        example_kwargs=example_kwargs,
        decomposition=decomposition,
        dynamic_shapes=dynamic_shapes,
        model_name=model_name,
        strict=strict,
    )
    write(result, out_dir)
    return result


def _distinct_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The example inputs with every tensor that shares memory with an earlier one cloned.

    torch.export specialises on aliasing: given one tensor twice (``model(t, t)``) it records a
    graph that reads the first input for both, which is wrong as soon as the two differ. The
    aliasing is an accident of the example, not part of the model's signature."""
    seen: set[int] = set()

    def distinct(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        storage = x.untyped_storage()
        key = storage.data_ptr() if storage.nbytes() else id(x)
        if key in seen:
            return x.clone()
        seen.add(key)
        return x

    return pytree.tree_map(distinct, (args, kwargs))


def capture(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    decomposition: str = "high",
    dynamic_shapes: Any = None,
    model_name: str | None = None,
    auto_decompose: bool = True,
    strict: bool = False,
) -> Exported:
    """Export in memory: the torch-ir graph, weights, example inputs and eager reference outputs.

    With ``auto_decompose``, ops the registry lacks but torch can decompose are decomposed and
    the graph re-recorded, a few rounds at most; ``Exported.auto_decomposed`` lists them.
    ``strict`` exports with TorchDynamo tracing (``torch.export.export(strict=True)``), which some
    modules need (transformers' static-cache export wrappers, whose cache non-strict export lifts
    as mutated constants).

    Buffers the forward updates in place (a KV cache) are recorded as state: their values before
    the call are the weights, the graph's buffer-mutation outputs their new values. The eager
    reference run starts from the same values, and the module's buffers are put back afterwards,
    as are the plain attributes (flags, counters) that tracing or that run set on its submodules.
    """
    if decomposition not in LEVELS:
        raise UsageError(f"unknown decomposition level {decomposition!r}; use one of {', '.join(LEVELS)}")
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"expected a torch.nn.Module, got {type(model).__name__}")
    attributes = _snapshot_attributes(model)
    try:
        return _capture(model, example_inputs, example_kwargs, decomposition, dynamic_shapes, model_name,
                        auto_decompose, strict)  # fmt: skip
    finally:
        _restore_attributes(model, attributes)


_PLAIN = (bool, int, float, str, type(None))


def _snapshot_attributes(model: torch.nn.Module) -> list[tuple[torch.nn.Module, dict[str, Any]]]:
    """Each submodule's plain attributes (bool, number, string, None): non-strict export runs the
    forward's Python, so a first-call flag it sets (RWKV's ``layers_are_rescaled``) would otherwise
    stay set on the user's module although its weights never changed."""
    return [(m, {k: v for k, v in vars(m).items() if isinstance(v, _PLAIN)}) for m in model.modules()]


def _restore_attributes(model: torch.nn.Module, saved: list[tuple[torch.nn.Module, dict[str, Any]]]) -> None:
    for module, plain in saved:
        for k, v in plain.items():
            if vars(module).get(k, v) is not v:
                setattr(module, k, v)


def _capture(
    model: torch.nn.Module,
    example_inputs: tuple[Any, ...],
    example_kwargs: Mapping[str, Any] | None,
    decomposition: str,
    dynamic_shapes: Any,
    model_name: str | None,
    auto_decompose: bool,
    strict: bool,
) -> Exported:
    if not isinstance(example_inputs, tuple):
        example_inputs = tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
    register_transformers_caches(model)  # (first: the inputs' cache objects are then containers, rebuilt below)
    example_inputs, kwargs = _distinct_tensors(example_inputs, dict(example_kwargs or {}))
    try:
        with warnings.catch_warnings():  # torch's own deprecation chatter is not the user's concern
            warnings.simplefilter("ignore", FutureWarning)
            ep = torch.export.export(model, example_inputs, kwargs=kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
            ep = decompose(ep, decomposition)
    except Exception as e:  # torch raises many types; the user needs the gist of its message
        gist = _export_error_gist(e)
        # Non-strict export lifts tensors a module creates itself (a cache object's) as constants and
        # cannot trace in-place updates of them; TorchDynamo (strict) sees them as the buffers they are.
        hint = "; try strict=True (--strict)" if not strict and "compiled_fn" in gist else ""
        raise ExportError(f"torch.export failed for {type(model).__name__}: {gist}{hint}") from e
    flat_in, _ = pytree.tree_flatten((example_inputs, kwargs))
    user_inputs = [s for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    inputs = {}
    for spec, value in zip(user_inputs, flat_in):
        if isinstance(value, torch.Tensor):
            inputs[spec.arg.name] = tensor_to_numpy(value)
    eager = _eager_run(model, example_inputs, kwargs, ep)
    flat_out, _ = pytree.tree_flatten(eager)
    name = model_name or type(model).__name__

    def record(ep: ExportedProgram) -> tuple[TorchIR, dict[str, np.ndarray]]:
        try:
            names = user_dim_names(model, example_inputs, kwargs, dynamic_shapes, ep)
            return _graph_to_ir(ep, name, decomposition, names, inputs)
        except RlxError:
            raise
        except Exception as e:  # a graph this recorder does not understand yet: say where, in one line
            raise ExportError(f"recording the exported graph of {name} failed: {type(e).__name__}: {e}") from e

    ir, weights = record(ep)
    decomposed: list[str] = []
    if auto_decompose:
        ep, ir, weights, decomposed = _auto_decompose(ep, ir, weights, record)
    outputs = [tensor_to_numpy(v) if isinstance(v, torch.Tensor) else None for v in flat_out]
    n_user = len(ir.outputs) - len(ir.state_updates)
    if len(outputs) != n_user:
        raise ExportError(f"eager run returned {len(outputs)} outputs but the exported graph has {n_user}")
    return Exported(ir, weights, inputs, outputs, ep, decomposed)


def _eager_run(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], ep: ExportedProgram) -> Any:
    """The reference outputs, leaving the module's buffers and the example inputs as they were
    (a forward that updates them in place runs on copies of the inputs, and its buffers are restored)."""
    state_before = _snapshot_state(model)
    # Rebuilt containers: a forward that updates an input object (a transformers cache it appends
    # to) updates a copy; the objects the recorder binds afterwards (and the user's) stay as they were.
    args, kwargs = pytree.tree_map(lambda t: t, (args, kwargs))
    if any(s.kind.name == "USER_INPUT_MUTATION" for s in ep.graph_signature.output_specs):
        args, kwargs = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
    try:
        with torch.no_grad():
            return model(*args, **kwargs)
    finally:
        _restore_state(model, state_before)


def _snapshot_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies of the module's buffers, so a forward that updates them in place can be undone."""
    return {k: b.detach().clone() for k, b in model.named_buffers()}


def _restore_state(model: torch.nn.Module, saved: Mapping[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for k, b in model.named_buffers():
            if k in saved and b.shape == saved[k].shape:
                b.copy_(saved[k])


MAX_DECOMPOSE_ROUNDS = 4


def _auto_decompose(
    ep: ExportedProgram, ir: TorchIR, weights: dict[str, np.ndarray], record: Any
) -> tuple[ExportedProgram, TorchIR, dict[str, np.ndarray], list[str]]:
    """Decompose the ops the registry lacks with torch's own decomposition table, then re-record.

    A decomposition is kept only if it applies to this graph and leaves no op rlx lacks that was
    not there before (torch decomposes some ops into ``prims.*``, which would only move the gap);
    the ops it cannot remove stay for the coverage check to report as genuine gaps.
    """
    from torch._decomp import decomposition_table

    from rlx.frontends.aten.registry import unsupported_ops

    done: list[str] = []
    tried: set[str] = set()
    tables: tuple[Mapping[Any, Any], ...] = ()
    for _ in range(MAX_DECOMPOSE_ROUNDS):
        missing = set(unsupported_ops(ir))
        candidates = {op: overload_of(op) for op in sorted(missing - tried)}
        tried.update(candidates)
        if candidates and not tables:  # (built once something is missing: the first build takes 0.1 s)
            # Core ATen's own table first (it also decomposes CompositeImplicitAutograd ops: einsum,
            # meshgrid, aliases such as multiply, which the aten level keeps as exported), then
            # torch's wider one.
            tables = (torch.export.default_decompositions(), decomposition_table)
        good: dict[str, Mapping[Any, Any]] = {}
        for op, overload in candidates.items():
            for table in _decompositions_for(overload, tables):
                trial = _run_decompositions(ep, table)
                if trial is not None and set(unsupported_ops(record(trial)[0])) <= missing - {op}:
                    good[op] = table
                    break
        if not good:
            break
        merged = {o: fn for table in good.values() for o, fn in table.items()}
        applied = _run_decompositions(ep, merged)
        if applied is None:
            break
        ep, (ir, weights) = applied, record(applied)
        done.extend(sorted(good))
    return ep, ir, weights, done


def _decompositions_for(overload: Any, tables: Sequence[Mapping[Any, Any]]) -> list[Mapping[Any, Any]]:
    """What may take ``overload`` out of the graph, in the order to try: each table's decomposition
    of it; the Python implementation a custom op was registered with (``torch.library.custom_op``);
    for an in-place op (``copy_`` at the ``aten`` level), an empty table: running decompositions
    functionalizes the graph."""
    if overload is None:
        return []
    found: list[Mapping[Any, Any]] = [{overload: t[overload]} for t in tables if overload in t]
    from torch._library.custom_ops import _maybe_get_opdef

    opdef = _maybe_get_opdef(overload)
    init = getattr(opdef, "_init_fn", None) if opdef is not None else None
    if init is not None:
        found.append({overload: init})
    if not found and overload._schema.is_mutable:
        found.append({})
    return found


def _run_decompositions(ep: ExportedProgram, table: Mapping[Any, Any]) -> ExportedProgram | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ep.run_decompositions(dict(table))
    except Exception:  # a decomposition torch cannot apply to this graph
        return None


def overload_of(op: str) -> Any:
    """``aten.cumsum.default`` → ``torch.ops.aten.cumsum.default``, and a custom op's
    ``mylib.rms.default`` likewise (None if torch has no such op)."""
    parts = op.split(".")
    if len(parts) != 3:
        return None
    try:
        packet = getattr(getattr(torch.ops, parts[0]), parts[1], None)
    except (AttributeError, RuntimeError):
        return None
    return getattr(packet, parts[2], None) if packet is not None else None


def _export_error_gist(e: Exception) -> str:
    """One line from torch's multi-line export errors: the first line, the first reason listed
    under it, and torch's suggested fix when it gives one."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    gist = f"{type(e).__name__}: {lines[0]}"
    reasons = [ln[2:] for ln in lines[1:] if ln.startswith("- ")]
    if reasons:
        gist += f" ({reasons[0]})"
    if "Suggested fixes:" in lines:
        fixes = []
        for ln in lines[lines.index("Suggested fixes:") + 1 :]:
            if not re.match(r"^[A-Za-z_][\w]* = ", ln):
                break
            fixes.append(ln)
        if fixes:
            gist += f"; torch suggests: {'; '.join(fixes)}"
    return gist


def dynamic_shapes_from_cli(axes: list[tuple[str, int, str, int | None, int | None]]) -> dict[str, dict[int, Any]]:
    """``--dynamic`` entries → torch.export's ``dynamic_shapes`` (one ``Dim`` per symbol name)."""
    dims: dict[str, Any] = {}
    spec: dict[str, dict[int, Any]] = {}
    for name, axis, symbol, lo, hi in axes:
        if symbol not in dims:
            kwargs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
            dims[symbol] = torch.export.Dim(symbol, **kwargs)
        spec.setdefault(name, {})[axis] = dims[symbol]
    return spec


def write(result: Exported, out_dir: str | Path) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / TORCH_IR_FILE, result.ir.dumps())
    safetensors_io.write(out_dir / WEIGHTS_FILE, result.weights)
    reference = {input_key(k): v for k, v in result.inputs.items()}
    reference.update({output_key(i): v for i, v in enumerate(result.outputs) if v is not None})
    safetensors_io.write(out_dir / REFERENCE_FILE, reference)


# ── graph → torch-ir ─────────────────────────────────────────────────────────
def _bound(end: Any) -> int | None:
    """One end of a torch value range as an int; None when unbounded (torch's ``int_oo`` /
    ``-int_oo`` say ``is_finite`` is True, so they are compared with first)."""
    if end == int_oo or end == -int_oo or not end.is_finite:
        return None
    return int(end)


class _Recorder:
    """Turns FX nodes and their fake-tensor metadata into torch-ir objects.

    Symbolic extents are recorded as the expressions torch.export derived, with its internal
    symbol names (``s72``) replaced by the names the user gave their ``Dim``s (``batch``).
    """

    def __init__(self, ep: ExportedProgram, user_names: dict[str, str]) -> None:
        self.rename = {}
        for sym in ep.range_constraints:
            if getattr(sym, "is_Symbol", False) and str(sym) in user_names:
                self.rename[sym] = sympy.Symbol(user_names[str(sym)], integer=True)
        self.symbols: list[Symbol] = []
        self._hints: dict[str, int] = {}
        self.ranges = {str(k): v for k, v in ep.range_constraints.items()}
        self.unbacked: dict[str, tuple[str, int | None]] = {}  # data symbol → (node, axis or None for a scalar)
        for sym, vr in ep.range_constraints.items():
            if not getattr(sym, "is_Symbol", False):
                continue  # derived extents (2*seq) are ranges of expressions, not new symbols
            if free_unbacked_symbols(sym):
                continue  # an extent read from data (u0 …), not an input's: lowering reports the op
            lower = _bound(vr.lower)
            self.symbols.append(Symbol(self.name(sym), 0 if lower is None else max(0, lower), _bound(vr.upper), 0))

    def name(self, expr: Any) -> str:
        return str(expr.xreplace(self.rename)) if self.rename else str(expr)

    def dim(self, d: Any, where: tuple[str, int | None] | None = None) -> Dim:
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            if getattr(expr, "is_number", False):
                return int(expr)
            if getattr(expr, "is_Symbol", False) and d.node.hint is not None:
                self._hints[self.name(expr)] = int(d.node.hint)
            elif getattr(expr, "is_Symbol", False) and str(expr).startswith("u") and where is not None:
                self.unbacked.setdefault(str(expr), where)  # the first node whose result has this size
            return Sym(self.name(expr))
        return int(d)

    def data_symbols(self, values: Mapping[str, Any]) -> list[Symbol]:
        """The unbacked symbols (``u0`` …) with their range and their value in the example run."""
        out = []
        for sym, (node, axis) in self.unbacked.items():
            name, _, k = node.partition("\0")
            value = values.get(name)
            if isinstance(value, tuple):
                value = value[int(k or 0)]
            if value is None:
                raise ExportError(f"no example value for node {name}, whose size {sym} depends on the data")
            hint = int(np.shape(value)[axis]) if axis is not None else int(np.asarray(value))
            vr = self.ranges.get(sym)
            low, hi = (None, None) if vr is None else (_bound(vr.lower), _bound(vr.upper))
            if axis is not None:  # an extent
                lo = 0 if low is None else max(0, low)
            else:  # a number read from a tensor (item()): negative too
                lo = -(2**63) if low is None else low
            out.append(Symbol(sym, lo, hi, hint))
        return out

    def finished_symbols(self) -> list[Symbol]:
        return [
            Symbol(s.name, s.min, s.max, self._hints.get(s.name, s.min)) for s in self.symbols if s.name in self._hints
        ]

    def tensor_meta(self, val: torch.Tensor, node: str | None = None) -> TensorMeta:
        shape = tuple(self.dim(d, None if node is None else (node, k)) for k, d in enumerate(val.shape))
        return TensorMeta(shape, torch_dtype_token(val.dtype))

    def meta(self, val: Any, node: str | None = None) -> TensorMeta | ScalarMeta | None:
        if isinstance(val, torch.Tensor):
            return self.tensor_meta(val, node)
        if isinstance(val, (bool, int, float)):
            return ScalarMeta(val)
        if isinstance(val, torch.SymInt):
            return ScalarMeta(self.dim(val, None if node is None else (node, None)))
        if isinstance(val, (torch.SymFloat, torch.SymBool)):
            return ScalarMeta(Sym(self.name(val.node.expr)))
        return None

    def arg(self, a: Any, where: str) -> Any:
        if isinstance(a, torch.fx.Node):
            return Ref(a.name)
        if a is None or isinstance(a, (bool, int, float, str)):
            return a
        if isinstance(a, torch.dtype):
            return DtypeArg(torch_dtype_token(a))
        if isinstance(a, (list, tuple, torch.Size)):
            return tuple(self.arg(x, where) for x in a)
        if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
            return str(a)
        raise ExportError(f"{where}: cannot record argument {a!r} of type {type(a).__name__}")

    def node(self, n: torch.fx.Node) -> Node:
        where = f"node {n.name}"
        args = tuple(self.arg(a, where) for a in n.args)
        kwargs = {k: self.arg(v, where) for k, v in n.kwargs.items()}
        val = n.meta.get("val")
        if isinstance(val, (tuple, list)):
            # A data-dependent size first seen in result k is read from result k of the example run.
            metas = tuple(self.meta(v, f"{n.name}\0{k}") for k, v in enumerate(val))
            return Node(n.name, _op_name(n.target), args, kwargs, metas, True)
        if n.target is torch.ops.aten._local_scalar_dense.default and isinstance(
            val, (torch.SymInt, torch.SymBool, torch.SymFloat)
        ):
            # item(): the value is data, lowered as a 0-d tensor, not a size to bind (a size that uses
            # it is recorded where it first appears). A bool reads as Eq(u0, 1): record the symbol.
            free = sorted(str(f) for f in val.node.expr.free_symbols)
            if len(free) == 1:
                return Node(n.name, _op_name(n.target), args, kwargs, (ScalarMeta(Sym(free[0])),), False)
        return Node(n.name, _op_name(n.target), args, kwargs, (self.meta(val, n.name),), False)


def _graph_to_ir(
    ep: ExportedProgram,
    model_name: str,
    decomposition: str,
    user_names: dict[str, str],
    example_inputs: Mapping[str, np.ndarray] | None = None,
) -> tuple[TorchIR, dict[str, np.ndarray]]:
    rec = _Recorder(ep, user_names)
    inputs, weights, tensors = _record_inputs(ep, rec)
    dropped = _effect_free(ep)
    nodes = [rec.node(n) for n in ep.graph.nodes if n.op == "call_function" and n not in dropped]
    outputs, state_updates = _record_outputs(ep, rec)
    data_symbols: list[Symbol] = []
    if rec.unbacked:  # sizes that depend on data: their example values come from running the graph
        from rlx.frontends.torch.reference import node_values

        data_symbols = rec.data_symbols(node_values(ep, example_inputs or {}))
    ir = TorchIR(
        model_name=model_name,
        inputs=inputs,
        weights=weights,
        nodes=nodes,
        outputs=outputs,
        producer=f"rlx {rlx.__version__} (torch {torch.__version__.split('+')[0]})",
        decomposition=decomposition,
        output_tree=tree_json(ep.call_spec.out_spec),
        symbols=rec.finished_symbols(),
        data_symbols=data_symbols,
        state_updates=state_updates,
    )
    return ir, tensors


def _record_inputs(ep: ExportedProgram, rec: _Recorder) -> tuple[list[Input], list[TorchWeight], dict[str, np.ndarray]]:
    inputs: list[Input] = []
    weights: list[TorchWeight] = []
    tensors: dict[str, np.ndarray] = {}
    kinds = {"PARAMETER": "param", "BUFFER": "buffer", "CONSTANT_TENSOR": "const"}
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for spec in ep.graph_signature.input_specs:
        name = spec.arg.name
        val = placeholders[name].meta.get("val")
        if spec.kind.name == "TOKEN":  # threads effects; only dropped checks use it (_effect_free)
            continue
        if spec.kind.name == "USER_INPUT":
            if isinstance(val, torch.Tensor):
                meta = rec.tensor_meta(val)
                inputs.append(Input(id=name, shape=meta.shape, dtype=meta.dtype))
            continue
        if spec.kind.name not in kinds:
            raise ExportError(f"input {name}: {spec.kind.name} inputs are not supported (inference graphs only)")
        tensor = ep.state_dict.get(spec.target)
        if tensor is None:
            tensor = ep.constants.get(spec.target)
        if not isinstance(tensor, torch.Tensor):
            raise ExportError(f"weight {spec.target!r} is not a tensor (found {type(tensor).__name__})")
        arr = weight_view(tensor)
        weights.append(
            TorchWeight(name, spec.target, tuple(arr.shape), torch_dtype_token(tensor.dtype), kinds[spec.kind.name])
        )
        tensors[spec.target] = arr
    return inputs, weights, tensors


def weight_view(t: torch.Tensor) -> np.ndarray:
    """A read-only numpy view of a weight's own memory (bf16 included): writing the weights file and
    the parity run read the module's tensors directly, so conversion holds no copy of the weights.
    Only a tensor that is not already a contiguous dense CPU tensor (a rare lifted constant, a
    conjugated view) is copied."""
    t = t.detach()
    if t.device.type != "cpu" or not t.is_contiguous() or t.is_conj() or t.is_neg() or t.layout != torch.strided:
        return tensor_to_numpy(t)
    if t.dtype == torch.bfloat16:  # numpy has no bf16: the same bits seen as ml_dtypes.bfloat16
        arr = t.view(torch.int16).numpy().view(dtypes.to_numpy("bf16"))
    else:
        torch_dtype_token(t.dtype)
        arr = t.numpy()
    arr.flags.writeable = False  # the module's memory: nothing in rlx may write into it
    return arr


def _record_outputs(ep: ExportedProgram, rec: _Recorder) -> tuple[list[Output], dict[str, int]]:
    """The model's outputs, then the new values of the buffers and inputs it updates in place
    (torch lists those first; here they follow, so ``output_tree`` indices stay the user's)."""
    placeholder_of = {s.target: s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "BUFFER"}
    output_node = next(n for n in ep.graph.nodes if n.op == "output")
    user: list[Output] = []
    updates: list[tuple[str, Output]] = []
    for k, (spec, arg) in enumerate(zip(ep.graph_signature.output_specs, output_node.args[0])):
        if spec.kind.name == "TOKEN":  # threads the effects of dropped checks (_effect_free)
            continue
        if isinstance(arg, torch.fx.Node):
            out_meta = rec.meta(arg.meta.get("val"))
            shape, dtype = (out_meta.shape, out_meta.dtype) if isinstance(out_meta, TensorMeta) else (None, None)
            out = Output(arg.name, None, shape, dtype)
        else:
            out = Output(None, rec.arg(arg, f"output {k}"))
        kind = spec.kind.name
        if kind == "USER_OUTPUT":
            user.append(out)
        elif kind == "BUFFER_MUTATION":
            updates.append((placeholder_of[spec.target], out))
        elif kind == "USER_INPUT_MUTATION":
            updates.append((spec.target, out))
        elif kind == "PARAMETER_MUTATION":
            written = [s.target for s in ep.graph_signature.output_specs if s.kind.name == "PARAMETER_MUTATION"]
            raise ExportError(
                f"the forward writes to {len(written)} parameter(s) ({', '.join(written[:3])}"
                f"{', …' if len(written) > 3 else ''}); rlx converts forwards that leave the weights as they "
                "are. If the model rescales or caches its weights on its first call (RWKV in eval mode does), "
                "call it once before converting"
            )
        else:
            raise ExportError(f"output {k}: {kind} outputs are not supported (inference graphs only)")
    state = {target: len(user) + j for j, (target, _) in enumerate(updates)}
    return user + [out for _, out in updates], state


# Effectful ops torch.export threads through a token that only check their inputs (they raise in
# eager PyTorch on a singular or non-definite matrix and compute nothing): rlx drops them.
_CHECKS = ("aten._linalg_check_errors.default",)


def _effect_free(ep: ExportedProgram) -> set[Any]:
    """The ``with_effects`` nodes of checks in ``_CHECKS`` and the getitems of their tokens; any
    other effectful op is refused (it would do something rlx cannot replay)."""
    dropped: set[Any] = set()
    for n in ep.graph.nodes:
        if n.op != "call_function" or n.target is not torch.ops.higher_order.with_effects:
            continue
        op = _op_name(n.args[1])
        if op not in _CHECKS:
            raise ExportError(f"node {n.name}: effectful op {op} is not supported (it has side effects rlx cannot run)")
        dropped.add(n)
        dropped.update(user for user in n.users if user.target is operator.getitem)
    return dropped


def _op_name(target: Any) -> str:
    if target is operator.getitem:
        return "_getitem"
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def user_dim_names(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], dynamic_shapes: Any, ep: ExportedProgram
) -> dict[str, str]:
    """Map torch's internal symbol names (``s72``) to the names of the user's ``Dim`` objects."""
    if dynamic_shapes is None:
        return {}
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return {}
    if isinstance(dynamic_shapes, Mapping):
        specs = [(bound[k], v) for k, v in dynamic_shapes.items() if k in bound]
    else:
        specs = list(zip(bound.values(), dynamic_shapes))
    leaves: list[tuple[torch.Tensor, Any]] = []
    for value, spec in specs:
        _tensor_specs(value, spec, leaves)
    by_id = {id(t): spec for t, spec in leaves}
    flat_in, _ = pytree.tree_flatten((args, dict(kwargs)))
    user_inputs = [s for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    names: dict[str, str] = {}
    for spec, value in zip(user_inputs, flat_in):
        axes = by_id.get(id(value))
        val = placeholders[spec.arg.name].meta.get("val")
        if axes is None or not isinstance(val, torch.Tensor):
            continue
        names.update(_axis_dim_names(axes, val))
    return names


def _tensor_specs(value: Any, spec: Any, leaves: list[tuple[torch.Tensor, Any]]) -> None:
    """Append each tensor of a (nested) forward argument with its part of the dynamic_shapes spec."""
    if isinstance(value, torch.Tensor):
        leaves.append((value, spec))
    elif isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)):
        for v, sp in zip(value, spec):
            _tensor_specs(v, sp, leaves)
    elif isinstance(value, Mapping) and isinstance(spec, Mapping):
        for key, v in value.items():
            _tensor_specs(v, spec.get(key), leaves)


def _axis_dim_names(axes: Any, val: torch.Tensor) -> dict[str, str]:
    """torch's symbol → the user's ``Dim`` name, for the axes of one input (a dict or list spec)."""
    names: dict[str, str] = {}
    items = axes.items() if isinstance(axes, Mapping) else enumerate(axes)
    for axis, dim in items:
        root = getattr(dim, "root", dim)  # a derived dim (2*seq) names its root (seq)
        user = getattr(root, "__name__", None)
        size = val.shape[axis] if isinstance(axis, int) and axis < val.dim() else None
        if not user or not isinstance(size, torch.SymInt):
            continue
        free = list(size.node.expr.free_symbols)
        if len(free) == 1:
            names[str(free[0])] = user
    return names


def tree_json(spec: pytree.TreeSpec) -> Any:
    """The output structure as JSON: leaves are ``{"out": flat_index}``."""
    counter = iter(range(spec.num_leaves))

    def walk(s: pytree.TreeSpec) -> Any:
        if s.is_leaf():
            return {"out": next(counter)}
        children = [walk(c) for c in s.children()]
        if s.type is type(None):
            return None
        if s.type is list:
            return {"list": children}
        context = s.context
        if isinstance(context, (list, tuple)) and len(context) == len(children) and s.type is not tuple:
            if all(isinstance(k, (str, int)) for k in context):  # dicts, OrderedDicts, ModelOutput-like classes
                return {"dict": [[k, c] for k, c in zip(context, children)]}
        return {"tuple": children}

    return walk(spec)
