"""The JAX backend: a whole Program becomes one ``jax.jit`` function, compiled by XLA.

jax is an optional extra. Nothing in this package imports it at module level: ``import rlx`` and
the numpy backend never pull it in, and asking for this backend without jax installed raises one
``UsageError`` saying how to install it.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from rlx.errors import UsageError
from rlx.ir.program import Call, Program
from rlx.runtime.jax_backend.registry import JAX_KERNELS, JaxKernel

if TYPE_CHECKING:
    from rlx.runtime.jax_backend.executor import JaxBackend

JAX_MISSING = "the JAX backend needs jax: pip install 'rlx[jax]'"


# Every other module of this package holds kernels (kernels, ordering, resample, scatter, and any
# family added later): importing one registers its kernels, so all are imported, none listed by hand.
# The generated JAX package vendors the same set (rlx.emit.vendor).
PLUMBING = ("executor", "registry")


def load_kernels() -> dict[type[Call], JaxKernel]:
    """Import jax and every kernel module of this package; the registry, filled."""
    try:
        import jax  # noqa: F401
    except ImportError:
        raise UsageError(JAX_MISSING) from None
    _import_kernel_modules()
    return JAX_KERNELS


@functools.cache
def _import_kernel_modules() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name not in PLUMBING:
            importlib.import_module(f"{__name__}.{info.name}")


def check_coverage(program: Program) -> None:
    """Every Call of ``program`` must have a JAX kernel: say which ones do not, all at once."""
    kernels = load_kernels()
    missing: dict[str, list[str]] = {}
    for ins in program.instrs:
        if type(ins.call) not in kernels:
            missing.setdefault(ins.call.op, []).append(ins.result)
    if missing:
        listed = ", ".join(f"{op} ×{len(r)} (first: {r[0]})" for op, r in sorted(missing.items()))
        raise UsageError(f"the JAX backend has no kernel for {listed}; run this model with backend='numpy'")


def backend(program: Program, weights: Mapping[str, np.ndarray]) -> JaxBackend:
    """The weights of ``program`` on the JAX device; calling the result with a (specialised)
    program compiles it into an executor."""
    load_kernels()
    from rlx.runtime.jax_backend.executor import JaxBackend

    return JaxBackend(program, weights)


__all__ = ["JAX_MISSING", "backend", "check_coverage", "load_kernels"]
