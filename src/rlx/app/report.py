"""``OUT/report.html``: a self-contained conversion report (inline SVG, no scripts, no fetches).

Built from ``report.json`` (summary, histograms, parity) and, when present, ``debug.json``
(per-node error along the graph). ``rlx import`` writes it; ``rlx report OUT`` rebuilds it.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from rlx.errors import BundleError
from rlx.formats.atomic import atomic_write_text
from rlx.formats.layout import DEBUG_FILE, REPORT_FILE
from rlx.frontends.aten.registry import find, is_noop

REPORT_HTML = "report.html"

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; } td, th { padding: 2px 10px; border-bottom: 1px solid #eee; }
th { text-align: left; background: #f6f6f6; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #17803d; font-weight: 600; } .fail { color: #b42318; font-weight: 600; }
code { background: #f3f3f3; padding: 0 3px; border-radius: 3px; }
.grid { display: grid; grid-template-columns: 1fr 1fr; gap: 2em; }
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def _num(v: float | None, spec: str = ".3e") -> str:
    return "-" if v is None else format(v, spec)


def _table(headers: list[str], rows: list[list[str]], numeric: AbstractSet[int] = frozenset()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def error_plot(nodes: list[dict[str, Any]], width: int = 1000, height: int = 260) -> str:
    """Per-node max abs error along the graph, log scale: accumulated (line) and local (dots)."""
    points = [
        (n["index"], n["accumulated"].get("max_abs_err"), n["local"].get("max_abs_err"), n["local"]["passed"])
        for n in nodes
    ]
    values = [v for _, a, l_, _ in points for v in (a, l_) if v]
    if not points:
        return "<p>No per-node data.</p>"
    lo = math.floor(math.log10(min(values))) if values else -12
    hi = math.ceil(math.log10(max(values))) if values else 0
    hi = max(hi, lo + 1)
    last = max(p[0] for p in points) or 1
    left, bottom, top = 60, 30, 10

    def x(i: int) -> float:
        return left + (width - left - 10) * i / last

    def y(v: float | None) -> float:
        v = max(v or 10.0**lo, 10.0**lo)
        return top + (height - top - bottom) * (hi - math.log10(v)) / (hi - lo)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        'aria-label="per-node error">'
    ]
    for k in range(lo, hi + 1):
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y(10.0**k):.1f}" y2="{y(10.0**k):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{left - 6}" y="{y(10.0**k) + 4:.1f}" font-size="11" text-anchor="end">1e{k}</text>')
    line = " ".join(f"{x(i):.1f},{y(a):.1f}" for i, a, _, _ in points)
    parts.append(f'<polyline fill="none" stroke="#4a78c2" stroke-width="1.5" points="{line}"/>')
    for i, _, loc, ok in points:
        parts.append(
            f'<circle cx="{x(i):.1f}" cy="{y(loc):.1f}" r="{2.5 if ok else 5}" fill="{"#999" if ok else "#b42318"}"/>'
        )
    parts.append(
        f'<text x="{left}" y="{height - 8}" font-size="11">aten node position in the graph → '
        "(line: accumulated error; dots: the node's own error on PyTorch's inputs; red: beyond tolerance)"
        "</text></svg>"
    )
    return "".join(parts)


def render(summary: dict[str, Any], debug: dict[str, Any] | None) -> str:
    name = summary.get("model_name", "model")
    parity = summary.get("parity")
    verdict = ""
    if parity is not None:
        ok = parity.get("passed")
        verdict = f'<span class="{"pass" if ok else "fail"}">{"PASS" if ok else "FAIL"}</span>'
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>rlx report: {_e(name)}</title>"
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>rlx conversion report: {_e(name)} {verdict}</h1>",
    ]
    facts = [
        ["decomposition level", _e(summary.get("decomposition") or "-")],
        ["inputs", _e(summary.get("inputs"))],
        ["parameters", f"{summary.get('parameters', 0):,} ({summary.get('parameter_bytes', 0) / 1e6:.2f} MB)"],
        ["aten nodes", _e(sum(summary.get("op_histogram", {}).values()))],
        ["instructions", _e(summary.get("instructions"))],
    ]
    out.append(_table(["", ""], facts))
    for note in summary.get("notes", []):
        out.append(f"<p>Note: {_e(note)}</p>")
    out.append("<h2>Parity per output</h2>")
    if parity is None:
        out.append("<p>Parity was not checked (--no-verify).</p>")
    else:
        rows = [
            [
                f"out{o['index']}",
                _e(o["shape"]),
                _e(o["dtype"]),
                _num(o["cosine"], ".8f"),
                _num(o["max_abs_err"]),
                _num(o["max_rel_err"]),
                f'<span class="{"pass" if o["passed"] else "fail"}">'
                f"{(_e(o['reason']) if o.get('random') else 'pass') if o['passed'] else 'FAIL ' + _e(o['reason'])}</span>",
            ]
            for o in parity["outputs"]
        ]
        out.append(
            _table(["output", "shape", "dtype", "cosine", "max abs err", "max rel err", "result"], rows, {3, 4, 5})
        )
    out.append("<h2>Per-node error along the graph</h2>")
    if debug:
        first = debug.get("first_divergent")
        out.append(
            f'<p class="fail">First divergent node: <code>{_e(first["id"])}</code> (<code>{_e(first["op"])}</code>, '
            f"position {first['index']}): {_e(first['reason'])}. A one-op reproducer is in <code>repro/</code>.</p>"
            if first
            else f'<p class="pass">No node diverges ({len(debug.get("nodes", []))} aten values compared).</p>'
        )
        out.append(error_plot(debug.get("nodes", [])))
    else:
        out.append("<p>No per-node data: run <code>rlx debug OUT</code>.</p>")
    hist = summary.get("op_histogram", {})
    ops = [
        [
            f"<code>{_e(op)}</code>",
            str(n),
            "yes" if op == "_getitem" or is_noop(op) or find(op) else '<span class="fail">no</span>',
        ]
        for op, n in hist.items()
    ]
    calls = [[f"<code>{_e(c)}</code>", str(n)] for c, n in summary.get("call_histogram", {}).items()]
    out.append('<div class="grid"><div><h2>Source aten ops</h2>')
    out.append(_table(["op", "count", "supported"], ops, {1}))
    out.append("</div><div><h2>rlx Calls</h2>")
    out.append(_table(["call", "count"], calls, {1}))
    out.append("</div></div>")
    timings = summary.get("timings_s", {})
    if timings:
        out.append("<h2>Timings</h2>")
        out.append(_table(["step", "seconds"], [[_e(k), f"{v:.3f}"] for k, v in timings.items()], {1}))
    out.append("</body></html>\n")
    return "\n".join(out)


def write_report(out_dir: str | Path) -> Path:
    """(Re)build ``OUT/report.html`` from ``OUT/report.json`` and ``OUT/debug.json``."""
    out = Path(out_dir)
    try:
        summary = json.loads((out / REPORT_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BundleError(f"{out}: no report.json; is this an output directory of `rlx import`?") from None
    except (OSError, json.JSONDecodeError) as e:
        raise BundleError(f"{out / 'report.json'}: unreadable: {e}") from None
    debug = None
    if (out / DEBUG_FILE).is_file():
        try:
            debug = json.loads((out / DEBUG_FILE).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            debug = None
    path = out / REPORT_HTML
    atomic_write_text(path, render(summary, debug))
    return path
