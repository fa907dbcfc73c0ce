"""The public API: real signatures and docstrings, imported on first use (``import rlx`` stays cheap)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import rlx

PUBLIC = ["from_torch", "from_onnx", "export", "build", "load", "Model", "verify_bundle"]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_names_have_real_signatures_and_docstrings(name: str) -> None:
    obj = getattr(rlx, name)
    assert inspect.getdoc(obj), f"rlx.{name} has no docstring"
    params = inspect.signature(obj).parameters.values()
    kinds = {p.kind for p in params}
    assert inspect.Parameter.VAR_POSITIONAL not in kinds, f"rlx.{name} is an (*args, **kwargs) wrapper"
    assert name in dir(rlx) and name in rlx.__all__


def test_import_rlx_pulls_in_no_heavy_module() -> None:
    code = (
        "import sys, rlx; heavy = [m for m in ('torch', 'onnx', 'onnxruntime', 'jax', 'pyarrow', 'rlx.runtime',"
        " 'rlx.app') if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        rlx.nothing  # noqa: B018
