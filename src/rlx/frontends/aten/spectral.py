"""Spectral lowerings: ``torch.fft`` — the FFT primitives and the functions the ``aten`` level keeps.

At ``high``/``core``, ``torch.fft.rfft``/``fft``/``irfft``/``fftn``… are already decomposed into
``_fft_r2c``, ``_fft_c2r`` and ``_fft_c2c`` (the signal padded or cropped to ``n``/``s`` by
``constant_pad_nd``/``slice``, integer inputs cast); each becomes one ``Fft`` Call. At ``aten`` the
functions stay whole (``fft_rfft``, ``fft_ifftn``, ``fft_hfft``, ``fft_fftshift``…) and are lowered
here the way ``SpectralOps.cpp`` writes them: promote, resize, then the same Call.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlx.errors import LoweringError
from rlx.formats.torch_ir import Node
from rlx.frontends.aten.movement import take_slice
from rlx.frontends.aten.registry import Builder, lowers
from rlx.frontends.aten.shapes import norm_axis
from rlx.frontends.common import static_dim
from rlx.ir import dtypes
from rlx.ir.calls import Conj, Fft, Pad, Roll
from rlx.ir.program import Operand, Ref

# PyTorch's fft_norm_mode: the integer ``normalization`` argument of the _fft_* ops.
_NORM = {0: "none", 1: "ortho", 2: "by_n"}


def _axes(node: Node, b: Builder, x: Ref, dims: int | Sequence[int]) -> tuple[int, ...]:
    axes = tuple(norm_axis(d, b.rank(x)) for d in ((dims,) if isinstance(dims, int) else dims))
    if not axes or len(set(axes)) != len(axes):
        raise LoweringError(f"node {node.id} ({node.op}): FFT dims {dims!r} must be distinct and non-empty")
    for a in axes:
        if not isinstance(b.shape(x)[a], int):
            raise LoweringError(f"node {node.id} ({node.op}): an FFT along symbolic axis {a} is not supported")
    return axes


def _fft(
    b: Builder,
    node: Node,
    x: Ref,
    kind: str,
    axes: tuple[int, ...],
    norm: str,
    forward: bool,
    onesided: bool = True,
    last_size: int | None = None,
) -> Ref:
    if kind == "r2c" and not dtypes.is_float(b.dtype(x)):
        raise LoweringError(f"node {node.id}: a real-to-complex FFT needs a floating-point input, found {b.dtype(x)}")
    if kind != "r2c" and not dtypes.is_complex(b.dtype(x)):
        raise LoweringError(f"node {node.id}: this FFT needs a complex input, found {b.dtype(x)}")
    return b.emit_like(Fft(x, kind, axes, norm, forward, onesided, last_size), node.meta)


# ── the primitives (high / core) ─────────────────────────────────────────────
def _primitive_norm(node: Node) -> str:
    norm = node.arg(2, "normalization")
    if norm not in _NORM:
        raise LoweringError(f"node {node.id} ({node.op}): unknown normalization {norm!r}")
    return _NORM[norm]


@lowers("aten._fft_r2c")
def fft_r2c(node: Node, b: Builder) -> Operand:
    # (self, dim, normalization, onesided): the forward transform of a real signal.
    x = b.input(node, 0)
    axes = _axes(node, b, x, node.arg(1, "dim"))
    return _fft(b, node, x, "r2c", axes, _primitive_norm(node), True, bool(node.arg(3, "onesided", True)))


@lowers("aten._fft_c2r")
def fft_c2r(node: Node, b: Builder) -> Operand:
    # (self, dim, normalization, last_dim_size): the inverse of a onesided spectrum.
    x = b.input(node, 0)
    axes = _axes(node, b, x, node.arg(1, "dim"))
    last = b.scalar(node, 3, "last_dim_size")
    if not isinstance(last, int) or last < 1:
        raise LoweringError(f"node {node.id}: _fft_c2r last_dim_size must be a static positive int, found {last!r}")
    return _fft(b, node, x, "c2r", axes, _primitive_norm(node), False, True, last)


@lowers("aten._fft_c2c")
def fft_c2c(node: Node, b: Builder) -> Operand:
    # (self, dim, normalization, forward)
    x = b.input(node, 0)
    axes = _axes(node, b, x, node.arg(1, "dim"))
    return _fft(b, node, x, "c2c", axes, _primitive_norm(node), bool(node.arg(3, "forward")))


# ── the torch.fft functions (aten level) ─────────────────────────────────────
def _norm_from_string(node: Node, norm: object, forward: bool) -> str:
    """``norm_from_string``: "backward" (the default) scales the inverse by 1/n, "forward" the
    forward transform, "ortho" both by 1/√n."""
    if norm in (None, "backward"):
        return "none" if forward else "by_n"
    if norm == "forward":
        return "by_n" if forward else "none"
    if norm == "ortho":
        return "ortho"
    raise LoweringError(f"node {node.id}: unknown FFT norm {norm!r} (backward, forward or ortho)")


def _promote(b: Builder, x: Ref, complex_: bool) -> Ref:
    """``promote_tensor_fft``: integers and bools become float32 (the default dtype); a complex
    input is required by the c2c / c2r paths, so a real one is made complex there."""
    if not dtypes.is_float(b.dtype(x)) and not dtypes.is_complex(b.dtype(x)):
        x = b.cast(x, "f32")
    if b.dtype(x) in ("f16", "bf16"):
        raise LoweringError("FFTs of float16/bfloat16 tensors are not supported on CPU (PyTorch refuses them too)")
    return b.cast(x, dtypes.complex_of(b.dtype(x))) if complex_ and not dtypes.is_complex(b.dtype(x)) else x


def _resize(b: Builder, x: Ref, axes: tuple[int, ...], sizes: tuple[int, ...]) -> Ref:
    """``resize_fft_input``: crop or zero-pad (at the end) each of ``axes`` to ``sizes``."""
    pads = [(0, 0)] * b.rank(x)
    for a, n in zip(axes, sizes):
        have = static_dim(b.shape(x)[a], "an FFT axis")
        if n < have:
            x = take_slice(b, x, a, 0, n)
        elif n > have:
            pads[a] = (0, n - have)
    if any(hi for _, hi in pads):
        # Every extent goes through int arithmetic here, so a symbolic one cannot be padded.
        shape = tuple(static_dim(d, "the extent of a padded FFT input") + hi for d, (_, hi) in zip(b.shape(x), pads))
        x = b.emit(Pad(x, tuple(pads), 0), shape, b.dtype(x))
    return x


def _shape_and_axes(
    node: Node, b: Builder, x: Ref, default_dims: tuple[int, ...] | None
) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """``canonicalize_fft_shape_and_dim_args`` for the 1-d, 2-d and n-d forms: the axes and the
    signal sizes requested along them (``None`` where ``n``/``s`` was not given)."""
    if node.base in _ONE_D:  # (self, n=None, dim=-1, norm=None)
        n = b.scalar(node, 1, "n")
        axes = _axes(node, b, x, node.arg(2, "dim", -1))
        return axes, None if n is None else (n,)
    s = b.scalar(node, 1, "s")
    dims = node.arg(2, "dim", default_dims)
    if dims is None:
        axes = tuple(range(b.rank(x) - len(s), b.rank(x))) if s is not None else tuple(range(b.rank(x)))
    else:
        axes = _axes(node, b, x, dims)
    if s is None:
        return axes, None
    if len(s) != len(axes):
        raise LoweringError(f"node {node.id}: FFT s={list(s)} and dim={list(axes)} differ in length")
    return axes, tuple(static_dim(b.shape(x)[a], "an FFT axis", node) if n == -1 else n for a, n in zip(axes, s))


_ONE_D = {"fft_fft", "fft_ifft", "fft_rfft", "fft_irfft", "fft_hfft", "fft_ihfft"}
_TWO_D = {"fft_fft2", "fft_ifft2", "fft_rfft2", "fft_irfft2", "fft_hfft2", "fft_ihfft2"}


@lowers(
    "aten.fft_fft",
    "aten.fft_ifft",
    "aten.fft_fft2",
    "aten.fft_ifft2",
    "aten.fft_fftn",
    "aten.fft_ifftn",
    "aten.fft_rfft",
    "aten.fft_ihfft",
    "aten.fft_rfft2",
    "aten.fft_ihfft2",
    "aten.fft_rfftn",
    "aten.fft_ihfftn",
    "aten.fft_irfft",
    "aten.fft_hfft",
    "aten.fft_irfft2",
    "aten.fft_hfft2",
    "aten.fft_irfftn",
    "aten.fft_hfftn",
)
def fft_function(node: Node, b: Builder) -> Operand:
    kind_name = node.base.removeprefix("fft_").rstrip("n2")  # fft, ifft, rfft, irfft, hfft, ihfft
    forward = kind_name in ("fft", "rfft", "hfft")
    x = b.input(node, 0)
    axes, sizes = _shape_and_axes(node, b, x, (-2, -1) if node.base in _TWO_D else None)
    norm = _norm_from_string(node, node.arg(3, "norm"), forward)
    if kind_name in ("fft", "ifft"):  # complex in; a real input goes through c2c as a complex one
        x = _promote(b, x, complex_=True)
        if sizes is not None:
            x = _resize(b, x, axes, sizes)
        return _fft(b, node, x, "c2c", axes, norm, forward)
    if kind_name in ("rfft", "ihfft"):  # real in, onesided complex out
        x = _promote(b, x, complex_=False)
        if dtypes.is_complex(b.dtype(x)):
            raise LoweringError(f"node {node.id}: {node.base} needs a real input, found a complex one")
        if sizes is not None:
            x = _resize(b, x, axes, sizes)
        return _fft(b, node, x, "r2c", axes, norm, forward)
    # irfft / hfft: a onesided spectrum in, real out; the last axis's real length decides the
    # spectrum length it reads (n // 2 + 1).
    x = _promote(b, x, complex_=True)
    last = sizes[-1] if sizes is not None else 2 * (static_dim(b.shape(x)[axes[-1]], "an FFT axis", node) - 1)
    if last < 1:
        raise LoweringError(f"node {node.id}: {node.base} output length {last} is invalid (give n/s)")
    lead = sizes[:-1] if sizes is not None else tuple(static_dim(b.shape(x)[a], "an FFT axis", node) for a in axes[:-1])
    x = _resize(b, x, axes, (*lead, last // 2 + 1))
    return _fft(b, node, x, "c2r", axes, norm, forward, True, last)


@lowers("aten.fft_fftshift", "aten.fft_ifftshift")
def fftshift(node: Node, b: Builder) -> Operand:
    """Roll every axis in ``dim`` (all by default) by half its size: ``n // 2`` to shift the zero
    frequency to the middle, ``(n + 1) // 2`` to undo it."""
    x = b.input(node, 0)
    dims = node.arg(1, "dim")
    axes = tuple(range(b.rank(x))) if dims is None else _axes(node, b, x, dims)
    sizes = [static_dim(b.shape(x)[a], "an FFT-shifted axis", node) for a in axes]
    shifts = [n // 2 if node.base == "fft_fftshift" else (n + 1) // 2 for n in sizes]
    keep = [(s, a) for s, a, n in zip(shifts, axes, sizes) if n and s % n]
    if not keep:
        return x
    return b.emit_like(Roll(x, tuple(s for s, _ in keep), tuple(a for _, a in keep)), node.meta)


@lowers("aten._conj", "aten.conj", "aten.conj_physical", "aten._conj_physical", "aten.resolve_conj", "aten._conj_copy")
def conj(node: Node, b: Builder) -> Operand:
    """Complex conjugate. PyTorch's ``_conj``/``conj`` are lazy views (a conjugate bit) that
    ``resolve_conj`` materialises; values carry no such bit here, so the view is the conjugate
    itself and ``resolve_conj`` has nothing left to do. Real tensors pass through."""
    x = b.input(node, 0)
    if node.base == "resolve_conj" or not dtypes.is_complex(b.dtype(x)):
        return x
    return b.emit_like(Conj(x), node.meta)
