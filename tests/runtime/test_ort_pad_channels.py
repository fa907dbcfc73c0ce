"""The onnxruntime engine's ``pad_channels`` option (rlx.runtime.onnxruntime_engine.pad_channels):
which convolution chains are padded to the channel block, PyTorch's values with and without NaN
and inf, and onnxruntime keeping its blocked layout through a padded chain."""

from __future__ import annotations

import onnx
import pytest
import torch

from helpers import assert_arrays_match, convert, rand, with_specials

pytest.importorskip("onnxruntime")

from rlx.runtime.onnxruntime_engine.executor import emit_model  # noqa: E402
from rlx.runtime.onnxruntime_engine.pad_channels import channel_block, pad_channels  # noqa: E402


class Chain(torch.nn.Module):
    """conv 1×1 (16 → ``mid``) → BatchNorm → ``act`` → conv 3×3 (``mid`` → 32, ``groups``): the
    producer and reader of a chain that padding keeps blocked."""

    def __init__(self, mid: int, act: torch.nn.Module, bias: bool, groups: int, mid_out: bool, divide: bool) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(mid)
        self.produce = torch.nn.Conv2d(16, mid, 1, bias=bias)
        self.norm = torch.nn.BatchNorm2d(mid)
        self.act = act
        self.read = torch.nn.Conv2d(mid, 32 if groups == 1 else mid, 3, padding=1, groups=groups)
        self.mid_out, self.divide = mid_out, divide
        with torch.no_grad():
            self.norm.running_mean.copy_(torch.rand(mid, generator=g) - 0.5)
            self.norm.running_var.copy_(torch.rand(mid, generator=g) + 0.5)
            self.norm.weight.copy_(torch.rand(mid, generator=g) + 0.5)
            self.norm.bias.copy_(torch.rand(mid, generator=g) - 0.5)

    def forward(self, x):
        h = x / (x.abs() + 1.0) if self.divide else x
        mid = self.act(self.norm(self.produce(h)))
        out = self.read(mid)
        return (out, mid) if self.mid_out else out


CHAINS = {
    # name: (mid channels, activation, producer bias, reader groups, mid an output, a division first, padded)
    "bottleneck": (12, torch.nn.ReLU(), False, 1, False, False, True),
    "relu-bias": (12, torch.nn.ReLU(), True, 1, False, False, True),
    # (hardswish and leaky relu arrive as several nodes with constants, x * clamp(x + 3) / 6 and a
    # Where of x > 0: steps of more than one operand, not followed)
    "hardswish": (12, torch.nn.Hardswish(), False, 1, False, False, False),
    "leaky-relu": (12, torch.nn.LeakyReLU(0.1), False, 1, False, False, False),
    "sigmoid": (4, torch.nn.Sigmoid(), False, 1, False, False, True),
    "on-the-block": (16, torch.nn.ReLU(), False, 1, False, False, False),
    "depthwise-reader": (12, torch.nn.ReLU(), False, 12, False, False, False),
    "mid-is-an-output": (12, torch.nn.ReLU(), False, 1, True, False, False),
    "after-a-division": (12, torch.nn.ReLU(), False, 1, False, True, False),
}


def _chain(name: str, pad: bool = True):
    *args, padded = CHAINS[name]
    module = Chain(*args).eval()
    x = rand((2, 16, 6, 6), seed=3)
    model, program, _ = convert(module, (x,), engine="onnxruntime", engine_options={"pad_channels": pad})
    return module, x, model, program, padded


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_only_chains_of_plain_convolutions_from_checkable_inputs_are_padded(name):
    """A chain is padded where its channels are off the block and every reader is a convolution of
    one group; not where its middle is a model output, a reader is depthwise, or a step before it
    can make NaN or inf of finite values (a division)."""
    _, _, model, program, padded = _chain(name, pad=False)
    graph = emit_model(program, model.engine)
    done = pad_channels(graph, program, model.engine.arrays, block=16)
    assert bool(done) == padded, done
    if padded:
        weights = {t.name: t for t in graph.graph.initializer}
        reader = next(n for n in graph.graph.node if n.op_type == "Conv" and n.output[0] != done[0])
        assert list(weights[reader.input[1]].dims)[:2] == [32, 16]  # input channels grown to the block
        props = {p.key: p.value for p in graph.metadata_props}
        assert '"x"' in props["rlx/finite_inputs"]  # checked before each run


@pytest.mark.parametrize("values", ["finite", "specials"])
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_padded_chains_match_torch_with_nan_and_inf(name, values):
    """Values, shapes and dtypes equal PyTorch's; an input holding NaN or inf runs the unpadded graph
    (a padded channel meeting inf would make NaN: 0 × inf)."""
    module, x, model, _, padded = _chain(name)
    inputs = with_specials(x) if values == "specials" else x
    with torch.no_grad():
        want = module(inputs)
    got = model(inputs.numpy())
    for k, (g, w) in enumerate(zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,))))):
        assert_arrays_match(g, w.numpy(), f"{name} output {k}", rtol=1e-5, atol=1e-5)
    executor = model.executor_for([inputs.numpy()])
    assert (executor._exact is not None) == (values == "specials" and (padded or executor._finite_inputs != ()))


@pytest.mark.skipif(channel_block() <= 1, reason="onnxruntime has no blocked layout on this CPU")
def test_a_padded_chain_stays_in_the_blocked_layout(tmp_path):
    """onnxruntime changes an off-block chain back to the plain layout (ReorderOutput) and keeps a
    padded one blocked."""
    _, _, model, program, _ = _chain("bottleneck", pad=False)
    reorders = {}
    for padded in (False, True):
        graph = emit_model(program, model.engine)
        if padded:
            assert pad_channels(graph, program, model.engine.arrays)
        opts = model.engine.session_options()
        opts.optimized_model_filepath = str(tmp_path / f"{padded}.onnx")
        names = [t.name for t in graph.graph.initializer if t.data_location == 1]
        opts.add_external_initializers(names, model.engine.weight_values(names))
        import onnxruntime as ort

        ort.InferenceSession(graph.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        optimized = onnx.load(str(tmp_path / f"{padded}.onnx"), load_external_data=False)
        reorders[padded] = sum(n.op_type == "ReorderOutput" for n in optimized.graph.node)
    assert reorders[True] < reorders[False], reorders
