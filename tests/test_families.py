"""One set of family names for every per-family tree, taken from the Call vocabulary.

``rlx.ir.calls.FAMILIES`` names the sections of ``ir/calls.py``. Each tree that is split by family
(the aten and ONNX front-ends, the ONNX exporter, the shared kernels and each engine's own) names a
module by a family (``movement.py``), by a family and a topic (``resample_tables.py``,
``nn_recurrent.py``), or declares it here as one of the tree's helpers; so a Call's lowering, ONNX
import, emitter and kernel sit under one name in every tree, and a new one has one place to go.
Read from the source files, nothing imported but ``rlx.ir.calls``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rlx.ir import calls
from rlx.ir.calls import FAMILIES

SRC = Path(__file__).resolve().parent.parent / "src" / "rlx"
TESTS = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Tree:
    entry: str  # the module that loads the families (the package's __init__, an engine's kernel table)
    helpers: dict[str, str]  # the modules that are no family, each with what it holds
    # Op groups ONNX has and the Call vocabulary does not (they lower to Calls of several families).
    op_groups: dict[str, str] = field(default_factory=dict)


TREES: dict[str, Tree] = {
    "frontends/aten": Tree(
        entry="__init__",
        helpers={
            "registry": "the @lowers registry and the Builder",
            "shapes": "shape arithmetic every lowering shares",
            "fixed_dims": "fixing chosen input dimensions while building",
        },
    ),
    "frontends/onnx": Tree(
        entry="__init__",
        helpers={
            "registry": "the @onnx_op registry and the OnnxBuilder",
            "reader": "reading a model: protobuf, external data, opsets, local functions, graph order",
            "boundary": "the onnx package, onnxruntime and external data, behind one error type",
            "input_shapes": "fixing chosen input dimensions while converting",
        },
        op_groups={
            "control": "If, Loop, Scan: inlined bodies",
            "quant": "QuantizeLinear and the QLinear / Integer ops: float arithmetic around existing Calls",
            "text": "TfIdfVectorizer: window comparisons and sums",
        },
    ),
    "exporters/onnx": Tree(
        entry="__init__",
        helpers={
            "registry": "the @emits registry and the graph builder emitters append nodes through",
            "build": "the driver: a Program → an ONNX model",
            "nan_sources": "which inputs must be finite for a pooled value to hold no NaN",
            "static_values": "values known from weights and literals while emitting",
        },
    ),
    "kernels": Tree(
        entry="__init__",
        helpers={
            "registry": "the @kernel table and engine_kernels",
            "namespace": "the array namespace an engine hands the shared definitions",
            "precision": "which types widen, what a max or a scan starts from",
            "geometry": "window geometry of convolution and pooling (shape arithmetic only)",
        },
    ),
    "kernels/jax": Tree(
        entry="kernels",
        helpers={
            "kernels": "the JAX engine's kernel table",
            "namespace": "jax.numpy, with XLA's differences from numpy made explicit",
            "overrides": "OVERRIDES: the engine's own kernels by Call name",
            "coverage": "what the JAX kernels cannot run, said before tracing",
        },
    ),
    "kernels/numpy": Tree(
        entry="kernels",
        helpers={
            "kernels": "the numpy engine's kernel table",
            "namespace": "numpy, with the functions the engine computes its own way",
            "overrides": "OVERRIDES: the engine's own kernels by Call name",
        },
    ),
}


def _is_family_name(name: str) -> bool:
    """A family, or ``<family>_<topic>``."""
    family, _, topic = name.partition("_")
    return family in FAMILIES and (topic == "" or topic.isidentifier())


def _modules(tree: str) -> list[str]:
    return sorted(p.stem for p in (SRC / tree).glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_module_is_named_by_a_family_or_declared(tree: str) -> None:
    known = {**TREES[tree].helpers, **TREES[tree].op_groups}
    stray = [m for m in _modules(tree) if not _is_family_name(m) and m not in known]
    assert not stray, (
        f"src/rlx/{tree}: module(s) {', '.join(f'{m}.py' for m in stray)} named by no Call family; "
        f"name each by a family of rlx.ir.calls.FAMILIES ({', '.join(FAMILIES)}) or <family>_<topic>, "
        f"or declare it in tests/test_families.py TREES (now: {', '.join(sorted(known))})"
    )


@pytest.mark.parametrize("tree", sorted(TREES))
def test_declared_helpers_exist_and_are_no_family(tree: str) -> None:
    # A declaration that outlives its module, or shadows a family name, would hide a stray one.
    modules = set(_modules(tree))
    for name in {**TREES[tree].helpers, **TREES[tree].op_groups}:
        assert name in modules, f"tests/test_families.py declares {tree}/{name}.py, which does not exist"
        assert not _is_family_name(name), f"{tree}/{name}.py is named by a family: it needs no declaration"


def _tree_imports(tree: str, module: str) -> set[str]:
    """The modules of ``tree`` that ``module`` (a module of it) imports, absolutely or relatively."""
    package = "rlx." + tree.replace("/", ".")
    mods = set(_modules(tree))
    found: set[str] = set()
    for node in ast.walk(ast.parse((SRC / tree / f"{module}.py").read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:  # relative: `from . import x`, `from .x import y` (from the tree's own level)
            base = package if node.level == 1 else package.rsplit(".", node.level - 1)[0]
            base = f"{base}.{node.module}" if node.module else base
        if base == package:
            found |= {a.name for a in node.names if a.name in mods}
        elif base.startswith(package + ".") and base.removeprefix(package + ".") in mods:
            found.add(base.removeprefix(package + "."))
    return found


@pytest.mark.parametrize("tree", sorted(TREES))
def test_the_entry_module_loads_every_family_module(tree: str) -> None:
    # Registration happens on import: a family module nothing loads would leave its ops silently out.
    entry = TREES[tree].entry
    loaded, todo = set(), [entry]
    while todo:
        m = todo.pop()
        if m not in loaded:
            loaded.add(m)
            todo += sorted(_tree_imports(tree, m))
    families = [m for m in _modules(tree) if _is_family_name(m) or m in TREES[tree].op_groups]
    missing = [m for m in families if m not in loaded]
    where = f"src/rlx/{tree}/{entry}.py"
    assert not missing, f"{where} does not load {', '.join(missing)}: import it there with the other families"


@pytest.mark.parametrize("tree", ["frontends/aten", "frontends/onnx"])
def test_family_tests_mirror_the_modules(tree: str) -> None:
    # tests/<tree>/test_<family…>.py tests the module of that name: a renamed module renames its test.
    modules = set(_modules(tree))
    names = [p.stem.removeprefix("test_") for p in (TESTS / tree).glob("test_*.py")]
    orphans = [n for n in names if (_is_family_name(n) or n in TREES[tree].op_groups) and n not in modules]
    assert not orphans, f"tests/{tree}: test_{', test_'.join(orphans)} name no module of src/rlx/{tree}"


SECTION = re.compile(r"^# ── (\w+)(?::[^─]*)? ─+$")


def test_the_families_are_the_sections_of_the_call_vocabulary() -> None:
    # FAMILIES is declared once, by hand, beside the section headers it names: both must agree.
    text = Path(calls.__file__).read_text(encoding="utf-8")
    headers = [m.group(1) for line in text.splitlines() if (m := SECTION.match(line))]
    every_header = [line for line in text.splitlines() if line.startswith("# ──")]
    assert len(headers) == len(every_header), f"a section header is not '# ── <family>: …': {every_header}"
    assert tuple(headers) == FAMILIES, f"ir/calls.py sections {headers} != FAMILIES {list(FAMILIES)}"


def test_every_call_is_in_a_section() -> None:
    # Sections start before the first Call, so each class sits under one.
    text = Path(calls.__file__).read_text(encoding="utf-8")
    first_section = next(i for i, line in enumerate(text.splitlines()) if SECTION.match(line))
    tree = ast.parse(text)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes and all(c.lineno > first_section for c in classes)


@pytest.mark.parametrize(
    "name,expected",
    [("movement", True), ("nn_recurrent", True), ("resample_tables", True), ("misc", False), ("shape", False)],
)
def test_family_names(name: str, expected: bool) -> None:
    # The checker itself: a topic must follow a real family.
    assert _is_family_name(name) is expected
