"""Greedy text generation with a converted Hugging Face LLM: numpy only at run time.

Builds a tiny Llama from a config (random weights: no download), wraps it in transformers' own
export recipe (``TorchExportableModuleWithStaticCache``: one token in, logits out, the KV cache
kept in buffers), converts that with rlx, and generates greedily with the rlx model. The KV cache
becomes the rlx model's state: every call reads it and writes the new values back.

Try: python examples/generate.py           (needs transformers for the conversion only)
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def tiny_llama(seed: int = 0, max_cache_len: int = 32) -> Any:
    """A 2-layer Llama with random weights, set up for static-cache generation."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return with_static_cache(LlamaForCausalLM(config).eval(), max_cache_len)


def with_static_cache(model: Any, max_cache_len: int) -> Any:
    """``model`` with the generation config transformers' export recipe asks for (greedy, no EOS stop)."""
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", cache_config={"batch_size": 1, "max_cache_len": max_cache_len},
        do_sample=False, pad_token_id=0, eos_token_id=None,
    )  # fmt: skip
    return model


def convert(model: Any, out_dir: str | Path, max_cache_len: int = 32) -> Any:
    """Convert the one-token decode step of ``model`` (with its KV cache) into ``out_dir``."""
    import torch
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    import rlx

    # The recipe picks a static cache, or a hybrid one for models with sliding-window layers.
    step = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=max_cache_len).model
    example = {"input_ids": torch.tensor([[1]]), "cache_position": torch.tensor([0])}
    # strict: transformers' recipe exports with TorchDynamo (non-strict export cannot lift its cache).
    return rlx.from_torch(step, (), out_dir, example_kwargs=example, strict=True, force=True)


def generate(model: Any, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
    """Greedy decoding with an rlx model of the decode step: the prompt one token at a time (that
    fills the KV cache), then the argmax of each step's logits fed back in."""
    model.reset()  # a fresh cache: every generation starts from position 0
    tokens = [int(t) for t in prompt]
    logits = None
    for position, token in enumerate(tokens):
        logits = model(input_ids=np.array([[token]]), cache_position=np.array([position]))
    for _ in range(max_new_tokens):
        assert logits is not None
        tokens.append(int(np.argmax(logits[0, -1])))
        if len(tokens) == len(prompt) + max_new_tokens:
            break
        logits = model(input_ids=np.array([[tokens[-1]]]), cache_position=np.array([len(tokens) - 1]))
    return tokens


def main() -> int:
    import rlx

    prompt, new_tokens = [5, 17, 42, 7], 12
    model = tiny_llama()
    with tempfile.TemporaryDirectory() as out:
        report = convert(model, out)
        print(report.summary())
        rlx_model = rlx.load(out)  # from here on: numpy only
        tokens = generate(rlx_model, prompt, new_tokens)
    import torch

    want = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False)[0].tolist()
    print(f"rlx:          {tokens}")
    print(f"transformers: {want}")
    print("identical" if tokens == want else "DIFFERENT")
    return 0 if tokens == want else 1


if __name__ == "__main__":
    sys.exit(main())
