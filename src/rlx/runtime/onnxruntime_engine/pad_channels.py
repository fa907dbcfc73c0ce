"""Convolution channels padded to onnxruntime's channel block (the engine option ``pad_channels``).

onnxruntime runs convolutions in a blocked channel layout (NCHWc: 16 channels a block with
AVX-512, 8 with AVX2). A convolution whose output has a channel count off the block computes the
block's padding anyway, but the convolution reading that output cannot take it blocked: onnxruntime
changes the tensor back to the plain layout (a ReorderOutput node) and runs the reader on it. A
ResNet bottleneck of 8 channels costs two such changes; EfficientNet's 8- and 24-channel
projections three. Padding the channels in the graph keeps the chain blocked: the producer gets
zero filters up to the block (and neutral BatchNorm statistics for them), each reader zero weights
for the extra input channels. For finite values that is exact: the padded channels hold finite
values (zero, or an activation of zero) that meet zero weights. A NaN or inf would not stay out of
the sum (0 × inf is NaN), so the engine checks the graph inputs the padded chain can get a NaN or
inf from before each run and runs the unpadded graph on the rare run that has one
(``rlx.exporters.onnx.nan_sources``); a chain with a step that can make them of finite values is
left as it is. Whether it pays depends on the model and batch (more multiply-adds against fewer
layout changes: ResNet b1 0.97×, b8 1.02×; EfficientNet b1 0.91×), so it is an option that
``rlx tune`` tries, not a default.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlx.exporters.onnx import FINITE_INPUTS
from rlx.exporters.onnx.nan_sources import NanSources
from rlx.ir import calls as C
from rlx.ir.program import Program
from rlx.runtime.cpu import cpu_flags

# Between the producer and its readers: per-channel steps that map finite values to finite ones.
PASS_THROUGH = frozenset({"Relu", "Clip", "LeakyRelu", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "Identity"})
BATCH_NORM = "BatchNormalization"


def channel_block() -> int:
    """onnxruntime's NCHWc channel block on this CPU (MLAS: 16 with AVX-512F, 8 with AVX2; 1: none)."""
    flags = cpu_flags()
    return 16 if "avx512f" in flags else 8 if "avx2" in flags else 1


def pad_channels(model: Any, program: Program, arrays: Mapping[str, np.ndarray], block: int | None = None) -> list[str]:
    """Pad, in ``model`` (an ``onnx.ModelProto`` emitted for ``program``, weights external), each
    float32 convolution whose output channels are off ``block`` and whose output reaches only
    convolutions (through ``PASS_THROUGH`` steps and BatchNorms); ``arrays``: the weights by name.
    The padded weights become initializers of their own, held in the graph. The graph inputs the
    padded chains need finite join the model's ``FINITE_INPUTS``. Returns the padded outputs' names."""
    from onnx import numpy_helper

    block = block or channel_block()
    if block <= 1:
        return []
    padder = _Padder(model.graph, program, arrays)
    done = [node.output[0] for node in list(model.graph.node) if padder.pad(node, block)]
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


class _Padder:
    """The padded weights of one graph, by new initializer name, as they are worked out."""

    def __init__(self, graph: Any, program: Program, arrays: Mapping[str, np.ndarray]) -> None:
        # (nodes are told apart by id: these lists hold every node's wrapper for the padder's life,
        # so protobuf hands out the same one each time)
        self.readers: dict[str, list[tuple[Any, int]]] = defaultdict(list)
        for node in graph.node:
            for k, name in enumerate(node.input):
                self.readers[name].append((node, k))
        self.outputs = {o.name for o in graph.output}
        self.conv_inputs = {ins.result: ins.call.x.name for ins in program.instrs if isinstance(ins.call, C.Conv)}
        self.sources = NanSources(program, lambda name: arrays.get(name))
        self.arrays = arrays
        self.padded: dict[str, np.ndarray] = {}  # new initializer name → padded value
        self.renamed: dict[tuple[int, int], str] = {}  # (node id, input index) → its padded initializer
        self.finite: set[str] = set()  # graph inputs the padded chains need finite

    def value(self, node: Any, k: int) -> np.ndarray | None:
        name = self.renamed.get((id(node), k)) or node.input[k]
        return self.padded[name] if name in self.padded else self.arrays.get(name)

    def grow(self, node: Any, k: int, axis: int, extra: int, fill: float = 0.0) -> None:
        arr = self.value(node, k)
        assert arr is not None  # (checked before anything is padded)
        shape = list(arr.shape)
        shape[axis] = extra
        name = self.renamed.get((id(node), k)) or f"{node.input[k]}/padded/{len(self.padded)}"
        self.padded[name] = np.concatenate([np.asarray(arr), np.full(shape, fill, arr.dtype)], axis=axis)
        self.renamed[(id(node), k)] = name

    def pad(self, node: Any, block: int) -> bool:
        """Pad ``node``'s output channels and its readers' input channels, where it qualifies."""
        weight = self.value(node, 1) if _plain_conv(node) else None
        x = self.conv_inputs.get(node.output[0])
        if weight is None or x is None or weight.dtype != np.float32 or weight.shape[0] % block == 0:
            return False
        chain, end = _chain(node.output[0], self.readers, self.outputs)
        readers = [r for r, _ in self.readers[end]]
        if chain is None or not all(_plain_conv(r) and k == 0 and self.value(r, 1) is not None
                                    for r, k in self.readers[end]):  # fmt: skip
            return False
        bias = len(node.input) > 2 and bool(node.input[2])
        norms = [n for n in chain if n.op_type == BATCH_NORM]
        if (bias and self.value(node, 2) is None) or any(self.value(n, k) is None for n in norms for k in range(1, 5)):
            return False
        needs = self.sources.inputs(x)  # (None: a step on the way can make NaN of finite values)
        if needs is None:
            return False
        extra = block - weight.shape[0] % block
        self.grow(node, 1, 0, extra)
        if bias:
            self.grow(node, 2, 0, extra)
        for norm in norms:  # scale, bias, mean, variance: the extra channels stay 0
            for k, fill in zip(range(1, 5), (0.0, 0.0, 0.0, 1.0)):
                self.grow(norm, k, 0, extra, fill)
        for reader in readers:
            self.grow(reader, 1, 1, extra)
        self.finite |= needs
        return True


def _plain_conv(node: Any) -> bool:
    """A 2-d convolution of one group (depthwise and grouped ones keep their channels)."""
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return node.op_type == "Conv" and node.domain in ("", "ai.onnx") and group == 1 and len(node.input) >= 2


def _chain(start: str, readers: Mapping[str, list[tuple[Any, int]]], outputs: set[str]) -> tuple[list[Any] | None, str]:
    """The per-channel steps from value ``start`` on, each the only reader of the one before, and
    the value their readers take (None: a value on the way is a graph output, or nothing reads it)."""
    chain, value = [], start
    while value not in outputs and len(readers[value]) == 1:
        step, k = readers[value][0]
        if k != 0 or not (step.op_type in PASS_THROUGH or step.op_type == BATCH_NORM):
            break
        chain.append(step)
        value = step.output[0]
    if value in outputs or not readers[value]:
        return None, value
    return chain, value


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
