"""``rlx tune`` / ``rlx.tune``: every installed engine × precision, each in its own process, checked
against PyTorch's outputs at the user's tolerance; the fastest passing choice in tuning.json, which
``rlx.load`` follows when it matches this machine (and an explicit engine overrides). Also the
onnxruntime engine's int8 precision, one of the candidates."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import rlx
from rlx.app.tune import judge, read_input_sets, tune
from rlx.errors import BundleError, InputError, RlxError, UsageError
from rlx.formats.layout import TUNING_FILE
from rlx.runtime.engines import supported_precisions
from rlx.runtime.tuning import FORMAT, machine

from helpers import CancellingLinear, GroupedConv, SmallConvNet, convert_example

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    out, module, inputs = convert_example(tmp_path_factory, "mlp")
    with torch.no_grad():
        want = module(*inputs).numpy()
    return out, inputs[0].numpy(), want


def _tuning(out, engine, precision, **changes):
    """A tuning.json choosing (engine, precision), recorded on this machine unless ``changes`` say otherwise."""
    doc = {"format": FORMAT, "version": 1, "choice": {"engine": engine, "precision": precision, "threads": 1},
           "machine": machine([engine])}  # fmt: skip
    doc["machine"].update(changes)
    (out / "bundle" / TUNING_FILE).write_text(json.dumps(doc))


NAN = float("nan")
# (got, reference, cosine tolerance, passes, reason it fails)
JUDGE_CASES = [
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.001], 0.999, True, ""),
    ([1.0, 2.0, 3.0], [1.0, 2.0, 3.05], 0.999, False, "max err 5.000e-02 > 3.050e-02"),  # relative to scale 3.05
    ([100.0, 200.0], [100.5, 200.0], 0.999, True, ""),  # 0.5 ≤ 1e-2 × 200
    ([1.0, -1.0], [-1.0, 1.0], 0.999, False, "cosine -1.000000 < 0.999; max err 2.000e+00 > 1.000e-02"),
    ([1.0, NAN], [1.0, 2.0], 0.999, False, "NaN/inf positions differ"),
    ([1.0, NAN, float("inf")], [1.0, NAN, float("inf")], 0.999, True, ""),
    (np.array([1, 2, 3]), np.array([1, 2, 4]), 0.5, False, "values differ"),  # integers: exact
    (np.array([True, False]), np.array([True, False]), 0.5, True, ""),
    (np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0], np.float64), 0.5, False, "dtype differs"),
]


@pytest.mark.parametrize("got,want,tolerance,passes,reason", JUDGE_CASES)
def test_parity_rule_at_the_users_tolerance(got, want, tolerance, passes, reason):
    got = np.asarray(got, dtype=None if isinstance(got, np.ndarray) else np.float32)
    want = np.asarray(want, dtype=None if isinstance(want, np.ndarray) else np.float32)
    (check,) = judge("set", [got], [want], tolerance, 1e-2, set())
    assert check.passed is passes and check.reason == reason, check


def test_tune_writes_the_fastest_passing_choice_and_load_follows_it(mlp, capsys):
    from rlx.cli import main

    out, x, want = mlp
    engines = ["numpy", "onnxruntime"] + (["openvino"] if "openvino" in _installed() else [])
    assert main(["tune", str(out), "--engines", ",".join(engines), "--threads", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = [(e, p) for e in engines for p in supported_precisions(e)]
    progress = [line for line in lines if line.startswith("[")]
    assert [p.split(":")[0] for p in progress] == [
        f"[{k + 1}/{len(expected)}] {e} {p}" for k, (e, p) in enumerate(expected)
    ]
    assert any(line.startswith(("fastest within tolerance: ", "choice: ")) for line in lines)
    doc = json.loads((out / "bundle" / TUNING_FILE).read_text())
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["versions"]["onnxruntime"]
    assert doc["tolerance"] == {"cosine": 0.999, "max_error": 0.01}
    assert len(doc["candidates"]) == len(expected)
    choice = doc["choice"]
    passing = [c for c in doc["candidates"] if c["passed"]]
    fastest = min(passing, key=lambda c: c["median_ms"])
    fastest_f32 = min((c for c in passing if c["precision"] == "f32"), key=lambda c: c["median_ms"])
    # the fastest, or float32 where a lower precision is not more than 5% faster
    keep_f32 = fastest_f32["median_ms"] <= 1.05 * fastest["median_ms"]
    expected_choice = fastest_f32 if keep_f32 else fastest
    assert (choice["engine"], choice["precision"]) == (expected_choice["engine"], expected_choice["precision"])
    model = rlx.load(out)
    assert (model.engine.name, model.precision) == (choice["engine"], choice["precision"])
    assert model.tuning.startswith("tuned by ")
    got = model(x)
    g, w = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    assert g @ w / (np.linalg.norm(g) * np.linalg.norm(w)) >= 0.999
    assert rlx.load(out, engine="numpy").engine.name == "numpy"  # an explicit engine wins


def test_tune_finishes_in_under_two_minutes_and_names_failures(mlp):
    out, _, _ = mlp
    # A tolerance no lower precision meets: each fails, naming the output and by how much.
    report = tune(out, tolerance=0.99999999, max_error=1e-7, engines=["onnxruntime"], write=False, runs=5)
    assert report.seconds < 120
    f32, int8, static = report.candidates
    assert (static.precision, static.passed) == ("int8-static", False)
    assert f32.passed or f32.failures  # (float32 on another engine may round differently)
    assert not int8.passed
    assert int8.verdict().startswith("FAIL reference out0: cosine ")
    assert "max err" in int8.verdict() and int8.failures[0].max_error > 1e-7


def test_user_inputs_are_checked_too(mlp, tmp_path):
    out, x, _ = mlp
    np.savez(tmp_path / "more.npz", x=x * 3)
    report = tune(out, engines=["numpy"], inputs=tmp_path / "more.npz", write=False)
    assert report.inputs[1].endswith("(numpy engine, f32)") and report.candidates[0].passed
    np.savez(tmp_path / "bad.npz", y=x)
    with pytest.raises(InputError, match=r"^--inputs .*bad.npz: set 0 has no array for input\(s\) x$"):
        tune(out, engines=["numpy"], inputs=tmp_path / "bad.npz", write=False)


def test_parquet_input_sets_are_read_in_the_inputs_dtypes(mlp, tmp_path):
    """A Parquet set written from nested Python floats is float64; like `rlx batch`, tune reads
    it as the float32 the model takes (same kind), and still refuses values of no number kind."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    out, x, _ = mlp
    rows = [x.tolist(), (2 * x).tolist()]
    pq.write_table(pa.table({"x": rows}), tmp_path / "sets.parquet")
    assert pq.read_schema(tmp_path / "sets.parquet").field("x").type.value_type.value_type == pa.float64()
    report = tune(out, engines=["numpy"], inputs=tmp_path / "sets.parquet", write=False)
    assert len(report.inputs) == 2 and report.candidates[0].passed, report.candidates[0].verdict()
    (kind,) = {v.dtype for v in rlx.load(out, engine="numpy").inputs}
    sets = read_input_sets(tmp_path / "sets.parquet", ["x"], kinds={"x": np.dtype(np.float32)})
    assert len(sets) == 2 and all(s["x"].dtype == np.float32 for s in sets) and kind == "f32"
    np.testing.assert_array_equal(sets[1]["x"], (2 * x).astype(np.float32))
    pq.write_table(pa.table({"x": [[["a"] * x.shape[1]] * x.shape[0]]}), tmp_path / "text.parquet")
    with pytest.raises(InputError, match=r"^input 'x' has dtype <U1, expected float32"):
        tune(out, engines=["numpy"], inputs=tmp_path / "text.parquet", write=False)


@pytest.mark.parametrize(
    "changes,why",
    [
        ({"cpu": "Another CPU 9000"}, "it was measured on another CPU (Another CPU 9000)"),
        (
            {"versions": {"rlx": "0.0.1", "numpy": "1.0", "onnxruntime": "0.1"}},
            "package versions changed (rlx 0.0.1 -> ",
        ),
    ],
)
def test_a_tuning_from_another_machine_is_ignored(mlp, changes, why):
    out, x, _ = mlp
    _tuning(out, "onnxruntime", "f32", **changes)
    model = rlx.load(out)
    assert model.engine.name == "numpy" and why in model.tuning
    _tuning(out, "onnxruntime", "f32")
    assert rlx.load(out).engine.name == "onnxruntime"


def test_a_malformed_tuning_is_refused_in_one_line(mlp):
    out, _, _ = mlp
    (out / "bundle" / TUNING_FILE).write_text('{"choice": 3}')
    with pytest.raises(BundleError, match="not a tuning file written by `rlx tune`"):
        rlx.load(out)
    (out / "bundle" / TUNING_FILE).write_text('{"format": 1, "choice": ')  # (cut short)
    with pytest.raises(BundleError, match=r"tuning.json: not valid JSON: .*; re-run `rlx tune` or delete it$"):
        rlx.load(out)
    for options, message in [
        ({"calibration": 3}, "malformed choice options; re-run `rlx tune`"),
        ({"float32": "relu"}, "malformed choice options; re-run `rlx tune`"),
        ({"threads": 2}, "malformed choice options; re-run `rlx tune`"),  # (not an option a choice records)
        ({"pad_channels": "yes"}, "malformed choice options; re-run `rlx tune`"),
        ({"calibration": "../../elsewhere.json"}, "resolves outside the bundle directory"),
    ]:
        _tuning(out, "onnxruntime", "int8-static")
        doc = json.loads((out / "bundle" / TUNING_FILE).read_text())
        doc["choice"]["options"] = options
        (out / "bundle" / TUNING_FILE).write_text(json.dumps(doc))
        with pytest.raises(BundleError, match=message):
            rlx.load(out)
    _tuning(out, "openvino", "f32")
    doc = json.loads((out / "bundle" / TUNING_FILE).read_text())
    doc["choice"]["options"] = {"pad_channels": True}  # (an onnxruntime option)
    (out / "bundle" / TUNING_FILE).write_text(json.dumps(doc))
    with pytest.raises(BundleError, match="malformed choice options"):
        rlx.load(out)
    (out / "bundle" / TUNING_FILE).unlink()
    assert rlx.load(out).engine.name == "numpy"


def test_a_padded_channels_choice_loads_padded(mlp):
    """A choice tune recorded with ``pad_channels`` loads with it (the option reaches the engine)."""
    out, x, want = mlp
    _tuning(out, "onnxruntime", "f32")
    doc = json.loads((out / "bundle" / TUNING_FILE).read_text())
    doc["choice"]["options"] = {"pad_channels": True}
    (out / "bundle" / TUNING_FILE).write_text(json.dumps(doc))
    model = rlx.load(out)
    assert model.engine.name == "onnxruntime" and model.engine.pad_channels
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6)
    (out / "bundle" / TUNING_FILE).unlink()


def test_int8_on_onnxruntime_is_close_not_exact(mlp):
    out, x, _ = mlp
    int8 = rlx.load(out, engine="onnxruntime", precision="int8")
    f32 = rlx.load(out, engine="onnxruntime")
    assert (int8.precision, f32.precision) == ("int8", "f32")
    g, w = int8(x).astype(np.float64).ravel(), f32(x).astype(np.float64).ravel()
    assert g @ w / (np.linalg.norm(g) * np.linalg.norm(w)) > 0.999
    assert np.abs(g - w).max() > 0  # the MatMuls ran in int8


def test_cli_refuses_an_unknown_engine_in_one_line(mlp, capsys):
    from rlx.cli import main

    assert main(["tune", str(mlp[0]), "--engines", "tpu"]) == 2
    assert (
        capsys.readouterr().err.strip() == "rlx: unknown engine(s) tpu; choose from numpy, jax, onnxruntime, openvino"
    )
    with pytest.raises(UsageError, match="--tolerance is a cosine"):
        tune(mlp[0], tolerance=2.0)


def _installed():
    import importlib.util

    return {e for e in ("openvino", "jax") if importlib.util.find_spec(e) is not None}


class OutlierConvNet(torch.nn.Module):
    """Int8's worst case: one channel of conv1's output 1000× the others, so one activation range
    (per tensor) cannot hold the small channels, which conv2 needs; conv1 and conv2 lose the accuracy."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c1, self.c2 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1)
        self.c3 = torch.nn.Conv2d(8, 4, 1)
        with torch.no_grad():
            self.c1.weight[0] *= 1000
            self.c1.bias[0] = self.c1.bias[0].abs() * 1000
            self.c2.weight[:, 0] /= 1000

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c3(torch.relu(self.c2(torch.relu(self.c1(x)))))


def _convert(module, x, out, dynamic=None):
    from torch.export import Dim

    shapes = ({0: Dim("batch", max=64)},) if dynamic else None
    rlx.from_torch(module.eval(), (x,), out, dynamic_shapes=shapes)
    return out


def _within_default_tolerance(got, want):
    (check,) = judge("torch", [got], [want], 0.999, 1e-2, set())
    assert check.passed, check


def test_int8_static_is_calibrated_once_and_runs_quantized_within_tolerance(tmp_path):
    from rlx.formats.bundle import read_bundle
    from rlx.formats.layout import CALIBRATION_FILE
    from rlx.runtime.engines import calibrate

    module = SmallConvNet().eval()
    x = torch.randn(2, 3, 16, 16)
    out = _convert(module, x, tmp_path / "cnn", dynamic=True)
    with pytest.raises(UsageError, match=r"^int8-static needs the activation ranges of a calibration run \(no "):
        rlx.load(out, engine="onnxruntime", precision="int8-static")
    program, weights, _ = read_bundle(out / "bundle")
    calibration = [[torch.randn(2, 3, 16, 16).numpy()] for _ in range(4)] + [[3 * x.numpy()[:1]]]
    assert calibrate(program, weights, calibration, out / "bundle" / CALIBRATION_FILE) == 5  # (both shapes)
    # each tensor's range is the widest the two shapes' own calibrations saw
    from onnxruntime.quantization.calibrate import load_tensors_data

    apart = [tmp_path / "batch2.json", tmp_path / "batch1.json"]
    calibrate(program, weights, calibration[:4], apart[0])
    calibrate(program, weights, calibration[4:], apart[1])
    (two, one), merged = [load_tensors_data(p) for p in apart], load_tensors_data(out / "bundle" / CALIBRATION_FILE)
    assert set(merged.keys()) == set(two.keys()) == set(one.keys()) and len(merged.keys()) > 5
    for name in merged.keys():
        (lo, hi), (lo2, hi2), (lo1, hi1) = merged[name].range_value, two[name].range_value, one[name].range_value
        np.testing.assert_array_equal(lo, np.minimum(lo2, lo1))
        np.testing.assert_array_equal(hi, np.maximum(hi2, hi1))
    assert any(np.any(one[n].range_value[1] > two[n].range_value[1]) for n in merged.keys())  # (3x: wider)
    static = rlx.load(out, engine="onnxruntime", precision="int8-static")
    f32 = rlx.load(out, engine="onnxruntime")
    for batch in (2, 5):  # the ranges of one calibration serve every binding of the batch axis
        xb = torch.randn(batch, 3, 16, 16)
        with torch.no_grad():
            want = module(xb).numpy()
        got = static(xb.numpy())
        assert got.shape == want.shape and got.dtype == np.float32
        _within_default_tolerance(got, want)
        assert np.abs(got - f32(xb.numpy())).max() > 1e-4  # quantized: not float32's answer
    # NaN/inf in the inputs: PyTorch's answer, from the float32 graph (quantizing would make NaN a number)
    xn = torch.randn(3, 3, 16, 16)
    xn[0, 1, 2, 3], xn[1, 0, 5, 5] = float("nan"), float("inf")
    with torch.no_grad():
        want = module(xn).numpy()
    for precision in ("int8", "int8-static"):
        got = rlx.load(out, engine="onnxruntime", precision=precision)(xn.numpy())
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-5)  # (row 2 is finite: float32 too)


def test_calibration_leaves_out_input_sets_with_nan_or_inf(tmp_path):
    """A NaN or inf input sets no activation range (onnxruntime's calibrator failed with "scale
    issue" on one): such sets are left out, and tune calibrates on the reference when every set
    the user gave holds one."""
    from rlx.formats.bundle import read_bundle
    from rlx.runtime.engines import calibrate

    x = torch.randn(2, 3, 16, 16)
    out = _convert(SmallConvNet().eval(), x, tmp_path / "cnn")
    program, weights, _ = read_bundle(out / "bundle")
    bad = [x.numpy().copy(), x.numpy().copy()]
    bad[0][0, 1, 2, 3], bad[1][1, 0, 4, 4] = np.nan, -np.inf
    assert calibrate(program, weights, [[bad[0]], [x.numpy()], [bad[1]]], tmp_path / "ranges.json") == 1
    finite_only = tmp_path / "finite.json"
    calibrate(program, weights, [[x.numpy()]], finite_only)
    assert json.loads((tmp_path / "ranges.json").read_text()) == json.loads(finite_only.read_text())
    with pytest.raises(InputError) as caught:
        calibrate(program, weights, [[b] for b in bad], tmp_path / "none.json")
    message = str(caught.value)
    assert "\n" not in message and "each of the 2 given holds NaN or inf" in message
    assert not (tmp_path / "none.json").exists()
    np.savez(tmp_path / "nan.npz", x=bad[0])
    lines: list[str] = []
    report = tune(out, engines=["onnxruntime"], precisions=["int8-static"], inputs=tmp_path / "nan.npz",
                  threads=1, runs=3, write=False, progress=lines.append)  # fmt: skip
    (cand,) = report.candidates
    assert not cand.error and cand.passed, cand.error
    assert "calibrated int8-static on 1 input set(s), leaving out 1 with NaN or inf" in lines


def test_int8_static_quantizes_bert(tmp_path):
    """BERT as Hugging Face initialises it (LayerNorms of weight 1, bias 0, after residual adds):
    the LayerNorms stay in float (onnxruntime's quantizer, left to quantize every op type, failed
    on their biases); the products run in int8, close to PyTorch's answer."""
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=16)  # fmt: skip
    model = transformers.BertModel(config).eval()
    model.config.return_dict = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (transformers' and torch.export's chatter)
        rlx.from_torch(model, (torch.randint(0, 100, (2, 8)),), tmp_path / "bert")
    report = tune(tmp_path / "bert", engines=["onnxruntime"], precisions=["int8-static"], threads=1, runs=3)
    (cand,) = report.candidates
    assert not cand.error, cand.error
    assert 0.99 < cand.min_cosine < 1 - 1e-7  # (quantized: close, not float32's answer)


@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_a_calibration_lacking_a_range_is_one_line(engine, tmp_path):
    from rlx.formats.bundle import read_bundle
    from rlx.formats.layout import CALIBRATION_FILE
    from rlx.runtime.engines import calibrate

    if engine not in _installed() | {"onnxruntime"} or "int8-static" not in supported_precisions(engine):
        pytest.skip(f"{engine} runs no int8-static here")
    x = torch.randn(2, 3, 16, 16)
    out = _convert(SmallConvNet().eval(), x, tmp_path / "cnn")
    program, weights, _ = read_bundle(out / "bundle")
    path = out / "bundle" / CALIBRATION_FILE
    calibrate(program, weights, [[x.numpy()]], path)
    ranges = json.loads(path.read_text())
    del ranges["data"]["max_pool2d_with_indices__0"]  # (the second convolution's input)
    path.write_text(json.dumps(ranges))
    with pytest.raises(RlxError) as caught:
        rlx.load(out, engine=engine, precision="int8-static")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path} has no activation range for a tensor of ")
    assert "max_pool2d_with_indices__0" in message and message.endswith(
        "recalibrate: `rlx tune BUNDLE --precisions int8-static`"
    )


def test_the_nodes_that_lose_int8_accuracy_are_named(tmp_path):
    from rlx.app.mixed import culprits, losses
    from rlx.formats.bundle import read_bundle
    from rlx.formats.layout import CALIBRATION_FILE
    from rlx.runtime.engines import calibrate

    x = torch.randn(2, 3, 12, 12)
    out = _convert(OutlierConvNet(), x, tmp_path / "outlier")
    program, weights, _ = read_bundle(out / "bundle")
    path = out / "bundle" / CALIBRATION_FILE
    calibrate(program, weights, [[x.numpy()]], path)
    ranked = losses("onnxruntime", program, weights, [x.numpy()], "int8-static", {"calibration": path})
    blamed = culprits(ranked, 0.999)
    assert [(b.name, b.op) for b in blamed[:2]] == [
        ("convolution_1", "aten.convolution.default"),  # conv2: its input's small channels quantized away
        ("convolution", "aten.convolution.default"),  # conv1: its output's range set by the outlier channel
    ]
    assert blamed[0].loss > 0.1 and all(b.added > 1e-5 for b in blamed)


class Attention(torch.nn.Module):
    """A projection, attention (one of onnxruntime's contrib ops, past which ONNX shape inference
    cannot type the tensors), GELU and a second projection."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.out = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16)

    def forward(self, x):
        q, k, v = self.qkv(x).view(1, 6, 3, 2, 8).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, 6, 16)
        return self.out(torch.nn.functional.gelu(y))


def test_int8_is_traced_node_by_node_past_contrib_ops(tmp_path):
    """Every value returned from dynamic int8's graph (it failed: "onnxruntime could not quantize",
    or on a ViT "Invalid tensor data type 0", when the traced values' types were left to inference)."""
    from rlx.app.mixed import losses
    from rlx.app.node_compare import run_whole
    from rlx.formats.bundle import read_bundle

    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(0))
    out = _convert(Attention(), x, tmp_path / "attention")
    program, weights, _ = read_bundle(out / "bundle")
    ranked = losses("onnxruntime", program, weights, [x.numpy()], "int8")
    floats = {i.result for i in run_whole(program, [x.numpy()], weights).program.instrs if i.dtype == "f32"}
    assert len(ranked) >= 6 and {r.name for r in ranked} <= floats
    assert all(np.isfinite(r.loss) and 0 <= r.loss < 1e-2 for r in ranked)
    # int8 quantizes the products: one of them adds the most loss, or the most but one (on some
    # inputs attention, whose inputs come from a quantized product, adds more)
    assert "aten.addmm.default" in [r.op for r in sorted(ranked, key=lambda r: -r.added)[:2]]


@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_tune_tries_int8_static_and_keeps_the_losing_nodes_in_float32(engine, tmp_path):
    """On either engine (OpenVINO runs onnxruntime's quantized graph: the nodes are named by
    tracing it on onnxruntime)."""
    from rlx.formats.layout import CALIBRATION_FILE

    if engine not in _installed() | {"onnxruntime"} or "int8-static" not in supported_precisions(engine):
        pytest.skip(f"{engine} runs no int8-static here")
    module = OutlierConvNet().eval()
    x = torch.randn(2, 3, 12, 12)
    out = _convert(module, x, tmp_path / "outlier")
    lines: list[str] = []
    report = tune(out, engines=[engine], precisions=["int8-static"], threads=1, runs=5, progress=lines.append)
    (cand,) = report.candidates
    assert lines[0] == "calibrated int8-static on 1 input set(s)"
    assert lines[-1].startswith(f"[1/1] {engine} int8-static: ") and "pass (mixed precision)" in lines[-1]
    # each conv with the ReLU after it (static quantization folds a ReLU into its input's range)
    assert cand.passed and cand.options["float32"] == ["convolution_1", "relu_1", "convolution", "relu"]
    table = report.table()
    assert "int8-static" in table and "note: all int8-static: FAIL reference out0: cosine " in table
    assert "losing the accuracy: convolution_1 (aten.convolution.default, 1-cos " in table
    doc = json.loads((out / "bundle" / TUNING_FILE).read_text())
    assert doc["choice"]["options"] == {"calibration": CALIBRATION_FILE, "float32": cand.options["float32"]}
    assert (out / "bundle" / CALIBRATION_FILE).is_file()
    model = rlx.load(out)  # follows the choice: int8-static, those nodes in float32, no recalibration
    assert (model.engine.name, model.precision, model.tuning.startswith("tuned by ")) == (
        engine,
        "int8-static",
        True,
    )
    with torch.no_grad():  # (the tolerance is proven on the inputs tune checked: calibrate on representative ones)
        _within_default_tolerance(model(x.numpy()), module(x).numpy())


def test_tune_keeps_the_losing_nodes_in_float32_at_openvino_bf16(tmp_path):
    """Mixed precision at OpenVINO's bf16: traced on OpenVINO itself, the grouped convolution named,
    kept in float32 by OpenVINO's runtime mark, and the candidate passes. Where this CPU's bf16
    convolution keeps the tolerance, the plain bf16 candidate passes instead."""
    if "openvino" not in _installed() or "bf16" not in supported_precisions("openvino"):
        pytest.skip("OpenVINO runs no bf16 here")
    module = GroupedConv().eval()
    x = torch.randn(2, 40, 64, generator=torch.Generator().manual_seed(0))
    out = _convert(module, x, tmp_path / "grouped")
    with torch.no_grad():
        want = module(x).numpy()
    plain = rlx.load(out, engine="openvino", precision="bf16")(x.numpy())
    (plain_check,) = judge("torch", [plain], [want], 0.999, 1e-2, set())
    lines: list[str] = []
    report = tune(out, engines=["openvino"], precisions=["bf16"], threads=1, runs=5, progress=lines.append)
    (cand,) = report.candidates
    assert cand.passed, report.table()
    if plain_check.passed:
        assert "float32" not in cand.options and "mixed" not in lines[-1]
        return
    assert lines[-1].startswith("[1/1] openvino bf16: ") and "pass (mixed precision)" in lines[-1]
    conv = next(i.result for i in rlx.load(out).program.instrs if i.call.op == "Conv")
    assert cand.options["float32"][0] == conv
    assert f"losing the accuracy: {conv} (aten.convolution.default, 1-cos " in report.table()
    model = rlx.load(out)  # follows the choice: bf16 with those nodes in float32
    assert (model.engine.name, model.precision) == ("openvino", "bf16")
    _within_default_tolerance(model(x.numpy()), want)


def test_tune_keeps_a_losing_linear_in_float32_at_openvino_bf16(tmp_path):
    """Mixed precision where OpenVINO's bf16 loses the accuracy in a product (a Linear whose
    products cancel a large common input): the product is named, its Linear computes in float32
    though OpenVINO rebuilds it, and the candidate passes; ``rlx.load`` follows the choice."""
    if "openvino" not in _installed() or "bf16" not in supported_precisions("openvino"):
        pytest.skip("OpenVINO runs no bf16 here")
    module = CancellingLinear().eval()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 0.1 + 100.0
    out = _convert(module, x, tmp_path / "cancelling")
    with torch.no_grad():
        want = module(x).numpy()
    plain = rlx.load(out, engine="openvino", precision="bf16")(x.numpy())
    (plain_check,) = judge("torch", [plain], [want], 0.999, 1e-2, set())
    if plain_check.passed:
        pytest.skip("OpenVINO keeps this product in float32 at bf16 on this CPU anyway")
    lines: list[str] = []
    report = tune(out, engines=["openvino"], precisions=["bf16"], threads=1, runs=5, progress=lines.append)
    (cand,) = report.candidates
    assert cand.passed and "pass (mixed precision)" in lines[-1], report.table()
    product = next(i.result for i in rlx.load(out).program.instrs if i.call.op == "MatMul")
    assert cand.options["float32"][0] == product
    assert f"losing the accuracy: {product} (aten.addmm.default, 1-cos " in report.table()
    model = rlx.load(out)  # follows the choice: bf16 with that Linear in float32
    assert (model.engine.name, model.precision) == ("openvino", "bf16")
    got = model(x.numpy())
    assert got.shape == want.shape and got.dtype == np.float32
    _within_default_tolerance(got, want)


class NormalizedCancellingLinear(CancellingLinear):
    """CancellingLinear with small weights (its output about 1e-2) and a LayerNorm after it, which
    scales that output and its bfloat16 error up about 100× together: the product loses the
    accuracy, the norm adds none of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        with torch.no_grad():
            self.lin.weight *= 0.01
            self.lin.bias *= 0.01

    def forward(self, x):
        return self.out(self.norm(self.lin(x)))


def _openvino_bf16_loses(module, x, out):
    """Skip unless OpenVINO's bf16 fails the default tolerance on ``module`` (some CPUs keep such
    products in float32 anyway); the converted bundle and eager's answer."""
    if "openvino" not in _installed() or "bf16" not in supported_precisions("openvino"):
        pytest.skip("OpenVINO runs no bf16 here")
    _convert(module, x, out)
    with torch.no_grad():
        want = module(x).numpy()
    (check,) = judge(
        "torch", [rlx.load(out, engine="openvino", precision="bf16")(x.numpy())], [want], 0.999, 1e-2, set()
    )
    if check.passed:
        pytest.skip("OpenVINO keeps this product in float32 at bf16 on this CPU anyway")
    return want, check


def test_max_error_is_measured_per_node_on_each_values_own_scale(tmp_path):
    """The per-node max error is over each value's own largest magnitude, so a LayerNorm that scales
    its input's error up with its input adds little of it: by max error (as by cosine) the product
    is named first. (Over the output's scale floored at 1, as the parity rule measures outputs, the
    product's error would read 1e-4 and the norm would seem to add almost all of its own.)"""
    from rlx.app.mixed import culprits, losses
    from rlx.formats.bundle import read_bundle

    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)) * 0.1 + 100.0
    out = tmp_path / "normalized"
    _openvino_bf16_loses(NormalizedCancellingLinear().eval(), x, out)
    program, weights, _ = read_bundle(out / "bundle")
    ranked = losses("openvino", program, weights, [x.numpy()], "bf16")
    ops = {r.name: r.op for r in ranked}
    product = next(i.result for i in program.instrs if i.call.op == "MatMul")
    norm = next(r for r in ranked if r.op == "aten.layer_norm.default")
    assert all(np.isfinite(r.error) and r.error >= 0 for r in ranked)
    for blamed in (culprits(ranked, 0.999), culprits(ranked, 0.999, 1e-2)):
        assert blamed[0].name == product and ops[product] == "aten.addmm.default"
    added = next(r for r in ranked if r.name == product).error_added
    assert added > 0.1 and norm.error > 0.1 and norm.error_added < added / 10  # (its input's error, rescaled)


def test_tune_keeps_nodes_in_float32_where_only_the_max_error_fails(tmp_path):
    """One row of a large batch near a large constant: bfloat16 loses that row's answer in the
    cancelling product, so the output's max error fails while its cosine (over 1024 rows) holds and
    no node adds a hundredth of cosine's allowance (as on ConvNeXt). The nodes are ranked by the max
    error they add instead, the product is kept in float32, and the candidate passes."""
    from rlx.app.mixed import culprits, losses
    from rlx.formats.bundle import read_bundle

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 64, generator=generator)
    x[0] = torch.randn(64, generator=generator) * 0.1 + 100.0
    out = tmp_path / "one_hard_row"
    want, check = _openvino_bf16_loses(CancellingLinear().eval(), x, out)
    program, weights, _ = read_bundle(out / "bundle")
    if check.cosine < 0.999 or culprits(losses("openvino", program, weights, [x.numpy()], "bf16"), 0.999):
        pytest.skip(f"on this CPU bf16 loses this product's accuracy by cosine too ({check})")
    lines: list[str] = []
    report = tune(out, engines=["openvino"], precisions=["bf16"], threads=1, runs=5, progress=lines.append)
    (cand,) = report.candidates
    assert cand.passed and "pass (mixed precision)" in lines[-1], report.table()
    product = next(i.result for i in program.instrs if i.call.op == "MatMul")
    assert cand.options["float32"][0] == product
    table = report.table()
    assert "note: all bf16: FAIL reference out0: max err " in table
    assert f"losing the accuracy: {product} (aten.addmm.default, max err " in table and " of its scale)" in table
    got = rlx.load(out)(x.numpy())  # follows the choice
    (kept,) = judge("torch", [got], [want], 0.999, 1e-2, set())
    assert kept.passed and got.dtype == np.float32 and got.shape == want.shape


@pytest.mark.parametrize("precision", ["int8", "int8-static"])
def test_instructions_kept_in_float32_are_not_quantized(tmp_path, precision):
    """``float32=`` (mixed precision) keeps the named instructions' nodes out of quantization: with
    every quantizable one kept, the answer is float32's (to rounding); an unknown option is refused."""
    from rlx.formats.bundle import read_bundle
    from rlx.formats.layout import CALIBRATION_FILE
    from rlx.runtime.engines import calibrate

    module = SmallConvNet().eval()
    x = torch.randn(2, 3, 16, 16)
    out = _convert(module, x, tmp_path / "cnn")
    program, weights, _ = read_bundle(out / "bundle")
    calibrate(program, weights, [[x.numpy()]], out / "bundle" / CALIBRATION_FILE)
    f32 = rlx.load(out, engine="onnxruntime")(x.numpy())
    every = [ins.result for ins in program.instrs]
    low = rlx.load(out, engine="onnxruntime", precision=precision)(x.numpy())
    kept = rlx.load(out, engine="onnxruntime", precision=precision, engine_options={"float32": every})(x.numpy())
    assert np.abs(low - f32).max() > 1e-5  # (int8 quantizes the Linear; int8-static the convs too)
    np.testing.assert_allclose(kept, f32, rtol=1e-5, atol=1e-6)
    with pytest.raises(
        UsageError,
        match=r"^float32= keeps instructions out of a lower precision; it needs precision='int8' or 'int8-static'$",
    ):
        rlx.load(out, engine="onnxruntime", engine_options={"float32": every})


def _race_work(threads: int, progress=None, bundle: Path = Path("b"), inputs: dict | None = None):
    """What ``_race`` reads of tune's work: the bundle, the first input set, threads, progress."""
    from rlx.app.tune import _Work
    from rlx.ir.program import Program

    program = Program("p", [], [], [], [])  # (no convolution: no padded-channels variant)
    return _Work(bundle, program, {}, [("set", inputs or {}, [])], 0.999, 0.01, set(), threads, 5, progress)


def test_close_contenders_are_re_timed_together(mlp):
    from rlx.app.tune import race

    out, x, _ = mlp
    contenders = [("numpy", "f32", None, None), ("onnxruntime", "f32", None, 1), ("onnxruntime", "int8", None, 2)]
    medians = race(str(out), contenders, {"x": x}, 1, rounds=2, block_s=0.001)
    assert len(medians) == 3 and all(0 < m < 1e3 for m in medians)
    # tune's close contenders (here made equal) get the medians of such a race, in a fresh process
    from rlx.app.tune import _race

    report = tune(out, engines=["onnxruntime"], precisions=["f32", "int8"], threads=1, write=False, runs=5)
    for cand in report.candidates:
        assert cand.passed
        cand.median_ms = 1e6
    lines: list[str] = []
    _race(report, _race_work(1, lines.append, out / "bundle", {"x": x}))
    assert all(0 < c.median_ms < 1e3 for c in report.candidates)
    assert lines == ["timed together: " + ", ".join(f"{c.name} {c.median_ms:.3f} ms" for c in report.candidates)]


@pytest.mark.parametrize(
    "medians,chosen",
    [
        ({"f32": 1.0, "int8": 0.5}, "int8"),  # clearly faster: the lower precision
        ({"f32": 1.04, "int8": 1.0}, "f32"),  # within 5%: float32's exact answer is kept
        ({"f32": 1.0, "int8": 1.2}, "f32"),
    ],
)
def test_a_lower_precision_must_be_clearly_faster(medians, chosen):
    from rlx.app.tune import Candidate, TuneReport

    cands = [Candidate("onnxruntime", p, passed=True, median_ms=m) for p, m in medians.items()]
    report = TuneReport("b", 0.999, 0.01, None, [], cands)
    assert report.choice is not None and report.choice.precision == chosen
    last = report.table().splitlines()[-1]
    assert last.startswith("choice: onnxruntime f32") == (chosen == "f32" and medians["int8"] < medians["f32"])


RACES = [
    # every passing candidate within 2x of the fastest, in the order of their first timings
    (
        {
            ("openvino", "bf16"): 1.0,
            ("openvino", "int8-static"): 1.3,
            ("onnxruntime", "f32"): 1.4,
            ("openvino", "f32"): 1.9,
            ("numpy", "f32"): 5.0,
        },  # fmt: skip
        [("openvino", "bf16"), ("openvino", "int8-static"), ("onnxruntime", "f32"), ("openvino", "f32")],
    ),
    # six at most, and the fastest float32 one (choice weighs float32 against a lower precision:
    # both medians must come from the same race)
    (
        {
            ("openvino", "bf16"): 1.0,
            ("openvino", "f16"): 1.01,
            ("onnxruntime", "int8"): 1.02,
            ("onnxruntime", "int8-static"): 1.03,
            ("openvino", "int8-static"): 1.04,
            ("jax", "bf16"): 1.05,
            ("onnxruntime", "bf16"): 1.06,
            ("onnxruntime", "f32"): 1.5,
        },  # fmt: skip
        [
            ("openvino", "bf16"),
            ("openvino", "f16"),
            ("onnxruntime", "int8"),
            ("onnxruntime", "int8-static"),
            ("openvino", "int8-static"),
            ("jax", "bf16"),
            ("onnxruntime", "f32"),
        ],
    ),
]


@pytest.mark.parametrize("medians,raced_ones", RACES)
def test_the_race_takes_every_candidate_within_2x_and_float32(monkeypatch, medians, raced_ones):
    import rlx.app.tune as tune_module
    from rlx.app.tune import Candidate, TuneReport, _race

    raced = []

    def fake_race(threads, fn, bundle, contenders, *rest):
        if not rest[-1]:  # (the second race, in reverse order, times the same contenders)
            raced.extend(contenders)
        return [1.0] * len(contenders)

    monkeypatch.setattr(tune_module, "in_fresh_process", fake_race)
    cands = [Candidate(e, p, passed=True, median_ms=m) for (e, p), m in medians.items()]
    report = TuneReport("b", 0.999, 0.01, None, [], cands)
    _race(report, _race_work(1))
    assert [(e, p) for e, p, _, _ in raced] == raced_ones
    assert all(threads == 1 for *_, threads in raced)  # (tune's own threads: one, so no fewer)


def test_every_close_contender_is_raced_at_fewer_threads_too(monkeypatch):
    """Each close contender on an engine whose threads are a session setting is raced at the
    halvings of tune's threads as well, not only the fastest few: on ResNet b1 the three fastest at
    two threads were onnxruntime's, and the fourth, OpenVINO bf16, ran 0.73x of them on one."""
    import rlx.app.tune as tune_module
    from rlx.app.tune import Candidate, TuneReport, _race

    raced = []

    def fake_race(threads, fn, bundle, contenders, *rest):
        if not rest[-1]:  # (the second race, in reverse order, times the same contenders)
            raced.extend(contenders)
        return [1.0] * len(contenders)

    monkeypatch.setattr(tune_module, "in_fresh_process", fake_race)
    firsts = [("onnxruntime", "f32", 1.0), ("onnxruntime", "int8", 1.01), ("onnxruntime", "int8-static", 1.02),
              ("openvino", "bf16", 1.03), ("numpy", "f32", 1.5)]  # fmt: skip
    cands = [Candidate(e, p, passed=True, median_ms=m) for e, p, m in firsts]
    report = TuneReport("b", 0.999, 0.01, 4, [], cands)
    _race(report, _race_work(4))
    at_four = [(e, p, 4) for e, p, _ in firsts]
    fewer = [(e, p, n) for e, p, _ in firsts if e != "numpy" for n in (2, 1)]
    assert [(e, p, n) for e, p, _, n in raced] == at_four + fewer


def test_each_contender_keeps_its_lower_median_of_two_races(monkeypatch):
    """The race runs twice, in a fresh process each, the second timing the contenders in reverse
    order; each keeps the lower of its two medians, since a disturbance only adds time: here the
    first race was slowed on both cores (the two-thread contenders 1.4x), the second was not."""
    import rlx.app.tune as tune_module
    from rlx.app.tune import Candidate, TuneReport, _race, _Work

    calls: list[tuple] = []

    def fake_race(threads, fn, bundle, contenders, inputs, own, rounds, block_s, reverse):
        calls.append(([(e, p, n) for e, p, _, n in contenders], rounds, reverse))
        return [1.4, 1.1, 1.4, 1.0] if not reverse else [1.0, 1.05, 1.3, 0.98]

    monkeypatch.setattr(tune_module, "in_fresh_process", fake_race)
    monkeypatch.setattr(_Work, "run", lambda self, cand: None)  # (the winning variant's judging: passes)
    cands = [Candidate("openvino", "bf16", passed=True, median_ms=1.0),
             Candidate("onnxruntime", "f32", passed=True, median_ms=1.2)]  # fmt: skip
    report = TuneReport("b", 0.999, 0.01, 2, [], cands)
    _race(report, _race_work(2))
    contenders = [
        ("openvino", "bf16", 2),
        ("onnxruntime", "f32", 2),
        ("openvino", "bf16", 1),
        ("onnxruntime", "f32", 1),
    ]
    assert calls == [(contenders, tune_module.RACE_ROUNDS, False), (contenders, tune_module.RACE_ROUNDS, True)]
    assert [(c.name, c.median_ms) for c in report.candidates] == [
        ("openvino bf16", 1.0), ("onnxruntime f32", 1.05), ("onnxruntime f32 on 1 thread", 0.98)
    ]  # fmt: skip
    assert report.choice is not None and report.choice.name == "onnxruntime f32 on 1 thread"


def test_a_race_that_crashes_at_fewer_threads_is_run_again_without_the_crashing_ones(monkeypatch):
    """An engine can crash the race's process at a thread count no candidate ran at yet (OpenVINO
    2026.4 compiling the transformer example at bf16 on one thread: SIGFPE). Each fewer-threads
    variant is then tried alone, and the race runs again without the ones that crash."""
    import rlx.app.tune as tune_module
    from rlx.app.tune import Candidate, TuneReport, _race, _Work

    races: list[list] = []

    def fake_race(threads, fn, bundle, contenders, *rest):
        races.append([(e, p, n) for e, p, _, n in contenders])
        if ("openvino", "bf16", 1) in races[-1]:
            raise RuntimeError("A process in the process pool was terminated abruptly")
        return [2.0, 1.5, 1.0][: len(contenders)]

    monkeypatch.setattr(tune_module, "in_fresh_process", fake_race)
    cands = [Candidate("onnxruntime", "f32", passed=True, median_ms=1.0),
             Candidate("openvino", "bf16", passed=True, median_ms=1.1)]  # fmt: skip
    report = TuneReport("b", 0.999, 0.01, 2, [], cands)
    lines: list[str] = []
    monkeypatch.setattr(_Work, "run", lambda self, cand: None)  # (the winning variant's judging: passes)
    _race(report, _race_work(2, lines.append))
    at_two = [("onnxruntime", "f32", 2), ("openvino", "bf16", 2)]
    assert races == [
        at_two + [("onnxruntime", "f32", 1), ("openvino", "bf16", 1)],
        [("onnxruntime", "f32", 1)],  # each variant alone, once
        [("openvino", "bf16", 1)],
        at_two + [("onnxruntime", "f32", 1)],  # (twice: the second time in reverse order)
        at_two + [("onnxruntime", "f32", 1)],
    ]
    assert [(c.name, c.median_ms) for c in report.candidates] == [
        ("onnxruntime f32", 2.0), ("openvino bf16", 1.5), ("onnxruntime f32 on 1 thread", 1.0)
    ]  # fmt: skip
    assert lines[:2] == [
        "the race's process crashed (RuntimeError: A process in the process pool was terminated abruptly); "
        "crashing on their own: openvino bf16 on 1 thread; timing together without them",
        "timed together: onnxruntime f32 2.000 ms, openvino bf16 1.500 ms, onnxruntime f32 on 1 thread 1.000 ms",
    ]
    assert report.choice is not None and report.choice.name == "onnxruntime f32 on 1 thread"


@pytest.mark.parametrize("medians,threads", [([1.0, 0.5], 1), ([0.5, 1.0], 2), ([1.0, 1.0], 2)])
def test_the_fastest_are_raced_at_fewer_threads(monkeypatch, mlp, medians, threads):
    """tune times its fastest candidates at halvings of its threads too (small models often run
    faster on fewer); a count that wins is judged again at that count, in a process of its own,
    and becomes the choice that tuning.json records and rlx.load follows. The race's medians are
    given here (which count wins on this machine is its own business); the judging and loading are
    real."""
    import rlx.app.tune as tune_module

    out, x, want = mlp
    raced: list = []
    real = tune_module.in_fresh_process

    def fake_race(threads, fn, *args):
        if fn is not tune_module.race:
            return real(threads, fn, *args)
        raced.append(args[1])
        return medians

    monkeypatch.setattr(tune_module, "in_fresh_process", fake_race)
    lines: list[str] = []
    report = tune(out, engines=["onnxruntime"], precisions=["f32"], threads=2, runs=5, progress=lines.append)
    assert raced == [[("onnxruntime", "f32", {}, 2), ("onnxruntime", "f32", {}, 1)]] * 2
    timed = f"timed together: onnxruntime f32 {medians[0]:.3f} ms, onnxruntime f32 on 1 thread "
    assert any(line.startswith(timed) for line in lines)
    choice = report.choice
    assert choice is not None and choice.passed and (choice.threads or 2) == threads
    assert [c.threads for c in report.candidates] == ([None, 1] if threads == 1 else [None])
    assert choice.median_ms == min(medians)  # the race's medians
    if threads == 1:
        assert lines[-1] == "onnxruntime f32 on 1 thread: pass"  # judged in a process of its own
    doc = json.loads((out / "bundle" / TUNING_FILE).read_text())
    assert doc["choice"]["threads"] == threads and doc["choice"]["median_ms"] == choice.median_ms
    assert report.table().splitlines()[-1] == f"fastest within tolerance: {choice.name} ({choice.median_ms:.3f} ms)"
    assert choice.name == "onnxruntime f32" + (" on 1 thread" if threads == 1 else "")
    model = rlx.load(out)
    assert model.engine.name == "onnxruntime" and model.engine.threads == threads
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6)
    (out / "bundle" / TUNING_FILE).unlink()


def test_a_fewer_threads_variant_that_fails_is_not_chosen(monkeypatch):
    """Only a variant that would be the choice is judged; one that fails stays in the table as
    failed, and the next fastest is the choice (here the same engine at tune's threads)."""
    import rlx.app.tune as tune_module
    from rlx.app.tune import Candidate, TuneReport, _race, _Work

    monkeypatch.setattr(tune_module, "in_fresh_process", lambda *a: [1.0, 2.0, 0.5, 1.5])
    judged = []

    def run(self, cand):
        judged.append(cand.name)
        cand.passed, cand.median_ms = False, 9.0

    monkeypatch.setattr(_Work, "run", run)
    cands = [Candidate("onnxruntime", "f32", passed=True, median_ms=1.0),
             Candidate("openvino", "f32", passed=True, median_ms=1.1)]  # fmt: skip
    report = TuneReport("b", 0.999, 0.01, 2, [], cands)
    _race(report, _race_work(2))
    assert judged == ["onnxruntime f32 on 1 thread"]
    assert [(c.name, c.passed, c.median_ms) for c in report.candidates] == [
        ("onnxruntime f32", True, 1.0),
        ("openvino f32", True, 2.0),
        ("onnxruntime f32 on 1 thread", False, 0.5),
    ]
    assert report.choice is cands[0]


def test_onnxruntime_float32_is_raced_with_padded_channels_too(monkeypatch):
    """Where padding convolution channels to onnxruntime's block may change the graph, every
    onnxruntime float32 contender is raced with ``pad_channels`` as well, at each thread count; the
    other engines and precisions are not."""
    import rlx.app.tune as tune_module
    from rlx.app.tune import Candidate, TuneReport, _race

    raced = []

    def fake_race(threads, fn, bundle, contenders, *rest):
        if not rest[-1]:
            raced.extend(contenders)
        return [1.0] * len(contenders)

    monkeypatch.setattr(tune_module, "in_fresh_process", fake_race)
    monkeypatch.setattr(tune_module, "pads_channels", lambda program, weights: True)
    firsts = [("onnxruntime", "f32", 1.0), ("onnxruntime", "int8", 1.01), ("openvino", "bf16", 1.02)]
    report = TuneReport("b", 0.999, 0.01, 2, [], [Candidate(e, p, passed=True, median_ms=m) for e, p, m in firsts])
    _race(report, _race_work(2))
    padded = [(e, p, n) for e, p, options, n in raced if options and options.get("pad_channels")]
    assert padded == [("onnxruntime", "f32", 2), ("onnxruntime", "f32", 1)]
    shown = Candidate("onnxruntime", "f32", options={"pad_channels": True}, passed=True, threads=1)
    assert shown.verdict() == "pass (channels padded)"
    assert shown.name == ("onnxruntime f32 padded on 1 thread")


@pytest.mark.parametrize("mid,off_block", [(12, True), (16, False)])
def test_pads_channels_finds_convolutions_off_the_block(mid, off_block):
    from rlx.runtime.engines import pads_channels
    from rlx.runtime.onnxruntime_engine.pad_channels import channel_block

    from helpers import convert

    module = torch.nn.Sequential(torch.nn.Conv2d(3, mid, 1), torch.nn.ReLU(), torch.nn.Conv2d(mid, 16, 1))
    model, program, _ = convert(module, (torch.randn(1, 3, 4, 4),))
    assert pads_channels(program, dict(model.weights)) == (off_block and channel_block() > 1)


def test_every_candidate_is_probed_with_nan_and_inf(tmp_path):
    """tune runs each candidate once more on the reference inputs with NaN, +inf and −inf planted
    in them and compares where its outputs hold NaN/inf with the numpy engine's (PyTorch's rules):
    float32 engines that keep PyTorch's rules read "same" in the table's NaN/inf column."""
    module = SmallConvNet().eval()
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = tmp_path / "convnet"
    rlx.from_torch(module, (x,), out)
    report = tune(out, engines=["numpy", "onnxruntime"], precisions=["f32"], threads=1, runs=3, write=False)
    assert [c.nan_parity for c in report.candidates] == [True, True]
    header, *rows = report.table().splitlines()
    assert "NaN/inf" in header and all(" same  pass" in row for row in rows[:2])


def test_same_nonfinite_compares_nan_and_signed_inf_positions():
    from rlx.app.tune import same_nonfinite

    want = [np.array([1.0, NAN, np.inf, -np.inf], np.float32), np.array([1, 2])]
    assert same_nonfinite([np.array([2.0, NAN, np.inf, -np.inf], np.float32), np.array([1, 3])], want)
    assert not same_nonfinite([np.array([1.0, 0.0, np.inf, -np.inf], np.float32), want[1]], want)  # NaN lost
    assert not same_nonfinite([np.array([1.0, NAN, -np.inf, -np.inf], np.float32), want[1]], want)  # sign of inf
    assert not same_nonfinite([want[0]], want)  # an output missing


def test_a_choice_that_moves_nan_is_named_with_the_fastest_that_keeps_it(mlp):
    """The table says so when the choice puts NaN/inf elsewhere than PyTorch does, and names the
    fastest candidate that does not."""
    from rlx.app.tune import Candidate, TuneReport

    fast = Candidate("openvino", "f32", median_ms=0.1, passed=True, nan_parity=False)
    slow = Candidate("onnxruntime", "f32", median_ms=0.2, passed=True, nan_parity=True)
    table = TuneReport("b", 0.999, 1e-2, None, [], [fast, slow]).table().splitlines()
    assert table[-2] == "fastest within tolerance: openvino f32 (0.100 ms)"
    assert table[-1] == (
        "note: on an input holding NaN or inf, openvino f32 puts NaN/inf elsewhere than PyTorch does "
        "(the NaN/inf column); the fastest that keeps them: onnxruntime f32 (0.200 ms)"
    )
    assert [line.split()[6] for line in table[1:3]] == ["differs", "same"]
