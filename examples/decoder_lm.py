"""A GPT-style decoder LM: int64 token ids → embedding → causal attention blocks → tied head.
Try: rlx import examples/decoder_lm.py -o out/decoder_lm
"""

import torch
import torch.nn.functional as F
from torch import nn


class DecoderBlock(nn.Module):
    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.ln1(x)

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2)

        y = F.scaled_dot_product_attention(heads(self.q(h)), heads(self.k(h)), heads(self.v(h)), is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class DecoderLM(nn.Module):
    def __init__(self, vocab: int = 100, dim: int = 32, n_heads: int = 4, n_layers: int = 2, max_len: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList([DecoderBlock(dim, n_heads) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied output head

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.tok(input_ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def get_model() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return DecoderLM().eval(), (torch.randint(0, 100, (2, 12), dtype=torch.int64),)
