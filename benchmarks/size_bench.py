"""Memory, time and disk of converting, verifying and loading a Llama, by model size (issue 33).

Each stage runs in a child process of its own, so its peak RSS (``ru_maxrss`` from ``os.wait4``)
is that stage's alone; the model is rebuilt from a transformers config with random weights (no
download). Rows: the model alone (built and run once: the floor every conversion pays),
``torch.export.export`` + ``torch.export.save``, ``torch.onnx.export(dynamo=True)`` with external
data (the time and memory targets of issue 33 are relative to it), ``rlx.from_torch`` without and
with verification, ``rlx.load`` + one call on each engine asked for (a fresh process without
torch), and, with ``--generate``, the ``examples/generate.py`` recipe at that size in one process:
the one-token decode step with its KV cache converted and verified, loaded, and run greedily.

    python benchmarks/size_bench.py                       # 50M and 200M, f32 and bf16
    python benchmarks/size_bench.py --sizes 50M --dtypes f32
    python benchmarks/size_bench.py --sizes 200M --dtypes f32 --engines numpy,onnxruntime,openvino
    python benchmarks/size_bench.py --sizes 1B --dtypes bf16 --generate
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# hidden, layers, heads, kv heads, intermediate (vocab 32000): ~50M, ~200M (the issue's), and
# 1.1B (TinyLlama-1.1B's shape).
SIZES = {
    "10M": (256, 4, 4, 2, 688),
    "50M": (512, 8, 8, 4, 1376),
    "200M": (1024, 12, 16, 4, 2816),
    "1B": (2048, 22, 32, 4, 5632),
}
SEQ = 32
PROMPT, NEW_TOKENS, CACHE = [5, 17, 42, 7], 8, 32  # the generate recipe's


def build(size: str, dtype: str) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, heads, kv, inter = SIZES[size]
    config = LlamaConfig(
        vocab_size=32000, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, intermediate_size=inter, max_position_embeddings=256, use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device("meta"):  # no random init on CPU: the weights are filled in place below
        model = LlamaForCausalLM(config)
    model = model.to_empty(device="cpu").to({"f32": torch.float32, "bf16": torch.bfloat16}[dtype]).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
        rotary = model.model.rotary_emb  # its inverse frequencies were never computed (meta device)
        rotary.inv_freq.copy_(type(rotary)(config).inv_freq)
    return model


def logits_module(model: Any) -> Any:
    import torch

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=input_ids).logits

    return Logits().eval()


def stage(name: str, size: str, dtype: str, out: Path) -> dict[str, Any]:
    """Run one stage in this (child) process; returns what it measured besides RSS."""
    import numpy as np

    ids = np.random.default_rng(0).integers(0, 32000, (1, SEQ), dtype=np.int64)
    if name.startswith("load"):  # without torch, as a deployment runs
        import rlx

        engine = name.partition(":")[2] or "numpy"
        t0 = time.perf_counter()
        model = rlx.load(out / "bundle", engine=engine)
        t1 = time.perf_counter()
        model(ids)
        return {"time_s": t1 - t0, "first_call_s": time.perf_counter() - t1}
    import torch

    torch.set_num_threads(1)
    if name == "generate":
        return generate_stage(build(size, dtype), out)
    ids = torch.from_numpy(ids)
    model = logits_module(build(size, dtype))
    weight_bytes = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    t0 = time.perf_counter()
    if name == "model":
        with torch.no_grad():
            model(ids)
    elif name == "torch.export":
        out.mkdir(parents=True, exist_ok=True)
        torch.export.save(torch.export.export(model, (ids,)), str(out / "model.pt2"))
    elif name == "torch.onnx.export":
        out.mkdir(parents=True, exist_ok=True)
        torch.onnx.export(model, (ids,), str(out / "model.onnx"), dynamo=True, external_data=True, verbose=False)
    else:
        import rlx

        report = rlx.from_torch(model, (ids,), out, verify=name == "verify", force=True)
        if not report.passed:
            raise SystemExit(f"parity failed:\n{report.summary()}")
    return {"time_s": time.perf_counter() - t0, "weight_bytes": weight_bytes}


def generate_stage(model: Any, out: Path) -> dict[str, Any]:
    """examples/generate.py at this size: convert (verified) the decode step, load it, generate
    greedily, then teacher-force PyTorch through the same tokens for the largest logit difference."""
    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from generate import convert, generate, with_static_cache

    import rlx

    model.config.use_cache = True  # build() turned it off for the whole-sequence rows
    model = with_static_cache(model, CACHE)
    t0 = time.perf_counter()
    report = convert(model, out, max_cache_len=CACHE)
    if not report.passed:
        raise SystemExit(f"parity failed:\n{report.summary()}")
    t1 = time.perf_counter()
    recorded = _Recorded(rlx.load(out))
    tokens = generate(recorded, PROMPT, NEW_TOKENS)
    t2 = time.perf_counter()
    with torch.no_grad():  # PyTorch's logits for the same tokens, one forward over all of them
        want = model(torch.tensor([tokens[:-1]])).logits.float().numpy()[0]
    got = np.concatenate([np.asarray(s, np.float32)[0] for s in recorded.steps])
    torch_tokens = model.generate(torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, do_sample=False)[0].tolist()
    return {
        "time_s": t1 - t0,
        "generate_s": t2 - t1,
        "tokens": len(recorded.steps),
        "max_abs_logit_err": float(np.abs(got - want).max()),
        "logit_scale": float(np.abs(want).max()),
        "same_argmax": int((got.argmax(-1) == want.argmax(-1)).sum()),
        "identical_tokens": tokens == torch_tokens,
        "weight_bytes": report.param_bytes,
    }


class _Recorded:
    """A loaded model that keeps each step's logits."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self.steps: list[Any] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.steps.append(result := self._model(**kwargs))
        return result

    def reset(self) -> None:
        self._model.reset()


def disk_bytes(path: Path) -> int:
    """Bytes on disk under ``path``, each inode once (hard links are one file)."""
    seen, total = set(), 0
    for f in path.rglob("*"):
        st = f.lstat()
        if f.is_file() and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def run_child(name: str, size: str, dtype: str, out: Path) -> dict[str, Any]:
    result = out.parent / f"{out.name}.{name}.json"
    cmd = [sys.executable, __file__, "--child", name, size, dtype, str(out), str(result)]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"stage {name} ({size} {dtype}) failed with status {status}")
    row = json.loads(result.read_text())
    row["peak_rss"] = usage.ru_maxrss * 1024  # Linux reports KiB
    if not name.startswith("load") and name != "model":
        row["disk"] = disk_bytes(out)
    return row


CONVERSIONS = ("model", "torch.export", "torch.onnx.export", "convert", "verify")
# Where each stage's files go (the load stages read the "verify" stage's).
OUT_DIR = {"torch.export": "pt2", "torch.onnx.export": "onnx", "generate": "gen"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50M,200M")
    parser.add_argument("--dtypes", default="f32,bf16")
    parser.add_argument("--stages", default=",".join(CONVERSIONS), help="conversion stages (model is always run)")
    parser.add_argument("--engines", default="numpy", help="engines for the rlx.load + one call rows")
    parser.add_argument("--generate", action="store_true", help="also run the examples/generate.py recipe")
    parser.add_argument("--json", type=Path, help="also write every row, as measured, to this file")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, size, dtype, out, result = args.child
        Path(result).write_text(json.dumps(stage(name, size, dtype, Path(out))))
        return 0
    stages = ["model", *(s for s in args.stages.split(",") if s and s != "model")]
    if args.engines:
        stages += [f"load:{e}" for e in args.engines.split(",")]
        if "verify" not in stages and "convert" not in stages:
            stages.insert(1, "convert")  # the load rows need a bundle
    if args.generate:
        stages.append("generate")
    print("| model | stage | peak RSS | RSS − model | ÷ weights | time | disk | ÷ weights |")
    print("|---|---|---|---|---|---|---|---|")
    results = []
    for size in args.sizes.split(","):
        for dtype in args.dtypes.split(","):
            with tempfile.TemporaryDirectory(prefix="rlx-size.") as tmp:
                weights = base = 0
                for name in stages:
                    row = run_child(name, size, dtype, Path(tmp) / OUT_DIR.get(name, "rlx"))
                    if name == "model":
                        weights, base = row["weight_bytes"], row["peak_rss"]
                    results.append({"size": size, "dtype": dtype, "stage": name, **row})
                    print(format_row(size, dtype, name, row, weights, base), flush=True)
                    if name == "generate":
                        print(f"  generate: {json.dumps(row)}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


def format_row(size: str, dtype: str, name: str, row: dict[str, Any], weights: int, base: int) -> str:
    """A table row: a load row's memory is the whole process (no torch, no model), every other
    row's is also shown beyond the model's own (the floor any conversion pays)."""
    extra = row["peak_rss"] - (0 if name.startswith("load") else base)
    disk = row.get("disk")
    return (
        f"| {size} {dtype} ({weights / 1e6:.0f} MB) | {name} | {row['peak_rss'] / 1e9:.2f} GB "
        f"| {extra / 1e9:+.2f} GB | {extra / weights:.2f} | {row['time_s']:.1f} s "
        f"| {'' if disk is None else f'{disk / 1e6:.0f} MB'} "
        f"| {'' if disk is None else f'{disk / weights:.2f}'} |"
    )


if __name__ == "__main__":
    sys.exit(main())
