"""Fixing chosen input dimensions of an ONNX model while converting (``input_shapes``).

As onnxruntime's ``make_dynamic_shape_fixed`` and OpenVINO's ``input=``: a dimension given a size
becomes that static extent; one given ``None`` (``?`` on the command line) stays as the model
declares it. A fixed ``dim_param`` is fixed on every input that names it, so axes the model ties
together stay tied. The model itself is not changed: a copy is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rlx.errors import UsageError

InputShapes = Mapping[str, Sequence[int | None]]


def dim_param(d: Any) -> str | None:
    """The name a declared dimension ties to, or None for a static or anonymous one.

    A ``dim_param`` without a letter or digit (paddle2onnx writes ``?`` for every free axis) names
    no dimension: two ``?`` axes are independent, as onnxruntime treats them, not one tied size.
    """
    name = d.dim_param if d.HasField("dim_param") else ""
    return name if re.search(r"\w", name) else None


def parse_input_shape(text: str) -> tuple[str, tuple[int | None, ...]]:
    """``NAME=1,3,?,?`` → ("NAME", (1, 3, None, None)); ``?`` or ``-1`` leaves an axis as declared."""
    name, eq, dims = text.partition("=")
    parts = [p.strip() for p in dims.split(",")] if dims.strip() else []
    if not eq or not name.strip() or not parts or not all(p in ("?", "-1") or p.isdigit() for p in parts):
        raise UsageError(f"--input-shape {text!r}: expected NAME=D0,D1,… with sizes or ?, e.g. images=1,3,640,640")
    return name.strip(), tuple(None if p in ("?", "-1") else int(p) for p in parts)


def fix_input_shapes(proto: Any, input_shapes: InputShapes, where: str) -> Any:
    """A copy of ``proto`` whose graph inputs have the given dimensions fixed."""
    import onnx

    params = _fixed_params(proto, input_shapes, where)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for vi in out.graph.input:
        if not vi.type.HasField("tensor_type"):
            continue
        dims = input_shapes.get(vi.name)
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            size = dims[axis] if dims is not None else None
            tied = dim_param(d)
            if size is None and tied is not None and tied in params:
                size = params[tied]
            if size is not None:
                d.dim_value = size  # clears dim_param (a oneof)
    return out


def _fixed_params(proto: Any, input_shapes: InputShapes, where: str) -> dict[str, int]:
    """Check ``input_shapes`` against the declared inputs; the size each fixed ``dim_param`` gets."""
    graph_inputs = {vi.name: vi for vi in proto.graph.input}
    params: dict[str, int] = {}
    for name, dims in input_shapes.items():
        vi = graph_inputs.get(name)
        if vi is None or not vi.type.HasField("tensor_type"):
            names = ", ".join(sorted(graph_inputs)) or "none"
            raise UsageError(f"{where}: input_shapes names {name!r}, which is not a tensor input (inputs: {names})")
        declared = vi.type.tensor_type.shape.dim
        if len(dims) != len(declared):
            raise UsageError(
                f"{where}: input_shapes gives {name!r} {len(dims)} dimensions, the model declares {len(declared)}"
            )
        for axis, (size, d) in enumerate(zip(dims, declared)):
            if size is None:
                continue
            what = f"{where}: input_shapes {name!r} axis {axis}"
            if size < 0:
                raise UsageError(f"{what}: size {size} is negative")
            if d.HasField("dim_value") and d.dim_value != size:
                raise UsageError(f"{what}: the model fixes it to {d.dim_value}, not {size}")
            tied = dim_param(d)
            if tied is not None and params.setdefault(tied, size) != size:
                raise UsageError(f"{where}: input_shapes gives dimension {tied!r} two sizes, {params[tied]} and {size}")
    return params
