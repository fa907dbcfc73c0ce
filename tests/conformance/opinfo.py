"""Run PyTorch's own OpInfo samples through export → lower → numpy runtime, compared with eager.

A sample counts when its export lands in Core ATen (every op of the core-level graph is tagged
``torch.Tag.core``, plus getitem and shape arithmetic); the rest are "not applicable" to this
suite. Outcomes: pass, fail (with the reason), known (declared in ``known_failures.KNOWN``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils import _pytree as pytree

from rlx.convert import build_program
from rlx.errors import RlxError
from rlx.runtime.model import Model, bind_weights
from rlx.torch_import import capture
from rlx.torch_import.dtypes import tensor_to_numpy

from helpers import assert_arrays_match

DTYPES = {"f32": torch.float32, "i64": torch.int64, "bool": torch.bool, "f16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Outcome:
    op: str
    dtype: str
    sample: int
    status: str  # pass | fail | n/a
    reason: str = ""


def opinfos():
    from torch.testing._internal.common_methods_invocations import op_db

    return [o for o in op_db if not o.variant_test_name]


class _Call(torch.nn.Module):
    def __init__(self, fn, spec, constants):
        super().__init__()
        self.fn, self.spec, self.constants = fn, spec, constants

    def forward(self, *tensors):
        leaves = list(self.constants)
        it = iter(tensors)
        leaves = [next(it) if c is _TENSOR else c for c in leaves]
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(inp, *args, **kwargs)


_TENSOR = object()


def _is_core(ep) -> str | None:
    for n in ep.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        if isinstance(t, torch._ops.OpOverload):
            if torch.Tag.core not in t.tags and t.namespace == "aten":
                return str(t)
            if t.namespace != "aten":
                return str(t)
    return None


def run_sample(opinfo, sample, dtype_tok: str, index: int) -> Outcome:
    name = opinfo.name
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    tensors = [x.detach() for x in leaves if isinstance(x, torch.Tensor)]
    if any(t.is_complex() or t.dtype not in DTYPES.values() or t.numel() > 10**6 for t in tensors):
        return Outcome(name, dtype_tok, index, "n/a", "unsupported input dtype or size")
    constants = [_TENSOR if isinstance(x, torch.Tensor) else x for x in leaves]
    module = _Call(opinfo.op, spec, constants).eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.no_grad():
                expected = module(*tensors)
            exported = capture(module, tuple(tensors), decomposition="core", auto_decompose=False)
    except Exception as e:
        return Outcome(name, dtype_tok, index, "n/a", f"export: {type(e).__name__}")
    non_core = _is_core(exported.exported_program)
    if non_core:
        return Outcome(name, dtype_tok, index, "n/a", f"not core ATen: {non_core}")
    try:
        program = build_program(exported.ir)
        model = Model(program, bind_weights(program, exported.weights, "weights"))
        got = model(*[tensor_to_numpy(t) for t in tensors])
        want_flat = [w for w in pytree.tree_leaves(expected)]
        got_flat = pytree.tree_leaves(got)
        if len(got_flat) != len(want_flat):
            return Outcome(name, dtype_tok, index, "fail", f"{len(got_flat)} outputs, torch has {len(want_flat)}")
        for k, (g, w) in enumerate(zip(got_flat, want_flat)):
            if isinstance(w, torch.Tensor):
                assert_arrays_match(np.asarray(g), tensor_to_numpy(w), f"output {k}")
            elif g != w:
                return Outcome(name, dtype_tok, index, "fail", f"output {k}: {g!r} != {w!r}")
    except RlxError as e:
        return Outcome(name, dtype_tok, index, "fail", f"{type(e).__name__}: {str(e)[:160]}")
    except AssertionError as e:
        return Outcome(name, dtype_tok, index, "fail", "mismatch: " + " ".join(str(e).split())[:160])
    except Exception as e:  # a non-rlx exception escaping is itself a bug worth recording
        return Outcome(name, dtype_tok, index, "fail", f"crash {type(e).__name__}: {str(e)[:120]}")
    return Outcome(name, dtype_tok, index, "pass")


def sweep(names: list[str] | None = None, dtypes=("f32",), max_samples: int = 3) -> Iterator[Outcome]:
    for opinfo in opinfos():
        if names is not None and opinfo.name not in names:
            continue
        for tok in dtypes:
            dtype = DTYPES[tok]
            if dtype not in opinfo.supported_dtypes("cpu"):
                continue
            try:
                samples = list(opinfo.sample_inputs("cpu", dtype, requires_grad=False))[:max_samples]
            except Exception:
                continue
            for k, sample in enumerate(samples):
                yield run_sample(opinfo, sample, tok, k)
