"""Parity: run a model on the reference inputs and compare every output with PyTorch's.

Pass rule per output: shape and dtype equal; NaN and ±inf in exactly the same places; then, on
the finite elements, integer and bool outputs exactly equal, float outputs with
cosine ≥ 0.99999 and max |err| ≤ 1e-4 · max(1, max |ref|) (looser for f16/bf16, whose own
rounding is larger: the tolerance grows to 8 ulps and cosine to 0.999). Complex outputs are
compared as their real and imaginary parts, like float32 outputs.

An output that depends on a random draw (``torch.randn`` in forward, dropout in training mode:
``rlx.ir.rng.random_values``) cannot equal PyTorch's, whose generator is another: its shape and
dtype are checked and it is reported as ``RANDOM`` ("values not comparable"); the model's other
outputs are still compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import ml_dtypes
import numpy as np

from rlx.errors import BundleError
from rlx.formats import safetensors_io
from rlx.formats.layout import REFERENCE_FILE, input_key, output_key
from rlx.ir import dtypes
from rlx.ir.program import Program, Ref
from rlx.ir.rng import random_values
from rlx.runtime.model import Model, load

COSINE_MIN = 0.99999
ATOL_FACTOR = 1e-4


@dataclass
class OutputParity:
    index: int
    shape: list[int]
    dtype: str
    ref_shape: list[int]
    ref_dtype: str
    passed: bool
    reason: str = ""
    # the measures one comparison took (None: not measured, e.g. after a shape mismatch)
    cosine: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    nonfinite_match: bool = True
    random: bool = False  # depends on a random draw: shape and dtype checked, values not comparable


RANDOM = "random: shape/dtype checked, values not comparable"


@dataclass
class ParityReport:
    """Per output: shape, dtype, NaN/inf pattern, cosine and max error against the reference.

    ``passed`` when every output passes; ``table()`` is the table ``rlx import`` prints. The
    tolerances are on the "Parity and the debugger" page of the docs.
    """

    passed: bool
    outputs: list[OutputParity] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "outputs": [asdict(o) for o in self.outputs]}

    def table(self) -> str:
        rows = [f"{'output':<8}{'shape':<18}{'dtype':<7}{'cosine':>12}{'max abs err':>14}{'max rel err':>14}  result"]
        for o in self.outputs:
            rows.append(
                f"{'out' + str(o.index):<8}{str(o.shape):<18}{o.dtype:<7}{_fmt(o.cosine, '.8f'):>12}"
                f"{_fmt(o.max_abs_err, '.3e'):>14}{_fmt(o.max_rel_err, '.3e'):>14}  "
                f"{('pass' if not o.random else RANDOM) if o.passed else 'FAIL ' + o.reason}"
            )
        return "\n".join(rows)


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _tolerances(tok: str) -> tuple[float, float]:
    if tok in ("f16", "bf16"):
        eps = float(ml_dtypes.finfo(dtypes.to_numpy(tok)).eps)
        return 0.999, max(ATOL_FACTOR, 8 * eps)
    return COSINE_MIN, ATOL_FACTOR


def _real_view(x: np.ndarray) -> np.ndarray:
    """A complex array as floats with a trailing (real, imag) axis."""
    return np.stack([x.real, x.imag], axis=-1)


class _Header(TypedDict):
    """The fields of an ``OutputParity`` that describe the two arrays, whatever the verdict."""

    index: int
    shape: list[int]
    dtype: str
    ref_shape: list[int]
    ref_dtype: str


def compare(index: int, got: np.ndarray, ref: np.ndarray, random: bool = False) -> OutputParity:
    """One output against PyTorch's; ``random``: it depends on a draw, so only shape and dtype count."""
    got_tok, ref_tok = dtypes.from_numpy(got.dtype), dtypes.from_numpy(ref.dtype)
    base = _Header(index=index, shape=list(got.shape), dtype=got_tok, ref_shape=list(ref.shape), ref_dtype=ref_tok)
    if random and got.shape == ref.shape and got_tok == ref_tok:
        return OutputParity(**base, passed=True, reason=RANDOM, random=True)
    if got.shape != ref.shape or got_tok != ref_tok:
        what = "shape" if got.shape != ref.shape else "dtype"
        return OutputParity(**base, passed=False, reason=f"{what} differs", nonfinite_match=False)
    if got.dtype.kind in "biu":
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64)) if got.size else np.zeros(0)
        max_abs = float(diff.max()) if diff.size else 0.0
        ok = bool(np.array_equal(got, ref))
        return OutputParity(**base, passed=ok, reason="" if ok else "values differ", max_abs_err=max_abs)
    if dtypes.is_complex(ref_tok):  # real and imaginary parts side by side, compared as values of their float type
        got, ref = _real_view(got), _real_view(ref)
        ref_tok = dtypes.real_of(ref_tok)
    g, r = got.astype(np.float64), ref.astype(np.float64)
    nonfinite_match = bool(
        np.array_equal(np.isnan(g), np.isnan(r))
        and np.array_equal(np.where(np.isinf(r), r, 0), np.where(np.isinf(g), g, 0))
    )
    finite = np.isfinite(g) & np.isfinite(r)
    gf, rf = g[finite], r[finite]
    max_abs = float(np.max(np.abs(gf - rf))) if gf.size else 0.0
    max_rel = float(np.max(np.abs(gf - rf) / np.maximum(np.abs(rf), 1e-12))) if gf.size else 0.0
    norm = float(np.linalg.norm(gf) * np.linalg.norm(rf))
    if norm > 0:
        cosine = float(np.dot(gf, rf) / norm)
    else:
        cosine = 1.0 if not np.any(gf) and not np.any(rf) else 0.0
    cos_min, atol_factor = _tolerances(ref_tok)
    scale = max(1.0, float(np.max(np.abs(rf)))) if rf.size else 1.0
    reasons = []
    if not nonfinite_match:
        reasons.append("NaN/inf positions differ")
    if cosine < cos_min:
        reasons.append(f"cosine {cosine:.6f} < {cos_min}")
    if max_abs > atol_factor * scale:
        reasons.append(f"max abs err {max_abs:.3e} > {atol_factor * scale:.3e}")
    return OutputParity(**base, passed=not reasons, reason="; ".join(reasons), nonfinite_match=nonfinite_match,
                        cosine=cosine, max_abs_err=max_abs, max_rel_err=max_rel)  # fmt: skip


def check_parity(
    model: Model, reference: Mapping[str, np.ndarray], source: str = "reference.safetensors"
) -> ParityReport:
    """Run ``model`` on the ``in::<id>`` tensors and compare with the ``out::<index>`` tensors."""
    missing = [n for n in model.input_names if input_key(n) not in reference]
    if missing:
        raise BundleError(f"{source}: no reference tensor for input(s) {', '.join(missing)} (expected keys in::<name>)")
    flat = model.run_flat(model.bind((), {n: reference[input_key(n)] for n in model.input_names}))
    drawn = random_outputs(model.program)
    outputs = []
    for i, got in enumerate(flat):
        ref = reference.get(output_key(i))
        if ref is None:
            continue  # a non-tensor output: nothing to compare
        outputs.append(compare(i, np.asarray(got), ref, random=i in drawn))
    if not outputs:
        raise BundleError(f"{source}: no out::<index> tensors to compare against")
    return ParityReport(passed=all(o.passed for o in outputs), outputs=outputs)


def random_outputs(program: Program) -> set[int]:
    """Indices of the outputs whose values depend on a random draw."""
    tainted = random_values(program)
    return {k for k, o in enumerate(program.outputs) if isinstance(o, Ref) and o.name in tainted}


def verify_bundle(path: str | Path, reference: str | Path | None = None) -> ParityReport:
    """Re-run parity for an OUT directory or a bundle (reference defaults to OUT/reference.safetensors)."""
    path = Path(path)
    model = load(path)
    if reference is None:
        candidates = [path / REFERENCE_FILE, path.parent / REFERENCE_FILE]
        reference = next((c for c in candidates if c.is_file()), None)
        if reference is None:
            raise BundleError(f"{path}: no reference.safetensors found; pass --reference FILE")
    tensors, _ = safetensors_io.read(reference)
    return check_parity(model, tensors, str(reference))
