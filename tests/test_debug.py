"""The parity debugger names the first diverging aten node, writes a reproducer and a report."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import rlx
from rlx.app.convert import debug
from rlx.cli import main
from rlx.kernels.numpy.namespace import NUMPY

from helpers import BLOCK_TORCH, convert_example, load_example


@pytest.fixture(scope="module")
def transformer_out(tmp_path_factory):
    return convert_example(tmp_path_factory, "transformer", keep_exported=True)[0]


def test_clean_conversion_has_no_divergent_node(transformer_out, capsys):
    data = json.loads((transformer_out / "debug.json").read_text())
    assert data["first_divergent"] is None
    assert len(data["nodes"]) > 50
    assert all(n["local"]["passed"] for n in data["nodes"])
    assert main(["debug", str(transformer_out)]) == 0
    assert "no node diverges" in capsys.readouterr().out
    assert not (transformer_out / "repro").exists()


def test_hand_edited_bundle_is_diagnosed(transformer_out, tmp_path, capsys):
    out = tmp_path / "t"
    subprocess.run(["cp", "-r", str(transformer_out), str(out)], check=True)
    program = json.loads((out / "bundle" / "program.json").read_text())
    silu = next(i for i in program["instrs"] if i["op"] == "Unary" and i["args"]["fn"] == "silu")
    silu["args"]["fn"] = "sigmoid"  # a plausible-looking wrong activation
    (out / "bundle" / "program.json").write_text(json.dumps(program))
    assert main(["verify", str(out)]) == 1
    capsys.readouterr()
    assert main(["debug", str(out)]) == 1
    text = capsys.readouterr().out
    first = json.loads((out / "debug.json").read_text())["first_divergent"]
    assert first["op"] == "aten.silu.default" and first["id"] == silu["node"]
    assert f"first divergent node: {silu['node']} (aten.silu.default)" in text
    # The reproducer re-lowers the op with this rlx: the op itself is fine, so it passes, torch-free.
    script = (
        BLOCK_TORCH + f"from rlx.cli import main\nraise SystemExit(main(['build', {str(out / 'repro')!r}, '--verify']))"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    repro = json.loads((out / "repro" / "torch-ir.json").read_text())
    assert [n["op"] for n in repro["nodes"]] == ["aten.silu.default"]


def test_kernel_bug_is_found_and_reproduced(monkeypatch, tmp_path):
    real = NUMPY.unary["gelu"]
    monkeypatch.setitem(NUMPY.unary, "gelu", lambda x: real(x) * np.float32(1.001))
    model, inputs = load_example("mlp").get_model()
    report = debug(model, inputs, tmp_path / "o")
    assert report.first_divergent is not None
    assert report.first_divergent.op == "aten.gelu.default"
    # Every node before it is fine, and the ones after inherit its error only in accumulated terms.
    before = [n for n in report.nodes if n.index < report.first_divergent.index]
    assert all(n.passed for n in before)
    repro = rlx.build(tmp_path / "o" / "repro", verify=True, force=True)
    assert not repro.passed, "the one-op reproducer must show the same divergence"
    html = (tmp_path / "o" / "report.html").read_text()
    assert "First divergent node" in html and "aten.gelu.default" in html


def test_report_html_is_self_contained(transformer_out, capsys):
    (transformer_out / "report.html").unlink()
    assert main(["report", str(transformer_out)]) == 0
    html = (transformer_out / "report.html").read_text()
    assert "<svg" in html and "<polyline" in html
    assert "parity" in html.lower() and "aten.scaled_dot_product_attention.default" in html
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html), "report must not fetch anything"
    assert "<script" not in html


def test_debug_needs_an_import_output(tmp_path, capsys):
    assert main(["debug", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("rlx: ")


def test_debug_runs_dynamic_bundles(tmp_path):
    model, inputs = load_example("decoder_lm").get_model()
    dim = torch.export.Dim
    rlx.from_torch(
        model,
        inputs,
        tmp_path / "o",
        dynamic_shapes={"input_ids": {0: dim("b", max=4), 1: dim("s", max=32)}},
        keep_exported=True,
    )
    assert json.loads((tmp_path / "o" / "debug.json").read_text())["first_divergent"] is None
    assert main(["debug", str(tmp_path / "o")]) == 0


class Checked(torch.nn.Module):
    """Ops whose export threads an error check through an effect token (_linalg_check_errors)."""

    def forward(self, a):
        return torch.linalg.inv(a), torch.linalg.ldl_factor(a + a.mT)[0]


def test_graphs_with_error_check_tokens_are_debugged(tmp_path):
    a = torch.randn(4, 4, generator=torch.Generator().manual_seed(0)) + 4 * torch.eye(4)
    report = rlx.from_torch(Checked(), (a,), tmp_path / "o", keep_exported=True)
    assert report.passed
    assert json.loads((tmp_path / "o" / "debug.json").read_text())["first_divergent"] is None


def test_a_diverging_result_of_a_multi_result_op_is_reproduced_whole(tmp_path):
    """linalg.eig's eigenvectors, whose signs LAPACK builds choose differently, diverge through a
    _getitem: the repro is the whole linalg_eig node, with both its results."""
    a = torch.randn(3, 5, 5, generator=torch.Generator().manual_seed(4))
    report = rlx.from_torch(Eig(), (a,), tmp_path / "o")
    if report.passed:
        pytest.skip("this LAPACK build gives PyTorch's signs")
    first = json.loads((tmp_path / "o" / "debug.json").read_text())["first_divergent"]
    assert first is not None
    repro = json.loads((tmp_path / "o" / "repro" / "torch-ir.json").read_text())
    assert [n["op"] for n in repro["nodes"]][0] == "aten.linalg_eig.default"
    assert len(repro["outputs"]) == 2


class Eig(torch.nn.Module):
    def forward(self, a):
        return torch.linalg.eig(a)
