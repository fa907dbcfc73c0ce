"""Real ONNX files with dynamic dimensions, converted once with the dimensions left as they are and
run at three sizes against onnxruntime on the numpy and onnxruntime engines (issue 32; slow suite).

Two sources: models exported here with torch.onnx (TorchScript ``dynamic_axes`` and dynamo
``dynamic_shapes``) — a conv + upsample neck, an audio front-end (reflect-padded STFT, framing with
an FFT), a bidirectional LSTM with state inputs — and the ONNX files two packages from the
registry ship, when they are installed (``pip install rlx[realmodels]``; their files are read, their
code is not imported): ``silero-vad`` (If on the decoder's extent, LSTM over a dynamic sequence,
half precision, state inputs) and ``rapidocr-onnxruntime`` (paddle2onnx OCR detection,
classification and recognition at opsets 11-12, dynamic batch / height / width).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from frontends.onnx.onnx_helpers import assert_runs_at_sizes

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow
R = np.random.default_rng(7)
Feed = dict[str, np.ndarray]


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (R.standard_normal(shape) * scale).astype(np.float32)


# ── exported here with torch.onnx ────────────────────────────────────────────
def _torch_models() -> dict[str, tuple[Any, tuple[Any, ...], dict[str, Any], Callable[[int], Feed], tuple[int, ...]]]:
    """name → (module, example args, dynamic axes by input, feed of size n, the three sizes)."""
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class Neck(nn.Module):  # strided conv, bilinear ×2 by scale, nearest to the input's own size
        def __init__(self) -> None:
            super().__init__()
            self.down, self.mix = nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.down(x))
            up = F.interpolate(self.mix(y), scale_factor=2.0, mode="bilinear", align_corners=False)
            near = F.interpolate(y, size=x.shape[-2:], mode="nearest")
            return up[..., : x.shape[-2], : x.shape[-1]] + near.sum(1, keepdim=True)

    class Spectrogram(nn.Module):  # torch.stft with a reflect-padded centre → ONNX Pad(reflect) + STFT
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("window", torch.hann_window(64))
            self.fc = nn.Conv1d(33, 16, 3, padding=1)

        def forward(self, wav: Any) -> Any:
            spec = torch.stft(wav, 64, 16, window=self.window, center=True, pad_mode="reflect", return_complex=False)
            return torch.log1p(torch.relu(self.fc((spec**2).sum(-1).sqrt()))).mean(-1)

    class Framed(nn.Module):  # reflect pad, frames by unfold, rfft (dynamo: Range + Gather + DFT)
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("window", torch.hann_window(64))
            self.fc = nn.Conv1d(33, 16, 3, padding=1)

        def forward(self, wav: Any) -> Any:
            x = F.pad(wav[:, None, :], (32, 32), mode="reflect")[:, 0]
            spec = torch.fft.rfft(x.unfold(-1, 64, 16) * self.window, dim=-1).abs().transpose(1, 2)
            return torch.log1p(torch.relu(self.fc(spec))).mean(-1)

    class Tagger(nn.Module):  # bidirectional LSTM over a dynamic batch, with its states as inputs
        def __init__(self) -> None:
            super().__init__()
            self.lstm, self.out = nn.LSTM(10, 16, batch_first=True, bidirectional=True), nn.Linear(32, 3)

        def forward(self, x: Any, h: Any, c: Any) -> Any:
            y, (h2, c2) = self.lstm(x, (h, c))
            return self.out(y), h2, c2

    def lstm_feed(n: int) -> Feed:
        return {"x": f32(n, 7, 10), "h": f32(2, n, 16), "c": f32(2, n, 16)}

    return {
        "neck": (Neck(), (torch.randn(2, 3, 32, 48),), {"x": {0: "b", 2: "h", 3: "w"}},
                 lambda n: {"x": f32(1 + n % 2, 3, 4 * n, 3 * n + 2)}, (8, 5, 13)),
        "spectrogram": (Spectrogram(), (torch.randn(2, 400),), {"wav": {0: "b", 1: "n"}},
                        lambda n: {"wav": f32(1 + n % 3, n)}, (400, 257, 1000)),
        "framed_fft": (Framed(), (torch.randn(2, 400),), {"wav": {1: "n"}}, lambda n: {"wav": f32(2, n)},
                       (400, 257, 1000)),
        "lstm_tagger": (Tagger(), (torch.randn(2, 7, 10), torch.zeros(2, 2, 16), torch.zeros(2, 2, 16)),
                        {"x": {0: "b"}, "h": {1: "b"}, "c": {1: "b"}}, lstm_feed, (2, 1, 5)),
    }  # fmt: skip


EXPORTS = [("neck", "torchscript"), ("spectrogram", "torchscript"), ("lstm_tagger", "torchscript"),
           ("neck", "dynamo"), ("framed_fft", "dynamo")]  # fmt: skip


def _export(module: Any, args: tuple[Any, ...], axes: dict[str, Any], exporter: str) -> Any:
    torch = pytest.importorskip("torch")
    names = list(axes) if exporter == "torchscript" else None
    f = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(module.eval(), args, f, input_names=list(axes), dynamic_axes=axes, dynamo=False,
                              opset_version=17)  # fmt: skip
        else:
            pytest.importorskip("onnxscript")
            shapes = {k: {a: torch.export.Dim(f"{k}_{a}", min=2, max=8192) for a in v} for k, v in axes.items()}
            # The dynamo exporter names inputs after forward()'s parameters.
            torch.onnx.export(module.eval(), args, f, dynamic_shapes=shapes, dynamo=True, input_names=names)
    return onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize(("name", "exporter"), EXPORTS, ids=[f"{n}-{e}" for n, e in EXPORTS])
def test_torch_onnx_export_runs_at_three_sizes(tmp_path, name, exporter):
    module, args, axes, make, sizes = _torch_models()[name]
    m = _export(module, args, axes, exporter)
    assert any(d.dim_param for vi in m.graph.input for d in vi.type.tensor_type.shape.dim)  # exported dynamic
    feeds = [make(n) for n in sizes]
    names = [vi.name for vi in m.graph.input]
    feeds = [dict(zip(names, feed.values())) for feed in feeds]
    assert_runs_at_sizes(tmp_path, m, feeds, rtol=1e-4, atol=1e-5)


# ── shipped inside a package from the registry ───────────────────────────────
def _package_files(package: str, folder: str) -> dict[str, Path]:
    """The .onnx files in ``folder`` of an installed ``package`` (found, not imported)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return {}
    data = Path(next(iter(spec.submodule_search_locations))) / folder
    return {p.name: p for p in sorted(data.glob("*.onnx"))}


# file → (batch sizes and sequence lengths tried, inputs frozen): the 16 kHz decoder squeezes a unit
# axis behind an If, so sequences whose decoded extent is 1 run (288 and 576 samples); others are
# refused by the guard that choice adds. The sequence model's batch axis is its LSTM's time axis
# (one Recurrent Call over a length known at run time); the OpenVINO file declares static shapes
# only, so its three runs differ in values, not sizes.
SILERO = {
    "silero_vad_16k_sequence.onnx": ([(3, 576), (1, 576), (9, 576)], {}),
    "silero_vad_openvino_16k.onnx": ([(1, 576)] * 3, {}),
    "silero_vad_16k_op15.onnx": ([(1, 576), (2, 576), (3, 288)], {}),
    "silero_vad_half.onnx": ([(1, 576), (2, 576), (3, 288)], {}),
    "silero_vad_op18_ifless.onnx": ([(1, 576), (2, 1088), (3, 288)], {}),
    "silero_vad.onnx": ([(1, 576), (2, 576), (3, 288)], {"sr": np.array(16000, np.int64)}),
}


@pytest.mark.parametrize("file", SILERO)
def test_silero_vad_onnx_files(tmp_path, file):
    files = _package_files("silero_vad", "data")
    if file not in files:
        pytest.skip("the silero-vad package is not installed (pip install 'rlx[realmodels]')")
    import rlx

    m = onnx.load(str(files[file]))
    sizes, frozen = SILERO[file]
    names = [vi.name for vi in m.graph.input]

    def feed(batch: int, seq: int) -> Feed:
        out = {"input": f32(batch, seq, scale=0.1), "state": f32(2, batch, 128, scale=0.1),
               "h": f32(1, 1, 128, scale=0.1), "c": f32(1, 1, 128, scale=0.1), "sr": np.array(16000, np.int64)}  # fmt: skip
        return {k: out[k] for k in names if k in out and k not in frozen}

    if frozen:  # an If on the sample rate's value picks differently shaped branches: the rate is fixed
        from rlx.app.onnx_convert import run_onnxruntime

        rlx.from_onnx(m, tmp_path / "out", example_inputs=feed(*sizes[0]), freeze_inputs=frozen)
        for engine in ("numpy", "onnxruntime"):
            loaded = rlx.load(tmp_path / "out", engine=engine)
            for s in sizes:
                x = feed(*s)
                got = loaded.run_flat(loaded.bind((), x))
                for g, w in zip(got, run_onnxruntime(m, {**x, **frozen})):
                    np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5, err_msg=f"{engine} {s}")
        return
    assert_runs_at_sizes(tmp_path, m, [feed(*s) for s in sizes], rtol=1e-4, atol=1e-5)


# file → the image sizes tried: the detector takes any multiple of 32; the recogniser's height is
# 48 by design (its neck reshapes the pooled height away), its width free; the classifier's
# height and width are free (from 48 on: below, a pooling window outgrows its input and
# onnxruntime keeps a row the ONNX formula drops).
RAPIDOCR = {
    "ch_PP-OCRv4_det_infer.onnx": [(1, 64, 96), (2, 96, 64), (1, 160, 128)],
    "ch_PP-OCRv4_rec_infer.onnx": [(1, 48, 160), (2, 48, 320), (3, 48, 96)],
    "ch_ppocr_mobile_v2.0_cls_infer.onnx": [(1, 48, 192), (2, 48, 100), (3, 64, 256)],
}


@pytest.mark.parametrize("file", RAPIDOCR)
def test_rapidocr_onnx_files(tmp_path, file):
    files = _package_files("rapidocr_onnxruntime", "models")
    if file not in files:
        pytest.skip("the rapidocr-onnxruntime package is not installed (pip install 'rlx[realmodels]')")
    m = onnx.load(str(files[file]))
    feeds = [{"x": f32(n, 3, h, w)} for n, h, w in RAPIDOCR[file]]
    assert_runs_at_sizes(tmp_path, m, feeds, rtol=1e-4, atol=1e-5)
