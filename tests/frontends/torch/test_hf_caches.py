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


def test_a_cache_passed_in_is_inputs_and_stays_as_it_was(tmp_path) -> None:
    """A decode step exported with a prefilled DynamicCache: its tensors are inputs (layer by layer,
    keys then values), the new cache is outputs, and the user's cache object is not appended to."""
    torch.manual_seed(0)
    model = MODELS["llama-for-causal-lm"]().eval()

    def prefill(seed: int) -> object:
        with torch.no_grad():
            return model(torch.randint(4, 128, (1, 5), generator=torch.Generator().manual_seed(seed))).cache

    cache = prefill(1)
    before = [t.clone() for t in _layers_tensors(cache)]
    report = rlx.from_torch(model, (torch.tensor([[7]]),), tmp_path / "step", example_kwargs={"past_key_values": cache})
    assert report.passed, report.summary()
    after = _layers_tensors(cache)
    assert len(after) == len(before) and all(torch.equal(a, b) for a, b in zip(after, before))

    converted = rlx.load(tmp_path / "step")
    assert len(converted.input_names) == 1 + len(before)
    other, token = prefill(2), torch.tensor([[42]])
    inputs = [token.numpy()] + [t.numpy().copy() for t in _layers_tensors(other)]
    with torch.no_grad():
        eager = model(token, past_key_values=other)
    got = converted(*inputs)
    np.testing.assert_allclose(got["logits"], eager.logits.numpy(), rtol=1e-4, atol=1e-5)
    grown = _layers_tensors(eager.cache)
    assert [g.shape for g in got["cache"]] == [tuple(t.shape) for t in grown] == [(1, 2, 6, 8)] * len(grown)
    for g, w in zip(got["cache"], grown):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)
