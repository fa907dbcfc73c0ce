"""Shape arithmetic shared by the lowerings (axes, slices, split sizes).

Every handler goes through these helpers rather than re-deriving shapes, so when shapes become
symbolic only this module has to learn the new arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlx.errors import LoweringError
from rlx.ir import rules
from rlx.ir.symbolic import Dim


def norm_axis(axis: int, rank: int) -> int:
    """A possibly negative axis as a non-negative one (rank 0 accepts 0 and −1, as torch does): the
    Call rules' own normalisation (``rlx.ir.rules``), refusing with a ``LoweringError``."""
    return rules.norm_axis(axis, rank, LoweringError)


def norm_axes(axes: int | Sequence[int] | None, rank: int) -> tuple[int, ...]:
    """Axes for a reduction: None or [] means every axis."""
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted({norm_axis(a, rank) for a in axes})) if rank else ()


def slice_bounds(size: int, start: int | None, end: int | None, step: int) -> tuple[int, int, int]:
    """``aten.slice`` bounds clamped to ``[0, size]`` like PyTorch (an empty slice has stop = start)."""
    if step < 1:
        raise LoweringError(f"slice step must be positive, found {step}")
    start = 0 if start is None else start
    end = size if end is None else end
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, 0), size)
    return start, max(start, end), step


def split_sizes(size: int, split_size: int) -> list[int]:
    """``torch.split`` with an int: equal pieces, the last one smaller."""
    if split_size <= 0:
        return [size] if size == 0 else []
    sizes = [split_size] * (size // split_size)
    if size % split_size:
        sizes.append(size % split_size)
    return sizes or [0]


def chunk_sizes(size: int, chunks: int) -> list[int]:
    step = -(-size // chunks) if size else 0
    return split_sizes(size, step) if step else [0]


def tensor_split_bounds(size: int, how: int | Sequence[int]) -> list[tuple[int, int]]:
    """``torch.tensor_split`` pieces as (start, stop): ``how`` sections (the first ``size % how``
    one longer), or cut indices read as Python slices ``x[i_{k-1}:i_k]`` (clamped, maybe empty)."""
    if isinstance(how, int):
        if how < 1:
            raise LoweringError(f"tensor_split needs at least one section, found {how}")
        base, extra = divmod(size, how)
        sizes = [base + 1] * extra + [base] * (how - extra)
        starts = [sum(sizes[:k]) for k in range(how)]
        return [(s, s + n) for s, n in zip(starts, sizes)]
    cuts = [None, *how, None]
    return [slice_bounds(size, lo, hi, 1)[:2] for lo, hi in zip(cuts, cuts[1:])]


def expand_shape(x_shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """``expand`` target with its -1 entries filled from the input."""
    lead = len(target) - len(x_shape)
    return tuple(x_shape[i - lead] if d == -1 else d for i, d in enumerate(target))


def broadcast(*shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    """The shape ``shapes`` broadcast to, as PyTorch broadcasts (trailing axes aligned, 1 stretches):
    the Call rules' broadcasting (``rlx.ir.rules``), so a lowering and the rule checking it agree."""
    return rules.broadcast(*shapes, error=LoweringError)


def ints(v: int | Sequence[int], n: int) -> tuple[int, ...]:
    """An int-or-list argument (kernel_size, stride, …) as ``n`` ints."""
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    return v * n if len(v) == 1 else v
