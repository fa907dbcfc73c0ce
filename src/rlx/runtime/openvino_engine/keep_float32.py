"""Mixed precision on OpenVINO: the nodes of chosen instructions computed in float32 at bf16 / f16.

The CPU plugin keeps a node at its own precision when its runtime info disables precision
conversion. The Python API cannot set that attribute, but the IR reader reads it, so the model
(weights still inputs, a few KB) goes through IR XML once, each node emitted for a kept instruction
marked (the ONNX node's name, OpenVINO's friendly name, starts with its instruction's result).

The mark is not copied when a transformation replaces a node, and two of OpenVINO's rebuild
``nn.Linear``: the product by ``Transpose(W)`` (as rlx emits it) becomes a FullyConnected node, and
at bf16 the bias add is fused into that node after precisions are decided. So a kept product
multiplies by the stored weight with ``transpose_b`` (a FullyConnected that keeps the mark), and at
bf16 its bias is added one axis up (a Reshape, no copy), where the bias fusion does not match, then
summed back down over that unit axis (a bias added after a reshape of the product is moved above
the reshape first). A Linear is kept whole: naming its product or its bias add keeps both. At bf16
OpenVINO also moves an activation above the reshape before it, rebuilding the reshape unmarked
(which then rounds the value between two kept nodes): for kept nodes that move is made here. A
kept graph output's Result is marked too (at f16 OpenVINO would round it). OpenVINO's fused
attention, normalizations and GELU still lose the mark and run at the hint.
"""

from __future__ import annotations

import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

# OpenVINO's runtime attribute (IR name) that keeps a node at its own precision, whatever the hint.
KEEP_PRECISION = "DisablePrecisionConversion"


def owner(op: Any) -> str:
    """The instruction an OpenVINO node was emitted for (``owner:OpType:k`` names, from the ONNX graph)."""
    return str(op.get_friendly_name()).split(":", 1)[0]


def keep_float32(
    core: Any, model: Any, keep: Collection[str], weights: Mapping[str, np.ndarray], precision: str
) -> Any:
    """``model`` (weights still Parameters) with the nodes emitted for the ``keep`` instructions,
    and the Linears they belong to, marked to compute in float32 at ``precision`` (read again by
    the OpenVINO ``core``)."""
    import openvino as ov

    kept = _linears_kept_whole(model, set(keep), weights, precision)
    if precision == "bf16":
        _elementwise_above_reshapes(model, kept)
    marked = {op.get_friendly_name() for op in model.get_ordered_ops() if owner(op) in kept}
    marked |= {r.get_friendly_name() for r in model.get_results() if owner(r.input_value(0).get_node()) in kept}
    if not marked:
        return model
    with tempfile.TemporaryDirectory() as folder:
        xml_path = Path(folder) / "model.xml"
        ov.save_model(model, str(xml_path), compress_to_fp16=False)
        tree = ET.parse(xml_path)
        constants = np.fromfile(xml_path.with_suffix(".bin"), dtype=np.uint8)
    for layer in tree.getroot().iter("layer"):
        if layer.get("name") in marked:
            info = layer.find("rt_info")
            if info is None:
                info = ET.SubElement(layer, "rt_info")
            ET.SubElement(info, "attribute", name=KEEP_PRECISION, version="0", value="dynamic:dynamic")
    return core.read_model(model=ET.tostring(tree.getroot()), weights=ov.Tensor(constants))


def _linears_kept_whole(model: Any, keep: set[str], weights: Mapping[str, np.ndarray], precision: str) -> set[str]:
    """Rewrite, in ``model``, each Linear one of whose instructions is in ``keep`` into the form whose
    nodes keep the mark (see the module's docstring); ``keep`` with the Linears' other instructions."""
    from openvino import opset13 as ops

    kept = set(keep)
    for op in list(model.get_ordered_ops()):
        weight = _transposed_weight(op, weights)
        if weight is None:
            continue
        bias = _bias_add(op, weights)
        names = {owner(op)} | ({owner(bias[0])} if bias is not None else set())
        if not names & keep:
            continue
        kept |= names
        product = ops.matmul(op.input_value(0), weight, False, True)
        product.set_friendly_name(op.get_friendly_name())
        op.output(0).replace(product.output(0))
        if bias is not None and precision == "bf16":
            add, side, vector, chain = bias
            if chain:  # (the bias over the last axis commutes with reshapes that keep it)
                _move_above(model, add, side, chain[0], chain[-1])
            name, width = owner(add), vector.get_partial_shape()[0].get_length()
            axis = product.get_output_partial_shape(0).rank.get_length() - 1
            # (0: that axis as it is; the sum over the unit axis, as OpenVINO moves no activation
            # above it and rebuilds no node, keeps its mark where a Squeeze or Reshape would not)
            up = ops.reshape(product, _dims([0] * axis + [1, width]), True, name=f"{name}:Reshape:up")
            added = ops.add(up, vector, name=add.get_friendly_name())
            down = ops.reduce_sum(added, _dims([axis]), False, name=f"{name}:ReduceSum:down")
            add.output(0).replace(down.output(0))
    return kept


# Elementwise ops OpenVINO moves above the reshapes before them (a binary one with a scalar constant).
_UNARY = {"Abs", "Ceiling", "Clamp", "Cos", "Elu", "Erf", "Exp", "Floor", "Gelu", "HSigmoid", "HSwish", "Log",
          "Mish", "Negative", "Relu", "Sigmoid", "Sign", "Sin", "SoftPlus", "Sqrt", "Tanh"}  # fmt: skip
_BINARY = {"Add", "Divide", "Maximum", "Minimum", "Multiply", "Power", "Subtract"}
_RESHAPES = {"Reshape", "Squeeze", "Unsqueeze", "Transpose"}


def _elementwise_above_reshapes(model: Any, kept: set[str]) -> None:
    """At bf16, OpenVINO moves an elementwise op above the reshapes before it and rebuilds them
    without the mark, so that a value passed between two kept nodes would be rounded to bfloat16
    there. For kept ops after kept reshapes, make that move here (the same values: an elementwise
    op commutes with a reshape), on nodes that keep their marks and names."""
    moved = True
    while moved:
        moved = False
        for op in model.get_ordered_ops():
            kind = op.get_type_name()
            scalar = kind in _BINARY and _is_scalar_constant(op.input_value(1).get_node())
            if owner(op) not in kept or not (kind in _UNARY or scalar):
                continue
            reshape = op.input_value(0).get_node()
            if reshape.get_type_name() not in _RESHAPES or owner(reshape) not in kept:
                continue
            if len(reshape.output(0).get_target_inputs()) != 1:
                continue
            _move_above(model, op, 0, reshape, reshape)
            moved = True
            break


def _move_above(model: Any, op: Any, side: int, first: Any, last: Any) -> None:
    """Make ``op``, which reads the reshapes ``first`` ... ``last`` on its input ``side``, read what
    ``first`` reads instead, and the reshapes read ``op``: its readers and tensor names go to ``last``."""
    readers = list(op.output(0).get_target_inputs())
    names = op.output(0).get_names()
    op.input(side).replace_source_output(first.input_value(0))
    first.input(0).replace_source_output(op.output(0))
    for reader in readers:
        reader.replace_source_output(last.output(0))
    op.output(0).get_tensor().set_names(set())  # (the value it names is now the last reshape's)
    last.output(0).get_tensor().set_names(names)
    model.validate_nodes_and_infer_types()


def _is_scalar_constant(node: Any) -> bool:
    return bool(node.get_type_name() == "Constant" and int(np.prod(node.get_output_shape(0))) == 1)


def _dims(dims: list[int]) -> Any:
    from openvino import opset13 as ops

    return ops.constant(np.array(dims, dtype=np.int64))


def _transposed_weight(op: Any, weights: Mapping[str, np.ndarray]) -> Any | None:
    """The weight Parameter ``W`` where ``op`` is ``MatMul(x, Transpose(W, (1, 0)))`` of a 2-d
    float32 weight (rlx's ``nn.Linear``), else None."""
    if op.get_type_name() != "MatMul" or op.get_attributes() != {"transpose_a": False, "transpose_b": False}:
        return None
    transpose = op.input_value(1).get_node()
    if transpose.get_type_name() != "Transpose":
        return None
    source, perm = (v.get_node() for v in transpose.input_values())
    if source.get_type_name() != "Parameter" or perm.get_type_name() != "Constant":
        return None
    arr = weights.get(source.output(0).get_any_name())
    if arr is None or arr.ndim != 2 or arr.dtype != np.float32 or list(perm.get_data()) != [1, 0]:
        return None
    return source


def _bias_add(product: Any, weights: Mapping[str, np.ndarray]) -> tuple[Any, int, Any, list[Any]] | None:
    """(the Add, which of its inputs is the product's, the bias, the reshapes between) where
    ``product``'s only reader, or that of reshapes of it that keep its last axis, adds it a 1-d
    float32 weight over that axis (of static width); None otherwise."""
    shape = product.get_output_partial_shape(0)
    if shape.rank.is_dynamic or not shape[-1].is_static:
        return None
    width, chain, node = shape[-1], [], product
    while True:
        readers = list(node.output(0).get_target_inputs())
        if len(readers) != 1:
            return None
        reader, side = readers[0].get_node(), readers[0].get_index()
        shape = reader.get_output_partial_shape(0)
        if shape.rank.is_dynamic or shape[-1] != width:
            return None
        if reader.get_type_name() != "Reshape":
            break
        chain.append(node := reader)
    if reader.get_type_name() != "Add":
        return None
    vector = reader.input_value(1 - side)
    arr = weights.get(vector.get_any_name()) if vector.get_node().get_type_name() == "Parameter" else None
    if arr is None or arr.ndim != 1 or arr.dtype != np.float32 or arr.shape[0] != width.get_length():
        return None
    return reader, side, vector, chain
