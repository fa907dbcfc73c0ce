"""Special-function lowerings (``torch.special``, lgamma, digamma, erfc …): each becomes one ``Special``.

The math happens in the result's float dtype (integer and bool inputs are promoted to it, as
PyTorch's float ops do); PyTorch's edge cases live in the kernels (``rlx.kernels.special``).
"""

from __future__ import annotations

import math

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.aten.elementwise import operand_as
from rlx.frontends.aten.registry import Builder, lowers
from rlx.ir.calls import Binary, Special
from rlx.ir.program import Operand

# aten base name → Special fn, one tensor argument.
_UNARY = {
    "lgamma": "lgamma", "digamma": "digamma", "erfc": "erfc", "erfinv": "erfinv", "i0": "i0",
    "special_i0e": "i0e", "special_i1": "i1", "special_i1e": "i1e", "special_erfcx": "erfcx",
    "special_ndtri": "ndtri", "special_log_ndtr": "log_ndtr", "special_bessel_j0": "bessel_j0",
    "special_bessel_j1": "bessel_j1", "special_bessel_y0": "bessel_y0", "special_bessel_y1": "bessel_y1",
    "special_modified_bessel_i0": "i0", "special_modified_bessel_i1": "i1",
    "special_modified_bessel_k0": "modified_bessel_k0", "special_modified_bessel_k1": "modified_bessel_k1",
    "special_scaled_modified_bessel_k0": "scaled_modified_bessel_k0",
    "special_scaled_modified_bessel_k1": "scaled_modified_bessel_k1",
    "special_spherical_bessel_j0": "spherical_bessel_j0", "special_airy_ai": "airy_ai",
    # torch.special's names for the same functions, as the un-decomposed graph keeps them
    "special_gammaln": "lgamma", "special_digamma": "digamma", "special_psi": "digamma",
    "special_erfc": "erfc", "special_erfinv": "erfinv", "special_i0": "i0",
}  # fmt: skip

# aten base name → Special fn, two arguments (tensors or numbers): (x, q), (a, x), (x, n).
_BINARY = {
    "special_zeta": "zeta", "igamma": "igamma", "igammac": "igammac",
    **{f"special_{p}": p for p in (
        "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
        "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
        "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he",
        "laguerre_polynomial_l", "legendre_polynomial_p",
    )},
}  # fmt: skip


def special(b: Builder, node: Node, fn: str, *args: object) -> Operand:
    """``fn`` of ``args`` (tensors or numbers), computed in the node's float dtype."""
    out = node.meta
    x, *rest = (operand_as(b, a, out.dtype) for a in args)
    return b.emit(Special(fn, x, rest[0] if rest else None), out.shape, out.dtype)


def _unary(fn: str):  # noqa: ANN202 - a tiny closure factory
    def handler(node: Node, b: Builder) -> Operand:
        return special(b, node, fn, node.arg(0))

    return handler


def _binary(fn: str):  # noqa: ANN202
    def handler(node: Node, b: Builder) -> Operand:
        return special(b, node, fn, node.arg(0), node.arg(1))

    return handler


for _base, _fn in _UNARY.items():
    lowers(f"aten.{_base}")(_unary(_fn))
for _base, _fn in _BINARY.items():
    lowers(f"aten.{_base}")(_binary(_fn))


@lowers("aten.polygamma", "aten.special_polygamma")
def polygamma(node: Node, b: Builder) -> Operand:
    """``polygamma(n, x)``: digamma for n = 0, PyTorch's trigamma for n = 1, (−1)ⁿ⁺¹ n! ζ(n + 1, x) above."""
    n, x = node.arg(0), node.arg(1)
    if not isinstance(n, int) or n < 0:
        raise LoweringError(f"node {node.id}: polygamma needs a non-negative integer order n, got {n!r}")
    if n <= 1:
        return special(b, node, "digamma" if n == 0 else "trigamma", x)
    return special(b, node, "polygamma", x, n)


@lowers("aten.mvlgamma", "aten.special_multigammaln")
def mvlgamma(node: Node, b: Builder) -> Operand:
    """The multivariate log-gamma of dimension p, as PyTorch computes it:
    Σᵢ lgamma(x − i/2) (i = 0 … p − 1) + p(p − 1)/4 · log π."""
    p = node.arg(1, "p")
    if not isinstance(p, int) or p < 1:
        raise LoweringError(f"node {node.id}: mvlgamma needs an integer p >= 1, got {p!r}")
    out = node.meta
    x = operand_as(b, node.arg(0), out.dtype)
    total: Operand | None = None
    for i in range(p):  # PyTorch's order: offsets −(p − 1)/2 … 0, each added to x
        offset = -(p - 1) / 2 + i / 2
        shifted = b.emit(Binary("add", x, b.lit(offset, out.dtype)), out.shape, out.dtype) if offset else x
        term = b.emit(Special("lgamma", shifted, None), out.shape, out.dtype)
        total = term if total is None else b.emit(Binary("add", total, term), out.shape, out.dtype)
    assert total is not None
    constant = p * (p - 1) * math.log(math.pi) / 4
    return b.emit(Binary("add", total, b.lit(constant, out.dtype)), out.shape, out.dtype)
