"""LLM generation: transformers' static-cache decode step converted by rlx generates the same
tokens as ``model.generate(do_sample=False)``, greedy, token for token (examples/generate.py).
Mixture-of-experts models convert at parity with their default experts implementation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlx

from helpers import load_example

transformers = pytest.importorskip("transformers")
example = load_example("generate")

SMALL = dict(
    vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64,
)  # fmt: skip

FAMILIES = {
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SMALL)),
    "gemma": lambda: transformers.GemmaForCausalLM(transformers.GemmaConfig(**SMALL, head_dim=8)),
    "phi3": lambda: transformers.Phi3ForCausalLM(transformers.Phi3Config(**SMALL, pad_token_id=0)),
    # Sliding-window layers: the recipe exports them with its hybrid cache (prompts longer than the window).
    "gemma2-sliding": lambda: transformers.Gemma2ForCausalLM(
        transformers.Gemma2Config(**SMALL, head_dim=8, sliding_window=4)
    ),
}
PROMPTS = ([3], [5, 17, 42], [9, 1, 33, 64, 2, 8, 120])


def _assert_same_tokens(model, out_dir, prompts, new_tokens: int) -> None:
    report = example.convert(model, out_dir)
    assert report.passed
    converted = rlx.load(out_dir)
    for prompt in prompts:
        want = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False)[0].tolist()
        assert example.generate(converted, prompt, new_tokens) == want, f"prompt {prompt}"


def test_llama_generates_like_transformers(tmp_path) -> None:
    _assert_same_tokens(example.tiny_llama(), tmp_path / "llama", PROMPTS[1:2], 8)


@pytest.mark.slow
def test_llama_several_prompt_lengths(tmp_path) -> None:
    _assert_same_tokens(example.tiny_llama(seed=1), tmp_path / "llama", PROMPTS, 12)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_generates_like_transformers(family, tmp_path) -> None:
    torch.manual_seed(0)
    model = example.with_static_cache(FAMILIES[family]().eval(), 32)
    _assert_same_tokens(model, tmp_path / family, PROMPTS, 12)


# ── mixture of experts ───────────────────────────────────────────────────────
class TopTwoMoE(torch.nn.Module):
    """Top-2 routing written the eager way: ``torch.where(mask)`` per expert, ``index_add_`` back."""

    def __init__(self, dim: int = 8, experts: int = 4, hidden: int = 16) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(dim, experts, bias=False)
        self.up = torch.nn.ModuleList([torch.nn.Linear(dim, hidden) for _ in range(experts)])
        self.down = torch.nn.ModuleList([torch.nn.Linear(hidden, dim) for _ in range(experts)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = self.gate(x).softmax(-1).topk(2, dim=-1)
        out = torch.zeros_like(x)
        for e, (up, down) in enumerate(zip(self.up, self.down)):
            token, slot = torch.where(chosen == e)
            out.index_add_(0, token, down(torch.relu(up(x[token]))) * weights[token, slot, None])
        return out


@pytest.mark.slow
def test_hand_written_moe_routes_like_torch(tmp_path) -> None:
    torch.manual_seed(0)
    module = TopTwoMoE().eval()
    report = rlx.from_torch(module, (torch.randn(10, 8),), tmp_path / "moe")
    assert report.passed
    model = rlx.load(tmp_path / "moe")
    for seed in range(3):  # other tokens: other routing, other expert batch sizes
        x = torch.randn(10, 8, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            want = module(x).numpy()
        torch.testing.assert_close(torch.from_numpy(model(x.numpy())), torch.from_numpy(want))


MOE_SMALL = dict(
    vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
    num_key_value_heads=2, num_local_experts=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
    head_dim=8,
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("family", ["Mixtral", "Qwen3Moe"])
def test_moe_default_experts_at_parity(family, tmp_path) -> None:
    torch.manual_seed(0)
    config = getattr(transformers, f"{family}Config")(**MOE_SMALL)
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    tokens = torch.randint(0, 64, (1, 7))
    report = rlx.from_torch(model, (tokens,), tmp_path / family, example_kwargs={"use_cache": False})
    assert report.passed, report.parity.table()
    assert "aten.histc.default" in report.op_histogram
    assert "transformers.grouped_mm_fallback.default" in report.op_histogram
    for engine in ("numpy", "jax", "onnxruntime", "openvino"):
        pytest.importorskip(engine)
        converted = rlx.load(tmp_path / family, engine=engine)
        for seed in range(3):  # other tokens: other routings, experts with no token
            other = torch.randint(0, 64, (1, 7), generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                want = model(other, use_cache=False).logits.numpy()
            got = converted(other.numpy())["logits"]
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{engine} seed {seed}")
