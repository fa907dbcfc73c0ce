"""Copy an engine's kernels into a generated package, so it runs without rlx.

The generated code calls the very kernels the rlx runtime executes (no second implementation to
drift). Vendoring is a copy: the engine's kernel table (``rlx/kernels/<numpy|jax>/kernels.py``) and
every module it imports, transitively, land under ``_ops/`` at the same relative paths, and their
relative imports work there unchanged. The modules in that closure import rlx only relatively
(an absolute ``rlx`` import is refused here, naming the module); packages whose ``__init__`` is not
itself needed get an empty one. ``_ops/__init__.py`` is written by the code generator.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rlx.errors import UsageError
from rlx.version import __version__

_RLX = Path(__file__).resolve().parents[2]  # src/rlx
STYLES = ("numpy", "jax")
_ROOTS = {
    "numpy": ("kernels/numpy/kernels.py", "formats/safetensors_io.py"),
    "jax": ("kernels/jax/kernels.py", "formats/safetensors_io.py"),
}


def _imports(path: Path) -> list[Path]:
    """The rlx files a module imports at module level (relative imports only; ``TYPE_CHECKING``
    blocks and imports inside functions are not followed)."""
    rel = path.relative_to(_RLX)
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "rlx":
            raise UsageError(f"cannot vendor rlx/{rel}: it imports {node.module} absolutely; use a relative import")
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        if node.module:
            base = base.joinpath(*node.module.split("."))
        if base.with_suffix(".py").is_file():
            found.append(base.with_suffix(".py"))
            continue
        for alias in node.names:  # `from . import a, b`: submodules, or names of the package itself
            sub = base / f"{alias.name}.py"
            found.append(sub if sub.is_file() else base / "__init__.py")
    return found


def kernel_files(style: str = "numpy") -> list[str]:
    """The files (relative to the rlx package) a package of ``style`` carries."""
    if style not in STYLES:
        raise UsageError(f"unknown package style {style!r}; choose one of {', '.join(STYLES)}")
    todo = [_RLX / r for r in _ROOTS[style]]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path == _RLX / "__init__.py":
            raise UsageError("cannot vendor the rlx package itself; import the module that defines the name")
        if path not in seen:
            seen.add(path)
            todo += _imports(path)
    return sorted(str(p.relative_to(_RLX)) for p in seen)


def vendor_ops(dest: Path, style: str = "numpy") -> list[str]:
    """Copy the kernel files of ``style`` into ``dest`` (the package's ``_ops``); their list."""
    files = kernel_files(style)
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        header = f"# Vendored from rlx {__version__} (rlx/{rel}); the same code the rlx runtime runs.\n"
        target.write_text(header + (_RLX / rel).read_text(encoding="utf-8"), encoding="utf-8")
    for folder in {(dest / rel).parent for rel in files} - {dest}:
        while folder != dest:
            (folder / "__init__.py").touch(exist_ok=True)
            folder = folder.parent
    return files
