"""Bundles shared by the batch tests, converted once per test process from small torch models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import Dim

import rlx

pytest.importorskip("pyarrow")


class TwoHeads(torch.nn.Module):
    """A dict of two per-row outputs of different dtypes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))

    def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.body(features)
        return {"logits": logits, "label": logits.argmax(-1)}


class PerToken(torch.nn.Module):
    """Sequences of any length: one output row per token, so rows of different lengths give ragged outputs."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.proj = torch.nn.Linear(4, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(tokens))


class Static(torch.nn.Module):
    """Exported without dynamic axes: a row is the whole (2, 5) input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sum(-1)


def convert(model: torch.nn.Module, example: torch.Tensor, out, dynamic: dict | None = None):
    rlx.from_torch(model.eval(), (example,), out, dynamic_shapes=(dynamic,) if dynamic else None, force=True)
    return out / "bundle"


@pytest.fixture(scope="session")
def two_heads(tmp_path_factory):
    model = TwoHeads().eval()
    bundle = convert(model, torch.randn(4, 6), tmp_path_factory.mktemp("two_heads"), {0: Dim("batch", max=4096)})
    return model, bundle


@pytest.fixture(scope="session")
def per_token(tmp_path_factory):
    model = PerToken().eval()
    dyn = {0: Dim("batch", max=512), 1: Dim("seq", min=2, max=64)}
    return model, convert(model, torch.randn(3, 5, 4), tmp_path_factory.mktemp("per_token"), dyn)


@pytest.fixture(scope="session")
def static(tmp_path_factory):
    model = Static().eval()
    return model, convert(model, torch.randn(2, 5), tmp_path_factory.mktemp("static"))


def torch_outputs(model: torch.nn.Module, x: np.ndarray) -> dict[str, np.ndarray]:
    with torch.no_grad():
        out = model(torch.from_numpy(x))
    return {k: v.numpy() for k, v in out.items()} if isinstance(out, dict) else {"output": out.numpy()}
