"""rlx's onnxruntime engine against torch.onnx.export(dynamo=True) + onnxruntime, one model at a time.

    python benchmarks/ort_graphs.py resnet/b8 mlp/b1 [--out DIR] [--rounds 6] [--profile]

For each model (bench.py's names) it writes both graphs as onnxruntime's optimizer leaves them
(``DIR/<model>.{rlx,torch}.opt.onnx``), prints the op-type histograms side by side (only the rows
that differ), and times the two sessions interleaved in one process (``--rounds`` blocks of
``--block`` runs each, alternating) with 2 intra-op threads, printing each one's median, the ratio of
the medians, the median of the per-round ratios and the ratio of the 10th percentiles.
``--profile``: onnxruntime's per-op-type time of each session (from its JSON profile). ``--pad``:
rlx's engine with its channels padded to onnxruntime's channel block (``pad_channels=True``).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the model table and its 2-thread environment)

import rlx  # noqa: E402
from rlx.runtime.onnxruntime_engine import executor  # noqa: E402


def cases(labels: list[str]):
    wanted = {label.split("/")[0]: int(label.split("/b")[1]) for label in labels}
    for batch in sorted(set(wanted.values())):
        table = [(n, *bench.example(n, batch)) for n in ("mlp", "transformer", "cnn", "decoder_lm") if n in wanted]
        if set(wanted) - {"mlp", "transformer", "cnn", "decoder_lm"}:
            table += bench.hf_models(batch)
        for name, model, inputs in table:
            if wanted.get(name) == batch:
                yield f"{name}/b{batch}", model, inputs


def sessions(label: str, model, inputs, out: Path, profile: bool, pad: bool = False):
    import onnxruntime as ort

    stem = label.replace("/", "_")
    rlx.from_torch(model, inputs, out / stem, force=True, verify=False)
    plain = executor.OrtEngine.session_options

    def options(self):  # the engine's own options, plus the optimized graph written out
        opts = plain(self)
        opts.optimized_model_filepath = str(out / f"{stem}.rlx.opt.onnx")
        opts.enable_profiling = profile
        opts.profile_file_prefix = str(out / f"{stem}.rlx")
        return opts

    executor.OrtEngine.session_options = options
    try:
        rlx_model = rlx.load(out / stem / "bundle", engine="onnxruntime", threads=bench.THREADS,
                             engine_options={"pad_channels": pad})  # fmt: skip
    finally:
        executor.OrtEngine.session_options = plain
    path = out / f"{stem}.torch.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, str(path), dynamo=True, verbose=False)
    opts = ort.SessionOptions()  # as bench.py's column
    opts.intra_op_num_threads, opts.inter_op_num_threads = bench.THREADS, 1
    opts.optimized_model_filepath = str(out / f"{stem}.torch.opt.onnx")
    opts.enable_profiling = profile
    opts.profile_file_prefix = str(out / f"{stem}.torch")
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    arrays = [t.numpy() for t in inputs]
    feeds = {i.name: a for i, a in zip(session.get_inputs(), arrays)}
    return (lambda: rlx_model(*arrays)), (lambda: session.run(None, feeds)), rlx_model, session


def histogram(path: Path) -> collections.Counter:
    import onnx

    return collections.Counter(
        (f"{n.domain}." if n.domain else "") + n.op_type
        for n in onnx.load(str(path), load_external_data=False).graph.node
    )


def profile_summary(path: str) -> collections.Counter:
    per_op: collections.Counter = collections.Counter()
    for event in json.loads(Path(path).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            per_op[event["args"]["op_name"]] += event["dur"]
    return per_op


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="bench.py labels, e.g. resnet/b8")
    parser.add_argument("--out", default="ort_graphs", help="where the graphs go")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--pad", action="store_true", help="rlx's engine with pad_channels=True")
    args = parser.parse_args()
    torch.set_num_threads(bench.THREADS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for label, model, inputs in cases(args.models):
        ours, theirs, rlx_model, session = sessions(label, model, inputs, out, args.profile, args.pad)
        stem = label.replace("/", "_")
        a, b = histogram(out / f"{stem}.rlx.opt.onnx"), histogram(out / f"{stem}.torch.opt.onnx")
        print(f"{label}: nodes after optimization rlx {sum(a.values())}, torch.onnx {sum(b.values())}")
        for op in sorted(set(a) | set(b)):
            if a[op] != b[op]:
                print(f"  {op:40s} rlx {a[op]:4d}  torch.onnx {b[op]:4d}")
        want = np.asarray(bench.first_tensor(model(*inputs)).detach().numpy())
        print(f"  max |rlx - torch.onnx| {np.abs(bench.first_tensor(ours()) - theirs()[0]).max():.2e}"
              f" (output scale {np.abs(want).max():.2e})")  # fmt: skip
        for fn in (ours, theirs):
            for _ in range(50):
                fn()
        times: dict[str, list[float]] = {"rlx": [], "torch.onnx": []}
        for _ in range(args.rounds):
            for key, fn in (("rlx", ours), ("torch.onnx", theirs)):
                time.sleep(0.1)
                t0 = time.perf_counter()
                for _ in range(args.block):
                    fn()
                times[key].append((time.perf_counter() - t0) / args.block)
        mr, mt = statistics.median(times["rlx"]), statistics.median(times["torch.onnx"])
        p10r, p10t = (sorted(times[k])[len(times[k]) // 10] for k in ("rlx", "torch.onnx"))
        ratios = [x / y for x, y in zip(times["rlx"], times["torch.onnx"])]
        print(f"  rlx {mr * 1e3:.4f} ms  torch.onnx {mt * 1e3:.4f} ms  ratio {mr / mt:.3f}"
              f"  median per-round ratio {statistics.median(ratios):.3f}  p10 ratio {p10r / p10t:.3f}"
              f"  (per round {' '.join(f'{r:.2f}' for r in ratios)})")  # fmt: skip
        if args.profile:
            p_ours = profile_summary(rlx_model._static._session.end_profiling())
            p_theirs = profile_summary(session.end_profiling())
            print("  per op type, µs summed over the profiled runs: rlx / torch.onnx")
            for op in sorted(set(p_ours) | set(p_theirs), key=lambda o: -(p_ours[o] + p_theirs[o])):
                print(f"    {op:32s} {p_ours[op]:10d} {p_theirs[op]:10d}")


if __name__ == "__main__":
    main()
