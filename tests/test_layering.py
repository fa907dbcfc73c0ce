"""The architecture, checked on the module-level imports of src/rlx (imports inside functions are
the deliberate, lazy kind: torch and jax only when asked for)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "rlx"


def _module(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Modules imported at module level (``TYPE_CHECKING`` blocks excluded), relative ones resolved."""
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    out = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
    return out


MODULES = {_module(p): p for p in SRC.rglob("*.py")}
# An import of an ancestor package is no edge: Python initialises it before the module anyway.
GRAPH = {m: {i for i in _imports(p) if i in MODULES and not (m + ".").startswith(i + ".")} for m, p in MODULES.items()}


def test_no_import_cycles():
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n) :] + [n] if n in stack else [m, n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n, stack + [n])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])


def _reaches(module: str, prefix: str) -> list[str]:
    return sorted(i for i in _imports(MODULES[module]) if i == prefix or i.startswith(prefix + "."))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_rooms_have_clear_doors(module):
    # lower knows aten and Calls, never kernels or engines; engines and kernels never know aten.
    if module.startswith("rlx.lower"):
        assert not _reaches(module, "rlx.kernels") and not _reaches(module, "rlx.runtime")
    if module.startswith(("rlx.kernels", "rlx.runtime")):
        assert not _reaches(module, "rlx.lower") and not _reaches(module, "rlx.torch_import")
    # Only the torch front-end imports torch at module level; nothing imports jax but its engine.
    if not module.startswith("rlx.torch_import"):
        assert not _reaches(module, "torch"), f"{module} imports torch at module level"
    if not module.startswith("rlx.runtime.jax_engine."):
        assert not _reaches(module, "jax"), f"{module} imports jax at module level"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("rlx.kernels")))
def test_shared_kernels_import_rlx_only_relatively(module):
    # Generated packages carry rlx/kernels as a plain copy (rlx.emit.vendor).
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    absolute = [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 0]
    assert not [m for m in absolute if m and m.split(".")[0] == "rlx"]


def test_no_two_modules_share_a_name_for_different_things():
    # One module per name across the package, apart from the per-room __init__ / family names
    # that mean the same thing in each room (a family of aten lowerings, of kernels, of an engine's own).
    allowed = {"__init__", "elementwise", "nn", "movement", "linalg", "reduce", "ordering", "scatter",
               "spectral", "resample", "creation", "misc", "selection", "special", "random", "kernels", "namespace", "overrides", "executor", "registry"}  # fmt: skip
    seen: dict[str, list[str]] = {}
    for m, p in MODULES.items():
        seen.setdefault(p.stem, []).append(m)
    clashes = {name: ms for name, ms in seen.items() if len(ms) > 1 and name not in allowed}
    assert not clashes
