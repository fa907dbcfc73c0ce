"""Write ``OUT/rlx_<name>/``: an installable, standalone Python package of the model.

    rlx_<name>/pyproject.toml
    rlx_<name>/README.md                 install, load, run; provenance
    rlx_<name>/rlx_<name>/__init__.py    load() -> callable model
    rlx_<name>/rlx_<name>/__main__.py    python -m rlx_<name> --input x=FILE.npy
    rlx_<name>/rlx_<name>/model.py       the generated forward
    rlx_<name>/rlx_<name>/_ops/          the runtime kernels it calls (vendored)
    rlx_<name>/rlx_<name>/weights.safetensors

Style ``numpy`` needs numpy + ml_dtypes; style ``jax`` runs the forward with ``jax.numpy`` under
``jax.jit`` and needs jax (+ numpy, ml_dtypes, which jax depends on).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from rlx.errors import UsageError
from rlx.exporters.package.codegen import identifier, ops_init, snake, writer
from rlx.exporters.package.vendor import STYLES, vendor_ops
from rlx.formats import safetensors_io
from rlx.formats.layout import WEIGHTS_FILE
from rlx.ir.calls import Special
from rlx.ir.program import Program
from rlx.ir.rng import RNG_STATE, with_rng_state
from rlx.kernels.linalg import SCIPY_CALLS
from rlx.kernels.special import library_functions
from rlx.optional import require
from rlx.version import __version__

# What both styles' __init__.py declare about the model (filled in by write_package).
CONSTANTS = (
    f'WEIGHTS = Path(__file__).parent / "{WEIGHTS_FILE}"\n'
    + """\
STATE = {state!r}  # buffers the model updates on every call → the tensor holding each one's initial value
UPDATES_INPUTS = {updates_inputs!r}  # whether the model writes into some of its inputs, as PyTorch's did
RNG = {rng!r}  # the state holding the random generator (rlx's Threefry-2x32), if the model draws
"""
)

INIT = (
    '''"""{name}: a PyTorch model converted by rlx {version}; runs with numpy only."""

from pathlib import Path

import numpy as np

from . import model
from ._ops import fork_state, read_safetensors, seed_state

'''
    + CONSTANTS
    + '''

class Model:
    """The converted model: ``Model()(*inputs)`` returns outputs in the original structure.

    A model with state (a KV cache) keeps it in ``state``, updated by every call; ``reset()``
    restores the initial values, and ``fork()`` makes a model sharing the weights with its own
    state: one per concurrent conversation or stream.
    """

    def __init__(self, weights_path=WEIGHTS, seed=None):
        tensors, _ = read_safetensors(weights_path)
        self.params = tensors
        self.initial = {{name: self.params[key] for name, key in STATE.items()}}
        if seed is not None and RNG in self.initial:  # random ops draw from a stream of this seed
            self.initial[RNG] = seed_state(seed)
        self.forks = 0
        self.reset()

    def reset(self):
        self.state = {{name: np.array(value) for name, value in self.initial.items()}}

    def fork(self):
        twin = object.__new__(Model)
        twin.params = self.params
        self.forks += 1
        twin.initial, twin.forks = dict(self.initial), 0
        if RNG in twin.initial:  # its own random stream
            twin.initial[RNG] = fork_state(np.asarray(self.initial[RNG]), self.forks)
        twin.reset()
        return twin

    def __call__(self, *inputs):
        with np.errstate(all="ignore"):  # inf and NaN are values here, as in PyTorch, not warnings
            result = model.forward(self.params, *inputs, **self.state)
        if UPDATES_INPUTS:  # the new values of inputs updated in place go into the arrays given
            *result, updates = result
            for position, value in updates.items():
                np.copyto(inputs[position], value)
            result = result[0] if len(result) == 1 else tuple(result)
        if STATE:
            result, self.state = result
        return result


def load(weights_path=WEIGHTS, seed=None):
    """Read the weights (memory-mapped) and return the callable model (``seed``: where its random
    draws start, as ``rlx.load(..., seed=)``; default: the stored state, seed 0)."""
    return Model(weights_path, seed)
'''
)

JAX_INIT = (
    '''"""{name}: a PyTorch model converted by rlx {version}; runs on JAX (one jit-compiled XLA computation)."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import model
from ._ops import fork_state, read_safetensors, seed_state, x64

'''
    + CONSTANTS
    + '''

class Model:
    """The converted model: ``Model()(*inputs)`` returns outputs (jax arrays) in the original structure.

    A model with state (a KV cache) passes it into the jitted forward and keeps what comes out in
    ``state``; ``reset()`` restores the initial values, ``fork()`` makes a model sharing the
    weights with its own state (one per concurrent conversation or stream).

    Calls run ``jax.jit(model.forward)`` with 64-bit types enabled, so int64 and float64 stay 64-bit
    as in PyTorch (``x64()`` is a thread-local scope; your own JAX code keeps its setting). To jit,
    vmap or differentiate ``model.forward(params, *inputs)`` yourself, do it inside ``with x64():``
    when the model uses int64 or float64.
    """

    def __init__(self, weights_path=WEIGHTS, seed=None):
        tensors, _ = read_safetensors(weights_path)
        with x64():
            self.params = {{key: jnp.asarray(value) for key, value in tensors.items()}}
        self.forward = jax.jit(model.forward)
        self.initial = {{name: self.params[key] for name, key in STATE.items()}}
        if seed is not None and RNG in self.initial:  # random ops draw from a stream of this seed
            self._set_rng(seed_state(seed))
        self.forks = 0
        self.reset()

    def _set_rng(self, value):
        with x64():
            self.initial[RNG] = jnp.asarray(value)

    def reset(self):
        self.state = dict(self.initial)

    def fork(self):
        twin = object.__new__(Model)
        twin.params, twin.forward = self.params, self.forward
        self.forks += 1
        twin.initial, twin.forks = dict(self.initial), 0
        if RNG in twin.initial:  # its own random stream
            twin._set_rng(fork_state(np.asarray(self.initial[RNG]), self.forks))
        twin.reset()
        return twin

    def __call__(self, *inputs):
        with x64():
            result = self.forward(self.params, *inputs, **self.state)
        if UPDATES_INPUTS:  # JAX arrays are immutable: the new values go into numpy arrays given
            *result, updates = result
            for position, value in updates.items():
                np.copyto(inputs[position], np.asarray(value))
            result = result[0] if len(result) == 1 else tuple(result)
        if STATE:
            result, self.state = result
        return result


def load(weights_path=WEIGHTS, seed=None):
    """Read the weights onto the JAX device and return the callable model (``seed``: where its
    random draws start, as ``rlx.load(..., seed=)``; default: the stored state, seed 0)."""
    return Model(weights_path, seed)
'''
)

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


def check_style(style: str) -> None:
    """A known style, whose runtime can generate code here (the JAX style needs jax to list its kernels)."""
    if style not in STYLES:
        raise UsageError(f"unknown package style {style!r}; choose one of {', '.join(STYLES)}")
    if style == "jax":
        require("jax", extra="jax", feature="a JAX-style package")


def write_package(
    program: Program,
    weights: Mapping[str, np.ndarray],
    out_dir: Path,
    *,
    decomposition: str = "",
    style: str = "numpy",
) -> Path:
    """Write the package for ``program`` into ``out_dir/rlx_<name>/`` and return that directory."""
    check_style(style)
    if style == "jax":  # refuse a program using a Call the JAX kernels lack, naming it
        from rlx.kernels.jax.coverage import check_coverage

        check_coverage(program)
    name = package_name(program.name)
    root = out_dir / name
    pkg = root / name
    if root.exists():
        shutil.rmtree(root)
    pkg.mkdir(parents=True)
    vendor_ops(pkg / "_ops", style)
    code = writer(program, style)
    (pkg / "model.py").write_text(code.module(decomposition), encoding="utf-8")
    (pkg / "_ops" / "__init__.py").write_text(ops_init(sorted(code.kernels), style), encoding="utf-8")
    init = JAX_INIT if style == "jax" else INIT
    state = {identifier(s.name): s.key for s in program.state}
    (pkg / "__init__.py").write_text(
        init.format(
            name=program.name,
            version=__version__,
            state=state,
            updates_inputs=bool(program.input_updates),
            rng=identifier(RNG_STATE),
        ),
        encoding="utf-8",
    )
    (pkg / "__main__.py").write_text(
        MAIN.format(package=name, inputs=[v.name for v in program.user_inputs]), encoding="utf-8"
    )
    weights = with_rng_state(program, dict(weights))
    needed = {w.key: weights[w.key] for w in program.weights}
    needed.update({s.key: weights[s.key] for s in program.state})
    safetensors_io.write(pkg / WEIGHTS_FILE, needed)
    (root / "pyproject.toml").write_text(
        _pyproject(name, program.name, style, _needs_scipy(program, style)), encoding="utf-8"
    )
    readme = _readme(name, program, decomposition, style)
    if _needs_scipy(program, style):
        readme = readme.replace(
            "numpy and ml_dtypes only", "numpy, ml_dtypes and scipy (special functions, LAPACK) only"
        )
    (root / "README.md").write_text(readme, encoding="utf-8")
    os.chmod(root, 0o755)
    return root


def _needs_scipy(program: Program, style: str) -> bool:
    """A numpy-style package of a program with special functions computes them with scipy; a
    package of either style with a Bunch-Kaufman LDLᵀ runs it with scipy's LAPACK."""
    fns = (ins.call.fn for ins in program.instrs if isinstance(ins.call, Special))
    lapack = any(ins.call.op in SCIPY_CALLS for ins in program.instrs)
    return lapack or (style == "numpy" and bool(library_functions(fns)))


def _pyproject(name: str, model: str, style: str, scipy: bool = False) -> str:
    # Weights are read by the vendored safetensors reader (_ops/safetensors_io.py): no safetensors
    # package needed. ml_dtypes: the vendored dtype table imports it (bfloat16).
    deps = ["numpy>=1.24", "ml_dtypes>=0.3"] if style == "numpy" else ["jax>=0.4.30", "numpy>=1.24", "ml_dtypes>=0.3"]
    deps += ["scipy>=1.10"] if scipy else []
    return f"""[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{name.replace("_", "-")}"
version = "0.1.0"
description = "{model}, converted from PyTorch by rlx {__version__}"
requires-python = ">=3.10"
dependencies = [{", ".join(f'"{d}"' for d in deps)}]

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


def _readme(name: str, program: Program, decomposition: str, style: str) -> str:
    inputs = "\n".join(f"- `{v.name}`: shape {[str(d) for d in v.shape]}, {v.dtype}" for v in program.user_inputs)
    ops = "\n".join(f"| `{op}` | {n} |" for op, n in program.source_histogram.items())
    runs_with = (
        "It runs with numpy and ml_dtypes only: no torch, no rlx."
        if style == "numpy"
        else "It runs on JAX (`jax.numpy`, one `jax.jit` computation): no torch, no rlx. `load()` runs it with\n"
        "64-bit types on (`_ops.x64()`, a thread-local scope), so int64/float64 stay 64-bit as in PyTorch; wrap\n"
        "your own `jax.jit(model.forward)` calls in `with _ops.x64():` when the model uses them."
    )
    return f"""# {name}

`{program.name}`, converted from PyTorch by rlx {__version__} (decomposition level: {decomposition or "?"}).
{runs_with}

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
