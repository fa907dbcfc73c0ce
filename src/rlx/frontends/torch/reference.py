"""PyTorch's side of the parity debugger: save/load the ExportedProgram, and run it node by node."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.export import ExportedProgram

from rlx.errors import BundleError, summary
from rlx.frontends.torch.tensors import numpy_to_tensor, tensor_to_numpy


def save_exported(ep: ExportedProgram, path: Path) -> str | None:
    """Save ``ep`` for ``rlx debug``; returns why not when torch cannot serialise this program
    (e.g. an output of a type its serialiser does not know), which only costs ``rlx debug``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.export.save(ep, str(path))
    except Exception as e:  # torch's serialiser raises many types
        path.unlink(missing_ok=True)
        return summary(e)[:200]
    return None


def load_exported(path: Path) -> ExportedProgram:
    if not path.is_file():
        raise BundleError(
            f"{path}: missing; re-run `rlx import MODEL -o {path.parent} --force --keep-exported` "
            "(rlx.from_torch(..., keep_exported=True)) to save it for `rlx debug`"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.load(str(path))


def _to_numpy(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return tensor_to_numpy(v)
    if isinstance(v, (tuple, list)):
        return tuple(_to_numpy(x) for x in v)
    return v


def node_values(ep: ExportedProgram, user_inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Every node's value (numpy; tuples for multi-output nodes), placeholders included, from
    running the exported graph on ``user_inputs`` (keyed by input id)."""
    tensors = {**ep.state_dict, **ep.constants}
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    args = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name == "USER_INPUT":
            constant = placeholders[spec.arg.name].meta.get("val")
            if spec.arg.name not in user_inputs and not isinstance(constant, torch.Tensor):
                args.append(constant)  # a non-tensor argument (use_cache=False): export fixed its value
                continue
            if spec.arg.name not in user_inputs:
                raise BundleError(f"no value for input {spec.arg.name!r} in the reference file")
            args.append(numpy_to_tensor(np.asarray(user_inputs[spec.arg.name])))
        elif spec.kind.name == "TOKEN":  # threads the effects of error checks (linalg inv, ldl_factor …)
            args.append(torch.tensor([]))
        else:
            args.append(tensors[spec.target])
    values: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            if n.op in ("placeholder", "call_function"):
                values[n.name] = _to_numpy(result)
            return result

    with torch.no_grad():
        Recorder(ep.graph_module).run(*args)
    return values
