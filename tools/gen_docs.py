"""Write the generated parts of the docs site and the README: python tools/gen_docs.py [--check]

A generated part sits between two markers, one convention everywhere:

    <!-- gen:NAME -->
    ...written by this script, never by hand...
    <!-- /gen:NAME -->

NAME is one of ``BLOCKS``. Some parts are derived from the code as it is now (the op tables from
the registries, the Call × engine matrix from the engines' kernel and emitter tables, the CLI
reference from the argument parser); the conformance parts are rendered from the results files
the conformance tools record (``tools/conformance.py --record``, ``tools/onnx_conformance.py
--record``), because the sweeps behind them take minutes. ``--check`` writes nothing and exits 1
naming every stale page (tests/docs/test_generated.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
OPINFO_RESULTS = ROOT / "tests" / "conformance" / "results.json"
ONNX_RESULTS = ROOT / "tests" / "frontends" / "onnx" / "results.json"

MARKER = re.compile(r"<!-- gen:([a-z0-9-]+) -->\n(.*?)<!-- /gen:\1 -->", re.S)
COUNTED = ("pass", "fail", "known")


# --------------------------------------------------------------------------- op tables (registries)


def aten_ops() -> str:
    from rlx.frontends.aten.registry import op_table_markdown

    return op_table_markdown()


def onnx_ops() -> str:
    from rlx.frontends.onnx.registry import op_table_markdown

    return op_table_markdown()


# --------------------------------------------------------------------------- OpInfo conformance (recorded)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def opinfo_summary_lines(record: dict[str, Any]) -> list[str]:
    """Per dtype group: the rate over every exported sample, then over those in Core ATen."""
    lines = []
    for group, sets in record["groups"].items():
        for which, what in (("all", "exported samples"), ("core", "samples in Core ATen")):
            c = sets[which]
            counted = sum(c[s] for s in COUNTED)
            rate = 100 * c["pass"] / counted if counted else 0.0
            line = f"{group}: {what}: {counted}; passed {c['pass']} ({rate:.1f}%), failed {c['fail']}, declared {c['known']}"
            if which == "all":
                line += f"; not exportable {c['n/a']}"
            lines.append(line)
    return lines


def opinfo_table(record: dict[str, Any]) -> str:
    """One row per op with at least one exported sample."""
    rows = ["| op | samples | passed | failed | declared | reason |", "|---|---|---|---|---|---|"]
    for op, c in sorted(record["ops"].items()):
        n = sum(c[s] for s in COUNTED)
        reason = "; ".join(_cell(t) for t in c["notes"][:2])
        rows.append(f"| `{op}` | {n} | {c['pass']} | {c['fail']} | {c['known']} | {reason} |")
    return "\n".join(rows)


def _opinfo_record() -> dict[str, Any]:
    return json.loads(OPINFO_RESULTS.read_text(encoding="utf-8"))


def opinfo_summary() -> str:
    r = _opinfo_record()
    head = (
        f"Recorded by `python tools/conformance.py --record` (`--dtypes {r['dtypes']} --max-samples "
        f"{r['max_samples']}`, torch {r['torch']}):"
    )
    return "\n".join([head, "", *(f"- {line}" for line in opinfo_summary_lines(r))])


def opinfo_by_op() -> str:
    return opinfo_table(_opinfo_record())


# --------------------------------------------------------------------------- ONNX conformance (recorded)


def onnx_summary_table(record: dict[str, Any]) -> str:
    n, ok, frozen = record["cases"], record["rlx_passed"], record["frozen"]
    # Inputs are frozen only where lowering asks for them, so the cases passing unfrozen are the rest.
    lines = ["| runner | cases passed | pass rate |", "|---|---:|---:|",
             f"| rlx, shape inputs frozen where needed | {ok} / {n} (of which {frozen} frozen) | {100 * ok / n:.1f}% |",
             f"| rlx, no input frozen | {ok - frozen} / {n} | {100 * (ok - frozen) / n:.1f}% |"]  # fmt: skip
    if record.get("ort_passed") is not None:
        lines.append(f"| onnxruntime | {record['ort_passed']} / {n} | {100 * record['ort_passed'] / n:.1f}% |")
    return "\n".join(lines)


def onnx_by_op_table(record: dict[str, Any]) -> str:
    lines = ["| op | rlx | onnxruntime | cases |", "|---|---:|---:|---:|"]
    for op, c in sorted(record["ops"].items()):
        ort = "-" if c.get("onnxruntime") is None else c["onnxruntime"]
        lines.append(f"| {op} | {c['rlx']} | {ort} | {c['cases']} |")
    return "\n".join(lines)


def _onnx_record() -> dict[str, Any]:
    return json.loads(ONNX_RESULTS.read_text(encoding="utf-8"))


def onnx_summary() -> str:
    r = _onnx_record()
    return f"Recorded by `python tools/onnx_conformance.py --record` ({r['versions']}):\n\n{onnx_summary_table(r)}"


def onnx_by_op() -> str:
    return onnx_by_op_table(_onnx_record())


# --------------------------------------------------------------------------- Call × engine matrix


def engines() -> str:
    """One row per Call: which definition each engine runs, or why it refuses the Call."""
    import inspect

    import rlx.exporters.onnx  # noqa: F401  (importing it registers every emitter)
    import rlx.ir.calls as C
    from rlx.exporters.onnx.registry import EMITTERS, NO_ONNX_FORM, NO_ONNX_FUNCTION
    from rlx.kernels import special
    from rlx.kernels.jax.kernels import JAX
    from rlx.kernels.jax.kernels import KERNELS as JAX_KERNELS
    from rlx.kernels.jax.kernels import OVERRIDES as JAX_OWN
    from rlx.kernels.numpy.kernels import KERNELS as NUMPY_KERNELS
    from rlx.kernels.numpy.kernels import OVERRIDES as NUMPY_OWN
    from rlx.kernels.registry import KERNELS as SHARED

    calls = sorted(
        (c for c in vars(C).values() if inspect.isclass(c) and issubclass(c, C.Call) and c is not C.Call),
        key=lambda c: c.__name__,
    )

    def kernel_cell(name: str, table: dict[str, Any], own: dict[str, Any]) -> str:
        if name in own:
            return "own kernel"
        return "shared" if name in table else "no"

    jax_missing = sorted(fn for fn in special.SPECIAL if special.missing(JAX, fn))
    rows = [
        "| Call | shared definition | numpy | JAX | onnxruntime |",
        "|---|---|---|---|---|",
    ]
    for cls in calls:
        name = cls.__name__
        jax = kernel_cell(name, JAX_KERNELS, JAX_OWN) if name in JAX_KERNELS else "no"
        if name == "Special" and jax_missing:
            jax += f" (not: {', '.join(jax_missing)})"
        if cls in EMITTERS:
            refused = sorted(NO_ONNX_FUNCTION.get(cls, ()))
            ort = "ONNX operators" + (f" (not: {', '.join(refused)})" if refused else "")
        else:
            ort = f"refused: {_cell(NO_ONNX_FORM[cls])}"
        rows.append(
            f"| `{name}` | {'yes' if name in SHARED else 'no'} | {kernel_cell(name, NUMPY_KERNELS, NUMPY_OWN)} "
            f"| {jax} | {ort} |"
        )
    return "\n".join(rows)


# --------------------------------------------------------------------------- CLI reference


def _option_row(action: argparse.Action) -> str | None:
    if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
        return None
    if action.option_strings:
        names = ", ".join(f"`{s}`" for s in action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or (
                "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
            )
            names += f" `{metavar}`"
    else:
        names = f"`{action.metavar or action.dest}`"
    text = _cell(action.help or "").replace("<", "&lt;").replace(">", "&gt;")
    extra = []
    if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0:
        if "default" not in text:
            extra.append(f"default: `{action.default}`")
    if (isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*")) and "repeatable" not in text:
        extra.append("repeatable")
    if extra:
        text = f"{text} ({'; '.join(extra)})" if text else "; ".join(extra)
    return f"| {names} | {text} |"


def cli() -> str:
    """Every subcommand of ``rlx`` with its arguments, read from the parser ``rlx`` itself uses."""
    from rlx.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    out = ["Global options: `--debug` (print tracebacks on errors), `--version`."]
    for name, p in sub.choices.items():
        rows = [r for r in map(_option_row, p._actions) if r]
        out += ["", f"## `rlx {name}`", "", _cell(helps.get(name) or ""), ""]
        out += ["| argument | meaning |", "|---|---|", *rows] if rows else ["No arguments."]
    return "\n".join(out)


# --------------------------------------------------------------------------- the pages

BLOCKS: dict[str, Callable[[], str]] = {
    "aten-ops": aten_ops,
    "onnx-ops": onnx_ops,
    "opinfo-summary": opinfo_summary,
    "opinfo-by-op": opinfo_by_op,
    "onnx-conformance-summary": onnx_summary,
    "onnx-conformance-by-op": onnx_by_op,
    "engines": engines,
    "cli": cli,
}


def pages() -> list[Path]:
    """Every file that may hold generated parts: the docs' markdown pages and the README."""
    return [*sorted(DOCS.rglob("*.md")), README]


def render(text: str, where: str, cache: dict[str, str]) -> str:
    """``text`` with every generated part written anew; an unknown NAME is an error naming the page."""

    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in BLOCKS:
            raise SystemExit(f"{where}: unknown generated part '{name}'; known: {', '.join(BLOCKS)}")
        if name not in cache:
            cache[name] = BLOCKS[name]().rstrip("\n")
        return f"<!-- gen:{name} -->\n{cache[name]}\n<!-- /gen:{name} -->"

    return MARKER.sub(fill, text)


def stale(paths: Iterable[Path]) -> dict[Path, str]:
    """The pages whose generated parts differ from what this script writes now, with the new text."""
    cache: dict[str, str] = {}
    out = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        new = render(text, str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path), cache)
        if new != text:
            out[path] = new
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = p.parse_args(argv)
    changed = stale(pages())
    for path, new in changed.items():
        rel = path.relative_to(ROOT)
        if args.check:
            print(f"stale: {rel} (run python tools/gen_docs.py)")
        else:
            path.write_text(new, encoding="utf-8")
            print(f"wrote {rel}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
