"""A pre-norm transformer encoder block stack.

Multi-head attention through ``F.scaled_dot_product_attention`` (one causal layer and one
layer with a boolean key-padding mask), RMSNorm, a SwiGLU feed-forward and residuals.
Try: rlx import examples/transformer.py -o out/transformer
"""

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, dim: int, n_heads: int, hidden: int, causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.norm1 = RMSNorm(dim)
        self.attn = Attention(dim, n_heads)
        self.norm2 = RMSNorm(dim)
        self.ffn = SwiGLU(dim, hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), None if self.causal else mask, self.causal)
        return x + self.ffn(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, dim: int = 64, n_heads: int = 4, hidden: int = 128) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            [Block(dim, n_heads, hidden, causal=True), Block(dim, n_heads, hidden, causal=False)]
        )
        self.norm = RMSNorm(dim)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        # padding_mask: [batch, seq] bool, True where the token is real.
        attn_mask = padding_mask[:, None, None, :]
        for block in self.blocks:
            x = block(x, attn_mask)
        return self.norm(x)


def get_model() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    batch, seq, dim = 2, 8, 64
    x = torch.randn(batch, seq, dim)
    padding_mask = torch.ones(batch, seq, dtype=torch.bool)
    padding_mask[1, 5:] = False
    return Transformer(dim).eval(), (x, padding_mask)
