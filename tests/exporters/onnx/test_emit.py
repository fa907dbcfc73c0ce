"""ONNX emission (``rlx.exporters.onnx``): every Call has an emitter; emitted models pass onnx's full
checker, carry provenance, keep symbolic extents as dim_param, run on onnxruntime with the
numpy engine's values and import back into rlx (torch → Program → ONNX → rlx → compare)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import rlx
from rlx.exporters.onnx import EMITTERS, NO_ONNX_FORM, EmitError, check_coverage, to_onnx, write_onnx
from rlx.formats.bundle import bind_weights
from rlx.ir import calls as C
from rlx.ir.program import CALL_TYPES
from rlx.runtime.model import Model

from helpers import (
    BLOCK_TORCH,
    as_module,
    assert_arrays_match,
    convert,
    exported_example,
    load_example,
    optimized_op_types,
)

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
EXAMPLES = ("mlp", "transformer", "cnn", "decoder_lm")


def test_every_call_has_an_emitter_or_a_declared_reason():
    covered = {cls.__name__ for cls in EMITTERS} | {cls.__name__ for cls in NO_ONNX_FORM}
    missing = sorted(set(CALL_TYPES) - covered)
    assert not missing, f"no ONNX emitter or declared reason for {missing}"
    assert not set(EMITTERS) & set(NO_ONNX_FORM)


SELECTION = {
    "nonzero": (lambda x, m, s, v: (torch.nonzero(x > 0), torch.nonzero(x[0, 0] > 0), torch.argwhere(m)),
                ("Nonzero",)),
    "masked_select": (lambda x, m, s, v: (torch.masked_select(x, m), torch.masked_select(x[0], m[0, :1])),
                      ("MaskedSelect",)),
    "searchsorted": (lambda x, m, s, v: (torch.searchsorted(s, v), torch.searchsorted(s, v, right=True),
                                         torch.bucketize(v, s[0])), ("SearchSorted",)),
    "det": (lambda x, m, s, v: torch.linalg.det(x[..., :3, :3]), ("Det",)),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SELECTION))
def test_selection_and_det_run_on_onnxruntime(name):
    fn, calls = SELECTION[name]
    x = torch.randn(2, 4, 4)
    x[0, 1] = float("nan")  # NaN is non-zero and selected, as in PyTorch
    m = torch.rand(2, 4, 4) > 0.5
    s = torch.sort(torch.randn(2, 6), dim=-1).values
    v = torch.cat([s[:, :2], torch.randn(2, 3)], dim=1)  # ties with the table and values between
    inputs = (x, m, s, v)
    model, program, _ = convert(fn, inputs, engine="onnxruntime")
    assert set(calls) <= {ins.call.op for ins in program.instrs}
    with torch.no_grad():
        want = fn(*inputs)
    got = model(*(t.numpy() for t in inputs))
    for g, w in zip(*(r if isinstance(r, tuple) else (r,) for r in (got, want))):
        assert g.dtype == w.numpy().dtype and g.shape == tuple(w.shape)
        assert_arrays_match(g, w.numpy(), name, rtol=1e-5, atol=1e-6)


def test_calls_without_onnx_form_are_named_with_the_reason():
    def fn(a, b):
        return torch.linalg.svdvals(a), torch.unique(b), torch.special.i0(a)

    _, program, _ = convert(fn, (torch.randn(3, 3), torch.tensor([3, 1, 3])))
    with pytest.raises(EmitError) as err:
        check_coverage(program)
    message = str(err.value)
    assert "\n" not in message
    for op, why in [("Svd", "factorisation"), ("Unique", "data-dependent"), ("Special", "special functions")]:
        assert op in message and why in message


def test_every_function_has_an_emitter_or_a_declared_reason():
    """Unary, Binary and Reduce calls name a function: each one the IR knows is written by the
    emitter or declared with the reason it has no ONNX form, never both."""
    from rlx.exporters.onnx import FUNCTIONS, NO_ONNX_FUNCTION
    from rlx.ir import calls as C

    for call, known in ((C.Unary, C.UNARY_FNS), (C.Binary, C.BINARY_FNS), (C.Reduce, C.REDUCE_FNS)):
        written, refused = FUNCTIONS[call], set(NO_ONNX_FUNCTION[call])
        assert set(known) == written | refused, (call.__name__, set(known) ^ (written | refused))
        assert not written & refused


def test_functions_without_onnx_form_are_named_with_the_reason(tmp_path):
    """All at once, in one line, each with its reason and what to do; the onnxruntime engine
    refuses the bundle with the same line."""
    import rlx

    def fn(a, b):
        return torch.copysign(a, b), torch.gcd(a.int(), b.int()), torch.signbit(a), torch.hypot(a, b)

    _, program, _ = convert(fn, (torch.randn(3), torch.randn(3)))
    with pytest.raises(EmitError) as err:
        check_coverage(program)
    message = str(err.value)
    assert "\n" not in message and message.endswith("; use the numpy or JAX engine")
    for fn_name, why in [
        ("Binary copysign", "sign of NaN"),
        ("Binary gcd", "Euclid"),
        ("Unary signbit", "sign of NaN"),
    ]:
        assert f"{fn_name} ×1" in message and why in message
    assert "hypot" not in message
    rlx.from_torch(as_module(fn), (torch.randn(3), torch.randn(3)), tmp_path / "out", verify=False)
    with pytest.raises(rlx.RlxError) as loading:
        rlx.load(tmp_path / "out", engine="onnxruntime")
    assert str(loading.value) == message


def test_hash_tensor_is_refused_in_one_line():
    """hash_tensor reads bit patterns (Bitcast, opset 26) and folds them with xor (no ONNX reduction)."""
    _, program, _ = convert(lambda x: torch.hash_tensor(x, 1), (torch.randn(3, 4),))
    with pytest.raises(EmitError) as err:
        to_onnx(program, {})
    assert "\n" not in str(err.value) and "hash_tensor" in str(err.value)


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_emit_check_and_run(name, tmp_path):
    exported, program = exported_example(name, "high")
    weights = bind_weights(program, exported.weights, "weights")
    path = write_onnx(program, weights, tmp_path)  # runs onnx.checker.check_model(full_check=True)
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))
    assert model.opset_import[0].version >= 21
    # Provenance: each node's doc_string is its instruction's note; its name starts with the result.
    notes = {ins.result: ins.note for ins in program.instrs}
    for node in model.graph.node:
        owner = node.name.split(":")[0]
        if owner in notes:
            assert notes[owner] in node.doc_string
    # Every instruction has nodes, but a Reshape read only by Reshapes (folded into them) or by
    # products (run on the tensor before the reshape).
    readers: dict[str, set[type]] = {}
    for ins in program.instrs:
        for ref in ins.call.refs():
            readers.setdefault(ref.name, set()).add(type(ins.call))
    folded = {
        i.result
        for i in program.instrs
        if isinstance(i.call, C.Reshape) and readers.get(i.result, {None}) <= {C.Reshape, C.MatMul}
    }
    assert {n.name.split(":")[0] for n in model.graph.node} >= set(notes) - folded
    assert {t.name for t in model.graph.initializer} >= {w.name for w in program.weights}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {v.name: exported.inputs[v.name] for v in program.inputs}
    got = session.run(None, feed)
    want = Model(program, weights).run_flat([feed[v.name] for v in program.inputs])
    for k, (g, w) in enumerate(zip(got, want)):
        assert_arrays_match(g, w, f"{name} output {k}", rtol=1e-4, atol=1e-5)


def test_dynamic_dims_are_dim_params_and_run_at_other_sizes(tmp_path):
    module, (ids,) = load_example("decoder_lm").get_model()
    dim = torch.export.Dim
    _, program, exported = convert(
        module, (ids,), dynamic_shapes={"input_ids": {0: dim("batch", max=8), 1: dim("seq", max=64)}}
    )
    path = write_onnx(program, bind_weights(program, exported.weights, "weights"), tmp_path)
    graph_input = onnx.load(str(path)).graph.input[0]
    params = [d.dim_param for d in graph_input.type.tensor_type.shape.dim]
    assert params == [str(d) for d in program.inputs[0].shape] and all(params)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch, seq in [(1, 5), (3, 17)]:
        x = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
        (got,) = session.run(None, {"input_ids": x.numpy()})
        with torch.no_grad():
            want = module(x).numpy()
        assert_arrays_match(got, want, f"batch {batch} seq {seq}", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_round_trip_through_the_onnx_importer(name, tmp_path):
    exported, program = exported_example(name, "high")
    weights = bind_weights(program, exported.weights, "weights")
    write_onnx(program, weights, tmp_path / "emitted")
    report = rlx.from_onnx(tmp_path / "emitted" / "model.onnx", tmp_path / "back")
    assert report.parity is not None and report.parity.passed, report.parity.table()
    back = rlx.load(tmp_path / "back" / "bundle")
    feed = [exported.inputs[v.name] for v in program.inputs]
    want = Model(program, weights).run_flat(feed)
    got = back.run_flat(feed)
    for g, w in zip(got, want):
        assert_arrays_match(g, w, name, rtol=1e-4, atol=1e-5)


def test_cli_emit_onnx_and_torch_free_build(tmp_path):
    module, inputs = load_example("mlp").get_model()
    rlx.from_torch(module, inputs, tmp_path / "out", write=("bundle",))
    # The Rust front-end's output (torch-ir.json + weights) becomes ONNX with torch blocked.
    script = BLOCK_TORCH + textwrap.dedent(
        f"""
        from rlx.cli import main
        raise SystemExit(main(["build", {str(tmp_path / "out")!r}, "-o", {str(tmp_path / "built")!r},
                               "--write", "bundle,onnx"]))
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    onnx.checker.check_model(str(tmp_path / "built" / "model.onnx"), full_check=True)
    # In place too (the staging directory's model.onnx is moved next to torch-ir.json).
    from rlx.cli import main

    assert main(["build", str(tmp_path / "out"), "--write", "onnx", "--force"]) == 0
    assert (tmp_path / "out" / "model.onnx").is_file()


@pytest.mark.parametrize(
    "fn,inputs,call",
    [
        (
            lambda x, g: F.grid_sample(x, g, align_corners=False),
            (torch.randn(1, 2, 4, 4).half(), torch.rand(1, 3, 3, 2).half() * 2 - 1),
            "GridSample",
        ),
        # (onnxruntime's Conv is float-only: it failed to load with its own error)
        (lambda x, w: F.conv2d(x, w), (torch.randint(0, 3, (1, 2, 4, 4)), torch.randint(0, 3, (3, 2, 2, 2))), "Conv"),
    ],
)
def test_unsupported_programs_fail_with_one_line(fn, inputs, call):
    _, program, _ = convert(fn, inputs)
    with pytest.raises(EmitError, match=call) as err:
        to_onnx(program, {})
    assert "\n" not in str(err.value) and str(err.value).endswith("use the numpy or JAX engine")
    check_coverage(program)  # every Call has an emitter; this one refuses its arguments
    with pytest.raises(rlx.RlxError, match=call):
        Model(program, {}, engine="onnxruntime")


@pytest.mark.parametrize(
    "fn", [lambda x: torch.fft.rfft(x).abs(), lambda x: (x.to(torch.complex64) * 2).real], ids=["rfft", "cast"]
)
def test_complex_values_are_refused_before_emission(fn):
    """onnxruntime has almost no complex kernels (a cast to complex failed to load): any complex
    value refuses the program in one line, before a graph is built."""
    _, program, _ = convert(fn, (torch.randn(2, 8),))
    with pytest.raises(EmitError, match=r"complex \(c64\) values; use the numpy or JAX engine$") as err:
        check_coverage(program)
    assert "\n" not in str(err.value)
    with pytest.raises(rlx.RlxError, match="complex"):
        Model(program, {}, engine="onnxruntime")


def test_unbatched_pool_and_gqa_run():
    def fn(x, q, kv):
        return (
            torch.nn.functional.max_pool2d(x, 2),
            torch.nn.functional.avg_pool2d(x, 3, padding=1, count_include_pad=False),
            torch.nn.functional.scaled_dot_product_attention(q, kv, kv, enable_gqa=True),
        )

    x, q, kv = torch.randn(3, 6, 7), torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
    model, _, _ = convert(fn, (x, q, kv), engine="onnxruntime")
    with torch.no_grad():
        want = fn(x, q, kv)
    for g, w in zip(model(x.numpy(), q.numpy(), kv.numpy()), want):
        assert_arrays_match(g, w.numpy(), "pool/gqa", rtol=1e-5, atol=1e-6)


def _assigned(x, key, v):
    y = x.clone()
    y[key] = v
    return y


INDEX_PUTS = {
    "axis1": lambda x, i, m, v: _assigned(x, (slice(None), i), v[: len(i)].reshape(len(i), 1)),
    "index_copy_axis1": lambda x, i, m, v: x.index_copy(1, i, x[:, : len(i)] * 2),
    "two_axes_after_one": lambda x, i, m, v: _assigned(x, (slice(None), i, i), v[: len(i)]),
    "mask_after_one": lambda x, i, m, v: _assigned(x, (slice(None), m), -1.0),
    "accumulate_axis1": lambda x, i, m, v: x.index_add(1, torch.cat([i, i]), x[:, : 2 * len(i)]),
}


@pytest.mark.parametrize("name", sorted(INDEX_PUTS))
def test_index_put_after_whole_axes_runs_on_onnxruntime(name):
    fn = INDEX_PUTS[name]
    x = torch.randn(3, 5, 4)
    i = torch.tensor([3, 0])
    m = torch.tensor([True, False, True, True, False])
    v = torch.randn(8)
    inputs = (x, i, m, v)
    model, program, _ = convert(fn, inputs, engine="onnxruntime")
    assert "IndexPut" in {ins.call.op for ins in program.instrs}
    with torch.no_grad():
        want = fn(*inputs)
    got = model(*(t.numpy() for t in inputs))
    assert got.shape == tuple(want.shape) and got.dtype == want.numpy().dtype
    assert_arrays_match(got, want.numpy(), name, rtol=1e-6, atol=1e-6)


def test_kv_cache_state_on_onnxruntime(tmp_path):
    class Cache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("k", torch.zeros(1, 6, 4))
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, x, pos):
            self.k.index_copy_(1, pos, self.proj(x))
            return self.k.sum(1)

    module = Cache()
    reference = Cache()
    reference.load_state_dict(module.state_dict())
    rlx.from_torch(module, (torch.randn(1, 1, 4), torch.tensor([0])), tmp_path / "b", verify=False)
    model = rlx.load(tmp_path / "b", engine="onnxruntime")
    for step in range(3):
        x, pos = torch.randn(1, 1, 4), torch.tensor([step])
        with torch.no_grad():
            want = reference(x, pos)
        assert_arrays_match(model(x.numpy(), pos.numpy()), want.numpy(), f"step {step}", rtol=1e-5, atol=1e-6)
    assert_arrays_match(model.state["b_k"], reference.k.numpy(), "state", rtol=1e-5, atol=1e-6)


HEADS = {
    # the reduction, reshaped (as a classifier head flattens it) into a Linear of this many
    # features; how many Reshape nodes the emitted graph keeps (sum-last-axis: the 3-d Linear's
    # own flatten and unflatten)
    "avgpool-flatten": (lambda x: torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1), 8, 0),
    "amax-view": (lambda x: torch.amax(x, dim=(2, 3), keepdim=True).view(x.shape[0], -1), 8, 0),
    "sum-last-axis": (lambda x: x.sum(dim=-1, keepdim=True).reshape(x.shape[0], x.shape[1], x.shape[2]), 4, 2),
    # (its reader keeps a unit axis: that reshape stays, the flatten after it folds into it)
    "mean-kept-as-3d": (lambda x: x.mean(dim=(2, 3), keepdim=True).reshape(x.shape[0], x.shape[1], 1).flatten(1), 8, 1),
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_a_reduction_whose_reshape_drops_its_unit_axes_emits_no_reshape(name):
    """A keepdim reduction read only by a reshape that drops exactly the kept unit axes (a
    classifier's global average pool, flattened into its Linear) drops them itself: the reshape
    is no node. A reshape to any other shape keeps its node. onnxruntime's answers match PyTorch's,
    NaN included (amax propagates it)."""
    reduce_to, features, reshapes = HEADS[name]

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.lin = torch.nn.Linear(features, 3)

        def forward(self, x):
            return self.lin(reduce_to(x))

    x = torch.randn(2, 8, 4, 5)
    x[1, 2, 3, 4] = float("nan")
    model, program, exported = convert(Head(), (x,), engine="onnxruntime")
    proto = to_onnx(program, bind_weights(program, exported.weights, "weights"))
    assert [n.op_type for n in proto.graph.node].count("Reshape") == reshapes
    with torch.no_grad():
        want = Head()(x).numpy()
    assert_arrays_match(model(x.numpy()), want, name, rtol=1e-5, atol=1e-6)


def _features_and_their_pool(x):
    features = torch.relu(x)  # (a backbone's last hidden state and its pooled output)
    return features, features.mean(dim=(2, 3), keepdim=True)


SPATIAL_MEANS = {
    # name: (the reduction, input shape, dtype, whether it is a GlobalAveragePool)
    "image-kept": (lambda x: x.mean(dim=(2, 3), keepdim=True) * x, (2, 3, 4, 5), torch.float32, True),
    "image-dropped": (lambda x: x.mean(dim=(-1, -2)), (2, 3, 4, 5), torch.float32, True),
    # (a 3-d mean is a transformer's RMSNorm as often: ReduceMean, which onnxruntime's RMSNorm fusion
    # reads; its blocked layout is 4-d only)
    "sequence": (lambda x: x.mean(dim=2), (2, 3, 7), torch.float32, False),
    "volume": (lambda x: x.mean(dim=(2, 3, 4), keepdim=True), (1, 2, 3, 4, 5), torch.float32, True),
    "half": (lambda x: x.mean(dim=(2, 3)), (2, 3, 4, 5), torch.float16, True),  # (reduced in float32)
    "double": (lambda x: x.mean(dim=(2, 3)), (2, 3, 4, 5), torch.float64, False),
    "not-the-spatial-axes": (lambda x: x.mean(dim=(1, 2)), (2, 3, 4, 5), torch.float32, False),
    "one-spatial-axis-of-two": (lambda x: x.mean(dim=3), (2, 3, 4, 5), torch.float32, False),
    # the pooled tensor is an output too, changed back to the plain layout anyway: pooled there
    "pooled-tensor-is-an-output": (_features_and_their_pool, (2, 3, 4, 5), torch.float32, False),
}


@pytest.mark.parametrize("name", sorted(SPATIAL_MEANS))
def test_a_mean_over_the_spatial_axes_is_a_global_average_pool(name):
    """A float32 mean over every axis after batch and channel is emitted as GlobalAveragePool
    (onnxruntime keeps it in its blocked layout) unless the pooled tensor is a model output; any
    other mean stays a ReduceMean. Values and dtype match PyTorch's on onnxruntime, NaN and inf
    included."""
    fn, shape, dtype, pooled = SPATIAL_MEANS[name]

    class Mean(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    x = torch.randn(shape).to(dtype)
    x.view(-1)[1] = float("nan")
    x.view(-1)[-1] = float("inf")
    model, program, exported = convert(Mean(), (x,), engine="onnxruntime")
    ops = [n.op_type for n in to_onnx(program, bind_weights(program, exported.weights, "weights")).graph.node]
    assert ("GlobalAveragePool" in ops, "ReduceMean" in ops) == (pooled, not pooled), ops
    got, want = model(x.numpy()), Mean()(x)
    tol = 1e-3 if dtype == torch.float16 else 1e-6
    for g, w in zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,)))):
        assert_arrays_match(g, w.numpy(), name, rtol=tol, atol=tol)


class RmsNorm(torch.nn.Module):
    """Llama's RMSNorm, as transformers writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def test_an_rms_norm_is_what_onnxruntime_fuses(tmp_path):
    """An RMSNorm over a [batch, sequence, hidden] tensor reaches onnxruntime as the nodes its
    fusion reads (Pow, ReduceMean, Add, Sqrt, Div, Mul): one SimplifiedLayerNormalization after its
    optimizer, with PyTorch's values."""
    from rlx.runtime.onnxruntime_engine.executor import emit_model

    module, x = RmsNorm().eval(), torch.randn(2, 5, 16)
    model, program, _ = convert(module, (x,), engine="onnxruntime")
    ops = optimized_op_types(model, emit_model(program, model.engine), tmp_path / "optimized.onnx")
    assert ops.count("SimplifiedLayerNormalization") == 1 and "ReduceMean" not in ops, ops
    assert_arrays_match(model(x.numpy()), module(x).detach().numpy(), "rms norm", rtol=1e-5, atol=1e-6)


def test_stored_experts_are_initializers_of_their_own():
    """A grouped product over an MoE weight reads each expert's matrix as an initializer made of
    the weight's bytes (external data at its offset for an engine, embedded when written): no
    Split or Transpose of the weight that onnxruntime would fold into copies of every expert."""
    pytest.importorskip("transformers")
    import transformers.integrations.moe  # noqa: F401  (registers transformers::grouped_mm_fallback)

    from frontends.aten.test_selection import StoredExperts
    from rlx.exporters.onnx import WEIGHT_SLICES, GraphOptions

    offs = torch.tensor([2, 2, 7], dtype=torch.int32)
    _, program, exported = convert(StoredExperts(transposed=True).eval(), (torch.randn(9, 4), offs))
    weights = bind_weights(program, exported.weights, "weights")
    (name,) = [w.name for w in program.weights if len(w.shape) == 3]
    for options in (GraphOptions(external_weights=True), GraphOptions()):
        model = to_onnx(program, weights, options=options)
        ops = [n.op_type for n in model.graph.node]
        assert ops.count("Gemm") == 3 and "Split" not in ops and "Transpose" not in ops
        inits = {t.name: t for t in model.graph.initializer}
        assert name not in inits and all(f"{name}[{e}]" in inits for e in range(3))
        props = {p.key: p.value for p in model.metadata_props}
        assert WEIGHT_SLICES in props and f"{name}[2]" in props[WEIGHT_SLICES]
        if not options.external_weights:
            second = onnx.numpy_helper.to_array(inits[f"{name}[1]"])
            assert second.shape == (5, 4) and (second == weights[name][1]).all()
