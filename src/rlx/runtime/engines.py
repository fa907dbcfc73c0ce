"""What a Model needs of an engine, and the engines there are.

An engine runs Programs with static shapes. ``Engine.source`` is the program that specialisations
start from (the numpy engine optimises a dynamic program once, as written, so its weights are
folded and packed once for every binding); ``Engine.compile`` turns one static program into an
``Executor``. The JAX, onnxruntime and OpenVINO engines are imported only when asked for, so
``import rlx`` never needs jax, onnxruntime or openvino.

A precision (``PRECISIONS``) is how an engine computes the program's float32 work: ``f32`` as
written (every engine), ``bf16`` / ``f16`` through OpenVINO's inference-precision hint, ``int8``
through onnxruntime's dynamic quantization of the MatMul/Gemm weights, ``int8-static`` through
onnxruntime's static QDQ quantization (weights per channel, activations with the ranges of a
calibration run, ``calibrate``), run by onnxruntime or OpenVINO. Results of a lower precision
are approximations: ``rlx tune`` checks them against the reference at the user's tolerance.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rlx.errors import UsageError
from rlx.ir.program import Program, specialize
from rlx.runtime.binding import bind_symbols

ENGINES = ("numpy", "jax", "onnxruntime", "openvino")
PRECISIONS = ("f32", "bf16", "f16", "int8", "int8-static")
# The engines that can return every intermediate value (``trace``: the per-node view of a precision).
TRACEABLE = ("onnxruntime", "openvino")
# The engines whose ``threads`` is a setting of each session (numpy's BLAS and XLA take theirs per
# process, when it starts): ``rlx tune`` races these at fewer threads within one process.
THREADS_PER_SESSION = ("onnxruntime", "openvino")
# The precisions each engine has a mode for (whether this CPU runs them: ``check_precision``).
ENGINE_PRECISIONS = {
    "numpy": ("f32",),
    "jax": ("f32",),
    "onnxruntime": ("f32", "int8", "int8-static"),
    "openvino": ("f32", "bf16", "f16", "int8-static"),
}


class Executor(Protocol):
    """One static-shaped Program, ready to run many times (from any number of threads)."""

    program: Program

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run on arrays already checked against the program's inputs (in order)."""
        ...


class Engine(Protocol):
    name: str

    @property
    def source(self) -> Program:
        """The program that input-shape specialisations are made from."""
        ...

    def compile(self, program: Program) -> Executor:
        """An executor of ``program`` (``source`` itself, or a specialisation of it)."""
        ...


def check_engine(name: str) -> None:
    """A known engine that can run here: UsageError otherwise (for jax, onnxruntime: how to install it)."""
    if name not in ENGINES:
        raise UsageError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    if name == "jax":
        from rlx.runtime.jax_engine import require_jax

        require_jax()
    if name == "onnxruntime":
        from rlx.runtime.onnxruntime_engine import require_onnxruntime

        require_onnxruntime()
    if name == "openvino":
        from rlx.runtime.openvino_engine import require_openvino

        require_openvino()


def check_precision(engine: str, precision: str) -> None:
    """UsageError unless ``engine`` runs ``precision`` on this CPU, in one line naming what is lacking
    (the engine's mode, or the CPU extensions OpenVINO's kernels need)."""
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if precision not in ENGINE_PRECISIONS[engine]:
        others = [e for e, ps in ENGINE_PRECISIONS.items() if precision in ps]
        raise UsageError(
            f"the {engine} engine has no {precision} mode (it runs {', '.join(ENGINE_PRECISIONS[engine])}); "
            f"{precision} runs on engine={' or '.join(repr(e) for e in others)}"
        )
    if engine == "openvino" and precision != "f32":
        from rlx.runtime.openvino_engine.hints import check_precision as check_openvino

        check_openvino(precision)


def supported_precisions(engine: str) -> list[str]:
    """The precisions ``engine`` (installed) runs on this CPU."""
    out = []
    for p in ENGINE_PRECISIONS[engine]:
        try:
            check_precision(engine, p)
        except UsageError:
            continue
        out.append(p)
    return out


def calibrate(program: Program, weights: Mapping[str, np.ndarray], sets: Sequence[list[np.ndarray]], path: Path) -> int:
    """int8-static's calibration (run on onnxruntime, for either engine): the activation ranges of
    ``program`` on ``sets`` (inputs in program order) written to ``path``, which
    ``precision="int8-static"`` then reads (``calibration=`` engine option). Returns how many sets
    were used (all of them: sets of other shapes are calibrated at their own shapes)."""
    check_engine("onnxruntime")
    from rlx.runtime.onnxruntime_engine.executor import calibrate_program

    return calibrate_program(program, weights, sets, path)


def pads_channels(program: Program, weights: Mapping[str, np.ndarray]) -> bool:
    """Whether onnxruntime's ``pad_channels`` may change this program's graph on this CPU: a float32
    convolution of one group has output channels off the channel block (``channel_block``)."""
    from rlx.runtime.onnxruntime_engine.pad_channels import channel_block, off_block_convolutions

    block = channel_block()
    return block > 1 and bool(off_block_convolutions(program, weights, block, one_group=True))


def trace(
    engine: str,
    program: Program,
    weights: Mapping[str, np.ndarray],
    inputs: list[np.ndarray],
    names: Sequence[str],
    precision: str,
    options: Mapping[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """The values ``names`` (instruction results) as ``engine`` computes them at ``precision`` on
    ``inputs``, with the outputs (by the engine's output names); the ``TRACEABLE`` engines can
    return their intermediate values (UsageError for the others)."""
    check_engine(engine)
    check_precision(engine, precision)
    if engine not in TRACEABLE:
        raise UsageError(f"the {engine} engine cannot return intermediate values; {' and '.join(TRACEABLE)} can")
    static = specialize(program, bind_symbols(program, inputs)) if program.is_dynamic else program
    if engine == "openvino":
        from rlx.runtime.openvino_engine.executor import trace_program as trace_openvino

        return trace_openvino(static, weights, inputs, names, precision, options or {})
    from rlx.runtime.onnxruntime_engine.executor import trace_program

    return trace_program(static, weights, inputs, names, precision, options or {})


def numpy_pass_names() -> tuple[str, ...]:
    """The numpy engine's load-time passes, by name (what ``disable_passes`` may switch off)."""
    from rlx.runtime.numpy_engine.passes.optimize import PASS_NAMES

    return PASS_NAMES


def create_engine(
    name: str,
    program: Program,
    weights: Mapping[str, np.ndarray],
    disable_passes: Iterable[str] | None = None,
    threads: int | None = None,
    options: Mapping[str, Any] | None = None,
    precision: str = "f32",
) -> Engine:
    """The engine ``name`` for ``program`` and its weights. ``disable_passes``: the numpy engine's
    load-time passes to skip (``None``: all of them); ``threads``: onnxruntime's intra-op threads
    (``None``: its default, one per physical core), or the numpy engine's (``None``: two, one on a
    one-core machine; see ``rlx.runtime.numpy_engine.parallel``; the jax engine takes none); ``options``: the engine's own settings
    (onnxruntime: ``optimization``, ``pooling_nan``, ``contrib``; see ``OrtEngine``; openvino:
    ``dynamic``; see ``OvEngine``); ``precision``: one of ``PRECISIONS`` the engine runs here."""
    check_engine(name)
    check_precision(name, precision)
    if name == "onnxruntime":
        from rlx.runtime.onnxruntime_engine.executor import OrtEngine

        return OrtEngine(program, weights, threads=threads, precision=precision, **dict(options or {}))
    if name == "openvino":
        from rlx.runtime.openvino_engine.executor import OvEngine

        def numpy_engine() -> Engine:  # (runs the calls whose inputs hold NaN or inf)
            return create_engine("numpy", program, weights, (), threads)

        return OvEngine(program, weights, threads=threads, precision=precision, numpy_engine=numpy_engine,
                        **dict(options or {}))  # fmt: skip
    if options:
        raise UsageError(f"the {name} engine takes no options, got {', '.join(sorted(options))}")
    if name == "jax":
        from rlx.runtime.jax_engine.executor import JaxEngine

        return JaxEngine(program, weights)
    from rlx.runtime.numpy_engine.engine import NumpyEngine

    return NumpyEngine(program, weights, disable_passes, threads)
