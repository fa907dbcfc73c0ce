"""transformers models that return their KV cache (``use_cache=True``, the default) convert as they run
in eager: the cache's tensors are outputs, layer by layer, keys then values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlx

transformers = pytest.importorskip("transformers")

SMALL = dict(
    vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    max_position_embeddings=64,
)  # fmt: skip
SEQ2SEQ = dict(
    vocab_size=128, d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
)  # fmt: skip


def _layers_tensors(cache: object) -> list[torch.Tensor]:
    """keys, values of every layer of a DynamicCache; self-attention then cross-attention of an
    EncoderDecoderCache."""
    if isinstance(cache, transformers.EncoderDecoderCache):
        return _layers_tensors(cache.self_attention_cache) + _layers_tensors(cache.cross_attention_cache)
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


MODELS = {
    "gpt-neox": lambda: transformers.GPTNeoXModel(transformers.GPTNeoXConfig(**SMALL)),
    "llama-for-causal-lm": lambda: transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**SMALL, num_key_value_heads=2)
    ),
    "bart": lambda: transformers.BartModel(transformers.BartConfig(**SEQ2SEQ)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_returning_its_cache_converts_with_the_cache_as_outputs(name, tmp_path) -> None:
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    assert model.config.use_cache  # the default config: the forward returns a cache object
    tokens = torch.randint(4, 128, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        eager = model(tokens)
    cache_key = next(k for k, v in eager.items() if isinstance(v, transformers.Cache))
    want = _layers_tensors(eager[cache_key])

    report = rlx.from_torch(model, (tokens,), tmp_path / name)
    assert report.passed, report.summary()
    got = rlx.load(tmp_path / name)(tokens.numpy())

    assert list(got) == list(eager.keys())
    assert len(got[cache_key]) == len(want) > 0
    for g, w in zip(got[cache_key], want):
        assert g.shape == tuple(w.shape) and g.dtype == np.float32
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)
    others = [k for k in eager.keys() if k != cache_key]
    for k in others:
        np.testing.assert_allclose(got[k], eager[k].numpy(), rtol=1e-4, atol=1e-5)
