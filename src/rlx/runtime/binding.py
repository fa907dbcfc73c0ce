"""Binding input symbols from the shapes of actual inputs, with every check torch.export implies.

One error per problem, naming the input, the axis and the symbol:
``input 'input_ids' axis 1 (symbol seq) = 300, outside 2..256``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlx.errors import InputError
from rlx.ir import symbolic
from rlx.ir.program import Program
from rlx.ir.symbolic import Sym


def _fmt(bindings: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(bindings.items()))


def bind_symbols(program: Program, arrays: Sequence[np.ndarray]) -> dict[str, int]:
    """The value of every input symbol, checked for consistency, ranges and torch's guards."""
    bindings: dict[str, int] = {}
    origin: dict[str, str] = {}
    derived = _bind_plain(program, arrays, bindings, origin)
    for name, axis, dim, size in derived:
        _bind_derived(f"input {name!r} axis {axis} ({dim.expr})", dim, size, bindings, origin)
    _check_ranges(program, bindings, origin)
    for guard in program.guards:
        try:
            ok = bool(symbolic.evaluate(guard, bindings))
        except KeyError:
            continue  # a guard over symbols no input carries cannot be checked here
        if not ok:
            raise InputError(f"input shapes violate the export guard {guard} (with {_fmt(bindings)})")
    return bindings


def _bind_plain(
    program: Program, arrays: Sequence[np.ndarray], bindings: dict[str, int], origin: dict[str, str]
) -> list[tuple[str, int, Sym, int]]:
    """Bind every axis that is a bare symbol; return the axes whose extent is an expression."""
    derived: list[tuple[str, int, Sym, int]] = []
    for spec, arr in zip(program.inputs, arrays):
        for axis, (dim, size) in enumerate(zip(spec.shape, arr.shape)):
            if isinstance(dim, int):
                continue  # static extents were checked with the dtype
            where = f"input {spec.name!r} axis {axis}"
            if not dim.expr.isidentifier():
                derived.append((spec.name, axis, dim, size))
            elif dim.expr in bindings and bindings[dim.expr] != size:
                raise InputError(
                    f"{where} (symbol {dim.expr}) = {size}, but {origin[dim.expr]} gives {dim.expr} = "
                    f"{bindings[dim.expr]}; the two must match"
                )
            else:
                bindings[dim.expr] = size
                origin.setdefault(dim.expr, where)
    return derived


def _bind_derived(where: str, dim: Sym, size: int, bindings: dict[str, int], origin: dict[str, str]) -> None:
    """Check an extent given by an expression; a symbol seen only there is solved from it."""
    unbound = symbolic.names(dim.expr) - set(bindings)
    if len(unbound) == 1:  # solve a·s + b = size
        (sym,) = unbound
        b = symbolic.eval_dim(dim, {**bindings, sym: 0})
        a = symbolic.eval_dim(dim, {**bindings, sym: 1}) - b
        if a == 0 or (size - b) % a:
            raise InputError(f"{where} = {size}: no integer {sym} satisfies {dim.expr} = {size}")
        bindings[sym] = (size - b) // a
        origin[sym] = where
    elif unbound:
        raise InputError(f"{where}: cannot bind {', '.join(sorted(unbound))} from this extent alone")
    want = symbolic.eval_dim(dim, bindings)
    if want != size:
        raise InputError(f"{where} = {size}, but {dim.expr} = {want} with {_fmt(bindings)}")


def _check_ranges(program: Program, bindings: dict[str, int], origin: dict[str, str]) -> None:
    for s in program.symbols:
        value = bindings.get(s.name)
        if value is None:
            continue
        if value < s.min or (s.max is not None and value > s.max):
            hi = "" if s.max is None else str(s.max)
            raise InputError(f"{origin[s.name]} (symbol {s.name}) = {value}, outside {s.min}..{hi}")
