"""Run PyTorch's own OpInfo samples through export → lower → numpy runtime, compared with eager.

Every OpInfo counts, variants included (named ``name.variant``, e.g. ``index_reduce.mean``), and
every sample that ``torch.export`` can export is converted the way a user converts a model
(``capture`` with its defaults: the ``high`` level, auto-decompose on). A sample "lands in Core
ATen" (``Outcome.core``) when the converted graph holds only ops tagged ``torch.Tag.core`` (plus
getitem and shape arithmetic) or the high-level ops rlx keeps whole by design, which decompose
into Core ATen; the summary reports the pass rate over all samples and over those separately.
Outcomes: pass, fail (with the reason), known (a failure declared with its reason in
``known_failures``), n/a (torch cannot export the sample, or its inputs are of a dtype or size
this suite does not feed).

Comparison: shape and dtype equal; integers and bools exact; floats with the per-dtype tolerances
of ``helpers.TOLERANCES`` (or an override from ``known_failures.TOLERANCES``) and the same NaN/inf
pattern; complex outputs part by part. Half precision also allows ``HALF_ULPS`` ulps at the scale
of the output (``atol = HALF_ULPS · eps · max|torch|``, as ``rlx.app.verify`` scales its bound by the
output's magnitude): PyTorch's CPU half kernels round intermediate results (col2im in transposed
convolutions, running sums in pooling) and its decompositions round after every op, so an element
that comes out of cancellation carries an error of an ulp of its operands, not of itself; rlx
accumulates in float32 and rounds once, which lands within that bound (and closer to the exact
value). One exception, ``TIE_ORDER_FREE``: where PyTorch documents
the order of equal values as unspecified (unstable ``sort``/``argsort``, ``topk``, ``kthvalue``,
``mode``), the index output is checked for validity rather than equality — in range, distinct
within a lane where it must be, and pointing at values equal (NaN included) to those PyTorch's
indices point at. ``sort``/``argsort`` with ``stable=True`` are compared exactly.

Random ops (``known_failures.RANDOM``): an output that depends on a random draw of the converted
program (``rlx.ir.rng.random_values``) is compared by shape and dtype, and its values must lie in
the distribution's support (``SUPPORT``); the draw cannot equal PyTorch's, whose generator is
another. Ops whose values PyTorch leaves undefined (``known_failures.VALUES_UNDEFINED``: ``empty``
and its kin, uninitialised memory) are compared by shape and dtype only, as PyTorch's own OpInfo
tests do.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils import _pytree as pytree

from rlx.app.convert import build_program
from rlx.errors import RlxError
from rlx.formats.bundle import bind_weights
from rlx.frontends.torch import capture
from rlx.frontends.torch.tensors import tensor_to_numpy
from rlx.ir import dtypes
from rlx.ir.program import Program, Ref
from rlx.ir.rng import random_values
from rlx.runtime.model import Model, unflatten

from .known_failures import GRAPH_DIFFERS_FROM_EAGER, RANDOM, TOLERANCES, VALUES_UNDEFINED, declared
from helpers import TOLERANCES as TOLERANCES_BY_DTYPE
from helpers import align_column_signs, assert_arrays_match, is_refusal

HALF_ULPS = 2
DTYPES = {"f32": torch.float32, "i64": torch.int64, "bool": torch.bool, "f16": torch.float16, "bf16": torch.bfloat16}
# Dtypes a sample's tensors may have: the swept ones, and int32 (LU pivots, offsets …) beside them.
INPUT_DTYPES = (*DTYPES.values(), torch.int32)
# The sweep: every dtype above, at most MAX_SAMPLES samples per op and dtype (the slow test and
# tools/conformance.py both use these).
SWEEP_DTYPES = tuple(DTYPES)
MAX_SAMPLES = 3


@dataclass
class Outcome:
    op: str
    dtype: str
    sample: int
    status: str  # pass | fail | known | n/a
    reason: str = ""
    core: bool = True  # the converted graph is Core ATen (see the module doc)


@dataclass(frozen=True)
class TieFree:
    """Where an op's index output sits and how to find the axis it indexes in a sample."""

    index_output: int
    dim_arg: int  # position of `dim` in sample.args (else the `dim` kwarg, else -1)
    distinct: bool  # a lane's indices are all different (a permutation, or k distinct picks)
    keepdim_arg: int | None = None  # reducing ops: position of `keepdim` (else the kwarg, else False)


TIE_ORDER_FREE = {
    "sort": TieFree(1, 0, distinct=True),
    "argsort": TieFree(0, 0, distinct=True),
    "topk": TieFree(1, 1, distinct=True),
    "kthvalue": TieFree(1, 1, distinct=False, keepdim_arg=2),
    "mode": TieFree(1, 0, distinct=False, keepdim_arg=1),
}


# Outputs whose columns are eigenvectors, each defined only up to its sign (for distinct
# eigenvalues): the column's sign is aligned with PyTorch's before comparing, as PyTorch's own
# linalg tests compare what is well-defined. linalg.eig's complex columns too: LAPACK's geev
# scales each to unit norm with its largest entry real, which leaves the sign, and LAPACK builds
# choose it differently (PyTorch's MKL and numpy's OpenBLAS give some column another sign in 31
# of 120 float64 5×5 randn matrices).
SIGN_FREE_COLUMNS = {"linalg.eigh": 1, "linalg.eig": 1}


def opinfos():
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


def op_name(opinfo) -> str:
    """The OpInfo's name, with its variant when it has one (``norm.nuc``, ``index_reduce.mean``)."""
    return f"{opinfo.name}.{opinfo.variant_test_name}" if opinfo.variant_test_name else opinfo.name


class _Call(torch.nn.Module):
    def __init__(self, fn, spec, constants):
        super().__init__()
        self.fn, self.spec, self.constants = fn, spec, constants

    def forward(self, *tensors):
        leaves = list(self.constants)
        it = iter(tensors)
        leaves = [next(it) if c is _TENSOR else c for c in leaves]
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(inp, *args, **kwargs)


_TENSOR = object()


def _non_core_op(ep) -> str | None:
    """The first op of ``ep`` outside Core ATen and outside the high-level ops kept whole, if any."""
    for n in ep.graph.nodes:
        t = n.target
        if n.op != "call_function" or not isinstance(t, torch._ops.OpOverload):
            continue
        if t.namespace != "aten" or (torch.Tag.core not in t.tags and not _kept_whole(t)):
            return str(t)
    return None


def _kept_whole(t) -> bool:
    from rlx.frontends.torch.levels import HIGH_LEVEL_OPS

    return f"{t._opname}.{t._overloadname}" in HIGH_LEVEL_OPS


def _arg(sample, index: int | None, name: str, default):
    if index is not None and index < len(sample.args):
        return sample.args[index]
    return sample.kwargs.get(name, default)


def assert_valid_indices(got: np.ndarray, want: torch.Tensor, sample, rule: TieFree, what: str) -> None:
    """``got`` is a valid index output where ties may come in any order (see the module doc)."""
    x = sample.input
    assert got.shape == tuple(want.shape), f"{what}: shape {got.shape} != torch {tuple(want.shape)}"
    assert got.dtype == np.int64 and want.dtype == torch.int64, f"{what}: dtype {got.dtype} != torch {want.dtype}"
    g, w = torch.from_numpy(np.array(got)), want
    if x.dim() == 0:
        x, g, w, dim = x.reshape(1), g.reshape(1), w.reshape(1), 0
    else:
        dim = _arg(sample, rule.dim_arg, "dim", -1) % x.dim()
        if rule.keepdim_arg is not None and not _arg(sample, rule.keepdim_arg, "keepdim", False):
            g, w = g.unsqueeze(dim), w.unsqueeze(dim)
    n = x.shape[dim]
    assert bool(((g >= 0) & (g < n)).all()), f"{what}: indices outside [0, {n})"
    if rule.distinct and g.numel():
        s = g.sort(dim).values
        assert bool((s.diff(dim=dim) != 0).all()), f"{what}: an index repeats within a lane"
    mine, theirs = x.gather(dim, g), x.gather(dim, w)
    same = (mine == theirs) | (mine.isnan() & theirs.isnan()) if x.is_floating_point() else mine == theirs
    assert bool(same.all()), f"{what}: indices point at values different from PyTorch's ({int((~same).sum())} entries)"


# ── random draws: where their values must lie ───────────────────────────────
def _numbers(sample) -> list[int | float]:
    """The sample's plain number arguments, input first (randint's bounds, uniform's interval …)."""
    return [a for a in (sample.input, *sample.args) if isinstance(a, (int, float)) and not isinstance(a, bool)]


def _randint_bounds(sample) -> tuple[int, int]:
    nums = _numbers(sample)
    return (0, int(nums[0])) if len(nums) == 1 else (int(nums[0]), int(nums[1]))


def _as_float(got: np.ndarray) -> np.ndarray:
    return np.asarray(got).astype(np.float64)


def _multinomial_ok(got: np.ndarray, want: torch.Tensor, sample) -> None:
    p = tensor_to_numpy(sample.input).astype(np.float64)
    rows, idx = p.reshape(-1, p.shape[-1]), np.asarray(got).reshape(-1, got.shape[-1] if got.ndim else 1)
    assert ((idx >= 0) & (idx < p.shape[-1])).all(), "indices outside the categories"
    assert all((r[i] > 0).all() for r, i in zip(rows, idx)), "an index of a category without mass"
    if not sample.kwargs.get("replacement", False):
        assert all(len(set(i.tolist())) == len(i) for i in idx), "an index repeats without replacement"


def _dropout_ok(got: np.ndarray, want: torch.Tensor, sample) -> None:
    x, p = tensor_to_numpy(sample.input).astype(np.float64), sample.kwargs.get("p", 0.5)
    g = _as_float(got)
    kept = np.isclose(g, x / (1 - p), rtol=1e-2, atol=1e-3) if p < 1 else np.zeros_like(g, dtype=bool)
    assert ((g == 0) | kept).all(), "an entry is neither dropped (0) nor x / (1 - p)"


def _alpha_dropout_ok(got: np.ndarray, want: torch.Tensor, sample) -> None:
    """Alpha dropout keeps SELU's mean and variance: kept entries are ``a·x + b``, dropped ones
    ``a·α' + b``, with ``α' = -λα`` of SELU, ``a = ((1 - p)(1 + p α'²))^-½`` and ``b = -a α' p``."""
    x, p = tensor_to_numpy(sample.input).astype(np.float64), sample.kwargs.get("p", 0.5)
    alpha = -1.0507009873554804934193349852946 * 1.6732632423543772848170429916717
    a = ((1 - p) * (1 + p * alpha**2)) ** -0.5
    b = -a * alpha * p
    g = _as_float(got)
    kept = np.isclose(g, a * x + b, rtol=1e-2, atol=1e-2)
    dropped = np.isclose(g, a * alpha + b, rtol=1e-2, atol=1e-2)
    assert (kept | dropped).all(), "an entry is neither a·x + b (kept) nor a·α' + b (dropped)"


def _rrelu_ok(got: np.ndarray, want: torch.Tensor, sample) -> None:
    x, g = tensor_to_numpy(sample.input).astype(np.float64), _as_float(got)
    lo, hi = sample.kwargs.get("lower", 1 / 8), sample.kwargs.get("upper", 1 / 3)
    tol = 1e-2 * np.abs(x) + 1e-3
    ok = np.where(x >= 0, np.isclose(g, x, rtol=1e-2, atol=1e-3), (x * hi - tol <= g) & (g <= x * lo + tol))
    assert ok.all(), "a negative entry's slope is outside [lower, upper], or a positive one changed"


def _pooled_ok(nd: int, got: np.ndarray, want: torch.Tensor, sample) -> None:
    """Fractional max pooling over ``nd`` axes: values taken from their own (batch, channel) plane;
    indices within it."""
    x = tensor_to_numpy(sample.input).astype(np.float64)
    planes = x.reshape(-1, int(np.prod(x.shape[-nd:])))
    g = np.asarray(got).reshape(planes.shape[0], -1)
    if g.dtype == np.int64:
        assert ((g >= 0) & (g < planes.shape[1])).all(), "an index outside its plane"
        return
    g = g.astype(np.float64)
    assert all(np.isin(gp, p).all() for gp, p in zip(g, planes)), "a pooled value that is not in its plane"


SUPPORT = {
    "finite": lambda g, w, s: _check(np.isfinite(_as_float(g)).all(), "a non-finite draw"),
    "not_nan": lambda g, w, s: _check(not np.isnan(_as_float(g)).any(), "a NaN draw"),
    "nonnegative": lambda g, w, s: _check((_as_float(g) >= 0).all(), "a negative draw"),
    "interval": lambda g, w, s: _check(
        ((_as_float(g) >= min(_numbers(s)[:2] or [0])) & (_as_float(g) <= max(_numbers(s)[:2] or [1]))).all(),
        f"a draw outside [{(_numbers(s)[:2] or [0, 1])}]",
    ),
    "geometric": lambda g, w, s: _check(
        ((_as_float(g) >= 1) & (_as_float(g) == np.floor(_as_float(g)))).all(),
        "a trial count that is not an integer ≥ 1",
    ),
    "randint": lambda g, w, s: _check(
        (
            (_as_float(g) >= _randint_bounds(s)[0])
            & (_as_float(g) < _randint_bounds(s)[1])
            & (_as_float(g) == np.floor(_as_float(g)))
        ).all(),
        f"a draw outside the integers of [{_randint_bounds(s)[0]}, {_randint_bounds(s)[1]})",
    ),  # fmt: skip
    "binary": lambda g, w, s: _check(np.isin(_as_float(g), (0.0, 1.0)).all(), "a draw other than 0 and 1"),
    "categories": _multinomial_ok,
    "dropout": _dropout_ok,
    "rrelu": _rrelu_ok,
    "alpha_dropout": _alpha_dropout_ok,
    "pooled2d": functools.partial(_pooled_ok, 2),
    "pooled3d": functools.partial(_pooled_ok, 3),
}


def _check(ok: bool, what: str) -> None:
    assert ok, what


def random_flags(program: Program) -> list[bool]:
    """For each output leaf (in ``pytree`` order of the model's result): whether it depends on a draw."""
    tainted = random_values(program)
    flags = [isinstance(o, Ref) and o.name in tainted for o in program.outputs[: program.n_user_outputs]]
    return pytree.tree_leaves(unflatten(program.output_tree, flags))


def _compare_random(opinfo, sample, got_flat, want_flat, flags) -> list[int]:
    """Check the outputs that depend on a draw (shape, dtype, support); the others' indices are returned."""
    name = op_name(opinfo)
    rule = RANDOM.get(name, (None, ""))[0]
    if any(flags) and rule is None:
        raise AssertionError(f"outputs depend on a random draw, but {name} declares no support rule in RANDOM")
    rest = []
    for k, (g, w, drawn) in enumerate(zip(got_flat, want_flat, flags)):
        if not drawn or not isinstance(w, torch.Tensor):
            rest.append(k)
            continue
        g = np.asarray(g)
        assert g.shape == tuple(w.shape), f"output {k}: shape {g.shape} != torch {tuple(w.shape)}"
        assert dtypes.from_numpy(g.dtype) == dtypes.from_numpy(tensor_to_numpy(w).dtype), (
            f"output {k}: dtype {g.dtype} != torch {w.dtype}"
        )
        if rule == "singular_values":
            if k == 1:
                assert_arrays_match(g, tensor_to_numpy(w), "singular values", 1e-3, 1e-3)
        else:
            SUPPORT[rule](g, w, sample)
    return rest


def _compare(opinfo, sample, dtype_tok: str, got, expected, flags: list[bool] | None = None) -> None:
    want_flat = pytree.tree_leaves(expected)
    got_flat = pytree.tree_leaves(got)
    assert len(got_flat) == len(want_flat), f"{len(got_flat)} outputs, torch has {len(want_flat)}"
    if op_name(opinfo) in VALUES_UNDEFINED:
        for k, (g, w) in enumerate(zip(got_flat, want_flat)):
            g = np.asarray(g)
            assert g.shape == tuple(w.shape) and g.dtype == tensor_to_numpy(w).dtype, (
                f"output {k}: {g.dtype}{list(g.shape)} != torch {w.dtype}{list(w.shape)}"
            )
        return
    compared = set(range(len(got_flat)))
    if flags is not None and len(flags) == len(got_flat):
        compared = set(_compare_random(opinfo, sample, got_flat, want_flat, flags))
    rule = TIE_ORDER_FREE.get(op_name(opinfo))
    if rule is not None and sample.kwargs.get("stable"):
        rule = None  # a stable sort has one right answer
    tolerance = TOLERANCES.get(op_name(opinfo), ({}, ""))[0].get(dtype_tok, (None, None))
    for k, (g, w) in enumerate(zip(got_flat, want_flat)):
        if k not in compared:
            continue
        if not isinstance(w, torch.Tensor):
            assert g == w, f"output {k}: {g!r} != {w!r}"
        elif rule is not None and k == rule.index_output:
            assert_valid_indices(np.asarray(g), w, sample, rule, f"output {k}")
        else:
            if SIGN_FREE_COLUMNS.get(op_name(opinfo)) == k:
                g = align_column_signs(np.asarray(g), tensor_to_numpy(w))
            rtol, atol = tolerance
            if atol is None and w.dtype in (torch.float16, torch.bfloat16):
                atol = _half_atol(w)
            assert_arrays_match(np.asarray(g), tensor_to_numpy(w), f"output {k}", rtol, atol)


def _half_atol(w: torch.Tensor) -> float | None:
    """``HALF_ULPS`` ulps at the output's largest finite magnitude, if above the default atol."""
    finite = w[torch.isfinite(w)].float()
    if not finite.numel():
        return None
    scale = HALF_ULPS * torch.finfo(w.dtype).eps * float(finite.abs().max())
    return max(scale, TOLERANCES_BY_DTYPE[dtypes.from_numpy(tensor_to_numpy(w).dtype)][1])


def run_sample(opinfo, sample, dtype_tok: str, index: int, engine: str = "numpy") -> Outcome:
    """One sample through rlx on ``engine`` against eager PyTorch; a program another engine refuses
    in one line is ``n/a`` with its reason."""
    name = op_name(opinfo)
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    tensors = [x.detach() for x in leaves if isinstance(x, torch.Tensor)]
    if any(t.dtype not in INPUT_DTYPES or t.numel() > 10**6 for t in tensors):
        return Outcome(name, dtype_tok, index, "n/a", "unsupported input dtype or size")
    constants = [_TENSOR if isinstance(x, torch.Tensor) else x for x in leaves]
    module = _Call(opinfo.op, spec, constants).eval()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.no_grad():
                expected = module(*tensors)
            exported = capture(module, tuple(tensors))
    except RlxError as e:
        if not str(e).startswith("torch.export failed"):  # torch exported it; rlx could not record it
            return _failed(name, dtype_tok, index, f"{type(e).__name__}: {str(e)[:160]}", core=False)
        return Outcome(name, dtype_tok, index, "n/a", f"export: {type(e).__name__}")
    except Exception as e:
        return Outcome(name, dtype_tok, index, "n/a", f"export: {type(e).__name__}")
    core = _non_core_op(exported.exported_program) is None
    got = None
    try:
        program = build_program(exported.ir)
        try:
            model = Model(program, bind_weights(program, exported.weights, "weights"), engine=engine)
        except RlxError as e:
            if engine != "numpy" and is_refusal(e):
                return Outcome(name, dtype_tok, index, "n/a", f"{engine} refuses: {str(e)[:120]}")
            raise
        got = model(*[tensor_to_numpy(t) for t in tensors])
        _compare(opinfo, sample, dtype_tok, got, expected, random_flags(program))
    except RlxError as e:
        reason = f"{type(e).__name__}: {str(e)[:160]}"
    except AssertionError as e:
        reason = "mismatch: " + " ".join(str(e).split())[:160]
    except Exception as e:  # a non-rlx exception escaping is itself a bug worth recording
        reason = f"crash {type(e).__name__}: {str(e)[:120]}"
    else:
        return Outcome(name, dtype_tok, index, "pass", core=core)
    why = declared(name, reason)
    graph_rule = GRAPH_DIFFERS_FROM_EAGER.get(name)
    if why is None and got is not None and graph_rule and dtype_tok in graph_rule[0]:
        why = _matches_graph(opinfo, sample, dtype_tok, got, exported, tensors, graph_rule[1])
    return _failed(name, dtype_tok, index, reason, core, why)


def _failed(name: str, dtype_tok: str, index: int, reason: str, core: bool, why: str | None = None) -> Outcome:
    """A failure: declared (``known``, with ``why``) when ``known_failures`` expects it, else ``fail``."""
    why = why or declared(name, reason)
    if why is None:
        return Outcome(name, dtype_tok, index, "fail", reason, core)
    return Outcome(name, dtype_tok, index, "known", why, core)


def _matches_graph(opinfo, sample, dtype_tok, got, exported, tensors, reason) -> str | None:
    """``reason`` if rlx's outputs match torch running the exported Core ATen graph, else None."""
    try:
        with torch.no_grad():
            graph = exported.exported_program.module()(*tensors)
        _compare(opinfo, sample, dtype_tok, got, graph)
    except AssertionError:
        return None
    return reason + " (checked: rlx matches torch running the exported graph)"


def sweep(
    names: list[str] | None = None, dtypes=SWEEP_DTYPES, max_samples: int = MAX_SAMPLES, engine: str = "numpy"
) -> Iterator[Outcome]:
    for opinfo in opinfos():
        if names is not None and op_name(opinfo) not in names:
            continue
        for tok in dtypes:
            dtype = DTYPES[tok]
            if dtype not in opinfo.supported_dtypes("cpu"):
                continue
            try:
                samples = list(opinfo.sample_inputs("cpu", dtype, requires_grad=False))[:max_samples]
            except Exception:
                continue
            for k, sample in enumerate(samples):
                yield run_sample(opinfo, sample, tok, k, engine)
