"""Copy rlx's numpy runtime kernels into a generated package, so it runs without rlx.

The generated code calls the very kernels the rlx runtime executes (no second implementation
to drift): their modules are copied with their ``rlx.*`` imports rewritten to package-relative
ones, and a tiny shim stands in for the Call classes (kernels only use them to register).
"""

from __future__ import annotations

import re
from pathlib import Path

import rlx
from rlx.errors import UsageError

_RLX = Path(rlx.__file__).parent
# Vendored module name → its source in rlx.
MODULES = {
    "dtypes": "ir/dtypes.py",
    "erf": "runtime/erf.py",
    "safetensors_io": "safetensors_io.py",
    "numpy_backend": "runtime/numpy_backend.py",
}
SHIM = '''"""Stand-ins for rlx's Call classes and errors: the kernels use Call names only to register."""


class Call:
    """Placeholder base (kernels only use it in annotations)."""


class SchemaError(Exception):
    pass


class WeightsError(Exception):
    pass


def __getattr__(name: str) -> str:
    return name  # `C.Conv` is just the name "Conv" here
'''


def kernel_modules() -> dict[str, str]:
    mods = dict(MODULES)
    for path in sorted((_RLX / "runtime").glob("*_kernels.py")):
        mods[path.stem] = f"runtime/{path.name}"
    return mods


def _rewrite(source: str, vendored: set[str], origin: str) -> str:
    def fix(match: re.Match[str]) -> str:
        module, names = match.group(1), match.group(2)
        if module == "rlx.ir" and names.strip() == "calls as C":
            return "from . import _calls as C"
        if module in ("rlx.ir.program", "rlx.errors"):
            return f"from ._calls import {names}"
        leaf = module.rsplit(".", 1)[-1]
        if leaf in vendored:
            return f"from .{leaf} import {names}"
        imported = [n.strip().split(" as ")[0] for n in names.split("#")[0].split(",")]
        if all(n in vendored for n in imported):
            return f"from . import {names}"
        raise UsageError(f"cannot vendor {origin}: it imports {module} ({names.strip()}) which a package cannot carry")

    return re.sub(r"^from (rlx(?:\.\w+)*) import (.+)$", fix, source, flags=re.M)


def vendor_ops(dest: Path) -> list[str]:
    """Write the ``_ops`` package into ``dest`` and return the Call names it has kernels for."""
    dest.mkdir(parents=True, exist_ok=True)
    mods = kernel_modules()
    for name, rel in mods.items():
        source = (_RLX / rel).read_text(encoding="utf-8")
        header = f"# Vendored from rlx {rlx.__version__} ({rel}); the same code the rlx runtime runs.\n"
        (dest / f"{name}.py").write_text(header + _rewrite(source, set(mods), rel), encoding="utf-8")
    (dest / "_calls.py").write_text(SHIM, encoding="utf-8")
    from rlx.runtime.numpy_backend import KERNELS

    return sorted(t.__name__ for t in KERNELS)
