"""Write ``OUT/rlx_<name>/``: an installable, standalone Python package of the model.

    rlx_<name>/pyproject.toml
    rlx_<name>/README.md                 install, load, run; provenance
    rlx_<name>/rlx_<name>/__init__.py    load() -> callable model
    rlx_<name>/rlx_<name>/__main__.py    python -m rlx_<name> --input x=FILE.npy
    rlx_<name>/rlx_<name>/model.py       the generated forward
    rlx_<name>/rlx_<name>/_ops/          the runtime kernels it calls (vendored, numpy + ml_dtypes only)
    rlx_<name>/rlx_<name>/weights.safetensors
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from rlx import __version__, safetensors_io
from rlx.emit.codegen import numpy_module, ops_init, snake
from rlx.emit.vendor import vendor_ops
from rlx.ir.program import Program

INIT = '''"""{name}: a PyTorch model converted by rlx {version}; runs with numpy only."""

from pathlib import Path

from . import model
from ._ops import read_safetensors

WEIGHTS = Path(__file__).parent / "weights.safetensors"


class Model:
    """The converted model: ``Model()(*inputs)`` returns outputs in the original structure."""

    def __init__(self, weights_path=WEIGHTS):
        tensors, _ = read_safetensors(weights_path)
        self.params = tensors

    def __call__(self, *inputs):
        return model.forward(self.params, *inputs)


def load(weights_path=WEIGHTS):
    """Read the weights (memory-mapped) and return the callable model."""
    return Model(weights_path)
'''

MAIN = '''"""python -m {package} --input NAME=FILE.npy ... [-o DIR]: run the model on .npy inputs."""

import argparse
import sys
from pathlib import Path

import numpy as np

from . import load

INPUTS = {inputs!r}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m {package}")
    parser.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE.npy")
    parser.add_argument("-o", "--out", help="directory for out<k>.npy")
    args = parser.parse_args(argv)
    given = dict(item.split("=", 1) for item in args.input)
    missing = [n for n in INPUTS if n not in given]
    if missing:
        print(f"{package}: missing --input for {{', '.join(missing)}}", file=sys.stderr)
        return 2
    result = load()(*[np.load(given[n], allow_pickle=False) for n in INPUTS])
    flat = list(result.values()) if isinstance(result, dict) else list(result) if isinstance(result, (tuple, list)) else [result]
    for k, arr in enumerate(flat):
        arr = np.asarray(arr)
        print(f"out{{k}}: shape {{list(arr.shape)}} dtype {{arr.dtype}}")
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            np.save(Path(args.out) / f"out{{k}}.npy", arr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def package_name(model_name: str) -> str:
    return "rlx_" + re.sub(r"\W+", "_", snake(model_name)).strip("_")


def write_package(
    program: Program, weights: Mapping[str, np.ndarray], out_dir: Path, *, decomposition: str = ""
) -> Path:
    """Write the package for ``program`` into ``out_dir/rlx_<name>/`` and return that directory."""
    name = package_name(program.name)
    root = out_dir / name
    pkg = root / name
    if root.exists():
        shutil.rmtree(root)
    pkg.mkdir(parents=True)
    kernels = vendor_ops(pkg / "_ops")
    (pkg / "_ops" / "__init__.py").write_text(ops_init(kernels), encoding="utf-8")
    (pkg / "model.py").write_text(numpy_module(program, decomposition), encoding="utf-8")
    (pkg / "__init__.py").write_text(INIT.format(name=program.name, version=__version__), encoding="utf-8")
    (pkg / "__main__.py").write_text(MAIN.format(package=name, inputs=[v.name for v in program.inputs]), encoding="utf-8")
    needed = {w.key: weights[w.key] for w in program.weights}
    safetensors_io.write(pkg / "weights.safetensors", needed)
    (root / "pyproject.toml").write_text(_pyproject(name, program.name), encoding="utf-8")
    (root / "README.md").write_text(_readme(name, program, decomposition), encoding="utf-8")
    os.chmod(root, 0o755)
    return root


def _pyproject(name: str, model: str) -> str:
    return f"""[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{name.replace("_", "-")}"
version = "0.1.0"
description = "{model}, converted from PyTorch by rlx {__version__}"
requires-python = ">=3.10"
dependencies = ["numpy>=1.24", "ml_dtypes>=0.3"]

[tool.setuptools.packages.find]
where = ["."]

[tool.setuptools.package-data]
"*" = ["*.safetensors"]

[tool.ruff]
line-length = 120

[tool.ruff.lint]
select = ["E", "F", "W", "B"]
ignore = ["E501", "E731", "B905"]
"""


def _readme(name: str, program: Program, decomposition: str) -> str:
    inputs = "\n".join(f"- `{v.name}`: shape {[str(d) for d in v.shape]}, {v.dtype}" for v in program.inputs)
    ops = "\n".join(f"| `{op}` | {n} |" for op, n in program.source_histogram.items())
    return f"""# {name}

`{program.name}`, converted from PyTorch by rlx {__version__} (decomposition level: {decomposition or "?"}).
It runs with numpy and ml_dtypes only: no torch, no rlx.

    pip install ./{name}          # or put this directory on PYTHONPATH
    python -c "import {name}, numpy as np; m = {name}.load(); print(m(...))"
    python -m {name} --input NAME=FILE.npy

Inputs:

{inputs}

`{name}/model.py` is the generated forward: one statement per operation, each commented with the
aten op it came from. `{name}/_ops/` holds the rlx runtime kernels it calls, copied verbatim.

## Provenance: source aten ops

| op | count |
|---|---|
{ops}
"""
