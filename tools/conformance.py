"""Print the OpInfo conformance pass rate by op and overall; optionally record it for the docs.

    python tools/conformance.py [--dtypes f32,i64,bool,f16,bf16] [--max-samples 3] [--ops add,mul]
                                [--save out.json] [--load out.json] [--record]
                                [--engine numpy|jax|onnxruntime|openvino]

``--save`` keeps every outcome as JSON; ``--load`` reads them back instead of sweeping (the full
sweep takes a while); ``--load`` with ``--ops`` sweeps those ops again and replaces their saved
outcomes (after a change to a few ops); ``--record`` writes the counts the docs show to
tests/conformance/results.json: per dtype group, the outcomes over every exported sample and over
the samples that land in Core ATen (float32/int64/bool, float16/bfloat16), and per op (samples
passed, failed, declared with reason). ``python tools/gen_docs.py`` then renders the coverage
page and the README's headline from that file. ``--engine`` runs the samples on another engine
(the docs' counts are the numpy engine's: ``--record`` refuses another).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import gen_docs  # noqa: E402  (beside this script: sys.path[0] when it runs)

from conformance.opinfo import MAX_SAMPLES, SWEEP_DTYPES, Outcome, sweep  # noqa: E402

RESULTS = gen_docs.OPINFO_RESULTS
GROUPS = {"f32/i64/bool": ("f32", "i64", "bool"), "f16/bf16": ("f16", "bf16")}
COUNTED = ("pass", "fail", "known")


def totals(outcomes: list[Outcome], dtypes: tuple[str, ...] | None = None, core_only: bool = False) -> Counter:
    return Counter(
        o.status
        for o in outcomes
        if (dtypes is None or o.dtype in dtypes) and (not core_only or o.core or o.status == "n/a")
    )


def record(outcomes: list[Outcome], dtypes: str, max_samples: int) -> dict[str, Any]:
    """The counts the docs show (gen_docs.py renders them): per dtype group and per exported op."""
    groups: dict[str, dict[str, dict[str, int]]] = {}
    for group, toks in GROUPS.items():
        if not any(o.dtype in toks for o in outcomes):
            continue
        everything, core = totals(outcomes, toks), totals(outcomes, toks, core_only=True)
        groups[group] = {
            "all": {s: everything[s] for s in (*COUNTED, "n/a")},
            "core": {s: core[s] for s in COUNTED},
        }
    by_op: dict[str, Counter] = defaultdict(Counter)
    notes: dict[str, list[str]] = defaultdict(list)
    for o in outcomes:
        by_op[o.op][o.status] += 1
        if o.status in ("fail", "known"):
            note = f"{'declared' if o.status == 'known' else 'fails'} [{o.dtype}]: {o.reason[:140]}"
            if note not in notes[o.op]:
                notes[o.op].append(note)
    ops = {
        op: {**{s: c[s] for s in COUNTED}, "notes": notes[op][:2]}
        for op, c in sorted(by_op.items())
        if sum(c[s] for s in COUNTED)
    }
    return {
        "generated_by": "python tools/conformance.py --record",
        "torch": _torch_version(),
        "dtypes": dtypes,
        "max_samples": max_samples,
        "groups": groups,
        "ops": ops,
    }


def _torch_version() -> str:
    import torch

    return torch.__version__.split("+")[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default=",".join(SWEEP_DTYPES))
    parser.add_argument("--max-samples", type=int, default=MAX_SAMPLES)
    parser.add_argument("--ops", default="")
    parser.add_argument("--save", help="write every outcome to this JSON file")
    parser.add_argument("--load", help="read outcomes from this JSON file instead of sweeping")
    parser.add_argument("--record", action="store_true", help=f"write the docs' counts to {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--engine", default="numpy", choices=("numpy", "jax", "onnxruntime", "openvino"))
    args = parser.parse_args()
    if args.record and args.engine != "numpy":
        parser.error("--record writes the numpy engine's counts (the docs'); drop --engine")
    names = args.ops.split(",") if args.ops else None
    outcomes: list[Outcome] = []
    if args.load:
        doc = json.loads(Path(args.load).read_text())
        outcomes = [Outcome(**o) for o in doc["outcomes"] if names is None or o["op"] not in names]
        args.dtypes, args.max_samples = doc["dtypes"], doc["max_samples"]
    if not args.load or names:
        for o in sweep(names, dtypes=tuple(args.dtypes.split(",")), max_samples=args.max_samples, engine=args.engine):
            outcomes.append(o)
            print(f"{o.op:<40} {o.dtype:<5} {o.status:<6}{o.reason[:100]}", flush=True)
    if args.save:
        doc = {"dtypes": args.dtypes, "max_samples": args.max_samples, "outcomes": [asdict(o) for o in outcomes]}
        Path(args.save).write_text(json.dumps(doc, indent=0))
    rec = record(outcomes, args.dtypes, args.max_samples)
    print()
    print(gen_docs.opinfo_table(rec))
    print()
    for line in gen_docs.opinfo_summary_lines(rec):
        print(line)
    if args.record:
        RESULTS.write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {RESULTS.relative_to(ROOT)}; now run python tools/gen_docs.py")


if __name__ == "__main__":
    main()
