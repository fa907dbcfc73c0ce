"""Memory, time and disk of converting, verifying and loading a Llama, by model size (issue 33).

Each stage runs in a child process of its own, so its peak RSS (``ru_maxrss`` from ``os.wait4``)
is that stage's alone; the model is rebuilt from a transformers config with random weights (no
download). Rows: the model alone (built and run once: the floor every conversion pays),
``torch.export.export`` + ``torch.export.save`` (what ``torch.onnx.export(dynamo=True)`` starts with;
the ONNX step itself needs onnxscript, not installed here, and the TorchScript exporter fails on
Llama's ``aten::diff``), ``rlx.from_torch``
without and with verification, and ``rlx.load`` + one call.

    python benchmarks/size_bench.py                       # 50M and 200M, f32 and bf16
    python benchmarks/size_bench.py --sizes 50M --dtypes f32
    python benchmarks/size_bench.py --sizes 1B --dtypes bf16
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

# hidden, layers, heads, kv heads, intermediate (vocab 32000): ~50M, ~200M (the issue's), ~1B.
SIZES = {
    "10M": (256, 4, 4, 2, 688),
    "50M": (512, 8, 8, 4, 1376),
    "200M": (1024, 12, 16, 4, 2816),
    "1B": (2048, 16, 32, 8, 5632),
}
SEQ = 32


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
    if name == "load":  # without torch, as a deployment runs
        import rlx

        t0 = time.perf_counter()
        model = rlx.load(out / "bundle")
        t1 = time.perf_counter()
        model(ids)
        return {"time_s": t1 - t0, "first_call_s": time.perf_counter() - t1}
    import torch

    torch.set_num_threads(1)
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
    else:
        import rlx

        report = rlx.from_torch(model, (ids,), out, verify=name == "verify", force=True)
        if not report.passed:
            raise SystemExit(f"parity failed:\n{report.summary()}")
    return {"time_s": time.perf_counter() - t0, "weight_bytes": weight_bytes}


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
    if name in ("torch.export", "convert", "verify"):
        row["disk"] = disk_bytes(out)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50M,200M")
    parser.add_argument("--dtypes", default="f32,bf16")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, size, dtype, out, result = args.child
        Path(result).write_text(json.dumps(stage(name, size, dtype, Path(out))))
        return 0
    print("| model | stage | peak RSS | RSS − model | ÷ weights | time | disk | ÷ weights |")
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes.split(","):
        for dtype in args.dtypes.split(","):
            with tempfile.TemporaryDirectory(prefix="rlx-size.") as tmp:
                rows = {}
                for name in ("model", "torch.export", "convert", "verify", "load"):
                    out = Path(tmp) / ("pt2" if name == "torch.export" else "rlx")
                    rows[name] = run_child(name, size, dtype, out)
                weights = rows["model"]["weight_bytes"]
                base = rows["model"]["peak_rss"]
                for name, row in rows.items():
                    extra = row["peak_rss"] - (base if name != "load" else 0)
                    disk = row.get("disk")
                    print(
                        f"| {size} {dtype} ({weights / 1e6:.0f} MB) | {name} | {row['peak_rss'] / 1e9:.2f} GB "
                        f"| {extra / 1e9:+.2f} GB | {extra / weights:.2f} | {row['time_s']:.1f} s "
                        f"| {'' if disk is None else f'{disk / 1e6:.0f} MB'} "
                        f"| {'' if disk is None else f'{disk / weights:.2f}'} |",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
