"""The architecture, checked on every import in src/rlx — at module level and inside functions.

The layers, lowest first (``LAYERS``); a module may import its own layer's package and layers
below, never above, and packages that share a rank (the two front-ends and the exporters) never
import each other. An engine's folder is private to it: only the engine table
(``rlx.runtime.engines``) names it. No module imports another module's ``_private`` name, and
there is no import cycle at all, lazy imports included. Heavy libraries are imported only by the
layer that needs them."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlx.ir.calls import FAMILIES

SRC = Path(__file__).resolve().parent.parent / "src" / "rlx"

# Lowest first. Packages in one tuple share a rank and may not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("rlx.errors", "rlx.version"),
    ("rlx.optional", "rlx.deprecation"),
    ("rlx.ir",),
    ("rlx.formats",),
    ("rlx.kernels",),
    ("rlx.interpret",),
    ("rlx.passes",),
    ("rlx.frontends.common",),  # what both front-ends share
    ("rlx.frontends", "rlx.frontends.aten", "rlx.frontends.onnx", "rlx.exporters"),
    ("rlx.frontends.torch",),  # capture with torch.export, then the aten front-end
    ("rlx.runtime",),
    ("rlx.app",),
    ("rlx.batch",),
    ("rlx.cli",),
    ("rlx.__main__", "rlx"),  # the facade: rlx/__init__.py re-exports the public API
)
ENGINE_TABLE = "rlx.runtime.engines"

# Third-party libraries and the only places that may import them (any import, lazy ones too).
LIBRARIES = {
    "torch": ("rlx.frontends.torch",),
    "jax": ("rlx.kernels.jax", "rlx.runtime.jax_engine"),
    # app: the ONNX import's reference run; runtime.quantize: its quantizer, for both graph engines
    "onnxruntime": ("rlx.runtime.onnxruntime_engine", "rlx.runtime.quantize", "rlx.app"),
    "openvino": ("rlx.runtime.openvino_engine",),
    "pyarrow": ("rlx.batch",),
    "ray": ("rlx.batch",),
    "scipy": ("rlx.kernels",),
}


@dataclass(frozen=True)
class Import:
    module: str  # the imported module (for `from m import name`: m.name when that is a module)
    name: str | None  # the imported name of `from m import name`
    line: int


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in SRC.rglob("*.py")}


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                lines |= set(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def _imports(path: Path) -> list[Import]:
    """Every import in the file, relative ones resolved (``TYPE_CHECKING`` blocks excluded)."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    out: list[Import] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [Import(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append(Import(sub if sub in MODULES else base, a.name, node.lineno))
    return out


IMPORTS = {m: _imports(p) for m, p in MODULES.items()}


def _owner(module: str) -> str:
    """The layer package a module belongs to (the longest matching prefix)."""
    best = ""
    for rank in LAYERS:
        for pkg in rank:
            # "rlx" is the package's own __init__ only: a new top-level module must be given a layer.
            matches = module == pkg or (pkg != "rlx" and module.startswith(pkg + "."))
            if matches and len(pkg) > len(best):
                best = pkg
    assert best, f"{module} is in no layer: add it to LAYERS"
    return best


RANK = {pkg: k for k, rank in enumerate(LAYERS) for pkg in rank}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _engine(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) >= 3 and parts[1] == "runtime" and parts[2].endswith("_engine") else None


def _rlx_edges(module: str) -> list[Import]:
    # An import of an ancestor package is no edge: Python initialises it before the module anyway.
    return [i for i in IMPORTS[module] if i.module in MODULES and not (module + ".").startswith(i.module + ".")]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module: str) -> None:
    mine = _owner(module)
    for imp in _rlx_edges(module):
        theirs = _owner(imp.module)
        if theirs == mine:
            continue
        where = f"{module}:{imp.line} imports {imp.module}"
        assert RANK[theirs] <= RANK[mine], f"{where}, a layer above it"
        assert RANK[theirs] < RANK[mine], f"{where}, a sibling of the same rank"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_engine_folders_are_private(module: str) -> None:
    for imp in _rlx_edges(module):
        engine = _engine(imp.module)
        if engine and _engine(module) != engine and module != ENGINE_TABLE:
            pytest.fail(f"{module}:{imp.line} imports {imp.module}, inside another engine's folder")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_names_across_modules(module: str) -> None:
    for imp in _rlx_edges(module):
        private = imp.name and imp.name.startswith("_") and not imp.name.startswith("__")
        assert not private, f"{module}:{imp.line} imports the private name {imp.name} of {imp.module}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_heavy_libraries_stay_in_their_layer(module: str) -> None:
    for imp in IMPORTS[module]:
        top = imp.module.split(".")[0]
        if top in LIBRARIES:
            allowed = LIBRARIES[top]
            assert any(_within(module, a) for a in allowed), f"{module}:{imp.line} imports {top}"


def test_no_import_cycles() -> None:
    graph = {m: sorted({i.module for i in _rlx_edges(m)}) for m in MODULES}
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in graph[m]:
            if state.get(n) == 1:
                cycle = stack[stack.index(n) :] + [n] if n in stack else [m, n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_the_checker_sees_lazy_and_relative_imports() -> None:
    # Guard against the walker going blind: from_torch imports the torch front-end inside the function,
    # the kernels import each other relatively.
    assert any(_within(i.module, "rlx.frontends.torch") for i in IMPORTS["rlx.app.convert"])
    assert any(i.module == "rlx.kernels.registry" for i in IMPORTS["rlx.kernels.numpy.overrides"])


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("rlx.kernels")))
def test_shared_kernels_import_rlx_only_relatively(module: str) -> None:
    # Generated packages carry rlx/kernels as a plain copy (rlx.exporters.package.vendor).
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    absolute = [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 0]
    assert not [m for m in absolute if m and m.split(".")[0] == "rlx"]


def test_no_two_modules_share_a_name_for_different_things() -> None:
    # One module per name across the package, apart from the per-room __init__ / family names
    # (rlx.ir.calls.FAMILIES, tests/test_families.py) that mean the same thing in each room (a family
    # of lowerings, of kernels, of an engine's own) and the per-room tables.
    allowed = {"__init__", *FAMILIES, "kernels", "namespace", "overrides", "executor", "registry"}
    seen: dict[str, list[str]] = {}
    for m, p in MODULES.items():
        seen.setdefault(p.stem, []).append(m)
    clashes = {name: ms for name, ms in seen.items() if len(ms) > 1 and name not in allowed}
    assert not clashes
