"""Convolution channels padded to onnxruntime's channel block (the engine option ``pad_channels``).

onnxruntime runs convolutions in a blocked channel layout (NCHWc: 16 channels a block with
AVX-512, 8 with AVX2). A convolution whose output has a channel count off the block computes the
block's padding anyway, but the convolution reading that output cannot take it blocked: onnxruntime
changes the tensor back to the plain layout (a ReorderOutput node) and runs the reader on it. A
ResNet bottleneck of 8 channels costs two such changes; EfficientNet's 8- and 24-channel
projections three. Padding the channels in the graph keeps them blocked.

What is padded is a *channel group*: the values that share one channel axis because per-channel
steps join them (activations, BatchNorm, depthwise convolutions, pools, residual sums, a
squeeze-excitation's scale, elementwise steps with constants), from the convolutions that make
them (the producers) to the convolutions that read them. The producers get zero filters up to the
block, the steps neutral parameters (BatchNorm statistics, depthwise filters, per-channel
constants), each reading convolution zero weights for the extra input channels. For finite values
that is exact: a padded channel starts at zero, every step maps finite values to finite ones, and
what it holds meets zero weights. A NaN or inf would not stay out of the sum (0 × inf is NaN), so
the engine checks the graph inputs the producers can get a NaN or inf from before each run and
runs the unpadded graph on the rare run that has one (``rlx.exporters.onnx.nan_sources``); a group
after a step that can make them of finite values is left as it is. Whether it pays depends on the
model and batch (more multiply-adds against fewer layout changes: ResNet b1 0.97×, b8 1.02×;
EfficientNet b1 0.91×), so it is an option that ``rlx tune`` tries, not a default.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlx.exporters.onnx import FINITE_INPUTS
from rlx.exporters.onnx.nan_sources import NanSources
from rlx.ir import calls as C
from rlx.ir.program import Program, Ref
from rlx.runtime.cpu import cpu_flags

# Per-channel steps whose every operand is a member of the group or a constant: each maps finite
# values to finite ones, so a padded channel (zero where it starts) stays finite.
ELEMENTWISE = frozenset({
    "Relu", "Clip", "LeakyRelu", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "Identity", "Neg", "Abs",
    "Add", "Sub", "Mul", "Max", "Min", "Where", "Greater", "Less", "GreaterOrEqual", "LessOrEqual",
})  # fmt: skip
POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
REDUCTIONS = frozenset({"ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum"})
BATCH_NORM = "BatchNormalization"
# BatchNorm's scale, bias, mean and variance: a padded channel gets 0 · (x − 0) / √(1 + eps) + 0.
NEUTRAL_NORM = {1: 0.0, 2: 0.0, 3: 0.0, 4: 1.0}
NOT_PER_CHANNEL = -1


def channel_block() -> int:
    """onnxruntime's NCHWc channel block on this CPU (MLAS: 16 with AVX-512F, 8 with AVX2; 1: none)."""
    flags = cpu_flags()
    return 16 if "avx512f" in flags else 8 if "avx2" in flags else 1


def pad_channels(model: Any, program: Program, arrays: Mapping[str, np.ndarray], block: int | None = None) -> list[str]:
    """Pad, in ``model`` (an ``onnx.ModelProto`` emitted for ``program``, weights external), every
    float32 channel group off ``block`` that convolutions of one group read; ``arrays``: the
    weights by name. The padded weights become initializers of their own, held in the graph; the
    graph inputs the padded groups need finite join the model's ``FINITE_INPUTS``. Returns the
    names of the padded producers' outputs."""
    from onnx import numpy_helper

    block = block or channel_block()
    if block <= 1:
        return []
    padder = _Padder(model.graph, program, arrays)
    done: list[str] = []
    for node in list(model.graph.node):
        weight = padder.value(node, 1) if _plain_conv(node) and id(node) not in padder.seen else None
        if weight is not None and weight.shape[0] % block:
            group = padder.group(node)
            if group is not None:
                padder.pad(group, block - group.channels % block)
                done += [p.output[0] for p in group.producers.values()]
    if done:
        for node in model.graph.node:
            for k in range(len(node.input)):
                node.input[k] = padder.renamed.get((id(node), k), node.input[k])
        read = {name for node in model.graph.node for name in node.input}
        kept = [t for t in model.graph.initializer if t.name in read]  # (onnxruntime refuses unread ones)
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)
        model.graph.initializer.extend(numpy_helper.from_array(arr, name) for name, arr in padder.padded.items())
        _add_finite_inputs(model, padder.finite)
    return done


def guard_block_padding(
    model: Any, program: Program, arrays: Mapping[str, np.ndarray], block: int | None = None
) -> None:
    """Name in ``model``'s ``FINITE_INPUTS`` the graph inputs that a convolution with output channels
    off ``block`` can get NaN or inf from. onnxruntime pads such an output to its channel block
    itself, with zero filters: where the convolution's input holds ±inf, the padding holds NaN
    (0 × inf), and a reading convolution's zero weights spread it to outputs PyTorch computes as
    numbers (after a tanh, a sigmoid or a clamp has made the real channels finite). The engine
    then runs such an input on the exact graph, which runs without the blocked layout. A
    convolution after a step that can make NaN or inf of finite values is not guarded (only
    overflow makes inf there, where implementations disagree anyway)."""
    block = block or channel_block()
    if block <= 1:
        return
    sources, needs = NanSources(program, lambda name: arrays.get(name)), set[str]()
    for conv in off_block_convolutions(program, arrays, block):
        needs |= (sources.inputs(conv.x.name) if isinstance(conv.x, Ref) else None) or set()
    if needs:
        _add_finite_inputs(model, needs)


def off_block_convolutions(
    program: Program, arrays: Mapping[str, np.ndarray], block: int, *, one_group: bool = False
) -> list[C.Conv]:
    """The float32 convolutions of ``program`` (not transposed; ``one_group``: of one group only)
    whose output channels are off ``block``; ``arrays``: the weights by name."""
    found = []
    for ins in program.instrs:
        call = ins.call
        if not isinstance(call, C.Conv) or call.transposed or not isinstance(call.weight, Ref):
            continue
        weight = arrays.get(call.weight.name)
        if weight is not None and weight.dtype == np.float32 and weight.shape[0] % block:
            if not one_group or call.groups == 1:
                found.append(call)
    return found


@dataclass
class _Group:
    """One channel group: who makes it, what steps it takes, who reads it."""

    channels: int
    rank: int
    # nodes by id (protobuf messages compare by content), in the order they were met:
    producers: dict[int, Any] = field(default_factory=dict)  # convolutions whose output channels grow
    steps: dict[int, Any] = field(default_factory=dict)  # per-channel nodes inside the group
    readers: dict[int, Any] = field(default_factory=dict)  # convolutions whose input channels grow
    params: list[tuple[Any, int, int, float]] = field(default_factory=list)  # (step, input, axis, fill)
    needs: frozenset[str] = frozenset()  # graph inputs that must be finite


class _Padder:
    """The padded weights of one graph, by new initializer name, as they are worked out."""

    def __init__(self, graph: Any, program: Program, arrays: Mapping[str, np.ndarray]) -> None:
        from onnx import numpy_helper

        # (nodes are told apart by id: these lists hold every node's wrapper for the padder's life,
        # so protobuf hands out the same one each time)
        self.readers: dict[str, list[tuple[Any, int]]] = defaultdict(list)
        self.producer: dict[str, Any] = {}
        for node in graph.node:
            for k, name in enumerate(node.input):
                if name:
                    self.readers[name].append((node, k))
            for name in node.output:
                self.producer[name] = node
        self.outputs = {o.name for o in graph.output}
        self.constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer if t.data_location != 1}
        self.conv_inputs = {ins.result: ins.call.x.name for ins in program.instrs if isinstance(ins.call, C.Conv)}
        self.sources = NanSources(program, lambda name: arrays.get(name))
        self.arrays = arrays
        self.seen: set[int] = set()  # convolutions already taken into a group as producers
        self.padded: dict[str, np.ndarray] = {}  # new initializer name → padded value
        self.renamed: dict[tuple[int, int], str] = {}  # (node id, input index) → its padded initializer
        self.finite: set[str] = set()  # graph inputs the padded groups need finite

    def value(self, node: Any, k: int) -> np.ndarray | None:
        name = self.renamed.get((id(node), k)) or node.input[k]
        if name in self.padded:
            return self.padded[name]
        return self.arrays.get(name) if name in self.arrays else self.constants.get(name)

    def group(self, start: Any) -> _Group | None:
        """The channel group ``start``'s output belongs to, or None where it cannot be padded."""
        weight = self.value(start, 1)
        if weight is None or weight.dtype != np.float32:
            self.seen.add(id(start))
            return None
        group = _Group(channels=weight.shape[0], rank=weight.ndim)
        members: set[str] = set()
        todo = [start.output[0]]
        while todo:
            name = todo.pop()
            if name in members:
                continue
            members.add(name)
            if name in self.outputs:
                return None
            node = self.producer.get(name)
            if node is None or not self._join(node, group, todo, k=None):
                return None
            for reader, k in self.readers[name]:
                if not self._join(reader, group, todo, k=k):
                    return None
        if not group.readers:
            return None
        needs: set[str] = set()
        for producer in group.producers.values():
            x = self.conv_inputs.get(producer.output[0])
            found = self.sources.inputs(x) if x is not None else None
            if found is None:  # (a step before it can make NaN of finite values)
                return None
            needs |= found
        group.needs = frozenset(needs)
        return group

    def _join(self, node: Any, group: _Group, todo: list[str], k: int | None) -> bool:
        """Take ``node`` into ``group``: the producer of a member (``k`` None) or a reader of one
        at input ``k``. Returns False where it cannot be padded with the group."""
        key = id(node)
        if _plain_conv(node):
            if k is not None and k != 0:
                return False
            role, axis = (group.producers, 0) if k is None else (group.readers, 1)
            if key not in role:
                weight = self.value(node, 1)
                if weight is None or weight.dtype != np.float32 or weight.shape[axis] != group.channels:
                    return False
                if k is None and len(node.input) > 2 and node.input[2] and self.value(node, 2) is None:
                    return False
                role[key] = node
                if k is None:
                    self.seen.add(key)
            return True
        if key in group.steps:
            return True
        step = self._step(node, group)
        if step is None:
            return False
        members, params = step
        group.steps[key] = node
        group.params += [(node, k, axis, fill) for k, axis, fill in params]
        todo += [node.input[i] for i in members]
        todo += [name for name in node.output if name]
        return True

    def _step(self, node: Any, group: _Group) -> tuple[list[int], list[tuple[int, int, float]]] | None:
        """Per-channel step ``node``'s inputs that join the group, and its constants to pad (input,
        axis, fill); None where ``node`` is no such step."""
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            return None
        op = node.op_type
        if op == BATCH_NORM:
            if any(_shape(self.value(node, k)) != (group.channels,) for k in NEUTRAL_NORM):
                return None
            return [0], [(k, 0, fill) for k, fill in NEUTRAL_NORM.items()]
        if op == "Conv":  # depthwise: one filter (and bias) per channel, zero where padded
            weight, biased = self.value(node, 1), len(node.input) > 2 and bool(node.input[2])
            if _attr(node, "group", 1) != group.channels or _shape(weight)[:2] != (group.channels, 1):
                return None
            if biased and self.value(node, 2) is None:
                return None
            return [0], [(k, 0, 0.0) for k in ((1, 2) if biased else (1,))]
        spatial = {"Pad": self._spatial_pad, "Resize": self._spatial_resize}.get(op)
        if op in POOLS or (op in REDUCTIONS and self._spatial(node, group)) or (spatial and spatial(node)):
            return [0], []
        if op in ELEMENTWISE or op == "Div":
            return self._elementwise(node, group)
        return None

    def _spatial(self, node: Any, group: _Group) -> bool:
        """A reduction over spatial axes only, keeping them (the channel axis stays where it is)."""
        axes = self.value(node, 1) if len(node.input) > 1 and node.input[1] else _attr(node, "axes", None)
        if axes is None or not len(axes) or not _attr(node, "keepdims", 1):
            return False
        return all(int(a) % group.rank > 1 for a in axes)

    def _spatial_pad(self, node: Any) -> bool:
        """A constant pad of spatial axes only (a finite value, or zero), as ``tf_padding`` writes."""
        pads, value = (self.value(node, k) if len(node.input) > k and node.input[k] else None for k in (1, 2))
        axes = self.value(node, 3) if len(node.input) > 3 and node.input[3] else None
        if _attr(node, "mode", b"constant") not in (b"constant", "constant") or pads is None or axes is not None:
            return False
        if value is not None and not _finite_constant(value):
            return False
        rank = len(pads) // 2
        return rank > 2 and not any(int(pads[k]) for k in (0, 1, rank, rank + 1))

    def _spatial_resize(self, node: Any) -> bool:
        """A resize of spatial axes only, by scales (a squeeze-excitation scale upsampled)."""
        scales = self.value(node, 2) if len(node.input) > 2 and node.input[2] else None
        sized = len(node.input) > 3 and bool(node.input[3])
        return scales is not None and not sized and len(scales) > 2 and float(scales[0]) == float(scales[1]) == 1.0

    def _elementwise(self, node: Any, group: _Group) -> tuple[list[int], list[tuple[int, int, float]]] | None:
        members, params = [], []
        for k, name in enumerate(node.input):
            const = self.value(node, k) if name else None
            if name and const is None:
                members.append(k)
            elif const is not None:
                axis = _constant_axis(const, group)
                if axis == NOT_PER_CHANNEL or not _finite_constant(const):
                    return None
                if node.op_type == "Div" and k == 1 and not (np.asarray(const) != 0).all():
                    return None
                if axis is not None:  # (a padded divisor is 1, any other padded constant 0)
                    params.append((k, axis, 1.0 if node.op_type == "Div" and k == 1 else 0.0))
        if node.op_type == "Div" and 1 in members:  # (a divisor from the group is 0 where padded)
            return None
        return members, params

    def pad(self, group: _Group, extra: int) -> None:
        """Grow every producer, step and reader of ``group`` by ``extra`` channels."""
        for producer in group.producers.values():
            self._grow(producer, 1, 0, extra)
            if len(producer.input) > 2 and producer.input[2]:
                self._grow(producer, 2, 0, extra)
        for step, k, axis, fill in group.params:
            self._grow(step, k, axis, extra, fill)
        for step in group.steps.values():
            if step.op_type == "Conv":
                next(a for a in step.attribute if a.name == "group").i = group.channels + extra
        for reader in group.readers.values():
            self._grow(reader, 1, 1, extra)
        self.finite |= group.needs

    def _grow(self, node: Any, k: int, axis: int, extra: int, fill: float = 0.0) -> None:
        arr = self.value(node, k)
        assert arr is not None  # (checked before anything is padded)
        shape = list(arr.shape)
        shape[axis] = extra
        name = self.renamed.get((id(node), k)) or f"{node.input[k]}/padded/{len(self.padded)}"
        self.padded[name] = np.concatenate([np.asarray(arr), np.full(shape, fill, arr.dtype)], axis=axis)
        self.renamed[(id(node), k)] = name


def _plain_conv(node: Any) -> bool:
    """A convolution of one group (depthwise and grouped ones keep their channels)."""
    return (
        node.op_type == "Conv"
        and node.domain in ("", "ai.onnx")
        and _attr(node, "group", 1) == 1
        and len(node.input) >= 2
    )


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _shape(arr: np.ndarray | None) -> tuple[int, ...]:
    return () if arr is None else tuple(np.shape(arr))


def _finite_constant(const: np.ndarray) -> bool:
    arr = np.asarray(const)
    return arr.dtype.kind not in "fc" or bool(np.isfinite(arr).all())


def _constant_axis(const: np.ndarray, group: _Group) -> int | None:
    """Where a constant operand of a step holds the group's channels: None for one value (it
    broadcasts over padded channels as it is), the axis to pad for one value per channel,
    ``NOT_PER_CHANNEL`` for any other shape."""
    shape = np.shape(const)
    if int(np.prod(shape)) == 1:
        return None
    axis = len(shape) - (group.rank - 1)  # (operands align to the right: the channel axis is 1)
    if axis < 0 or shape[axis] != group.channels or any(d != 1 for i, d in enumerate(shape) if i != axis):
        return NOT_PER_CHANNEL
    return axis


def _add_finite_inputs(model: Any, names: set[str]) -> None:
    props = {p.key: p.value for p in model.metadata_props}
    known = set(json.loads(props.get(FINITE_INPUTS, "[]")))
    merged = sorted(known | names)
    for p in model.metadata_props:
        if p.key == FINITE_INPUTS:
            p.value = json.dumps(merged)
            return
    entry = model.metadata_props.add()
    entry.key, entry.value = FINITE_INPUTS, json.dumps(merged)
