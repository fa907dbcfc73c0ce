"""``rlx bench BUNDLE``: time every installed engine on a bundle, check each against the numpy
engine, and name the fastest engine that passes.

Each engine runs in its own fresh process (so its peak memory is its own, and one engine's
threads or JIT caches cannot slow another), on the same inputs: the bundle's example inputs
(``reference.safetensors`` next to it) or random values within the declared shapes and dtypes.
Parity is rlx's rule (``rlx.app.verify.compare``: cosine and max error per output) against the numpy
engine's outputs.
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import resource
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from rlx.app.verify import compare
from rlx.errors import RlxError, UsageError, summary
from rlx.formats import safetensors_io
from rlx.formats.layout import PROGRAM_FILE, REFERENCE_FILE, input_key
from rlx.ir import dtypes
from rlx.ir.program import Program
from rlx.ir.symbolic import Sym, eval_shape
from rlx.runtime.engines import ENGINES

_MODULES = {"numpy": "numpy", "jax": "jax", "onnxruntime": "onnxruntime", "openvino": "openvino"}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
R = TypeVar("R")


class Timed(Protocol):
    """A measured run of one engine (``rlx bench``) or candidate (``rlx tune``)."""

    median_ms: float
    passed: bool
    error: str


T = TypeVar("T", bound=Timed)


def fastest(results: Sequence[T]) -> T | None:
    """The run with the lowest median time among those that passed the parity check (None: none did)."""
    passing = [r for r in results if r.passed and not r.error]
    return min(passing, key=lambda r: r.median_ms) if passing else None


@dataclass
class EngineResult:
    engine: str
    load_s: float = math.nan
    median_ms: float = math.nan
    p90_ms: float = math.nan
    peak_mb: float = math.nan
    min_cosine: float | None = None
    passed: bool = False
    error: str = ""


@dataclass
class BenchReport:
    bundle: str
    inputs: str  # where the inputs came from
    results: list[EngineResult]

    def table(self) -> str:
        rows = [f"{'engine':<13}{'load s':>8}{'median ms':>11}{'p90 ms':>9}{'peak MB':>9}{'min cosine':>13}  parity"]
        for r in self.results:
            if r.error:
                rows.append(f"{r.engine:<13}  failed: {r.error}")
                continue
            cosine = "-" if r.min_cosine is None else f"{r.min_cosine:.7f}"
            rows.append(
                f"{r.engine:<13}{r.load_s:>8.2f}{r.median_ms:>11.3f}{r.p90_ms:>9.3f}{r.peak_mb:>9.0f}{cosine:>13}"
                f"  {'pass' if r.passed else 'FAIL'}"
            )
        best = self.fastest
        rows.append(f"fastest passing engine: {best.engine} ({best.median_ms:.3f} ms)" if best else "no engine passed")
        return "\n".join(rows)

    @property
    def fastest(self) -> EngineResult | None:
        return fastest(self.results)


def installed_engines() -> list[str]:
    return [e for e in ENGINES if importlib.util.find_spec(_MODULES[e]) is not None]


def bench(
    bundle: str | Path,
    *,
    engines: Sequence[str] | None = None,
    batch: int | None = None,
    threads: int | None = None,
    runs: int = 30,
    warmup: int = 3,
    seed: int = 0,
) -> BenchReport:
    """Time ``engines`` (default: every installed one) on ``bundle``; see the module docstring."""
    from rlx.formats.bundle import read_bundle

    engines = list(engines) if engines else installed_engines()
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        raise UsageError(f"unknown engine(s) {', '.join(unknown)}; choose from {', '.join(ENGINES)}")
    if runs < 1 or warmup < 0:
        raise UsageError("--runs must be at least 1 and --warmup at least 0")
    program, _, _ = read_bundle(bundle)
    inputs, origin = example_inputs(Path(bundle), program, batch, seed)
    if "numpy" not in engines:
        engines = ["numpy", *engines]  # the reference every engine is checked against
    measured = {e: _measure_in_subprocess(Path(bundle), e, inputs, threads, runs, warmup) for e in engines}
    reference = measured["numpy"][1]
    results = []
    for result, outputs in measured.values():
        if not result.error and reference is not None and outputs is not None:
            parity = [compare(i, got, ref) for i, (got, ref) in enumerate(zip(outputs, reference))]
            cosines = [p.cosine for p in parity if p.cosine is not None]
            result.min_cosine = min(cosines) if cosines else None
            result.passed = len(outputs) == len(reference) and all(p.passed for p in parity)
        results.append(result)
    return BenchReport(str(bundle), origin, results)


def example_inputs(bundle: Path, program: Program, batch: int | None, seed: int) -> tuple[dict[str, np.ndarray], str]:
    """The reference inputs next to the bundle, else random values of the declared shapes and
    dtypes; ``batch`` resizes axis 0 of the inputs where it is symbolic (rows repeated in turn)."""
    names = [v.name for v in program.inputs]
    root = bundle.parent if (bundle / PROGRAM_FILE).is_file() else bundle
    ref = root / REFERENCE_FILE
    arrays: dict[str, np.ndarray] = {}
    if ref.is_file():
        tensors, _ = safetensors_io.read(ref)
        if all(input_key(n) in tensors for n in names):
            arrays, origin = {n: np.asarray(tensors[input_key(n)]) for n in names}, str(ref)
    if not arrays:
        arrays, origin = _random_inputs(program, seed), f"random (seed {seed})"
    if batch is not None:
        arrays = _rebatch(program, arrays, batch)
        origin += f", batch {batch}"
    return arrays, origin


def _random_inputs(program: Program, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    hints = {s.name: s.hint for s in program.symbols}
    out = {}
    for v in program.inputs:
        shape = eval_shape(v.shape, hints)
        dt = dtypes.to_numpy(v.dtype)
        if v.dtype == "bool":
            out[v.name] = rng.random(shape) < 0.5
        elif dtypes.is_int(v.dtype):
            out[v.name] = rng.integers(0, 2, shape).astype(dt)  # 0/1: valid ids, masks and indices
        else:
            out[v.name] = rng.standard_normal(shape).astype(dt)
    return out


def _rebatch(program: Program, arrays: Mapping[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    if batch < 1:
        raise UsageError(f"--batch must be at least 1, got {batch}")
    dynamic = [v for v in program.inputs if v.shape and isinstance(v.shape[0], Sym)]
    if not dynamic:
        raise UsageError("--batch needs an input whose axis 0 is dynamic; export with a dynamic batch axis")
    out = dict(arrays)
    for v in dynamic:
        arr = arrays[v.name]
        rows = np.arange(batch) % max(arr.shape[0], 1)
        out[v.name] = np.ascontiguousarray(arr[rows])
    return out


def in_fresh_process(threads: int | None, fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` in a freshly spawned process, with the BLAS/OpenMP thread variables set to
    ``threads`` while it starts (numpy's BLAS reads them only then); this process's are restored."""
    saved = {k: os.environ.get(k) for k in THREAD_VARIABLES}
    if threads is not None:
        os.environ.update({k: str(threads) for k in THREAD_VARIABLES})
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
            return pool.submit(fn, *args).result()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


BLOCK_S, PAUSE_S, MIN_BLOCK = 0.03, 0.1, 3  # interleaved timing: seconds of calls per block, pause before one


def interleaved(
    calls: Sequence[Callable[[], object]], rounds: int, block_s: float = BLOCK_S, pause_s: float = PAUSE_S
) -> list[float]:
    """The median ms of each of ``calls`` (warmed up already) over every run of
    ``interleaved_rounds``."""
    per_round = interleaved_rounds(calls, rounds, block_s, pause_s)
    return [float(np.median([t for block in blocks for t in block])) * 1e3 for blocks in per_round]


def interleaved_rounds(
    calls: Sequence[Callable[[], object]], rounds: int, block_s: float = BLOCK_S, pause_s: float = PAUSE_S
) -> list[list[list[float]]]:
    """Each of ``calls`` (warmed up already) timed together: ``rounds`` rounds, each running every
    call in a block of about ``block_s`` seconds (at least ``MIN_BLOCK`` calls) after a pause of
    ``pause_s``. Returns, per call, per round, the seconds of each run.

    On a shared machine, timings taken one after another drift by more than the gaps between
    engines; alternating blocks meet the same drift. The pause lets the previous engine's worker
    threads stop spinning (onnxruntime's and OpenBLAS's would steal a core). The first round times the
    calls in the given order, each later one in a new order (shuffled), so that no call always
    follows the same one (a neighbour whose workers still spin after its block would slow it in
    every round; rotating the order would not help, as each call would keep its predecessor). Blocks last a
    time, not a count: after another onnxruntime session in the process ran, a session runs up to 2× slower
    for its first few milliseconds (its workers have gone to sleep and are woken per parallel
    section); a block of ten sub-millisecond calls would mostly time that, not the steady state."""
    sizes = []
    for call in calls:
        once = []
        for _ in range(3):
            t = time.perf_counter()
            call()
            once.append(time.perf_counter() - t)
        sizes.append(max(MIN_BLOCK, round(block_s / max(min(once), 1e-7))))
    times: list[list[list[float]]] = [[] for _ in calls]
    order, shuffle = list(range(len(calls))), random.Random(0).shuffle  # (seeded: the same orders every run)
    for _ in range(rounds):
        for k in order:
            time.sleep(pause_s)
            block = []
            for _ in range(sizes[k]):
                t = time.perf_counter()
                calls[k]()
                block.append(time.perf_counter() - t)
            times[k].append(block)
        shuffle(order)
    return times


def steady_medians(per_round: Sequence[Sequence[Sequence[float]]]) -> list[float]:
    """Each call's median ms from ``interleaved_rounds``, with the machine's changes of speed between
    rounds taken out: in each round, every call's median relative to the geometric mean of all the
    calls' medians in that round; each call's median of those over rounds, times the median of the
    rounds' geometric means (so a race slowed all through reads slower as a whole, and the lower
    of two races' medians still picks the calmer one for every call)."""
    medians = np.array([[np.median(block) for block in blocks] for blocks in per_round])  # calls × rounds
    level = np.exp(np.log(medians).mean(axis=0))
    return [float(m) * 1e3 for m in np.median(medians / level, axis=1) * np.median(level)]


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """How much slower ``a`` ran than ``b``, from their median seconds in each round of
    ``interleaved_rounds``: the median over rounds of the ratio. A shared machine's speed changes
    for seconds at a time (a 2-core VM ran an onnxruntime session at 44 µs, then at 28 µs, every
    session alike); the blocks of one round meet the same state. Of two sessions timed together,
    the medians over all runs read 1.27 apart where the paired ratio read 1.06."""
    return float(np.median([x / y for x, y in zip(a, b, strict=True)]))


def _measure_in_subprocess(
    bundle: Path, engine: str, inputs: Mapping[str, np.ndarray], threads: int | None, runs: int, warmup: int
) -> tuple[EngineResult, list[np.ndarray] | None]:
    try:
        return in_fresh_process(threads, measure, str(bundle), engine, dict(inputs), threads, runs, warmup)
    except RlxError:
        raise
    except Exception as e:  # a crashed worker: report the engine as failed, keep the others
        return EngineResult(engine, error=summary(e)), None


def measure(
    bundle: str, engine: str, inputs: dict[str, np.ndarray], threads: int | None, runs: int, warmup: int
) -> tuple[EngineResult, list[np.ndarray] | None]:
    """In the worker process: load, warm up, time ``runs`` calls; the outputs of the last one."""
    from rlx.runtime.model import load

    result = EngineResult(engine)
    try:
        t0 = time.perf_counter()
        model = load(bundle, engine=engine, threads=threads)
        flat_inputs = model.bind((), inputs)
        outputs = model.run_flat(flat_inputs)  # the first call compiles (jax, onnxruntime)
        result.load_s = time.perf_counter() - t0
        for _ in range(warmup):
            model.run_flat(flat_inputs)
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            outputs = model.run_flat(flat_inputs)
            times.append((time.perf_counter() - t) * 1e3)
    except RlxError as e:
        result.error = str(e)
        return result, None
    result.median_ms = float(np.median(times))
    result.p90_ms = float(np.percentile(times, 90))
    result.peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return result, [np.asarray(o) for o in outputs]


__all__ = [
    "BenchReport",
    "EngineResult",
    "bench",
    "example_inputs",
    "installed_engines",
    "interleaved",
    "interleaved_rounds",
    "measure",
    "paired_ratio",
]
