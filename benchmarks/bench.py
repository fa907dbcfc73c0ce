"""Latency, cold start and memory of rlx against PyTorch eager, onnxruntime and OpenVINO, in one run.

    python benchmarks/bench.py            # examples + transformers models (if installed), batch 1 and 8
    python benchmarks/bench.py --quick    # a one-minute smoke run

Each row (model and batch) runs in a fresh process of its own, which times every engine of the
row interleaved by rounds (each round times every engine in a short block of its own, so load
drift hits all of them alike, with a pause between blocks so onnxruntime's spinning threads don't
slow the next engine), after warm-up, with 2 threads everywhere. Cold start is measured in fresh
processes too. PyTorch is timed eager and through torch.compile (inductor, compiled before
timing; --no-compile skips it: it compiles each model for minutes on a busy 2-core machine). With
OpenVINO installed, a second table puts OpenVINO at f32 and bf16 (on torch.onnx's graph and on
rlx's openvino engine) beside "rlx tuned": the choice `rlx tune` makes for the bundle (numpy,
onnxruntime and openvino at every precision they run here, within the default tolerance), each as
a ratio to the fastest float32 peer (eager, torch.compile, torch.onnx + ORT, OpenVINO f32). Needs
the `bench` extra: pip install -e ".[bench]" -c constraints.txt
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")
# XLA's CPU thread pool (rlx jax) gets 2 threads too.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=2")

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import rlx  # noqa: E402
from rlx.app.bench import PAUSE_S, interleaved_rounds, paired_ratio  # noqa: E402
from rlx.app.tune import DEFAULT_MAX_ERROR, DEFAULT_TOLERANCE, judge  # noqa: E402
from rlx.errors import first_line  # noqa: E402
from rlx.ir import dtypes  # noqa: E402
from rlx.ir.symbolic import is_static  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
THREADS = 2


def example(name: str, batch: int):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, inputs = module.get_model()
    # Same example, other batch size: repeat the batch axis.
    inputs = tuple(t[:1].repeat((batch,) + (1,) * (t.dim() - 1)) for t in inputs)
    return model.eval(), inputs


def hf_models(batch: int):
    """Small transformers models built from configs with random weights (skipped if not installed)."""
    try:
        import transformers as tf
    except ImportError:
        return []
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (batch, 32))
    small = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    models = [
        ("bert", tf.BertModel(tf.BertConfig(vocab_size=1000, **small)), (ids,)),
        ("gpt2", tf.GPT2Model(tf.GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=4)), (ids,)),
        ("llama-gqa", tf.LlamaModel(tf.LlamaConfig(vocab_size=1000, num_key_value_heads=2, **small)), (ids,)),
        ("vit", tf.ViTModel(tf.ViTConfig(image_size=64, patch_size=16, **small)), (torch.randn(batch, 3, 64, 64),)),
        (
            "resnet",
            tf.ResNetModel(tf.ResNetConfig(embedding_size=32, hidden_sizes=[32, 64], depths=[1, 1])),
            (torch.randn(batch, 3, 64, 64),),
        ),
    ]
    out = []
    for name, model, inputs in models:
        trained_like(model).eval()
        model.config.return_dict = False
        model.config.use_cache = False  # a KV cache object is not an output torch.export can flatten
        out.append((name, model, inputs))
    return out + hf_architectures(batch)


class Output(torch.nn.Module):
    """One output of a transformers model (its ModelOutput flattened by position)."""

    def __init__(self, model: torch.nn.Module, index: int = 0) -> None:
        super().__init__()
        self.model, self.index = model, index

    def forward(self, *inputs):
        return self.model(*inputs)[self.index]


def trained_like(model: torch.nn.Module) -> torch.nn.Module:
    """Every parameter that random initialisation leaves constant (transformers zeroes the biases and
    sets the norms' weights to one) moved by a little noise, as training moves it. Left constant,
    torch.onnx's optimizer deletes those adds and multiplies, and its graph times work that a
    trained model has and it skipped (GPT-2 b1: its eight bias adds)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and p.dtype.is_floating_point and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn(p.shape, generator=g) * 0.02)
    return model


def random_batch_norms(model: torch.nn.Module) -> torch.nn.Module:
    """BatchNorm weights and running statistics drawn at random: transformers initialises some of
    them so that a randomly weighted EfficientNet or MobileViT outputs exact zeros."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_var is not None:
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            if m.affine:
                m.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
    return model


def hf_architectures(batch: int):
    """Convolutional, windowed-attention, audio and encoder-decoder architectures at small configs
    (the families whose kernels rlx's numpy engine plans specially: depthwise and grouped convs,
    pooling, windowed and efficient attention), each returning its first output (EfficientNet: the
    pooled one, after its ``AvgPool2d(kernel_size=hidden_dim, ceil_mode=True)``; MobileNetV2, whose
    ReLU6 blocks at depth 0.35 have 8, 24, 56 and 112 channels, off onnxruntime's channel blocks:
    its pooled one too)."""
    import transformers as tf
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (batch, 32))
    image = torch.randn(batch, 3, 64, 64)
    small = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    experts = dict(num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2)
    builders = [
        (
            "efficientnet",
            lambda: tf.EfficientNetModel(
                tf.EfficientNetConfig(image_size=64, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320)
            ),
            (image,),
            1,
        ),
        (
            "convnext",
            lambda: tf.ConvNextModel(
                tf.ConvNextConfig(image_size=64, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1])
            ),
            (image,),
            0,
        ),
        (
            "swin",
            lambda: tf.SwinModel(
                tf.SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=4)
            ),
            (image,),
            0,
        ),
        (
            "wav2vec2",
            lambda: tf.Wav2Vec2Model(
                tf.Wav2Vec2Config(
                    **small,
                    conv_dim=(32, 32, 32),
                    conv_stride=(5, 2, 2),
                    conv_kernel=(10, 3, 3),
                    num_conv_pos_embeddings=128,
                    num_conv_pos_embedding_groups=16,
                )
            ),
            (torch.randn(batch, 4000),),
            0,
        ),
        (
            "mobilevit",
            lambda: tf.MobileViTModel(
                tf.MobileViTConfig(
                    image_size=64, hidden_sizes=[48, 64, 80], neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 160]
                )
            ),
            (image,),
            0,
        ),
        (
            "segformer",
            lambda: tf.SegformerModel(
                tf.SegformerConfig(
                    hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 4, 8]
                )
            ),
            (image,),
            0,
        ),
        (
            "bart",
            lambda: tf.BartModel(
                tf.BartConfig(
                    vocab_size=1000,
                    d_model=128,
                    encoder_layers=2,
                    decoder_layers=2,
                    encoder_attention_heads=4,
                    decoder_attention_heads=4,
                    encoder_ffn_dim=256,
                    decoder_ffn_dim=256,
                    use_cache=False,
                )
            ),
            (ids,),
            0,
        ),
        (
            "whisper-encoder",
            lambda: WhisperEncoder(
                tf.WhisperConfig(
                    d_model=128,
                    encoder_layers=2,
                    encoder_attention_heads=4,
                    encoder_ffn_dim=256,
                    max_source_positions=100,
                )
            ),
            (torch.randn(batch, 80, 200),),
            0,
        ),
        ("deit", lambda: tf.DeiTModel(tf.DeiTConfig(image_size=64, patch_size=16, **small)), (image,), 0),
        (  # (after the others, so that the random weights of the models above stay as they were)
            "mobilenet-v2",
            lambda: tf.MobileNetV2Model(tf.MobileNetV2Config(image_size=64, depth_multiplier=0.35)),
            (image,),
            1,
        ),
        (  # transformers' default experts: histc counts, one grouped product per projection
            "mixtral",
            lambda: tf.MixtralModel(tf.MixtralConfig(vocab_size=1000, use_cache=False, **experts, **small)),
            (ids,),
            0,
        ),
    ]
    return [
        (name, Output(trained_like(random_batch_norms(build())), index).eval(), inputs)
        for name, build, inputs, index in builders
    ]


def first_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, dict):
        return first_tensor(next(iter(x.values())))
    return first_tensor(x[0])


class Engines:
    """One model behind each engine, each a zero-argument callable returning the first output."""

    def __init__(self, name, model, inputs, workdir: Path, compile: bool = True):
        self.name, self.model, self.inputs = name, model, inputs
        self.np_inputs = [t.numpy() for t in inputs]
        self.out = workdir / name
        rlx.from_torch(model, inputs, self.out, force=True, verify=False)
        self.rlx_model = rlx.load(self.out / "bundle")
        self.rlx_jax = self._rlx_jax()
        self.rlx_ort = self._rlx_ort()
        self.onnx_path: Path | None = None
        self.ort = self._onnxruntime(workdir)
        self.openvino = self._openvino() if importlib.util.find_spec("openvino") else {}
        self.compiled = self._torch_compile() if compile else None

    def _torch_compile(self):
        """The model through torch.compile (inductor), compiled here by a first call (None if it fails)."""
        t0 = time.perf_counter()
        try:
            compiled = torch.compile(self.model)
            with torch.inference_mode():
                compiled(*self.inputs)
        except Exception as e:  # no C++ compiler, or a model inductor cannot take: report it, keep benchmarking
            print(f"  torch.compile: {self.name}: {type(e).__name__}: {first_line(e)[:100]}")
            return None
        print(f"  torch.compile: {self.name}: compiled in {time.perf_counter() - t0:.0f} s")

        def run():
            with torch.inference_mode():
                return first_tensor(compiled(*self.inputs)).numpy()

        return run

    def _openvino(self) -> dict:
        """OpenVINO at f32 and bf16 on torch.onnx's graph and on rlx's engine, and "rlx tuned"."""
        import openvino as ov

        out = {}
        feeds = list(self.np_inputs)
        core = ov.Core()
        for precision in ("f32", "bf16"):
            if self.onnx_path is not None:
                cfg = {
                    "INFERENCE_PRECISION_HINT": precision,
                    "PERFORMANCE_HINT": "LATENCY",
                    "INFERENCE_NUM_THREADS": THREADS,
                }
                try:
                    compiled = core.compile_model(core.read_model(str(self.onnx_path)), "CPU", cfg)
                    request = compiled.create_infer_request()
                    out[f"ov {precision}"] = lambda r=request: r.infer(feeds)[0]
                except Exception as e:
                    print(f"  openvino {precision}: {self.name}: {type(e).__name__}: {first_line(e)[:100]}")
            try:
                m = rlx.load(self.out / "bundle", engine="openvino", precision=precision, threads=THREADS)
                out[f"rlx ov {precision}"] = lambda m=m: first_tensor(m(*self.np_inputs))
            except rlx.RlxError as e:
                print(f"  rlx openvino {precision}: {self.name}: {e}")
        t0 = time.perf_counter()
        raced: list[str] = []  # tune's re-timing of the close contenders, printed with its choice

        def progress(line: str) -> None:
            if line.startswith("timed together"):
                raced.append(line)

        report = rlx.tune(
            self.out / "bundle", engines=["numpy", "onnxruntime", "openvino"], threads=THREADS, progress=progress
        )
        choice = report.choice
        print(f"  rlx tune: {choice.name if choice else 'nothing passed'} ({time.perf_counter() - t0:.0f} s)")
        for line in raced:
            print(f"    {line}")
        if choice is not None:
            tuned = rlx.load(self.out / "bundle")  # follows tuning.json
            out["rlx tuned"] = lambda: first_tensor(tuned(*self.np_inputs))
            self.tuned_choice = choice.name
        return out

    def _rlx_ort(self):
        """The same bundle on rlx's onnxruntime engine (None without onnxruntime)."""
        try:
            return rlx.load(self.out / "bundle", engine="onnxruntime", threads=THREADS)
        except rlx.RlxError as e:
            print(f"  rlx onnxruntime: {self.name}: {e}")
            return None

    def _rlx_jax(self):
        """The same bundle on the JAX engine (compiled here, at load; None without jax)."""
        try:
            return rlx.load(self.out / "bundle", engine="jax")
        except rlx.RlxError as e:
            print(f"  rlx jax: {self.name}: {e}")
            return None

    def _onnxruntime(self, workdir: Path):
        try:
            import onnxruntime as ort
        except ImportError:
            return None
        path = workdir / f"{self.name}.onnx"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(self.model, self.inputs, str(path), dynamo=True, verbose=False)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = THREADS
            opts.inter_op_num_threads = 1
            session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
            self.onnx_path = path
        except Exception as e:  # a model ORT's exporter cannot take: report it, keep benchmarking
            print(f"  onnxruntime: {self.name}: {type(e).__name__}: {first_line(e)[:100]}")
            return None
        feeds = {i.name: a for i, a in zip(session.get_inputs(), self.np_inputs)}
        return lambda: session.run(None, feeds)[0]

    def callables(self):
        def eager():
            with torch.inference_mode():
                return first_tensor(self.model(*self.inputs)).numpy()

        engines = {"eager": eager, "rlx": lambda: first_tensor(self.rlx_model(*self.np_inputs))}
        if self.compiled is not None:
            engines["compile"] = self.compiled
        if self.rlx_jax is not None:  # measure()'s warm-up runs come after the compilation at load
            engines["rlx jax"] = lambda: first_tensor(self.rlx_jax(*self.np_inputs))
        if self.rlx_ort is not None:
            engines["rlx ort"] = lambda: first_tensor(self.rlx_ort(*self.np_inputs))
        if self.ort is not None:
            engines["ort"] = self.ort
        engines.update(self.openvino)
        return engines


def measure(
    engines: dict, rounds: int, warmup: int, pause_s: float = PAUSE_S
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Each engine's median latency (s) over all its runs, and its median in each round, all timed
    together as ``rlx tune`` times its contenders (``rlx.app.bench.interleaved_rounds``: alternating
    blocks of about 30 ms each, with pauses)."""
    for fn in engines.values():
        for _ in range(warmup):
            fn()
    runs = interleaved_rounds(list(engines.values()), rounds, pause_s=pause_s)
    medians = {k: float(np.median([t for block in blocks for t in block])) for k, blocks in zip(engines, runs)}
    return medians, {k: [float(np.median(block)) for block in blocks] for k, blocks in zip(engines, runs)}


def ratio(rounds: dict[str, list[float]], a: str, b: str) -> float:
    """How much slower engine ``a`` ran than ``b`` in this row: the median over rounds of the
    ratio of their blocks (``rlx.app.bench.paired_ratio``); NaN where either did not run."""
    return paired_ratio(rounds[a], rounds[b]) if a in rounds and b in rounds else math.nan


def parity(engines: dict) -> tuple[dict[str, float], dict[str, bool]]:
    """Each engine's max |error| against eager over max(1, max |eager|), and whether its output is
    within rlx tune's default tolerance of eager's (``rlx.app.tune.judge``: cosine, max error, NaN/inf)."""
    want = np.asarray(engines["eager"]())
    scale = max(1.0, float(np.abs(want).max()))
    errors, within = {}, {}
    for k, fn in engines.items():
        got = np.asarray(fn())
        errors[k] = float(np.abs(got.astype(np.float64) - want).max()) / scale
        (check,) = judge(k, [got.astype(want.dtype)], [want], DEFAULT_TOLERANCE, DEFAULT_MAX_ERROR, set())
        within[k] = check.passed
    return errors, within


COLD = {
    "rlx": """
        import time; t0 = time.perf_counter()
        import numpy as np, rlx
        m = rlx.load({bundle!r}, engine="numpy"); x = [np.load(p) for p in {inputs!r}]
        m(*x); print(time.perf_counter() - t0)
        print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")))
    """,
    "eager": """
        import time; t0 = time.perf_counter()
        import importlib.util, numpy as np, torch
        torch.set_num_threads(2)
        spec = importlib.util.spec_from_file_location("m", {example!r}); mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod); model, _ = mod.get_model()
        x = [torch.from_numpy(np.load(p)) for p in {inputs!r}]
        with torch.inference_mode(): model(*x)
        print(time.perf_counter() - t0)
        print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")))
    """,
}
# Peak RSS is read from VmHWM: ru_maxrss would include the parent's memory inherited through fork.


def cold_start(engines: Engines, example_file: Path) -> dict[str, tuple[float, float]]:
    files = []
    for k, a in enumerate(engines.np_inputs):
        f = engines.out / f"in{k}.npy"
        np.save(f, a)
        files.append(str(f))
    out = {}
    for name, code in COLD.items():
        script = textwrap.dedent(code).format(
            bundle=str(engines.out / "bundle"), inputs=files, example=str(example_file)
        )
        env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode != 0:
            out[name] = (math.nan, math.nan)
            continue
        seconds, rss_kb = proc.stdout.split()[-2:]
        out[name] = (float(seconds), float(rss_kb) / 1024)
    return out


def peak_memory(engines: Engines) -> tuple[float, float, float]:
    """Peak RSS (MB) of a fresh process that loads the bundle and runs it on numpy, against what
    the model needs: its weights and its largest activation (MB, from the program's value types)."""
    files = []
    for k, a in enumerate(engines.np_inputs):
        f = engines.out / f"in{k}.npy"
        np.save(f, a)
        files.append(str(f))
    script = textwrap.dedent(COLD["rlx"]).format(bundle=str(engines.out / "bundle"), inputs=files)
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    rss = float(proc.stdout.split()[-1]) / 1024 if proc.returncode == 0 else math.nan
    program = engines.rlx_model.program
    weights = sum(a.nbytes for a in engines.rlx_model.weights.values())
    activation = max(
        (math.prod(i.shape) * dtypes.to_numpy(i.dtype).itemsize for i in program.instrs if is_static(i.shape)),
        default=0,
    )
    return rss, weights / 2**20, activation / 2**20


def geomean(values):
    values = [v for v in values if v and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


PRECISION_COLUMNS = ("compile", "ort", "ov f32", "ov bf16", "rlx ort", "rlx ov f32", "rlx ov bf16", "rlx tuned")
F32_PEERS = ("eager", "compile", "ort", "ov f32")
PEERS = (*F32_PEERS, "ov bf16")  # at any precision: those within the default tolerance of eager count


def print_precisions(rows, tuned: dict[str, str]) -> None:
    """Median ms (ratio to the fastest float32 peer) per engine and precision, the tuned choice,
    rlx's OpenVINO graph against torch.onnx's at each precision, the largest error, and rlx tuned
    against the fastest peer at any precision whose output is within the default tolerance. The
    fastest peer is the one with the lowest median; every ratio is paired by rounds (``ratio``)."""
    print()
    print(
        "Engines and precisions: median ms (ratio to the fastest float32 peer of eager, torch.compile, torch.onnx+ORT, "
        "OpenVINO f32; median of the per-round ratios)"
    )
    head = f"{'model':<22}" + "".join(f"{c:>17}" for c in PRECISION_COLUMNS)
    head += f"{'tuned choice':>30}{'rlxov/ov f32':>14}{'rlxov/ov bf16':>15}{'err tuned':>11}{'tuned/any peer':>16}"
    print(head)
    print("-" * len(head))
    ratios, any_ratios = [], []
    for label, med, rounds, err, within in rows:
        best = min((k for k in F32_PEERS if k in med), key=med.__getitem__)
        any_best = min((k for k in PEERS if k in med and within.get(k)), key=med.__getitem__, default="")
        mark = "" if within.get("rlx tuned", True) else " (tuned out of tolerance!)"
        cells = "".join(
            f"{med[c] * 1e3:>9.3f} ({ratio(rounds, c, best):>4.2f})" if c in med else f"{'-':>17}"
            for c in PRECISION_COLUMNS
        )
        ratios.append(ratio(rounds, "rlx tuned", best))
        any_ratios.append(ratio(rounds, "rlx tuned", any_best))
        print(
            f"{label:<22}{cells}{tuned.get(label, '-'):>30}{ratio(rounds, 'rlx ov f32', 'ov f32'):>14.2f}"
            f"{ratio(rounds, 'rlx ov bf16', 'ov bf16'):>15.2f}{err.get('rlx tuned', math.nan):>11.1e}"
            f"{any_ratios[-1]:>16.2f}{mark}"
        )
    print("-" * len(head))
    print(f"{'geomean rlx tuned / fastest f32 peer':<40}{geomean(ratios):>6.2f}")
    print(f"{'geomean rlx tuned / fastest peer in tolerance':<40}{geomean(any_ratios):>6.2f}")
    above = [f"{label} {r:.2f}" for (label, *_), r in zip(rows, ratios) if r > 1.0]
    print(f"rlx tuned above the fastest f32 peer on {len(above)} of {len(rows)} rows: {', '.join(above) or '-'}")
    above = [f"{label} {r:.2f}" for (label, *_), r in zip(rows, any_ratios) if r > 1.0]
    print(
        f"rlx tuned above the fastest peer in tolerance on {len(above)} of {len(rows)} rows: {', '.join(above) or '-'}"
    )


def cases(quick: bool, only: set[str]):
    """(label, model, inputs, example file or None) of every benchmark row, in the table's order."""
    out = []
    for batch in (1,) if quick else (1, 8):
        for name in ("mlp", "transformer", "cnn", "decoder_lm"):
            out.append((f"{name}/b{batch}", *example(name, batch), ROOT / "examples" / f"{name}.py"))
        if not quick:
            out += [(f"{n}/b{batch}", m, i, None) for n, m, i in hf_models(batch)]
    return [c for c in out if not only or c[0].split("/")[0] in only]


def run_row(label: str, args: argparse.Namespace, work: Path) -> dict | None:
    """One row, measured in this process: latencies, parity, tune's choice, memory, cold start."""
    rounds, warmup = (4, 5) if args.quick else (12, 10)
    label, model, inputs, example_file = next(c for c in cases(args.quick, set()) if c[0] == label)
    try:
        engines = Engines(label.replace("/", "_"), model, inputs, work, compile=not args.no_compile)
    except rlx.RlxError as e:  # one model rlx cannot take: say so, benchmark the rest
        print(f"  rlx: {label}: {e}")
        return None
    fns = engines.callables()
    med, per_round = measure(fns, rounds, warmup)
    err, within = parity(fns)
    cold = cold_start(engines, example_file) if example_file is not None and label.endswith("/b1") else None
    return {"label": label, "med": med, "rounds": per_round, "err": err, "within": within, "tuned": getattr(engines, "tuned_choice", "-"),
            "memory": peak_memory(engines), "cold": cold}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="examples only, batch 1, few rounds")
    parser.add_argument("--only", default="", help="comma-separated model names (e.g. bert,swin): those only")
    parser.add_argument("--no-compile", action="store_true", help="leave the torch.compile column out")
    parser.add_argument("--row", default="", help=argparse.SUPPRESS)  # (a child process: this row only)
    parser.add_argument("--row-out", default="", help=argparse.SUPPRESS)  # (where the child writes it, JSON)
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    if args.row:
        with tempfile.TemporaryDirectory() as tmp:
            row = run_row(args.row, args, Path(tmp))
        Path(args.row_out).write_text(json.dumps(row, default=lambda v: v.item()))  # (numpy scalars)
        return
    rows, cold_rows, memory_rows = [], [], []
    tuned: dict[str, str] = {}
    labels = [c[0] for c in cases(args.quick, {n for n in args.only.split(",") if n})]
    with tempfile.TemporaryDirectory() as tmp:
        for label in labels:
            # Each row in a process of its own: in one process that had run the rows before it,
            # rlx's onnxruntime session on MobileViT b1 ran 1.10-1.13x torch.onnx's in four full
            # runs, and 0.97x with that row alone.
            print(f"benchmarking {label} ...", flush=True)
            out = Path(tmp) / "row.json"
            flags = [f for f, on in (("--quick", args.quick), ("--no-compile", args.no_compile)) if on]
            done = subprocess.run([sys.executable, __file__, "--row", label, "--row-out", str(out), *flags])
            row = json.loads(out.read_text()) if done.returncode == 0 and out.is_file() else None
            out.unlink(missing_ok=True)
            if row is None:
                print(f"  {label}: no result (exit code {done.returncode})")
                continue
            rows.append((label, row["med"], row["rounds"], row["err"], row["within"]))
            tuned[label] = row["tuned"]
            memory_rows.append((label, row["memory"]))
            if row["cold"] is not None:
                cold_rows.append((label, row["cold"]))
    print()
    print(
        "Latency (median ms, 2 threads; ratios: median of the per-round ratios) and parity "
        "(max abs err / max(1, |eager|)) against PyTorch eager"
    )
    head = f"{'model':<22}{'eager':>9}{'ORT':>9}{'rlx':>9}{'rlx/eager':>11}{'rlx/ORT':>9}{'err rlx':>10}{'err ORT':>10}"
    head += f"{'compile':>9}{'rlx/comp':>10}{'err comp':>10}"  # torch.compile (inductor)
    head += f"{'rlx jax':>9}{'jax/eager':>11}{'jax/ORT':>9}{'err jax':>10}"
    head += f"{'rlx ort':>9}{'rort/ORT':>9}{'err rort':>10}"  # rlx's onnxruntime engine vs torch.onnx + ORT
    print(head)
    print("-" * len(head))
    pairs = [("rlx", "eager"), ("rlx", "ort"), ("rlx", "compile"), ("rlx jax", "eager"), ("rlx jax", "ort"),
             ("rlx ort", "ort")]  # fmt: skip
    paired = {pair: [] for pair in pairs}
    for label, med, rounds, err, _ in rows:
        r = {pair: ratio(rounds, *pair) for pair in pairs}
        for pair, value in r.items():
            paired[pair].append(value)
        ms = {k: med.get(k, math.nan) * 1e3 for k in ("eager", "ort", "rlx", "compile", "rlx jax", "rlx ort")}
        print(
            f"{label:<22}{ms['eager']:>9.3f}{ms['ort']:>9.3f}{ms['rlx']:>9.3f}"
            f"{r['rlx', 'eager']:>11.2f}{r['rlx', 'ort']:>9.2f}{err['rlx']:>10.1e}{err.get('ort', math.nan):>10.1e}"
            f"{ms['compile']:>9.3f}{r['rlx', 'compile']:>10.2f}{err.get('compile', math.nan):>10.1e}"
            f"{ms['rlx jax']:>9.3f}{r['rlx jax', 'eager']:>11.2f}{r['rlx jax', 'ort']:>9.2f}"
            f"{err.get('rlx jax', math.nan):>10.1e}"
            f"{ms['rlx ort']:>9.3f}{r['rlx ort', 'ort']:>9.2f}{err.get('rlx ort', math.nan):>10.1e}"
        )
    print("-" * len(head))
    g = {pair: geomean(values) for pair, values in paired.items()}
    print(
        f"{'geomean ratio':<22}{'':>27}{g['rlx', 'eager']:>11.2f}{g['rlx', 'ort']:>9.2f}{'':>29}"
        f"{g['rlx', 'compile']:>10.2f}{'':>19}{g['rlx jax', 'eager']:>11.2f}{g['rlx jax', 'ort']:>9.2f}"
        f"{'':>19}{g['rlx ort', 'ort']:>9.2f}"
    )
    if any("rlx tuned" in m for _, m, *_ in rows):
        print_precisions(rows, tuned)
    print()
    print("Cold start: new process, import + load + first output (s) and peak RSS (MB)")
    print(f"{'model':<22}{'rlx s':>9}{'eager s':>9}{'ratio':>8}{'rlx MB':>9}{'eager MB':>10}")
    for label, cold in cold_rows:
        (rs, rm), (es, em) = cold["rlx"], cold["eager"]
        print(f"{label:<22}{rs:>9.2f}{es:>9.2f}{rs / es:>8.2f}{rm:>9.0f}{em:>10.0f}")
    print(f"{'geomean ratio':<22}{'':>18}{geomean([c['rlx'][0] / c['eager'][0] for _, c in cold_rows]):>8.2f}")
    print()
    print("Peak memory of rlx (new process: load + one run), against weights + 4 x largest activation + 150 MB")
    print(f"{'model':<22}{'peak MB':>9}{'weights':>9}{'activ.':>9}{'budget':>9}{'within':>8}")
    for label, (rss, weights, activation) in memory_rows:
        budget = weights + 4 * activation + 150
        print(
            f"{label:<22}{rss:>9.0f}{weights:>9.1f}{activation:>9.1f}{budget:>9.0f}{'yes' if rss <= budget else 'NO':>8}"
        )


if __name__ == "__main__":
    main()
