"""Runs a Program on numpy arrays through a plan compiled once, at load.

The plan is a flat list of steps ``(fn, get, out, free)``: ``fn`` is a callable bound to its
instruction at load (a fast path from ``fused.BINDERS`` — often a bare ufunc or a method —
or the generic kernel with its Call already applied), ``get`` an ``operator.itemgetter`` over the
value slots, ``out`` the result slot, ``free`` the slots whose last reader this step is. Weights,
literals and ``None`` live in slots filled once, so running is a list copy and one tight loop with
no dict lookups and no type dispatch. The rewrites that make the plan fast (constant folding,
fusion, weight packing, buffer reuse) are Program → Program passes run before it
(``rlx.runtime.numpy_engine.passes.optimize``); the executor runs whatever Program it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

import numpy as np

from rlx.errors import BundleError, RlxError
from rlx.interpret import bind_sizes
from rlx.ir import dtypes
from rlx.ir.program import Instr, Lit, Program, Ref, mentions_sym, resolve_operand, subst_call
from rlx.ir.symbolic import Sym, UnboundSymbolError, is_static, partial_dim
from rlx.runtime.numpy_engine.fused import BINDERS, Site, TensorType, kernel_for
from rlx.runtime.numpy_engine.parallel import check_threads, split_step

_NONE_SLOT = 0  # always holds None: an absent optional operand reads it
_SIZES_SLOT = 1  # one run's data-dependent sizes (u0 …), bound as the instructions producing them run


class _Slots:
    """The value slots of a plan: inputs, weights, literals (one slot per distinct literal) and
    results, each with its static type; slot 0 always holds None (an absent optional operand)."""

    def __init__(self) -> None:
        self.base: list[Any] = [None, None]
        self.index: dict[str, int] = {}
        self.types: dict[str, TensorType | None] = {}
        self._consts: dict[tuple[Any, str, type], int] = {}

    def define(self, name: str, shape: Any, dtype: str, value: Any = None) -> int:
        if name in self.index:
            raise BundleError(f"program.json: value {name!r} is defined twice")
        self.base.append(value)
        self.index[name], self.types[name] = len(self.base) - 1, _arg(shape, dtype)
        return self.index[name]

    def operand(self, v: Any) -> tuple[int, TensorType | None]:
        if v is None:
            return _NONE_SLOT, None
        if isinstance(v, Lit) and isinstance(v.value, Sym):
            return _NONE_SLOT, None  # a data-dependent size: the late-bound step computes it per run
        if isinstance(v, Lit):
            key = (v.value, v.dtype, type(v.value))
            if key not in self._consts:
                self.base.append(np.asarray(v.value, dtype=dtypes.to_numpy(v.dtype)))
                self._consts[key] = len(self.base) - 1
            return self._consts[key], TensorType((), dtypes.to_numpy(v.dtype))
        return self.index[v.name], self.types[v.name]

    def operands(self, ins: Instr) -> tuple[list[int], list[TensorType | None], list[int], bool]:
        """The slots and types of ``ins``'s operands in the kernels' flat order, the layout that
        regroups them into fields (-1: one operand, n: a tuple of n), and whether every operand
        present has a static type (None in ``types`` is then an absent optional operand)."""
        static = True
        flat: list[int] = []
        types: list[TensorType | None] = []
        layout: list[int] = []
        for f in ins.call.operand_fields():
            v = getattr(ins.call, f)
            items = v if isinstance(v, tuple) else (v,)
            for item in items:
                if isinstance(item, Ref) and item.name not in self.index:
                    raise BundleError(f"program.json: instruction {ins.result!r} reads undefined value {item.name!r}")
                slot, t = self.operand(item)
                static &= item is None or t is not None
                flat.append(slot)
                types.append(t)
            layout.append(len(items) if isinstance(v, tuple) else -1)
        return flat, types, layout, static


Step = tuple[Callable[..., Any], Callable[[list[Any]], Any], int, tuple[int, ...], bool]


class Executor:
    """A Program bound to its weights, ready to run many times (from any number of threads)."""

    def __init__(self, program: Program, weights: Mapping[str, np.ndarray], threads: int = 1) -> None:
        self.program = program
        self.threads = check_threads(threads)  # large steps split over this many threads (``parallel``)
        slots = _Slots()
        for v in program.inputs:
            slots.define(v.name, v.shape, v.dtype)
        for w in program.weights:
            slots.define(w.name, w.shape, w.dtype, weights[w.name])
        self._steps: list[Step] = []
        self._labels: list[str] = []
        self._sized = False  # whether some step reads or binds a data-dependent size
        reads = [self._plan(ins, slots) for ins in program.instrs]
        self._base = slots.base
        self._input_slots = [slots.index[v.name] for v in program.inputs]
        self._outputs: list[int] = [slots.operand(o)[0] for o in program.outputs]
        # An output that is a weight, a literal or an input itself is copied on the way out: the
        # caller owns what it gets back, and must not be able to write into what every run shares.
        produced = {step[2] for step in self._steps}
        self._copy_out = [s not in produced for s in self._outputs]
        # Free each intermediate after its last reader (weights, literals and outputs stay).
        frees = _last_reads(reads, pinned=(set(range(len(slots.base))) - produced) | set(self._outputs))
        self._steps = [
            (fn, get, out, tuple(frees.get(k, ())), single) for k, (fn, get, out, _, single) in enumerate(self._steps)
        ]

    def _plan(self, ins: Instr, slots: _Slots) -> list[int]:
        """Append the step of ``ins``; the slots it reads."""
        if ins.result in slots.index:
            raise BundleError(f"program.json: value {ins.result!r} is defined twice")
        kern = kernel_for(ins.call.op)
        if kern is None:
            raise BundleError(f"program.json: the numpy engine has no kernel for {ins.call.op}")
        flat, types, layout, static = slots.operands(ins)
        label = f"{ins.result} = {ins.call.op} [{ins.note or ins.node}]"
        try:
            if mentions_sym(ins.call) or not is_static(ins.shape):
                # A size known only at run time: evaluated (or bound) as the run goes.
                fn = _late_bound(kern, ins, layout, label)
                flat = [_SIZES_SLOT, *flat]
                self._sized = True
            else:
                fn = self._bind(ins, kern, tuple(types) if static else None, layout, label)
        except RlxError:
            raise
        except Exception as e:  # shapes or dtypes that contradict each other: a damaged program
            raise BundleError(f"program.json: cannot plan {label}: {type(e).__name__}: {e}") from e
        out = slots.define(ins.result, ins.shape, ins.dtype)
        getter = itemgetter(*flat) if flat else _no_args
        self._steps.append((fn, getter, out, (), len(flat) == 1))
        self._labels.append(label)
        return flat

    def _bind(
        self,
        ins: Instr,
        kern: Callable[..., Any],
        args: tuple[TensorType | None, ...] | None,
        layout: list[int],
        label: str,
    ) -> Callable[..., Any]:
        """A binder's fast path when every type is static and it has one, else the generic kernel."""
        binder = BINDERS.get(ins.call.op)
        if binder is not None and args is not None and is_static(ins.shape):
            shape = tuple(d for d in ins.shape if isinstance(d, int))
            site = Site(ins.call, shape, dtypes.to_numpy(ins.dtype), args)
            fast = binder(site)
            if fast is not None:
                return (split_step(site, self.threads) if self.threads > 1 else None) or fast
        return _generic(kern, ins.call, layout, dtypes.to_numpy(ins.dtype), tuple(ins.shape), label)

    @property
    def n_steps(self) -> int:
        return len(self._steps)

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run on arrays already checked against the program's inputs (in order)."""
        env = self._base.copy()
        for slot, arr in zip(self._input_slots, inputs):
            env[slot] = arr
        if self._sized:
            env[_SIZES_SLOT] = {}
        step = None
        try:
            with np.errstate(all="ignore"):  # inf/NaN are values here, as in PyTorch, not warnings
                for step in self._steps:
                    fn, get, out, free, single = step
                    env[out] = fn(get(env)) if single else fn(*get(env))
                    for slot in free:
                        env[slot] = None
        except RlxError:
            raise
        except Exception as e:  # a kernel failure is reported with the instruction
            label = self._labels[self._steps.index(step)] if step is not None else "?"
            raise RlxError(f"runtime error in {label}: {type(e).__name__}: {e}") from e
        return [np.array(env[o]) if copy else np.asarray(env[o]) for o, copy in zip(self._outputs, self._copy_out)]

    def profile(self, inputs: list[np.ndarray], repeat: int = 20) -> list[tuple[str, float]]:
        """Seconds per step (median over ``repeat`` runs), labelled — where the time goes."""
        import time

        times: list[list[float]] = [[] for _ in self._steps]
        for _ in range(repeat):
            env = self._base.copy()
            for slot, arr in zip(self._input_slots, inputs):
                env[slot] = arr
            env[_SIZES_SLOT] = {}
            with np.errstate(all="ignore"):
                for k, (fn, get, out, free, single) in enumerate(self._steps):
                    t0 = time.perf_counter()
                    env[out] = fn(get(env)) if single else fn(*get(env))
                    times[k].append(time.perf_counter() - t0)
                    for slot in free:
                        env[slot] = None
        return [(label, float(np.median(t))) for label, t in zip(self._labels, times)]


def _last_reads(reads: list[list[int]], pinned: set[int]) -> dict[int, list[int]]:
    """Step index → the slots whose last reader it is (pinned slots are never freed)."""
    last: dict[int, int] = {}
    for k, flat in enumerate(reads):
        for s in flat:
            last[s] = k
    frees: dict[int, list[int]] = {}
    for s, k in last.items():
        if s not in pinned:
            frees.setdefault(k, []).append(s)
    return frees


def _arg(shape: Any, dtype: str) -> TensorType | None:
    """The static type of a value; None while its shape is symbolic (no binder sees it then)."""
    return TensorType(tuple(shape), dtypes.to_numpy(dtype)) if is_static(shape) else None


def _no_args(env: list[Any]) -> tuple[()]:
    return ()


def _generic(
    kern: Callable[..., Any], call: Any, layout: list[int], dtype: np.dtype, shape: tuple[Any, ...] | None, label: str
) -> Callable[..., Any]:
    """The generic kernel with its Call applied, the operands regrouped into the Call's fields, and
    the result checked against the declared dtype and shape."""
    grouped = any(n >= 0 for n in layout)

    def run(*flat: Any) -> np.ndarray:
        if grouped:
            args, k = [], 0
            for n in layout:
                if n < 0:
                    args.append(flat[k])
                    k += 1
                else:
                    args.append(list(flat[k : k + n]))
                    k += n
            out = kern(call, *args)
        else:
            out = kern(call, *flat)
        if out.dtype != dtype:
            out = out.astype(dtype)
        if shape is not None and out.shape != shape:
            raise RlxError(
                f"runtime error in {label}: produced shape {list(out.shape)}, program declares {list(shape)}"
            )
        return out

    return run


def _late_bound(kern: Callable[..., Any], ins: Instr, layout: list[int], label: str) -> Callable[..., Any]:
    """The generic kernel for an instruction whose sizes depend on data: its symbolic fields are
    evaluated with this run's sizes, and an extent it produces first (``u0``) is bound from its result."""

    # Operands that are literal sizes (Lit(u0)) are read from the call once its sizes are known.
    symbolic = [k for k, v in enumerate(_flat_operands(ins.call)) if isinstance(v, Lit) and isinstance(v.value, Sym)]

    def run(sizes: dict[str, int], *flat: Any) -> np.ndarray:
        try:
            call = subst_call(ins.call, sizes)
            shape = tuple(partial_dim(d, sizes) for d in ins.shape)
        except UnboundSymbolError as e:
            raise RlxError(f"runtime error in {label}: {e}") from None
        if symbolic:
            operands = _flat_operands(call)
            flat = tuple(resolve_operand(operands[k], {}) if k in symbolic else v for k, v in enumerate(flat))
        out = _generic(kern, call, layout, dtypes.to_numpy(ins.dtype), None, label)(*flat)
        bind_sizes(shape, out.shape, sizes, label)
        return out

    return run


def _flat_operands(call: Any) -> list[Any]:
    """A call's operands in the kernels' flat order (tuple fields spread)."""
    out: list[Any] = []
    for f in call.operand_fields():
        v = getattr(call, f)
        out.extend(v if isinstance(v, tuple) else (v,))
    return out


__all__ = ["Executor"]
