"""Large steps split into independent chunks, run on a small persistent thread pool.

numpy releases the GIL inside its ufunc loops, so a step whose result is large (a depthwise conv,
an elementwise chain, a norm, a softmax, a pooling) can run as ``threads`` chunks at once. A chunk
is a slice of the result along one axis that the step computes independently: an axis the step
does not reduce over (never a softmax's axis; a conv's batch axis, or its channels when it is
depthwise). Norms are not split: their row statistics are BLAS matrix-vector products, whose
rounding of a row depends on where it falls in the matrix (measured: ulp differences). Each chunk runs the *same* binder's fast path, bound at load for the chunk's
shape, on slices of the operands (an operand broadcast along the axis is passed whole), and writes
a disjoint slice of one result buffer: the per-element arithmetic is the single-threaded step's,
so results are bit-identical. Matmuls are not split here: OpenBLAS threads them itself.

Only steps from ``MIN_BYTES`` of result up are split: below it the handoff to the pool (tens of
microseconds) costs more than the second core saves. ``threads=1`` binds no splitter at all.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from rlx.errors import UsageError
from rlx.ir import calls as C
from rlx.kernels.numpy.namespace import GELU_SMALL_SIZE
from rlx.kernels.numpy.nn import conv_path
from rlx.runtime.numpy_engine.fused import (
    BINDERS,
    Fn,
    Site,
    TensorType,
    check_steps,
    register_types,
    reuse_buffer,
    step_param,
)
from rlx.runtime.numpy_engine.fused_calls import Fused

# Results smaller than this run on one thread. The pool's round trip is ~25 µs (one no-op task,
# measured); a 1 MiB float32 add takes ~35 µs alone, a GELU of it ~600 µs. On the shared 2-core
# machine this was developed on (load 4–7 from other jobs) no size showed a gain, the second core
# being busy, so this is a conservative floor, not a measured break-even: remeasure on an idle machine.
MIN_BYTES = 1 << 20

# Every chunk has at least this many elements: float32 GELU takes another (per-element) path on
# fewer, whose roundings differ; the only size-dependent choice among the split fast paths that
# changes values (a conv's path is compared explicitly, ``_split_conv``).
MIN_CHUNK = GELU_SMALL_SIZE

# A splitter: for a split of the result along ``axis`` into chunks of ``sizes``, operand i's axis
# to slice (None: passed whole) and the call the chunks run (a depthwise conv split by channels
# has fewer groups); None when the step reduces or mixes along ``axis``, or its chunks would take
# another path than the whole step.
Splitter = Callable[[Site[Any], int, set[int]], tuple[tuple[int | None, ...], Any] | None]
SPLITTERS: dict[str, Splitter] = {}

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def default_threads() -> int:
    """One: splitting is opt-in. On an idle 2-core machine (``benchmarks/numpy_threads.py``,
    ConvNeXt / SegFormer / Whisper encoder at batch 8) every threshold that split any step was
    slower than one thread (ConvNeXt 1.10× the unsplit latency with 4 steps split at 256 KiB,
    1.28× with 15 at 64 KiB; Whisper 1.10× and 1.17×): the handoff, OpenBLAS's own two threads
    and the second core's cold caches cost more than the halved loops save at these sizes."""
    return 1


def check_threads(threads: int | None) -> int:
    """The numpy engine's thread count: ``None`` is ``default_threads()``; otherwise at least 1."""
    if threads is None:
        return default_threads()
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise UsageError(f"threads must be an int of at least 1, got {threads!r}")
    return int(threads)


def _pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads (shared by every model, created once)."""
    with _pools_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="rlx-numpy")
        return pool


def splits(*ops: str) -> Callable[[Splitter], Splitter]:
    def register(fn: Splitter) -> Splitter:
        for op in ops:
            SPLITTERS[op] = fn
        return fn

    return register


def _aligned(site: Site[Any], axis: int) -> tuple[int | None, ...]:
    """Broadcasting operands: each one's axis aligned with the result's ``axis`` (right-aligned),
    or None where the operand is absent, has no such axis, or broadcasts along it (size 1)."""
    n = len(site.shape)
    out: list[int | None] = []
    for t in site.operands:
        k = None if t is None else axis - (n - len(t.shape))
        out.append(k if t is not None and k is not None and k >= 0 and t.shape[k] == site.shape[axis] else None)
    return tuple(out)


@splits("Unary", "Binary")
def _split_elementwise(site: Site[Any], axis: int, sizes: set[int]) -> tuple[tuple[int | None, ...], Any] | None:
    return _aligned(site, axis), site.call


@splits("Fused")
def _split_fused(site: Site[Fused], axis: int, sizes: set[int]) -> tuple[tuple[int | None, ...], Any] | None:
    """Elementwise everywhere but at a softmax step: never along its axis (right-aligned with the result's)."""
    n = len(site.shape)
    types, _ = register_types(check_steps(site.call), site.operands[: len(site.call.inputs)])
    for k, st in enumerate(check_steps(site.call)):
        if st.fn in ("softmax", "log_softmax"):
            rank = len(types[len(site.call.inputs) + k].shape)
            if not rank or axis == int(step_param(st)) % rank + n - rank:
                return None
    return _aligned(site, axis), site.call


@splits("Softmax")
def _split_softmax(site: Site[C.Softmax], axis: int, sizes: set[int]) -> tuple[tuple[int | None, ...], Any] | None:
    if axis == site.call.axis % len(site.shape):
        return None
    return (axis,), site.call


@splits("MaxPool", "AvgPool")
def _split_pool(
    site: Site[C.MaxPool | C.AvgPool], axis: int, sizes: set[int]
) -> tuple[tuple[int | None, ...], Any] | None:
    if axis >= len(site.shape) - len(site.call.kernel):
        return None
    return (axis,), site.call


@splits("Conv")
def _split_conv(site: Site[C.Conv], axis: int, sizes: set[int]) -> tuple[tuple[int | None, ...], Any] | None:
    """By batch (weights whole), or a depthwise conv (one input channel per group) by channels."""
    c, x, w = site.call, site.operand(0), site.operand(1)
    if c.transposed:
        return None
    if axis == 0:
        planned: tuple[tuple[int | None, ...], Any] = ((0, None, None), c)
    elif axis == 1 and c.groups == x.shape[1] == site.shape[1]:
        planned = ((1, 0, 0 if site.operands[2] is not None else None), c)
    else:
        return None
    path = conv_path(c, x.shape, w.shape)
    for size in sizes:
        chunk = _chunk_site(site, planned[1], axis, planned[0], size)
        if path == "fft" or conv_path(chunk.call, chunk.operand(0).shape, chunk.operand(1).shape) != path:
            return None  # the FFT checks its own chunk for inf/NaN; another path rounds otherwise
    return planned


def split_step(site: Site[Any], threads: int) -> Fn | None:
    """A step running ``site`` as ``threads`` chunks on the pool, or None (too small, no axis that
    splits, or no fast path for the chunks)."""
    splitter = SPLITTERS.get(site.call.op)
    binder = BINDERS.get(site.call.op)
    if threads < 2 or splitter is None or binder is None or not site.shape:
        return None
    if site.dtype.itemsize * math.prod(site.shape) < MIN_BYTES:
        return None
    for axis, n in enumerate(site.shape):
        bounds = [n * i // threads for i in range(threads + 1)]
        sizes = {b - a for a, b in zip(bounds, bounds[1:])}
        if n < threads or min(sizes) * math.prod(site.shape) // n < MIN_CHUNK:
            continue
        planned = splitter(site, axis, sizes)
        if planned is None:
            continue
        return _bind_chunks(site, binder, axis, bounds, *planned)
    return None


def _chunk_site(site: Site[Any], call: Any, axis: int, op_axes: Sequence[int | None], size: int) -> Site[Any]:
    shape = site.shape[:axis] + (size,) + site.shape[axis + 1 :]
    operands = tuple(
        t if k is None or t is None else TensorType(t.shape[:k] + (size,) + t.shape[k + 1 :], t.dtype)
        for t, k in zip(site.operands, op_axes)
    )
    if isinstance(call, C.Conv) and axis == 1:
        call = dataclasses.replace(call, groups=size)
    return Site(call, shape, site.dtype, operands)


def _bind_chunks(
    site: Site[Any], binder: Any, axis: int, bounds: list[int], op_axes: tuple[int | None, ...], call: Any
) -> Fn | None:
    fns: dict[int, Fn] = {}
    for size in {b - a for a, b in zip(bounds, bounds[1:])}:
        fn = binder(_chunk_site(site, call, axis, op_axes, size))
        if fn is None:
            return None
        fns[size] = fn
    lead = (slice(None),) * axis
    chunks = [(fns[b - a], slice(a, b)) for a, b in zip(bounds, bounds[1:])]
    slicers = [None if k is None else (slice(None),) * k for k in op_axes]
    shape, dtype = site.shape, site.dtype
    pool = _pool(len(bounds) - 2)
    reuse_last = site.call.op == "Fused"  # the chain's last operand is a buffer it may write into

    into = {size: _takes_out(fn) for size, fn in fns.items()}

    def one(fn: Fn, part: slice, args: tuple[Any, ...], out: np.ndarray) -> None:
        cut = [a if s is None or a is None else a[(*s, part)] for a, s in zip(args, slicers)]
        dest = out[(*lead, part)]
        if reuse_last:
            cut[-1] = dest
        r = fn(*cut, out=dest) if into[part.stop - part.start] else fn(*cut)
        if r.ctypes.data != dest.ctypes.data or r.shape != dest.shape or r.strides != dest.strides:
            np.copyto(dest, r)

    def run(*args: Any) -> np.ndarray:
        out = reuse_buffer(args[-1], shape, dtype) if reuse_last else None
        if out is None:
            out = np.empty(shape, dtype)
        with np.errstate(all="ignore"):
            futures = [pool.submit(_quiet, one, fn, part, args, out) for fn, part in chunks[1:]]
            fn, part = chunks[0]
            one(fn, part, args, out)
        for f in futures:
            f.result()
        return out

    return run


def _takes_out(fn: Fn) -> bool:
    """Whether ``fn`` writes its result into an ``out=`` array (a ufunc, or a fast path declaring one)."""
    if isinstance(fn, np.ufunc):
        return fn.nout == 1
    try:
        return "out" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _quiet(one: Callable[..., None], *args: Any) -> None:
    with np.errstate(all="ignore"):  # numpy's error state is per thread: inf/NaN are values here
        one(*args)


__all__ = ["MIN_BYTES", "SPLITTERS", "check_threads", "default_threads", "split_step"]
