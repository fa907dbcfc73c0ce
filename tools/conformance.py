"""Print the OpInfo conformance pass rate by op and overall.

    python tools/conformance.py [--dtypes f32,i64,bool,f16,bf16] [--max-samples 3] [--ops add,mul]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from conformance.known_failures import KNOWN  # noqa: E402
from conformance.opinfo import sweep  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtypes", default="f32,i64,bool,f16,bf16")
    parser.add_argument("--max-samples", type=int, default=3)
    parser.add_argument("--ops", default="")
    args = parser.parse_args()
    names = args.ops.split(",") if args.ops else None
    by_op: dict[str, Counter] = defaultdict(Counter)
    reasons: dict[str, str] = {}
    for o in sweep(names, dtypes=tuple(args.dtypes.split(",")), max_samples=args.max_samples):
        status = "known" if o.status == "fail" and o.op in KNOWN else o.status
        by_op[o.op][status] += 1
        if status == "fail":
            reasons.setdefault(o.op, f"[{o.dtype}] {o.reason}")
        print(f"{o.op:<40}{o.dtype:<6}{o.status:<6}{o.reason[:100]}", flush=True)
    total = Counter()
    for c in by_op.values():
        total.update(c)
    counted = total["pass"] + total["fail"] + total["known"]
    print()
    print("| op | pass | fail | known | n/a | first failure |")
    print("|---|---|---|---|---|---|")
    for op, c in sorted(by_op.items()):
        if c["pass"] + c["fail"] + c["known"]:
            print(f"| `{op}` | {c['pass']} | {c['fail']} | {c['known']} | {c['n/a']} | {reasons.get(op, '')} |")
    rate = 100 * total["pass"] / counted if counted else 0.0
    print(f"\nsamples in Core ATen: {counted}; passed {total['pass']} ({rate:.1f}%), failed {total['fail']}, "
          f"declared {total['known']}; not applicable {total['n/a']}")  # fmt: skip


if __name__ == "__main__":
    main()
