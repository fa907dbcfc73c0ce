"""Copy rlx's runtime kernels into a generated package, so it runs without rlx.

The generated code calls the very kernels the rlx runtime executes (no second implementation
to drift): their modules are copied with their ``rlx.*`` imports rewritten to package-relative
ones, and a tiny shim stands in for the Call classes (kernels only use them to register).

Which modules: the roots of the style (the numpy kernels, or the JAX backend's kernel modules) and
everything they import from rlx, transitively. The modules land side by side in ``_ops/``; a JAX
backend module is prefixed ``jax_`` (``jax_backend/kernels.py`` → ``_ops/jax_kernels.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import rlx
from rlx.errors import UsageError

_RLX = Path(rlx.__file__).parent
STYLES = ("numpy", "jax")
# Modules whose names the shim provides instead (kernels use Call classes only to register).
_SHIMMED = ("rlx.ir.program", "rlx.errors", "rlx.ir.calls")
_IMPORT = re.compile(r"^([ \t]*)from (rlx(?:\.\w+)*) import (\([^)]*\)|.+)$", re.M)
_NOT_VENDORED = ("__init__", "executor")  # the JAX backend's rlx-side plumbing, not kernels
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


def vendored_name(module: str) -> str:
    """``rlx.runtime.numpy_backend`` → ``numpy_backend``, ``rlx.runtime.jax_backend.kernels`` → ``jax_kernels``."""
    parts = module.split(".")
    if parts[:3] == ["rlx", "runtime", "jax_backend"] and len(parts) == 4:
        return "jax_" + parts[3]
    return parts[-1]


def _file(module: str) -> Path | None:
    path = _RLX.joinpath(*module.split(".")[1:]).with_suffix(".py")
    return path if path.is_file() else None


def _source(module: str) -> str:
    path = _file(module)
    if path is None:
        raise UsageError(f"cannot vendor {module}: no such module in rlx")
    return path.read_text(encoding="utf-8")


def _names(names: str) -> list[tuple[str, str]]:
    """``a, b as c  # comment`` / ``(a,\\n b)`` → [(a, a), (b, c)]."""
    out = []
    for item in names.strip().strip("()").split("#")[0].replace("\n", " ").split(","):
        if item.strip():
            name, _, alias = item.strip().partition(" as ")
            out.append((name.strip(), alias.strip() or name.strip()))
    return out


def _imported_modules(module: str, names: str, origin: str) -> list[str]:
    """The rlx modules a ``from module import names`` line needs vendored (none for the shim)."""
    if module in _SHIMMED or (module == "rlx.ir" and [n for n, _ in _names(names)] == ["calls"]):
        return []
    if _file(module):
        return [module]
    subs = [f"{module}.{name}" for name, _ in _names(names)]
    if all(_file(s) for s in subs):
        return subs
    raise UsageError(f"cannot vendor {origin}: it imports {module} ({names.strip()}) which a package cannot carry")


def _rewrite(source: str, origin: str) -> str:
    def fix(match: re.Match[str]) -> str:
        indent, module, names = match.group(1), match.group(2), match.group(3)
        if module == "rlx.ir" and [n for n, _ in _names(names)] == ["calls"]:
            return f"{indent}from . import _calls as {_names(names)[0][1]}"
        if module in _SHIMMED:
            return f"{indent}from ._calls import {names}"
        if _file(module):
            return f"{indent}from .{vendored_name(module)} import {names}"
        _imported_modules(module, names, origin)  # raises for an import a package cannot carry
        parts = []
        for name, alias in _names(names):
            vendored = vendored_name(f"{module}.{name}")
            parts.append(vendored if vendored == alias else f"{vendored} as {alias}")
        comment = names.partition("#")[2]
        return f"{indent}from . import {', '.join(parts)}" + (f"  #{comment}" if comment else "")

    return _IMPORT.sub(fix, source)


def _roots(style: str) -> list[str]:
    if style == "numpy":
        kernels = ["rlx.runtime.numpy_backend"]
        kernels += [f"rlx.runtime.{p.stem}" for p in sorted((_RLX / "runtime").glob("*_kernels.py"))]
    elif style == "jax":
        kernels = [
            f"rlx.runtime.jax_backend.{p.stem}"
            for p in sorted((_RLX / "runtime" / "jax_backend").glob("*.py"))
            if p.stem not in _NOT_VENDORED
        ]
    else:
        raise UsageError(f"unknown package style {style!r}; choose one of {', '.join(STYLES)}")
    return kernels + ["rlx.safetensors_io"]


def kernel_modules(style: str = "numpy") -> dict[str, str]:
    """Vendored name → rlx module, for the style's roots and everything they import from rlx."""
    todo, mods = _roots(style), {}
    while todo:
        module = todo.pop()
        name = vendored_name(module)
        if name in mods:
            if mods[name] != module:
                raise UsageError(f"cannot vendor both {mods[name]} and {module} as _ops/{name}.py")
            continue
        mods[name] = module
        for m in _IMPORT.finditer(_source(module)):
            todo += _imported_modules(m.group(2), m.group(3), module)
    return dict(sorted(mods.items()))


def vendor_ops(dest: Path, style: str = "numpy") -> list[str]:
    """Write the ``_ops`` modules into ``dest`` and return the vendored module names."""
    dest.mkdir(parents=True, exist_ok=True)
    mods = kernel_modules(style)
    for name, module in mods.items():
        rel = module.removeprefix("rlx.").replace(".", "/") + ".py"
        header = f"# Vendored from rlx {rlx.__version__} ({rel}); the same code the rlx runtime runs.\n"
        (dest / f"{name}.py").write_text(header + _rewrite(_source(module), rel), encoding="utf-8")
    (dest / "_calls.py").write_text(SHIM, encoding="utf-8")
    return list(mods)
