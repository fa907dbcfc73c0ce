"""Run ONNX's own node tests (``onnx.backend.test.case.node``) through rlx and through onnxruntime.

Every ai.onnx case is read, lowered, optimised and run on the numpy runtime, and its outputs are
compared with the expected outputs the case ships (ONNX's tolerances: ``rtol`` / ``atol`` of the
case; shapes and dtypes must match exactly). onnxruntime runs the same cases in the same process.

    python tools/onnx_conformance.py                      # print the summary
    python tools/onnx_conformance.py --record             # record the counts the docs show, then:
    python tools/gen_docs.py                              # render them into docs/ and the README
    python tools/onnx_conformance.py --write-known-failures   # refresh tests/frontends/onnx/known_failures.py
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "tests" / "frontends" / "onnx" / "results.json"  # read by tools/gen_docs.py
KNOWN_FAILURES = ROOT / "tests" / "frontends" / "onnx" / "known_failures.py"


@dataclass
class Outcome:
    name: str
    op: str
    passed: bool
    reason: str = ""


def collect(pattern: str | None = None) -> list[Any]:
    """ONNX's node test cases of the ai.onnx domain (``pattern``: a regex over case names)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        np.seterr(all="ignore")
        cases = collect_testcases()
    out = []
    for c in cases:
        domains = {n.domain for n in c.model.graph.node}
        if domains - {"", "ai.onnx"}:
            continue
        if pattern and not re.search(pattern, c.name):
            continue
        out.append(c)
    return out


def case_op(case: Any) -> str:
    return case.model.graph.node[0].op_type if case.model.graph.node else "?"


def _array(x: Any) -> Any:
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(x) if isinstance(x, TensorProto) else np.asarray(x) if isinstance(x, np.generic) else x


def _inputs(case: Any) -> tuple[list[Any], list[Any]]:
    inputs, outputs = case.data_sets[0]
    return [_array(x) for x in inputs], [_array(x) for x in outputs]


def compare(got: Any, want: Any, rtol: float, atol: float) -> str:
    """'' when ``got`` matches ``want`` (shape, dtype, NaN pattern, values within tolerance)."""
    if not isinstance(want, np.ndarray):
        return f"expected a {type(want).__name__}"
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {list(got.shape)} != {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if want.dtype.name.startswith(("float8", "float4")):  # ml_dtypes' (kind "V" or "f"): exactly, NaN = NaN
        same = np.array_equal(got.astype(np.float32), want.astype(np.float32), equal_nan=True)
        return "" if same else "values differ"
    if want.dtype.name == "bfloat16":  # ml_dtypes' kind is "V": compare as the floats they are (NaN = NaN)
        got, want = got.astype(np.float32), want.astype(np.float32)
    if want.dtype.kind in "fc":
        try:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError:
            diff = np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64))) if got.size else 0
            return f"values differ (max abs err {diff:.3g})"
        return ""
    if want.dtype.kind == "O":
        return "object outputs"
    return "" if np.array_equal(got, want) else "values differ"


def run_rlx(case: Any, freeze: bool = True) -> Outcome:
    from rlx.errors import LoweringError, RlxError

    op = case_op(case)
    try:
        from rlx.app.onnx_convert import lower_graph
        from rlx.app.pipeline import finish_program
        from rlx.formats.bundle import bind_weights
        from rlx.frontends.onnx import reader
        from rlx.runtime.model import Model

        inputs, expected = _inputs(case)
        if any(not isinstance(x, (np.ndarray, np.generic)) for x in inputs):
            return Outcome(case.name, op, False, "sequence/optional input")
        feed = {vi.name: np.asarray(x) for vi, x in zip(case.model.graph.input, inputs)}
        shapes = {k: v.shape for k, v in feed.items()}
        frozen: dict[str, np.ndarray] = {}
        while True:  # inputs that must be known while converting (axes, shapes, pads) are frozen
            try:
                graph = reader.read(case.model, shapes, frozen)
                program, weights = lower_graph(graph)
                break
            except LoweringError as e:
                m = re.search(r"input \d+ \('([^']*)'\) must be known", str(e))
                if not m or not freeze:
                    raise
                if m.group(1) in feed and m.group(1) not in frozen:
                    frozen[m.group(1)] = feed[m.group(1)]
                    continue
                # computed from inputs: freeze the small integer inputs (window sizes, target shapes) and
                # the scalars (Range bounds, loop counts computed from them)
                small = {
                    k: v
                    for k, v in feed.items()
                    if ((v.dtype.kind in "iu" and v.size <= 16) or v.ndim == 0) and k not in frozen
                }
                if not small:
                    raise
                frozen.update(small)
        program = finish_program(program)
        model = Model(program, bind_weights(program, weights, "weights"))
        names = [n for n, _, _ in graph.inputs]
        with np.errstate(all="ignore"):
            got = model.run_flat(model.bind((), {n: feed[n] for n in names}))
        for k, (g, w) in enumerate(zip(got, expected)):
            why = compare(g, w, case.rtol, case.atol)
            if why:
                return Outcome(case.name, op, False, f"output {k}: {why}")
        return Outcome(case.name, op, True, f"frozen inputs: {', '.join(frozen)}" if frozen else "")
    except RlxError as e:
        return Outcome(case.name, op, False, f"{type(e).__name__}: {str(e)[:160]}")
    except Exception as e:  # a crash is a failure of this case, reported, not a crash of the run
        return Outcome(case.name, op, False, f"crash {type(e).__name__}: {str(e)[:160]}")


def run_ort(case: Any) -> Outcome:
    op = case_op(case)
    try:
        import onnxruntime as ort

        inputs, expected = _inputs(case)
        options = ort.SessionOptions()
        options.log_severity_level = 4
        options.intra_op_num_threads = 1
        sess = ort.InferenceSession(case.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feed = {vi.name: np.asarray(x) for vi, x in zip(case.model.graph.input, inputs)}
        got = sess.run(None, feed)
        for k, (g, w) in enumerate(zip(got, expected)):
            why = compare(g, w, case.rtol, case.atol)
            if why:
                return Outcome(case.name, op, False, f"output {k}: {why}")
        return Outcome(case.name, op, True)
    except Exception as e:
        return Outcome(case.name, op, False, f"{type(e).__name__}: {str(e)[:160]}")


def record(rlx: list[Outcome], ort: list[Outcome] | None) -> dict[str, Any]:
    """The counts the docs show (tools/gen_docs.py renders them): overall and per op, rlx and onnxruntime."""
    import onnx

    versions = f"onnx {onnx.__version__}"
    if ort is not None:
        import onnxruntime

        versions += f", onnxruntime {onnxruntime.__version__}"
    ort_by = {o.name: o for o in ort or []}
    by_op: dict[str, list[Outcome]] = defaultdict(list)
    for o in rlx:
        by_op[o.op].append(o)
    return {
        "generated_by": "python tools/onnx_conformance.py --record",
        "versions": versions,
        "cases": len(rlx),
        "rlx_passed": sum(o.passed for o in rlx),
        "frozen": sum(o.passed and o.reason.startswith("frozen") for o in rlx),
        "ort_passed": None if ort is None else sum(o.passed for o in ort),
        "ops": {
            op: {
                "cases": len(cases),
                "rlx": sum(o.passed for o in cases),
                "onnxruntime": None if ort is None else sum(ort_by[o.name].passed for o in cases if o.name in ort_by),
            }
            for op, cases in sorted(by_op.items())
        },
    }


def reason_class(reason: str) -> str:
    """A short, stable class of a failure reason for the known-failures table."""
    for pattern, label in (
        (r"element type (\w+)", r"dtype \1 unsupported"),
        (r"unsupported ONNX ops", "op not supported"),
        (r"sequence|optional", "sequence/optional types"),
        (r"values differ", "values differ"),
        (r"shape \[", "shape differs"),
        (r"dtype \w+ != ", "dtype differs"),
        (r"data-dependent|must be known", "data-dependent shape"),
    ):
        m = re.search(pattern, reason)
        if m:
            return m.expand(label) if "\\" in label else label
    return reason[:100]


# Value differences rlx keeps on purpose, by case name: why rlx's answer differs from the expected one.
DELIBERATE = {
    r"test_attention_.*_(bf16|fp16)(_expanded)?$": "1 ulp of half precision: the reference rounds every intermediate "
    "to bf16/f16, rlx computes in float32 and rounds once (as PyTorch's CPU kernels)",
    r"test_dft_inverse": "float32 rounding (~2e-6) above the case's atol: rlx's inverse DFT is numpy's FFT",
    r"test_maxunpool_export_with_output_shape": "indices address the output_shape tensor, as in onnxruntime and "
    "PyTorch's max_unpool; the reference reads them in the inferred shape and pads",
}


def known_reason(o: Outcome) -> str:
    for pattern, why in DELIBERATE.items():
        if re.match(pattern, o.name) and "values differ" in o.reason:
            return f"deliberate: {why}"
    return reason_class(o.reason)


def write_known_failures(outcomes: list[Outcome]) -> None:
    rows = [f"    {o.name!r}: {known_reason(o)!r}," for o in outcomes if not o.passed]
    KNOWN_FAILURES.write_text(
        '"""ONNX node-test cases rlx is known to fail, with the reason (written by tools/onnx_conformance.py\n'
        '--write-known-failures; tests/frontends/onnx/test_conformance.py checks the rest pass)."""\n\n'
        "KNOWN_FAILURES: dict[str, str] = {\n" + "\n".join(rows) + "\n}\n",
        encoding="utf-8",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-k", "--pattern", help="only cases whose name matches this regex")
    p.add_argument("--no-ort", action="store_true", help="do not run onnxruntime")
    p.add_argument(
        "--record", action="store_true", help="write the counts the docs show to tests/frontends/onnx/results.json"
    )
    p.add_argument("--write-known-failures", action="store_true")
    p.add_argument("--failures", action="store_true", help="list every failing case with its reason")
    p.add_argument(
        "--no-freeze", action="store_true", help="never freeze inputs: shape parameters must stay run-time inputs"
    )
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    cases = collect(args.pattern)
    rlx = [run_rlx(c, freeze=not args.no_freeze) for c in cases]
    ort = None if args.no_ort else [run_ort(c) for c in cases]
    import gen_docs  # beside this file: renders the counts as the docs show them

    rec = record(rlx, ort)
    print(gen_docs.onnx_summary_table(rec))
    print(f"\n{len(cases)} cases in {time.perf_counter() - t0:.1f} s")
    if args.failures:
        for o in rlx:
            if not o.passed:
                print(f"FAIL {o.name}: {o.reason}")
    counts = Counter(reason_class(o.reason) for o in rlx if not o.passed)
    print("\nfailure classes:", ", ".join(f"{k} ×{v}" for k, v in counts.most_common(15)))
    if args.record:
        RESULTS.write_text(json.dumps(rec, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {RESULTS.relative_to(ROOT)}; now run python tools/gen_docs.py")
    if args.write_known_failures:
        write_known_failures(rlx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
