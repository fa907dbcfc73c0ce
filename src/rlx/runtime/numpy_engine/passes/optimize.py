"""The optimisation pipeline the numpy runtime runs on a Program at load.

Each pass is a Program → Program rewrite in its own module, listed here by name; any of them can
be switched off (``rlx.load(bundle, disable_passes=("fusion",))``, ``rlx run --disable-pass
fusion``) and ``optimize=False`` / ``rlx run --no-opt`` turns them all off. Some run more than
once: weight packing, BatchNorm folding and the merging of sibling projections write new
weight-only instructions that the next constant-folding run computes (so fusion sees packed
weights as weights), and the alias pass cleans up the reshapes fusion leaves behind. The Program on disk
is never touched — program.json stays the plain lowering that the generated package and other
engines read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from rlx.errors import BundleError, RlxError, UsageError
from rlx.ir.program import Program
from rlx.passes.alias import remove_aliases
from rlx.passes.dce import dead_code_elimination
from rlx.passes.fold import constant_folding
from rlx.runtime.numpy_engine.fused import kernel_for
from rlx.runtime.numpy_engine.passes.buffers import reuse_buffers
from rlx.runtime.numpy_engine.passes.fusion import fuse
from rlx.runtime.numpy_engine.passes.packing import pack_weights

Weights = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Pass:
    """A named rewrite: ``run`` (Program → Program), or ``run_with_weights`` for the passes that
    read and extend the weights ((Program, weights) → (Program, weights))."""

    name: str
    run: Callable[[Program], Program] | None = None
    run_with_weights: Callable[[Program, Weights], tuple[Program, Weights]] | None = None
    doc: str = ""

    @property
    def needs_weights(self) -> bool:
        return self.run_with_weights is not None


PASSES: dict[str, Pass] = {
    p.name: p
    for p in (
        Pass(
            "constant_folding",
            run_with_weights=lambda program, weights: constant_folding(program, weights, kernel_for),
            doc="compute weight/constant-only instructions once, at load",
        ),
        Pass("alias", remove_aliases, doc="drop no-op reshapes, casts, permutes, slices; collapse reshape chains"),
        Pass(
            "weight_packing",
            run_with_weights=pack_weights,
            doc="read weights consumed transposed as GEMM-ready views (no copy)",
        ),
        Pass("fusion", fuse, doc="BatchNorm into conv, matmul + bias + activation, elementwise chains (+ softmax)"),
        Pass("dead_code", dead_code_elimination, doc="drop instructions and weights nothing reads"),
        Pass("buffer_reuse", reuse_buffers, doc="write large results into the storage of dead values"),
    )
}
# The order they run in (a name may appear twice).
# Packing runs before the first folding too, so a transposed weight becomes a view of the weight
# rather than the C-contiguous copy folding would store.
ORDER = (
    "weight_packing", "constant_folding", "alias", "weight_packing", "constant_folding", "fusion", "alias", "constant_folding",
    "dead_code", "buffer_reuse",
)  # fmt: skip
PASS_NAMES = tuple(PASSES)


def check_names(names: Iterable[str]) -> frozenset[str]:
    names = frozenset(names)
    unknown = sorted(names - set(PASSES))
    if unknown:
        raise UsageError(f"unknown pass(es) {', '.join(unknown)}; the passes are {', '.join(PASS_NAMES)}")
    return names


def optimize(program: Program, weights: Weights, disabled: Iterable[str] = ()) -> tuple[Program, Weights]:
    """Run every pass not in ``disabled``, in ``ORDER``; returns the rewritten program and its weights
    (the given ones plus what folding computed)."""
    disabled = check_names(disabled)
    for name in ORDER:
        if name in disabled:
            continue
        p = PASSES[name]
        try:
            if p.run_with_weights is not None:
                program, weights = p.run_with_weights(program, weights)
            elif p.run is not None:
                program = p.run(program)
        except RlxError:
            raise
        except Exception as e:  # a pass only trips on a program whose declared shapes/dtypes disagree
            raise BundleError(
                f"program.json: the {name} pass cannot rewrite {program.name}: {type(e).__name__}: {e}"
            ) from e
    return program, weights
