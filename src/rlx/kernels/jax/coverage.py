"""What the JAX kernels cannot run, said before anything is traced: the JAX engine and the JAX
style of generated packages both ask here. (Not vendored: nothing the kernel table imports uses it.)"""

from __future__ import annotations

from ...errors import UsageError
from ...ir import dtypes
from ...ir.calls import Special
from ...ir.program import Program
from ...ir.symbolic import Sym
from .. import special
from .kernels import JAX, KERNELS


def check_coverage(program: Program) -> None:
    """Every Call of ``program`` must have a JAX kernel: say which ones do not, all at once; no size
    may depend on the data, which XLA's fixed shapes cannot express; and no value may be of a
    low-bit storage type (float8, int4 …)."""
    if program.data_symbols:
        producers = _size_producers(program)
        raise UsageError(
            f"the JAX engine compiles fixed shapes, and {program.name} has sizes that depend on the data "
            f"({', '.join(s.name for s in program.data_symbols)}, from {', '.join(producers) or 'its graph'}); "
            "run it with engine='numpy'"
        )
    low = sorted({v.dtype for v in program.values().values() if dtypes.is_low_bit(v.dtype)})
    if low:
        raise UsageError(
            f"the JAX engine does not run {', '.join(low)} values (rlx stores and casts them on numpy only); "
            "run this model with engine='numpy'"
        )
    missing: dict[str, list[str]] = {}
    for ins in program.instrs:
        if ins.call.op not in KERNELS:
            missing.setdefault(ins.call.op, []).append(ins.result)
        elif isinstance(ins.call, Special) and special.missing(JAX, ins.call.fn):  # jax.scipy.special lacks it
            missing.setdefault(f"Special({ins.call.fn})", []).append(ins.result)
    if missing:
        listed = ", ".join(f"{op} ×{len(r)} (first: {r[0]})" for op, r in sorted(missing.items()))
        raise UsageError(f"the JAX engine has no kernel for {listed}; run this model with engine='numpy'")


def _size_producers(program: Program) -> list[str]:
    """The Calls whose results first have each data-dependent size."""
    pending = {s.name for s in program.data_symbols}
    ops: list[str] = []
    for ins in program.instrs:
        for d in ins.shape:
            if isinstance(d, Sym) and d.expr in pending:
                pending.discard(d.expr)
                ops.append(ins.call.op)
    return sorted(set(ops))
