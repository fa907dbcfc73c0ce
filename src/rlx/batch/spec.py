"""What a batch run feeds the model and what it gets back: one row's inputs and outputs, read off a loaded Model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlx.errors import UsageError
from rlx.ir.dtypes import to_numpy
from rlx.ir.symbolic import Dim, Sym
from rlx.runtime import Model

ROW_INDEX = "row_index"  # the output column holding each row's position in the input (always written)


@dataclass(frozen=True)
class InputSpec:
    """One model input: the data column it is read from and the shape of one row (the batch axis removed)."""

    name: str
    column: str
    dtype: np.dtype
    row_shape: tuple[Dim, ...]

    def shape_text(self) -> str:
        return "[" + ", ".join(str(d) for d in self.row_shape) + "]"


@dataclass(frozen=True)
class OutputSpec:
    """One output leaf: its column name, where it sits in the model's output structure, one row's shape."""

    name: str
    path: tuple[str | int, ...]
    row_shape: tuple[Dim, ...] | None  # None when the bundle's meta.json does not say
    dtype: np.dtype | None

    @property
    def ragged(self) -> bool:
        """Rows may differ in shape (a symbol other than the batch), so the column holds lists, not tensors."""
        return self.row_shape is None or any(isinstance(d, Sym) for d in self.row_shape)


@dataclass(frozen=True)
class Signature:
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]
    batched: bool  # every input's axis 0 is the same symbol: rows are stacked along it
    min_batch: int
    max_batch: int | None

    @property
    def columns(self) -> list[str]:
        return [i.column for i in self.inputs]

    def input_for_column(self, column: str) -> InputSpec:
        return next(i for i in self.inputs if i.column == column)


def signature(model: Model, column_map: Mapping[str, str] | None = None) -> Signature:
    """The batch view of ``model``; ``column_map`` maps input names to data columns (default: same name)."""
    column_map = dict(column_map or {})
    if model.program.state or model.program.input_updates:
        # Rows in batches, in any order and on several workers: a state carried between them means nothing.
        raise UsageError(
            f"{model.name} updates state or its inputs on every call ({', '.join(model.state) or 'its inputs'}); "
            "rlx batch runs models whose rows are independent: call the model in a loop instead"
        )
    unknown = sorted(set(column_map) - set(model.input_names))
    if unknown:
        raise UsageError(
            f"--column {unknown[0]}=...: the model has no input {unknown[0]!r}; its inputs are "
            + ", ".join(model.input_names)
        )
    batch_symbol = _batch_symbol(model)
    inputs = tuple(
        InputSpec(
            name=v.name,
            column=column_map.get(v.name, v.name),
            dtype=to_numpy(v.dtype),
            row_shape=tuple(v.shape[1:]) if batch_symbol else tuple(v.shape),
        )
        for v in model.inputs
    )
    lo, hi = _symbol_range(model.meta, batch_symbol)
    return Signature(inputs, _outputs(model, batch_symbol), batch_symbol is not None, lo, hi)


def _batch_symbol(model: Model) -> Sym | None:
    """The symbol every input has on axis 0, or None (a static bundle: the model runs one row at a time)."""
    firsts = {v.shape[0] if len(v.shape) else None for v in model.inputs}
    if len(firsts) != 1:
        return None
    (first,) = firsts
    return first if isinstance(first, Sym) and first.expr.isidentifier() else None


def _symbol_range(meta: Mapping[str, Any], symbol: Sym | None) -> tuple[int, int | None]:
    if symbol is None:
        return 1, None
    for s in meta.get("symbols", []):
        if isinstance(s, dict) and s.get("name") == symbol.expr:
            return max(1, int(s.get("min") or 1)), s.get("max")
    return 1, None


def _outputs(model: Model, batch_symbol: Sym | None) -> tuple[OutputSpec, ...]:
    declared = model.meta.get("outputs") or []
    specs = []
    for name, path, index in output_leaves(model.output_tree):
        row_shape, dtype = None, None
        if index < len(declared):
            shape = [Sym(d) if isinstance(d, str) else d for d in declared[index]["shape"]]
            if batch_symbol is not None and (not shape or shape[0] != batch_symbol):
                raise UsageError(
                    f"output {name!r} has shape {shape}, without the batch axis {batch_symbol} first; "
                    "rlx batch needs every output to be per row"
                )
            row_shape = tuple(shape[1:]) if batch_symbol is not None else tuple(shape)
            dtype = to_numpy(declared[index]["dtype"])
        if dtype is not None and dtype.kind == "c":
            raise UsageError(f"output {name!r} is complex ({dtype}); Parquet has no complex type")
        specs.append(OutputSpec(name, path, row_shape, dtype))
    return tuple(specs)


def output_leaves(tree: Any) -> list[tuple[str, tuple[str | int, ...], int]]:
    """(column name, path into the output structure, flat output index) for every model output.

    One output is ``output``; a tuple or list gives ``output_0``, ``output_1``; a dict gives its keys;
    nested levels append ``_<index>`` or ``_<key>``. Constant leaves are not per row and are left out.
    """
    leaves: list[tuple[str, tuple[str | int, ...], int]] = []

    def walk(t: Any, name: str, path: tuple[str | int, ...]) -> None:
        if t is None or "const" in t:
            return
        if "out" in t:
            leaves.append((name, path, t["out"]))
        for kind in ("tuple", "list"):
            for k, item in enumerate(t.get(kind, [])):
                walk(item, f"{name}_{k}", (*path, k))
        for key, item in t.get("dict", []):
            walk(item, f"{name}_{key}" if path else str(key), (*path, key))

    walk(tree, "output", ())
    return leaves


def pick(result: Any, path: tuple[str | int, ...]) -> Any:
    """The leaf at ``path`` in a model's (unflattened) result."""
    for key in path:
        result = result[key]
    return result
