"""Matrix products: mm, bmm, matmul, addmm, baddbmm, linear."""

from __future__ import annotations

from rlx.ir.calls import Binary, Linear, MatMul, Permute, Reshape
from rlx.ir.program import Operand
from rlx.ir.torch_ir import Node
from rlx.lower.registry import Builder, lowers


@lowers("aten.mm", "aten.bmm", "aten.matmul", "aten.mv", "aten.dot", "aten.vdot")
def matmul(node: Node, b: Builder) -> Operand:
    out = node.meta
    x = b.cast(b.input(node, 0), out.dtype)
    y = b.cast(b.input(node, 1), out.dtype)
    return b.emit_like(MatMul(x, y), out)


@lowers("aten.addmm", "aten.baddbmm", "aten.addmv", "aten.addbmm")
def addmm(node: Node, b: Builder) -> Operand:
    """``beta·input + alpha·(x @ y)``; addbmm sums the batch of products."""
    out = node.meta
    bias = b.cast(b.input(node, 0), out.dtype)
    x, y = b.input(node, 1), b.input(node, 2)
    beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
    if node.base == "addbmm":  # Σ_b x[b] @ y[b] is one product: [n, B·k] @ [B·k, p]
        (nb, n, k), p = b.shape(x), b.shape(y)[2]
        xt = b.emit(Permute(x, (1, 0, 2)), (n, nb, k), b.dtype(x))
        x = b.emit(Reshape(xt, (n, nb * k)), (n, nb * k), b.dtype(x))
        y = b.emit(Reshape(y, (nb * k, p)), (nb * k, p), b.dtype(y))
    prod = b.emit(MatMul(x, y), _matmul_shape(b.shape(x), b.shape(y)), out.dtype)
    if alpha != 1:
        prod = b.emit(Binary("mul", prod, b.lit(alpha, out.dtype)), b.shape(prod), out.dtype)
    if beta == 0:  # PyTorch ignores `input` entirely (even NaN in it) when beta is 0
        return prod
    if beta != 1:
        bias = b.emit(Binary("mul", bias, b.lit(beta, out.dtype)), b.shape(bias), out.dtype)
    return b.emit_like(Binary("add", prod, bias), out)


def _matmul_shape(xs: tuple[int, ...], ys: tuple[int, ...]) -> tuple[int, ...]:
    if len(xs) == 1 and len(ys) == 1:
        return ()
    if len(ys) == 1:
        return xs[:-1]
    if len(xs) == 1:
        return ys[:-2] + ys[-1:]
    batch = xs[:-2] if len(xs) >= len(ys) else ys[:-2]
    return batch + (xs[-2], ys[-1])


@lowers("aten.linear")
def linear(node: Node, b: Builder) -> Operand:
    x, w = b.input(node, 0), b.input(node, 1)
    return b.emit_like(Linear(x, w, b.optional_input(node, 2, "bias")), node.meta)
