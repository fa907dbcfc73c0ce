"""``rlx tune BUNDLE``: the fastest (engine, precision) on this machine whose outputs stay within
the user's tolerance of PyTorch's, written to ``BUNDLE/tuning.json`` for ``rlx.load`` to follow.

Every installed engine × every precision it runs on this CPU (``rlx.runtime.engines``) is a
candidate. Each candidate runs in a fresh process of its own (as ``rlx bench`` does: its threads,
JIT caches and peak memory are its own) on the same input sets: the bundle's reference inputs
(``reference.safetensors``, checked against PyTorch eager's outputs recorded beside them) and, with
``inputs=``, the user's (checked against the numpy engine at float32, rlx's reference engine).

The rule is rlx's parity rule at the user's tolerance: per output, the shape, dtype and NaN/±inf
pattern equal, then cosine ≥ ``tolerance`` and max |error| ≤ ``max_error`` × max(1, max |reference|);
integer and boolean outputs exactly equal. Candidates that pass are timed (median of calls after a
warm-up), then the close ones again together in one process, at tune's threads and at halvings of
them (``_race``: small models often run faster on fewer); the fastest is the
choice, unless it is a lower precision no more than 5% faster than the fastest float32 candidate
(then float32's exact answer is kept). Where a candidate fails, the report names the outputs and
by how much.

``int8-static`` (onnxruntime's quantizer; its graph runs on onnxruntime or OpenVINO) is calibrated
here, once, on the user's inputs (else the reference inputs); the ranges are written beside
tuning.json (``CALIBRATION_FILE``) and the choice points at them. A lower precision that fails is
traced node by node (``rlx.app.mixed``; int8-static on onnxruntime for either engine): the nodes
that add the most loss are named in the table's note and kept in float32 in retries (mixed
precision); the choice records them, and ``rlx.load`` keeps them in float32 too.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlx.app.bench import BLOCK_S, fastest, in_fresh_process, interleaved_rounds, steady_medians
from rlx.app.mixed import culprits, losses
from rlx.errors import InputError, RlxError, UsageError, summary
from rlx.formats import safetensors_io
from rlx.formats.atomic import atomic_write_text
from rlx.formats.layout import CALIBRATION_FILE, REFERENCE_FILE, TUNING_FILE, bundle_root, input_key, output_key
from rlx.ir import dtypes
from rlx.ir.program import Program
from rlx.optional import available, require
from rlx.runtime.cpu import cores
from rlx.runtime.engines import (
    ENGINES,
    PRECISIONS,
    THREADS_PER_SESSION,
    TRACEABLE,
    calibrate,
    pads_channels,
    supported_precisions,
)
from rlx.runtime.onnx_graph import finite
from rlx.runtime.tuning import ENGINE_PACKAGES, FORMAT, machine

if TYPE_CHECKING:
    from rlx.runtime.model import Model

DEFAULT_TOLERANCE = 0.999  # cosine, per output (the Rust reference's parity threshold)
DEFAULT_MAX_ERROR = 1e-2  # max |error| relative to max(1, max |reference|)
TIME_BUDGET_S = 1.5  # timing per candidate: at most this long (and at most `runs` calls)
RACE_WITHIN, RACE_MAX = 2.0, 6  # re-timed together: the RACE_MAX fastest passing ones within 2x the best
KEEP_F32 = 1.05  # a lower precision is chosen only when more than this much faster than float32
# Re-timing: rounds of interleaved blocks in each of RACES races. A disturbance only ever adds time,
# and one that lasts a whole race (another process busy on one of two cores for ten seconds) slows
# the contenders that use every core and not those on fewer: in one benchmark run, EfficientNet b8
# timed OpenVINO bf16 on one thread level with two, where two ran 1.4x faster before and after.
# So the race runs twice, in a fresh process each, the second in reverse order, and each
# contender's time is the lower of its two medians. Within a race, the medians are taken round by
# round against all contenders (``steady_medians``): a change of machine speed between rounds cancels.
RACE_ROUNDS, RACES = 10, 2
NAN_PARITY = {True: "same", False: "differs", None: "-"}  # the table's NaN/inf column


@dataclass
class OutputCheck:
    input_set: str
    index: int
    cosine: float | None
    max_error: float | None
    limit: float | None  # the max |error| allowed for this output
    passed: bool
    reason: str = ""


@dataclass
class Candidate:
    engine: str
    precision: str
    median_ms: float = math.nan
    load_s: float = math.nan
    min_cosine: float | None = None
    passed: bool = False
    error: str = ""
    failures: list[OutputCheck] = field(default_factory=list)
    # engine options: int8-static's calibration file, and (mixed precision) the instructions kept in float32
    options: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # mixed precision: which nodes lost the accuracy, what keeping them in float32 did
    threads: int | None = None  # fewer than tune's threads (``_race``); None: tune's own
    # On the NaN probe (``nan_probe``): whether NaN and inf land where the numpy engine (PyTorch's
    # rules) puts them; None: no float input to plant them in, or the run failed.
    nan_parity: bool | None = None

    @property
    def name(self) -> str:
        threads = "" if self.threads is None else f" on {self.threads} thread{'s' * (self.threads > 1)}"
        padded = " padded" if self.options.get("pad_channels") else ""
        return f"{self.engine} {self.precision}{padded}{threads}"

    def verdict(self) -> str:
        if self.error:
            return f"failed: {self.error}"
        if self.passed:
            how = [what for what, key in (("mixed precision", "float32"), ("channels padded", "pad_channels"))
                   if self.options.get(key)]  # fmt: skip
            return f"pass ({', '.join(how)})" if how else "pass"
        worst = "; ".join(f"{f.input_set} out{f.index}: {f.reason}" for f in self.failures[:3])
        more = f" (+{len(self.failures) - 3} more)" if len(self.failures) > 3 else ""
        return f"FAIL {worst}{more}"


@dataclass
class TuneReport:
    bundle: str
    tolerance: float
    max_error: float
    threads: int | None
    inputs: list[str]
    candidates: list[Candidate]
    seconds: float = 0.0
    written: str = ""

    @property
    def choice(self) -> Candidate | None:
        """The fastest passing candidate, except that a lower precision must beat the fastest float32
        one by more than timing noise (``KEEP_F32``): within it, float32's exact answer is kept."""
        best = fastest(self.candidates)
        if best is None or best.precision == "f32":
            return best
        exact = fastest([c for c in self.candidates if c.precision == "f32"])
        return exact if exact is not None and exact.median_ms <= KEEP_F32 * best.median_ms else best

    def table(self) -> str:
        rows = [
            f"{'engine':<13}{'precision':<11}{'threads':>8}{'load s':>8}{'median ms':>11}{'min cosine':>13}"
            f"{'NaN/inf':>9}  result"
        ]
        for c in self.candidates:
            timed = not c.error and c.passed
            cosine = "-" if c.min_cosine is None else f"{c.min_cosine:.6f}"
            threads = c.threads or self.threads or "default"
            rows.append(
                f"{c.engine:<13}{c.precision:<11}{threads:>8}{_num(c.load_s, '8.2f')}"
                f"{_num(c.median_ms if timed else math.nan, '11.3f')}{cosine:>13}"
                f"{NAN_PARITY[c.nan_parity]:>9}  {c.verdict()}"
            )
            if c.note:
                rows.append(f"{'':<13}note: {c.note}")
        best, quickest = self.choice, fastest(self.candidates)
        if best is None:
            rows.append("no candidate passed")
        elif quickest is not best and quickest is not None:
            rows.append(
                f"choice: {best.name} ({best.median_ms:.3f} ms): {quickest.name} ({quickest.median_ms:.3f} ms) "
                f"is not faster by more than {KEEP_F32 - 1:.0%}, so float32 is kept"
            )
        else:
            rows.append(f"fastest within tolerance: {best.name} ({best.median_ms:.3f} ms)")
        if best is not None and best.nan_parity is False:
            faithful = fastest([c for c in self.candidates if c.nan_parity])
            instead = (
                f"; the fastest that keeps them: {faithful.name} ({faithful.median_ms:.3f} ms)" if faithful else ""
            )
            rows.append(
                f"note: on an input holding NaN or inf, {best.name} puts NaN/inf elsewhere than PyTorch does "
                f"(the NaN/inf column){instead}"
            )
        return "\n".join(rows)

    def to_json(self) -> dict[str, Any]:
        best = self.choice
        engines = sorted({c.engine for c in self.candidates})
        return {
            "format": FORMAT,
            "version": 1,
            "choice": None
            if best is None
            else {
                "engine": best.engine,
                "precision": best.precision,
                "threads": self.threads if best.threads is None else best.threads,
                "median_ms": best.median_ms,
                "options": _recorded(best.options),
            },  # fmt: skip
            "tolerance": {"cosine": self.tolerance, "max_error": self.max_error},
            "inputs": self.inputs,
            "machine": machine(engines),
            "candidates": [_jsonable({**asdict(c), "options": _recorded(c.options)}) for c in self.candidates],
        }


def _recorded(options: dict[str, Any]) -> dict[str, Any]:
    """Engine options as tuning.json records them: the calibration file by its name in the bundle."""
    return {k: (CALIBRATION_FILE if k == "calibration" else v) for k, v in options.items()}


def _num(v: float, spec: str) -> str:
    width = int(spec.split(".")[0])
    return f"{'-':>{width}}" if math.isnan(v) else format(v, spec)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


def candidates(engines: Sequence[str] | None, precisions: Sequence[str] | None) -> list[tuple[str, str]]:
    """Every (engine, precision) to try: the installed engines (or ``engines``) × what each runs here."""
    unknown = [e for e in engines or () if e not in ENGINES]
    if unknown:
        raise UsageError(f"unknown engine(s) {', '.join(unknown)}; choose from {', '.join(ENGINES)}")
    bad = [p for p in precisions or () if p not in PRECISIONS]
    if bad:
        raise UsageError(f"unknown precision(s) {', '.join(bad)}; choose from {', '.join(PRECISIONS)}")
    chosen = (
        list(engines) if engines else [e for e in ENGINES if available(ENGINE_PACKAGES[e].replace("jaxlib", "jax"))]
    )
    out = []
    for e in chosen:
        runs_here = supported_precisions(e)  # (an engine asked for but not installed: its one-line refusal)
        out += [(e, p) for p in runs_here if precisions is None or p in precisions]
    if not out:
        raise UsageError(f"no engine here runs precision(s) {', '.join(precisions or ())}; try --precisions f32")
    return out


def read_input_sets(
    path: str | Path, names: Sequence[str], limit: int = 4, kinds: Mapping[str, np.dtype] | None = None
) -> list[dict[str, np.ndarray]]:
    """The user's input sets: a .npz of arrays named like the inputs (one set), a .safetensors with
    ``in::<name>`` keys (one set), or a Parquet file with one column per input, each row one set
    (its cells the whole input as nested lists; the first ``limit`` rows). A Parquet cell is read
    in the input's dtype from ``kinds`` where it is of the same kind, as ``rlx batch`` reads one
    (nested Python floats are written as float64, a float32 model wants them)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--inputs {path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            sets = [{n: z[n] for n in names if n in z.files}]
    elif suffix == ".safetensors":
        tensors, _ = safetensors_io.read(path)
        sets = [{n: np.asarray(tensors[input_key(n)]) for n in names if input_key(n) in tensors}]
    elif suffix == ".parquet":
        pq = require("pyarrow.parquet", extra="batch", feature="--inputs FILE.parquet")
        table = pq.read_table(path, columns=[n for n in names if n in pq.read_schema(path).names])
        rows = min(table.num_rows, limit)
        sets = [
            {n: _cell(table.column(n)[k].as_py(), (kinds or {}).get(n)) for n in table.column_names}
            for k in range(rows)
        ]
    else:
        raise InputError(f"--inputs {path}: expected a .npz, .safetensors or .parquet file")
    for k, s in enumerate(sets):
        missing = [n for n in names if n not in s]
        if missing:
            raise InputError(f"--inputs {path}: set {k} has no array for input(s) {', '.join(missing)}")
    if not sets:
        raise InputError(f"--inputs {path}: no rows")
    return sets


def _cell(value: Any, kind: np.dtype | None) -> np.ndarray:
    arr = np.asarray(value)
    return arr.astype(kind) if kind is not None and np.can_cast(arr.dtype, kind, casting="same_kind") else arr


def _reference_sets(root: Path, names: Sequence[str]) -> list[tuple[str, dict[str, np.ndarray], list[np.ndarray]]]:
    """(label, inputs, PyTorch outputs) from the bundle's reference.safetensors, if it has one."""
    for ref in (root / REFERENCE_FILE, root.parent / REFERENCE_FILE):
        if ref.is_file():
            tensors, _ = safetensors_io.read(ref)
            if all(input_key(n) in tensors for n in names):
                outs, k = [], 0
                while output_key(k) in tensors:
                    outs.append(np.asarray(tensors[output_key(k)]))
                    k += 1
                return [("reference", {n: np.asarray(tensors[input_key(n)]) for n in names}, outs)]
    return []


def judge(
    label: str, got: list[np.ndarray], want: list[np.ndarray], tolerance: float, max_error: float, random: set[int]
) -> list[OutputCheck]:
    """Every output against its reference with rlx's parity rule at the user's tolerance."""
    from rlx.app.verify import compare

    checks = []
    for i, (g, w) in enumerate(zip(got, want)):
        p = compare(i, np.asarray(g), w, random=i in random)
        if p.random or (p.cosine is None and p.passed):
            checks.append(OutputCheck(label, i, None, p.max_abs_err, 0.0 if p.max_abs_err is not None else None, True))
            continue
        if p.reason in ("shape differs", "dtype differs") or p.cosine is None:  # shape/dtype, or integers/bools
            checks.append(OutputCheck(label, i, None, p.max_abs_err, 0.0, p.passed, p.reason))
            continue
        finite = w[np.isfinite(w)] if w.dtype.kind == "f" else w
        scale = max(1.0, float(np.max(np.abs(finite.astype(np.float64))))) if finite.size else 1.0
        limit = max_error * scale
        reasons = []
        if not p.nonfinite_match:
            reasons.append("NaN/inf positions differ")
        if p.cosine < tolerance:
            reasons.append(f"cosine {p.cosine:.6f} < {tolerance}")
        if p.max_abs_err is not None and p.max_abs_err > limit:
            reasons.append(f"max err {p.max_abs_err:.3e} > {limit:.3e}")
        checks.append(OutputCheck(label, i, p.cosine, p.max_abs_err, limit, not reasons, "; ".join(reasons)))
    if len(got) != len(want):
        checks.append(
            OutputCheck(label, len(want), None, None, None, False, f"{len(got)} outputs, expected {len(want)}")
        )
    return checks


def measure(
    bundle: str,
    engine: str,
    precision: str,
    sets: list[dict[str, np.ndarray]],
    threads: int | None,
    runs: int,
    options: dict[str, Any] | None = None,
    probe: dict[str, np.ndarray] | None = None,
) -> tuple[float, float, list[list[np.ndarray]] | None, str]:
    """In the worker process: load (with the engine ``options``), run every input set, time the
    first; (load s, median ms, outputs per set, error). ``probe``: one more input set, run after
    the timing (an engine may compile a graph of its own for it), its outputs last (None where it
    failed)."""
    from rlx.runtime.model import load

    try:
        t0 = time.perf_counter()
        model = load(bundle, engine=engine, precision=precision, threads=threads, engine_options=options or None)
        flat = [model.bind((), s) for s in sets]
        outputs = [[np.asarray(o) for o in model.run_flat(f)] for f in flat]  # the first call compiles
        load_s = time.perf_counter() - t0
        for _ in range(2):
            model.run_flat(flat[0])
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < runs and (len(times) < 5 or time.perf_counter() - start < TIME_BUDGET_S):
            t = time.perf_counter()
            model.run_flat(flat[0])
            times.append((time.perf_counter() - t) * 1e3)
    except RlxError as e:
        return math.nan, math.nan, None, str(e)
    if probe is not None:
        try:
            outputs.append([np.asarray(o) for o in model.run_flat(model.bind((), probe))])
        except RlxError:
            outputs.append(None)  # type: ignore[arg-type]
    return load_s, float(np.median(times)), outputs, ""


def _in_subprocess(bundle: Path, engine: str, precision: str, sets: list[dict[str, np.ndarray]], threads: int | None,
                   runs: int, options: dict[str, Any] | None = None, probe: dict[str, np.ndarray] | None = None,
                   ) -> tuple[float, float, list[list[np.ndarray]] | None, str]:  # fmt: skip
    try:
        return in_fresh_process(threads, measure, str(bundle), engine, precision, sets, threads, runs, options, probe)
    except Exception as e:  # a crashed worker: this candidate failed, the others go on
        text = str(e).strip().splitlines()
        return math.nan, math.nan, None, f"{type(e).__name__}: {text[0] if text else ''}"


def tune(
    bundle: str | Path,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    max_error: float = DEFAULT_MAX_ERROR,
    engines: Sequence[str] | None = None,
    precisions: Sequence[str] | None = None,
    inputs: str | Path | None = None,
    threads: int | None = None,
    runs: int = 50,
    write: bool = True,
    progress: Callable[[str], None] | None = None,
) -> TuneReport:
    """Try every candidate (see the module docstring); write the fastest passing one to
    ``BUNDLE/tuning.json`` (``write=False``: only report). ``progress`` receives one line per candidate."""
    from rlx.app.verify import random_outputs
    from rlx.formats.bundle import read_bundle
    from rlx.runtime.model import load

    if not 0.0 < tolerance <= 1.0:
        raise UsageError(f"--tolerance is a cosine in (0, 1], got {tolerance}")
    if max_error <= 0:
        raise UsageError(f"max_error must be positive, got {max_error}")
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")
    started = time.perf_counter()
    directory = bundle_root(Path(bundle))
    program, weights, _ = read_bundle(directory)
    names = [v.name for v in program.user_inputs]
    todo = candidates(engines, precisions)
    sets = _reference_sets(directory, names)
    labels = ["reference.safetensors (PyTorch eager)"] if sets else []
    numpy_model = functools.cache(lambda: load(directory, engine="numpy"))  # (loaded once, where needed)
    if inputs is not None:
        reference_model = numpy_model()
        kinds = {v.name: dtypes.to_numpy(v.dtype) for v in program.user_inputs}
        for k, s in enumerate(read_input_sets(inputs, names, kinds=kinds)):
            want = [np.asarray(o) for o in reference_model.run_flat(reference_model.bind((), s))]
            sets.append((f"{Path(inputs).name}[{k}]", s, want))
        labels.append(f"{inputs} (numpy engine, f32)")
    if not sets:
        raise UsageError(
            f"{directory}: no reference.safetensors beside it; pass --inputs FILE (.npz/.safetensors/.parquet)"
        )
    random = random_outputs(program)
    report = TuneReport(str(directory), tolerance, max_error, threads, labels, [])
    work = _Work(directory, program, weights, sets, tolerance, max_error, random, threads, runs, progress,
                 nan_probe(numpy_model, program, sets[0][1]))  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="rlx-tune-") as tmp:
        calibration = Path(tmp) / CALIBRATION_FILE
        calibration_error = _calibrate(work, todo, calibration) if any(p == "int8-static" for _, p in todo) else ""
        report.candidates = [_candidate(work, k, todo, calibration, calibration_error) for k in range(len(todo))]
        _race(report, work)
        report.seconds = time.perf_counter() - started
        if write and report.choice is not None:
            if calibration.is_file():  # (also when f32 won: `precision="int8-static"` loads without recalibrating)
                shutil.copyfile(calibration, directory / CALIBRATION_FILE)
            path = directory / TUNING_FILE
            atomic_write_text(path, json.dumps(report.to_json(), indent=1) + "\n")
            report.written = str(path)
    return report


def _candidate(
    work: _Work, k: int, todo: list[tuple[str, str]], calibration: Path, calibration_error: str
) -> Candidate:
    """The ``k``-th candidate run, judged and (failing at a lower precision) retried in mixed precision."""
    engine, precision = todo[k]
    cand = Candidate(engine, precision)
    if precision == "int8-static":
        cand.options["calibration"] = str(calibration)
        cand.error = calibration_error
    if not cand.error:
        work.run(cand)
    if not cand.passed and not cand.error and precision != "f32":
        _mixed(work, cand)
    if work.progress:
        timing = f"{cand.median_ms:.3f} ms" if cand.passed else "not timed"
        work.progress(f"[{k + 1}/{len(todo)}] {cand.name}: {timing}, {cand.verdict()}")
    return cand


def _calibrate(work: _Work, todo: list[tuple[str, str]], path: Path) -> str:
    """int8-static's calibration into ``path``, on the user's inputs when given (what the model will
    see) that hold no NaN or inf, else the reference's; the error, if it failed ("" otherwise)."""
    flat = [(label, _flat(work.program, work.weights, s)) for label, s, _ in work.sets]
    own = [f for label, f in flat if label != "reference"]
    finite_own = [f for f in own if finite(f)]
    try:
        used = calibrate(work.program, work.weights, finite_own or [f for _, f in flat], path)
    except RlxError as e:
        return str(e)
    if work.progress:
        skipped = f", leaving out {len(own) - len(finite_own)} with NaN or inf" if len(finite_own) < len(own) else ""
        work.progress(f"calibrated int8-static on {used} input set(s){skipped}")
    return ""


def _flat(program: Program, weights: Mapping[str, np.ndarray], named: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """An input set in program order, in the program's dtypes (a state buffer: its initial value)."""
    missing = [v.name for v in program.inputs if v.name not in named and v.name not in weights]
    if missing:  # (a state buffer whose initial value is stored under another key)
        raise InputError(f"no value for input(s) {', '.join(missing)} to calibrate or trace with")
    return [
        np.ascontiguousarray(named[v.name] if v.name in named else weights[v.name], dtype=dtypes.to_numpy(v.dtype))
        for v in program.inputs
    ]


def nan_probe(
    numpy_model: Callable[[], Model], program: Program, inputs: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], list[np.ndarray]] | None:
    """``inputs`` with NaN, +inf and −inf planted at the start of every float input, and what the
    numpy engine (``numpy_model``: the bundle loaded on it; PyTorch's rules, as the test suite
    holds it to) answers there; None where no input is a float one or the numpy engine cannot
    run the model."""
    floats = [v.name for v in program.user_inputs if dtypes.is_float(v.dtype) and v.name in inputs]
    if not floats:
        return None
    probe = {name: np.array(arr, copy=True) for name, arr in inputs.items()}
    for name in floats:
        flat = probe[name].reshape(-1)
        flat[:3] = np.array([np.nan, np.inf, -np.inf], dtype=np.float64)[: flat.size].astype(flat.dtype)
    try:
        reference = numpy_model()
        return probe, [np.asarray(o) for o in reference.run_flat(reference.bind((), probe))]
    except RlxError:
        return None


def same_nonfinite(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    """Whether every output holds NaN, +inf and −inf exactly where the reference does (and has its
    shape and dtype): rlx's parity rule's own test (``rlx.app.verify.compare``)."""
    from rlx.app.verify import compare

    return len(got) == len(want) and all(
        compare(i, np.asarray(g), w).nonfinite_match for i, (g, w) in enumerate(zip(got, want))
    )


@dataclass
class _Work:
    """What every candidate is run and judged with."""

    directory: Path
    program: Program
    weights: Mapping[str, np.ndarray]
    sets: list[tuple[str, dict[str, np.ndarray], list[np.ndarray]]]  # (label, inputs, reference outputs)
    tolerance: float
    max_error: float
    random: set[int]
    threads: int | None
    runs: int
    progress: Callable[[str], None] | None
    nan_probe: tuple[dict[str, np.ndarray], list[np.ndarray]] | None = None  # (inputs, the numpy engine's outputs)

    def run(self, cand: Candidate) -> None:
        """Run ``cand`` (with its options) in a fresh process, judge every output, keep the timing;
        and see where it puts NaN and inf on the probe."""
        threads = self.threads if cand.threads is None else cand.threads
        probe, probe_want = self.nan_probe if self.nan_probe is not None else (None, None)
        load_s, median, outputs, error = _in_subprocess(
            self.directory, cand.engine, cand.precision, [s for _, s, _ in self.sets], threads, self.runs,
            cand.options, probe,
        )  # fmt: skip
        cand.load_s, cand.error = load_s, error
        if outputs is None:
            return
        if probe_want is not None:
            probed = outputs.pop()
            cand.nan_parity = None if probed is None else same_nonfinite(probed, probe_want)
        checks = [c for (label, _, want), got in zip(self.sets, outputs)
                  for c in judge(label, got, want, self.tolerance, self.max_error, self.random)]  # fmt: skip
        cosines = [c.cosine for c in checks if c.cosine is not None]
        cand.min_cosine = min(cosines) if cosines else None
        cand.failures = [c for c in checks if not c.passed]
        cand.passed = not cand.failures
        cand.median_ms = median


MIXED_ROUNDS = (3, 9, 27)  # how many of the worst nodes each retry keeps in float32


def _mixed(work: _Work, cand: Candidate) -> None:
    """``cand`` failed the tolerance at a lower precision: name the nodes that lose the accuracy
    (``rlx.app.mixed``) and retry with the worst of them kept in float32, a few more each round,
    until it passes; the note says which nodes and what came of it."""
    # (int8-static is onnxruntime's quantized graph on either engine: traced on onnxruntime)
    tracer = "onnxruntime" if cand.precision.startswith("int8") else cand.engine
    if tracer not in TRACEABLE:
        cand.note = f"mixed precision not tried: the {tracer} engine cannot return its intermediate values"
        return
    label = cand.failures[0].input_set
    named = next(s for lab, s, _ in work.sets if lab == label)
    try:
        ranked = losses(tracer, work.program, work.weights, _flat(work.program, work.weights, named),
                        cand.precision, cand.options)  # fmt: skip
    except RlxError as e:
        cand.note = f"the per-node comparison failed: {e}"
        return
    # (by cosine where an output failed it; by max error where only that bound failed, or where no
    # node stands out by cosine)
    cosine_failed = any(c.cosine is not None and c.cosine < work.tolerance for c in cand.failures)
    views = [None, work.max_error] if cosine_failed else [work.max_error]
    max_error, blamed = next(((v, b) for v in views if (b := culprits(ranked, work.tolerance, v))), (None, []))
    most = len(ranked) - 1  # (with every node in float32 it would be float32, not mixed precision)
    if not blamed or most < 1:
        cand.note = "no single node loses the accuracy (the loss is spread out); mixed precision not tried"
        return
    first = cand.verdict()
    worst = ", ".join(x.describe(by_error=max_error is not None) for x in blamed[:3])
    keep: list[str] = []
    for size in MIXED_ROUNDS:
        if len(keep) >= min(size, most, len(blamed)):
            break
        keep = [n for x in blamed[: min(size, most)] for n in x.names]
        trial = Candidate(cand.engine, cand.precision, options={**cand.options, "float32": keep})
        if work.progress:
            work.progress(f"    {cand.name}: keeping {len(keep)} node(s) in float32 ({', '.join(keep[:5])} ...)")
        work.run(trial)
        if trial.passed:
            cand.passed, cand.failures, cand.options = True, [], trial.options
            cand.median_ms, cand.load_s, cand.min_cosine = trial.median_ms, trial.load_s, trial.min_cosine
            cand.note = (
                f"all {cand.precision}: {first}; losing the accuracy: {worst}; "
                f"passes with {len(keep)} node(s) kept in float32"
            )
            return
    cand.note = f"losing the accuracy: {worst}; still fails with {len(keep)} node(s) kept in float32"


def _race(report: TuneReport, work: _Work) -> None:
    """Time the close contenders again, together, at tune's threads and at halvings of them: a
    fresh process loads them all and times them in alternating blocks with pauses (``race``), twice
    (``RACES``), and each one's lower median of the two replaces its first one.

    On a shared machine, timings taken one process after another drift by more than the gaps
    between candidates; blocks that alternate meet the same drift. A small model often runs faster
    on fewer threads than it may use (a parallel section costs it more than it saves), and which
    candidate gains most from fewer differs: ResNet b1 ran onnxruntime f32, int8 and OpenVINO bf16
    within 2% of each other at two threads, and OpenVINO bf16 at 0.73x of them on one, so every
    close contender on an engine whose threads are a session setting is timed at each count. A count
    below tune's joins the candidates, and so can be the choice, only after its outputs are judged
    again on every input set at that count, in a process of its own."""
    passing = sorted((c for c in report.candidates if c.passed), key=lambda c: c.median_ms)
    if not passing:
        return
    # Wide on purpose: a first timing, taken in a process of its own, can be off by more than 1.3x on
    # a busy machine, and a candidate left out cannot win the race (MobileViT b8: with the three
    # closest and each engine's fastest raced, OpenVINO float32 was left out behind its int8-static,
    # and the benchmark then ran it at 0.83x the onnxruntime float32 that tune chose). The fastest
    # float32 one always runs: ``choice`` weighs it against a lower precision, which medians from two
    # timings must not decide.
    within = [c for c in passing if c.median_ms <= RACE_WITHIN * passing[0].median_ms]
    close = within[:RACE_MAX]
    f32 = fastest([c for c in within if c.precision == "f32"])
    if f32 is not None and f32 not in close:
        close.append(f32)
    budget = work.threads or cores()
    counts = [budget >> k for k in range(1, budget.bit_length())][:2]  # (16 threads: 8 and 4)
    variants = [Candidate(c.engine, c.precision, options=dict(c.options), threads=n)
                for c in close if c.engine in THREADS_PER_SESSION for n in counts]  # fmt: skip
    if pads_channels(work.program, work.weights):  # onnxruntime f32 with the channels padded, raced too
        plain = [c for c in close + variants if c.engine == "onnxruntime" and c.precision == "f32"]
        variants += [replace(c, options={**c.options, "pad_channels": True}) for c in plain]
    timed = close + variants
    if len(timed) < 2:
        return
    medians, failure = _race_medians(work, timed)
    if medians is None and variants:
        # A count below tune's is a configuration no candidate ran at yet, and an engine can crash
        # the process there (OpenVINO 2026.4 compiling the transformer example at bf16 on one
        # thread: SIGFPE). Each such variant is tried alone, and the race runs again without the
        # ones that crash.
        crashed = [v for v in variants if _race_medians(work, [v], rounds=1, races=1)[0] is None]
        if work.progress:
            names = ", ".join(v.name for v in crashed) or "none alone"
            work.progress(
                f"the race's process crashed ({failure}); crashing on their own: {names}; timing together without them"
            )
        variants = [v for v in variants if v not in crashed]
        timed = close + variants
        medians, failure = _race_medians(work, timed) if len(timed) > 1 else (None, "one candidate left")
    if medians is None:  # a crashed worker: keep the first timings, at tune's threads
        if work.progress:
            work.progress(f"timing together failed ({failure}); keeping the first timings")
        return
    for cand, median in zip(timed, medians):
        cand.median_ms = median
    if work.progress:
        work.progress("timed together: " + ", ".join(f"{c.name} {c.median_ms:.3f} ms" for c in timed))
    _judge_variants(report, work, variants)


def _judge_variants(report: TuneReport, work: _Work, variants: list[Candidate]) -> None:
    """Add the raced fewer-threads ``variants`` to the candidates; each one that would be the choice
    is judged on every input set at its count, in a process of its own, before it can be."""
    for v in variants:  # (provisionally, until judged: only a variant that would be the choice is run)
        v.passed = True
    report.candidates += variants
    unjudged = {id(v) for v in variants}  # (by identity: a dataclass's == compares the fields)
    while (best := report.choice) is not None and id(best) in unjudged:
        unjudged.remove(id(best))
        median = best.median_ms
        work.run(best)
        best.median_ms = median  # (the race's: the others were timed with it)
        if work.progress:
            work.progress(f"{best.name}: {best.verdict()}")
    report.candidates = [c for c in report.candidates if id(c) not in unjudged]


def _race_medians(
    work: _Work, timed: list[Candidate], rounds: int = RACE_ROUNDS, races: int = RACES
) -> tuple[list[float] | None, str]:
    """``race`` over ``timed``, ``races`` times, each in a fresh process (every second one in
    reverse order): the lowest median ms of each, or None and why not (a worker crashed:
    BrokenProcessPool, or the error the worker raised, by its type and first line)."""
    contenders = [(c.engine, c.precision, c.options, c.threads or work.threads) for c in timed]
    medians = []
    for k in range(races):
        try:
            medians.append(in_fresh_process(work.threads, race, str(work.directory), contenders, work.sets[0][1],
                                            work.threads, rounds, BLOCK_S, k % 2 == 1))  # fmt: skip
        except Exception as e:
            return None, summary(e)
    return [min(each) for each in zip(*medians)], ""


def race(
    bundle: str,
    contenders: list[tuple[str, str, dict[str, Any] | None, int | None]],
    inputs: dict[str, np.ndarray],
    threads: int | None,
    rounds: int,
    block_s: float = BLOCK_S,
    reverse: bool = False,
) -> list[float]:
    """In the worker process: load every (engine, precision, options, threads), warm each up, then
    time them together (``rlx.app.bench.interleaved_rounds``: ``rounds`` rounds of a ``block_s``
    block each, with pauses, as ``benchmarks/bench.py`` times engines; ``reverse``: last to first);
    the median ms of each, in the given order, with the machine's changes of speed between rounds
    taken out (``steady_medians``: a contender's blocks met the slow state in one round more than
    another's should not decide between them). ``threads``: the
    process's BLAS threads (set when it started), the default of a contender that names none."""
    from rlx.runtime.model import load

    calls = []
    for engine, precision, options, own in contenders:
        model = load(bundle, engine=engine, precision=precision, threads=own or threads,
                     engine_options=options or None)  # fmt: skip
        flat = model.bind((), inputs)
        for _ in range(3):
            model.run_flat(flat)
        calls.append(lambda model=model, flat=flat: model.run_flat(flat))
    if reverse:  # (timed last to first, reported in the given order)
        return steady_medians(interleaved_rounds(calls[::-1], rounds, block_s))[::-1]
    return steady_medians(interleaved_rounds(calls, rounds, block_s))


def describe_failures(report: TuneReport) -> list[str]:
    """One line per failing candidate: which outputs and by how much."""
    return [f"{c.name}: {c.verdict()}" for c in report.candidates if not c.passed]


__all__ = ["Candidate", "TuneReport", "candidates", "describe_failures", "judge", "read_input_sets", "tune"]
