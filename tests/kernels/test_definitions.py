"""One definition per Call: every Call has a kernel on every engine, and every engine's own
algorithm is held to the shared definition it replaces (bit for bit, or within a stated bound)."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.ir import calls as C
from rlx.ir.program import CALL_TYPES, Ref
from rlx.kernels import KERNELS as SHARED
from rlx.kernels import elementwise
from rlx.kernels.numpy.kernels import KERNELS as NUMPY_KERNELS
from rlx.kernels.numpy.kernels import NUMPY
from rlx.kernels.numpy.kernels import OVERRIDES as NUMPY_OVERRIDES
from rlx.runtime.numpy_engine import fused

# CALL_TYPES holds what program.json may hold: not the numpy engine's own Gemm/Fused.
PROGRAM_CALLS = sorted(CALL_TYPES)
X, Y = Ref("x"), Ref("y")


def _engines() -> dict[str, dict]:
    engines = {"numpy": NUMPY_KERNELS}
    try:
        from rlx.kernels.jax.kernels import KERNELS as JAX_KERNELS
    except ImportError:  # jax is an optional extra
        return engines
    return {**engines, "jax": JAX_KERNELS}


@pytest.mark.parametrize("engine", sorted(_engines()))
def test_every_call_has_a_kernel_on_every_engine(engine):
    missing = [name for name in PROGRAM_CALLS if name not in _engines()[engine]]
    assert not missing, f"{engine}: no shared definition or override for {missing}"


def test_kernels_are_registered_for_calls_that_exist():
    from rlx.runtime.numpy_engine.fused import BINDERS, FUSED_KERNELS
    from rlx.runtime.numpy_engine.fused_calls import Fused, Gemm

    names = set(SHARED) | set(NUMPY_OVERRIDES) | set(BINDERS) | set(FUSED_KERNELS)
    for table in _engines().values():
        names |= set(table)
    known = set(CALL_TYPES) | {Gemm.op, Fused.op}  # the portable Calls and the numpy engine's own
    assert names <= known, sorted(names - known)


def test_elementwise_table_is_the_vocabulary():
    assert set(elementwise.UNARY) == set(C.UNARY_FNS)
    assert set(elementwise.BINARY) == set(C.BINARY_FNS)


# ── values: a grid of ordinary and edge values per dtype ─────────────────────
def grid(dtype: str, size: int = 600) -> np.ndarray:
    rng = np.random.default_rng(size)
    if dtype in ("float32", "float64"):
        edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 20.0, -20.0, 3.0, -3.0, 0.5, 88.0, -88.0, 1e30]
        values = np.concatenate([edges, rng.standard_normal(size) * 4, rng.standard_normal(size) * 0.01])
        return values.astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size).astype(bool)
    info = np.iinfo(dtype)
    values = np.concatenate([[0, 1, -1, info.min, info.max, 2, -2], rng.integers(-50, 50, size)])
    return values.astype(dtype) if dtype.startswith("int") else np.abs(values).astype(dtype)


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def shared_unary(fn: str, x: np.ndarray) -> np.ndarray:
    return np.asarray(elementwise.UNARY[fn].on(NUMPY)(x))


# ── the numpy engine's elementwise overrides ─────────────────────────────────
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_relu_override_is_the_shared_relu_bit_for_bit(dtype):
    x = grid(dtype)
    assert_same_bits(np.asarray(NUMPY.unary["relu"](x)), shared_unary("relu", x))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("size", [50, 5000])  # math.erf per element, and the fitted float32 path
def test_gelu_override_within_a_few_ulps_of_the_shared_gelu(size):
    x = grid("float32", size)
    got, want = NUMPY.unary["gelu"](x), shared_unary("gelu", x)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    ulp = np.spacing(np.abs(want[finite]))
    assert np.all(np.abs(got[finite] - want[finite]) <= 4 * ulp + 1.2e-7 * np.abs(x[finite]))
    x64 = grid("float64", size)
    assert_same_bits(NUMPY.unary["gelu"](x64), shared_unary("gelu", x64))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fn", ["sigmoid", "silu"])
def test_sigmoid_overrides_within_a_few_ulps_of_the_shared_definition(fn):
    # float32: in-place passes, PyTorch's SiLU formula; float64 is the shared definition itself.
    x = np.concatenate([grid("float32", 5000), np.linspace(-100, 100, 2001, dtype=np.float32)])
    got, want = NUMPY.unary[fn](x), shared_unary(fn, x)
    assert got.dtype == want.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    normal = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float32).tiny)
    rest = ~normal & ~np.isnan(want)  # ±inf, zeros and subnormals: the same, or within 1e-43
    np.testing.assert_allclose(got[rest], want[rest], rtol=0, atol=1e-5 * np.finfo(np.float32).tiny)
    assert np.all(np.abs(got[normal] - want[normal]) <= 4 * np.spacing(np.abs(want[normal])))
    x64 = grid("float64")
    assert_same_bits(NUMPY.unary[fn](x64), shared_unary(fn, x64))
    scalar = np.array(-3.5, np.float32)  # 0-d: the shared definition
    assert_same_bits(np.asarray(NUMPY.unary[fn](scalar)).reshape(1), shared_unary(fn, scalar).reshape(1))


# ── the executor's fast paths (rlx.runtime.numpy_engine.fused) ───────────────
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", sorted(fused.FLOAT_UNARY))
def test_in_place_unary_is_the_engine_function_bit_for_bit(fn, dtype):
    # The engine's function is the shared definition, or its override (held to it above).
    x = grid(dtype)
    want = np.asarray(NUMPY.unary[fn](x))
    assert_same_bits(fused.FLOAT_UNARY[fn](x), want)
    buf = x.copy()
    assert fused.FLOAT_UNARY[fn](buf, buf) is buf  # safe with ``out`` being ``x`` itself
    assert_same_bits(buf, want)


BINARY_FAST = [(fn, kind) for fn, (_, kinds) in sorted(fused._UFUNC_BINARY.items()) for kind in kinds]
KIND_DTYPE = {"f": ["float32", "float64"], "i": ["int32", "int64"], "u": ["uint8"], "b": ["bool"]}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fn,kind", BINARY_FAST)
def test_binary_ufunc_fast_path_is_the_shared_definition_bit_for_bit(fn, kind):
    for dtype in KIND_DTYPE[kind]:
        x, y = grid(dtype, 300), np.roll(grid(dtype, 300), 7)
        if fn in ("floor_divide", "remainder", "fmod") and kind != "f":
            y = np.where(y == 0, 1, y).astype(dtype)
        ufunc = fused.fast_binary(fn, x.dtype, y.dtype, np.result_type(fused._UFUNC_BINARY[fn][0](x[:1], y[:1])))
        assert ufunc is not None
        assert_same_bits(ufunc(x, y), np.asarray(elementwise.BINARY[fn].on(NUMPY)(x, y)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_in_place_softmax_is_the_shared_softmax_bit_for_bit(log, dtype):
    x = grid(dtype, 120)[15:].reshape(3, 5, -1)  # the random part: no NaN/inf lanes
    for axis in range(3):
        want = SHARED["Softmax"](C.Softmax(X, axis, log), x, xp=NUMPY)
        assert_same_bits(fused._softmax_inplace(axis, log)(x), want)
    # Many short trailing rows (row maxima from a transposed copy), with NaN and -inf lanes.
    rows = grid(dtype, 8192)[: 64 * 4 * 16].reshape(64, 4, 16)
    rows[5, 1] = -np.inf
    for axis in (-1, 2, 1):
        want = SHARED["Softmax"](C.Softmax(X, axis, log), rows, xp=NUMPY)
        assert_same_bits(fused._softmax_inplace(axis, log)(rows), want)


# ── the numpy engine's own kernels against the shared definitions ────────────
@pytest.mark.parametrize("dtype,tol", [("float32", 2e-6), ("float64", 1e-14)])
@pytest.mark.parametrize("shape,ndim", [((2, 5, 16), 1), ((3, 4, 6), 2), ((1, 64), 1), ((4, 3), 1)])
def test_norm_overrides_match_the_shared_definition(shape, ndim, dtype, tol):
    rng = np.random.default_rng(ndim)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    w, b = rng.standard_normal(shape[-ndim:]).astype(dtype), rng.standard_normal(shape[-ndim:]).astype(dtype)
    cases = [(C.LayerNorm(X, X, X, ndim, 1e-5), (x, w, b)), (C.LayerNorm(X, None, None, ndim, 1e-5), (x, None, None))]
    cases += [(C.RmsNorm(X, X, ndim, 1e-6), (x, w)), (C.RmsNorm(X, None, ndim, 1e-6), (x, None))]
    for call, operands in cases:
        got = NUMPY_OVERRIDES[call.op](call, *operands)
        want = SHARED[call.op](call, *operands, xp=NUMPY)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bins,lo,hi", [(5, -1.0, 1.0), (7, 0.0, 0.0), (1, 0.0, 3.0), (4, 0.0, 3.0)])
def test_histc_override_is_the_shared_histc(bins, lo, hi, dtype):
    rng = np.random.default_rng(bins)
    x = np.concatenate([rng.standard_normal(200) * 2, [lo, hi, np.nan, np.inf, -np.inf, 1.0, 3.0]]).astype(dtype)
    for data in (x, x[np.isfinite(x)], np.full(3, 2.5, dtype), x[:0]):
        call = C.Histc(X, bins, lo, hi)
        got, want = NUMPY_OVERRIDES["Histc"](call, data), SHARED["Histc"](call, data, xp=NUMPY)
        assert got.dtype == want.dtype == np.dtype(dtype) and got.shape == want.shape == (bins,)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("engine", ["numpy", "jax"])
@pytest.mark.parametrize("dtype,tol", [("float32", 1e-6), ("float64", 1e-14), ("bfloat16", 1e-2)])
@pytest.mark.parametrize("offsets", [[2, 2, 7], [0, 9, 9], [3, 5, 9], [0, 0, 0], [4, 12, 20], [9, 9, 9]])
def test_grouped_matmul_overrides_match_the_shared_definition(offsets, dtype, tol, engine):
    """Each engine's own GroupedMatMul (numpy: group by group; JAX: ragged_dot), offsets past the rows
    included (offsets never decrease: PyTorch requires it)."""
    import ml_dtypes

    if engine == "jax":
        pytest.importorskip("jax")
        from rlx.kernels.jax.kernels import OVERRIDES, x64
    else:
        OVERRIDES, x64 = NUMPY_OVERRIDES, None  # noqa: N806
    np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(len(offsets))
    x, w = rng.standard_normal((9, 4)).astype(np_dtype), rng.standard_normal((3, 4, 5)).astype(np_dtype)
    call = C.GroupedMatMul(X, X, X)
    if x64 is None:
        got = OVERRIDES["GroupedMatMul"](call, x, w, np.array(offsets, np.int32))
    else:
        with x64():
            got = np.asarray(OVERRIDES["GroupedMatMul"](call, x, w, np.array(offsets, np.int32)))
    want = SHARED["GroupedMatMul"](call, x, w, np.array(offsets, np.int32), xp=NUMPY)
    assert got.dtype == want.dtype == np_dtype and got.shape == want.shape == (9, 5)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


ATTENTION = [  # q, k shapes, causal, mask, gqa
    ((2, 4, 5, 8), (2, 4, 7, 8), False, None, False),
    ((2, 4, 5, 8), (2, 4, 5, 8), True, None, False),
    ((1, 4, 3, 8), (1, 2, 6, 8), False, "bool", True),
    ((2, 2, 4, 8), (2, 2, 4, 8), True, "float", False),
    ((1, 2, 3, 4), (1, 2, 3, 4), False, "dead", False),  # a query row that may attend nowhere
]


@pytest.mark.parametrize("dtype,tol", [("float32", 3e-6), ("float64", 1e-14)])
@pytest.mark.parametrize("q_shape,k_shape,causal,mask_kind,gqa", ATTENTION)
def test_attention_override_matches_the_shared_definition(q_shape, k_shape, causal, mask_kind, gqa, dtype, tol):
    rng = np.random.default_rng(len(q_shape) + q_shape[-2])
    q, k = rng.standard_normal(q_shape).astype(dtype), rng.standard_normal(k_shape).astype(dtype)
    v = rng.standard_normal(k_shape).astype(dtype)
    mask = None
    if mask_kind == "bool":
        mask = rng.random((q_shape[-2], k_shape[-2])) > 0.3
    elif mask_kind == "float":
        mask = rng.standard_normal((1, 1, q_shape[-2], k_shape[-2])).astype(dtype)
    elif mask_kind == "dead":
        mask = np.ones((q_shape[-2], k_shape[-2]), bool)
        mask[1] = False
    call = C.Attention(X, X, X, None if mask is None else X, causal, 0.35, gqa)
    got = NUMPY_OVERRIDES["Attention"](call, q, k, v, mask)
    want = SHARED["Attention"](call, q, k, v, mask, xp=NUMPY)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if mask_kind == "dead":
        assert not got[..., 1, :].any()  # zeros, like PyTorch's safe softmax


# ── the JAX engine: its overrides and the shared table on jax.numpy ──────────
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("target", ["int8", "uint8", "int32", "int64", "bool"])
@pytest.mark.parametrize("source", ["float32", "float64"])
def test_jax_cast_override_is_the_shared_cast_bit_for_bit(source, target):
    pytest.importorskip("jax")
    from rlx.kernels.jax.kernels import KERNELS as JAX_KERNELS
    from rlx.kernels.jax.kernels import x64

    token = {"int8": "i8", "uint8": "u8", "int32": "i32", "int64": "i64", "bool": "bool"}[target]
    x = np.concatenate([grid(source), np.array([3e9, -3e9, 1e19, -1e19, 255.7, -128.9], source)])
    call = C.Cast(X, token)
    with x64():
        got = np.asarray(JAX_KERNELS["Cast"](call, x))
    assert_same_bits(got, SHARED["Cast"](call, x, xp=NUMPY))


INTEGER_ONLY = ("left_shift", "right_shift", "gcd", "lcm")


@pytest.mark.parametrize("dtype", ["int64", "int8", "uint8"])
def test_integer_functions_agree_on_numpy_and_jax(dtype):
    pytest.importorskip("jax")
    from rlx.kernels.jax.kernels import JAX, x64

    info = np.iinfo(dtype)
    x = np.array([0, 1, -1, 7, -100, 100, info.max, info.min, 12, -12], dtype=np.int64).astype(dtype)
    y = np.array([0, 3, 70, -2, 5, 63, 1, 7, 8, 18], dtype=np.int64).astype(dtype)
    with x64():
        for name in INTEGER_ONLY:
            e = elementwise.BINARY[name]
            want = np.asarray(e.on(NUMPY)(x, y))
            got = np.asarray(e.on(JAX)(x, y))
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_shared_elementwise_table_agrees_on_numpy_and_jax(dtype):
    pytest.importorskip("jax")
    from rlx.kernels.jax.kernels import JAX, x64

    x = grid(dtype, 200)
    y = np.roll(x, 3)
    eps = np.finfo(dtype).eps
    with x64():
        for name, e in {**elementwise.UNARY, **elementwise.BINARY}.items():
            if name.startswith("bitwise") or name in INTEGER_ONLY:
                continue  # integers and bools only
            operands = (x,) if e.arity == 1 else (x, y)
            want = np.asarray(e.on(NUMPY)(*operands))
            got = np.asarray(e.on(JAX)(*operands))
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
            ok = ~np.isnan(want)
            np.testing.assert_allclose(got[ok], want[ok], rtol=16 * eps, atol=16 * eps, err_msg=name)


@pytest.mark.parametrize(
    ("source", "target"),
    [("float32", "i32"), ("int32", "f32"), ("float64", "i64"), ("int64", "f64"), ("int8", "u8"), ("bool", "u8"),
     ("float16", "i16")],
)  # fmt: skip
def test_bitcast_reinterprets_bits_on_every_engine(source, target):
    from rlx.ir import dtypes

    x = grid(source if source != "float16" else "float32")[:600].astype(source).reshape(-1, 3)[:, ::2]  # strided
    want = np.ascontiguousarray(x).view(dtypes.to_numpy(target))  # numpy's own reinterpretation
    call = C.Bitcast(X, target)
    for name, table in _engines().items():
        if name == "jax":
            from rlx.kernels.jax.kernels import x64

            with x64():  # as the JAX engine runs: 64-bit values stay 64-bit
                got = np.ascontiguousarray(table["Bitcast"](call, x))
        else:
            got = np.ascontiguousarray(table["Bitcast"](call, x))
        assert_same_bits(got, want)
