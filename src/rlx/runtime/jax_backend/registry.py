"""The JAX backend's kernel registry: one traceable function per Call.

Same contract as the numpy backend (``rlx.runtime.numpy_backend``): a kernel receives the Call and
its operands in ``Call.operand_fields()`` order (literals as 0-d arrays, absent optionals as None,
tuples as lists) and returns one array. JAX kernels must be traceable under ``jax.jit``: every
shape comes from the Call's fields, never from array values, and there is no Python-side control
flow on data.
"""

from __future__ import annotations

from collections.abc import Callable

from rlx.ir.program import Call

JaxKernel = Callable[..., object]
JAX_KERNELS: dict[type[Call], JaxKernel] = {}


def kernel(*call_types: type[Call]) -> Callable[[JaxKernel], JaxKernel]:
    def register(fn: JaxKernel) -> JaxKernel:
        for t in call_types:
            JAX_KERNELS[t] = fn
        return fn

    return register
