"""The onnxruntime engine's ``pad_channels`` option (rlx.runtime.onnxruntime_engine.pad_channels):
which channel groups (a producer to its readers through a chain of steps, or several producers,
steps and readers joined by sums, depthwise convolutions and squeeze-excitation scales) are padded
to the channel block, PyTorch's values with and without NaN and inf, and onnxruntime keeping its
blocked layout through a padded group."""

from __future__ import annotations

import pytest
import torch

from helpers import assert_arrays_match, convert, optimized_op_types, rand, with_specials

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
    # (elementwise steps with constants: x * clamp(x + 3, 0, 6) / 6, a Where of x > 0, x * sigmoid(x))
    "hardswish": (12, torch.nn.Hardswish(), False, 1, False, False, True),
    "leaky-relu": (12, torch.nn.LeakyReLU(0.1), False, 1, False, False, True),
    "silu": (12, torch.nn.SiLU(), False, 1, False, False, True),
    "sigmoid": (4, torch.nn.Sigmoid(), False, 1, False, False, True),
    "on-the-block": (16, torch.nn.ReLU(), False, 1, False, False, False),
    "depthwise-reader": (12, torch.nn.ReLU(), False, 12, False, False, False),
    "mid-is-an-output": (12, torch.nn.ReLU(), False, 1, True, False, False),
    "after-a-division": (12, torch.nn.ReLU(), False, 1, False, True, False),
}


def _conv(cin: int, cout: int, k: int = 1, groups: int = 1) -> torch.nn.Conv2d:
    return torch.nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups)


class Group(torch.nn.Module):
    """A channel group of 12 (off every block) that more than a chain makes: ``body`` maps the
    16-channel input to 12 channels, a 3×3 convolution reads them."""

    def __init__(self, body: str) -> None:
        super().__init__()
        torch.manual_seed(len(body))
        self.body = body
        self.a, self.b, self.c = _conv(16, 12), _conv(12, 12), _conv(12, 12, 3, groups=12)
        self.squeeze, self.excite = _conv(12, 4), _conv(4, 12)
        self.norm = torch.nn.BatchNorm2d(12).eval()
        self.scale = torch.nn.Parameter(torch.rand(12, 1, 1) + 0.5)
        self.read = _conv(12, 32, 3)

    def forward(self, x):
        h = self.a(x)
        if self.body == "inverted-residual":  # MobileNet: expand, depthwise, activations
            h = torch.nn.functional.relu6(self.norm(self.c(torch.nn.functional.relu6(h))))
        elif self.body == "tf-padded":  # transformers' MobileNet: a zero pad before the depthwise one
            h = self.c(torch.nn.functional.pad(torch.relu(h), (0, 1, 0, 1)))
        elif self.body == "residual":  # two producers joined by a sum
            h = torch.relu(h + self.b(torch.relu(h)))
        elif self.body == "squeeze-excitation":  # the scale: a mean, two convolutions, a sigmoid
            h = torch.nn.functional.silu(h)
            s = self.excite(torch.nn.functional.silu(self.squeeze(h.mean((2, 3), keepdim=True))))
            h = h * torch.sigmoid(s)
        elif self.body == "layer-scale":  # a constant per channel
            h = h * self.scale + 1.0
        elif self.body == "pooled":
            h = torch.nn.functional.max_pool2d(torch.relu(h), 3, 1, 1)
        elif self.body == "divided-by-itself":  # a divisor from the group: 0 where padded
            h = h / (h.abs() + 1.0)
        elif self.body == "channel-mean":  # a reduction across channels mixes the padding in
            h = h - h.mean(1, keepdim=True)
        elif self.body == "concatenated":
            return self.read(torch.cat([h[:, :6], h[:, 6:]], 1))
        return self.read(h)


GROUPS = {  # body: padded
    "inverted-residual": True,
    "residual": True,
    "tf-padded": True,
    "squeeze-excitation": True,
    "layer-scale": True,
    "pooled": True,
    "divided-by-itself": False,
    "channel-mean": False,
    "concatenated": False,
}


def _group(body: str, pad: bool = True):
    module = Group(body).eval()
    x = rand((2, 16, 6, 6), seed=5)
    model, program, _ = convert(module, (x,), engine="onnxruntime", engine_options={"pad_channels": pad})
    return module, x, model, program, GROUPS[body]


def _chain(name: str, pad: bool = True):
    *args, padded = CHAINS[name]
    module = Chain(*args).eval()
    x = rand((2, 16, 6, 6), seed=3)
    model, program, _ = convert(module, (x,), engine="onnxruntime", engine_options={"pad_channels": pad})
    return module, x, model, program, padded


CASES = [("chain", name) for name in sorted(CHAINS)] + [("group", body) for body in sorted(GROUPS)]


def _case(kind: str, name: str, pad: bool = True):
    return (_chain if kind == "chain" else _group)(name, pad)


@pytest.mark.parametrize("kind,name", CASES)
def test_only_groups_of_plain_convolutions_from_checkable_inputs_are_padded(kind, name):
    """Every convolution making the group grows its filters to the block, every per-channel step its
    parameters, every convolution reading it its input channels, and the input is checked before
    each run. Not padded: channels on the block, a group whose values are a model output, are read
    by a depthwise convolution at its end, come after a step that can make NaN or inf of finite
    values (a division), or meet a step that would mix the padding into real channels or divide by
    it."""
    _, _, model, program, padded = _case(kind, name, pad=False)
    graph = emit_model(program, model.engine)
    done = pad_channels(graph, program, model.engine.arrays, block=16)
    assert bool(done) == padded, done
    if padded:
        weights = {t.name: t for t in graph.graph.initializer}
        for conv in (n for n in graph.graph.node if n.op_type == "Conv"):
            dims = list(weights[conv.input[1]].dims)
            group = next((a.i for a in conv.attribute if a.name == "group"), 1)
            assert group in (1, 16) and all(d % 16 == 0 for d in dims[: 1 if group > 1 else 2]), (conv.name, dims)
        props = {p.key: p.value for p in graph.metadata_props}
        assert '"x"' in props["rlx/finite_inputs"]


@pytest.mark.parametrize("values", ["finite", "specials"])
@pytest.mark.parametrize("kind,name", CASES)
def test_padded_groups_match_torch_with_nan_and_inf(kind, name, values):
    """Values, shapes and dtypes equal PyTorch's; an input holding NaN or inf runs the unpadded graph
    (a padded channel meeting inf would make NaN: 0 × inf)."""
    module, x, model, _, padded = _case(kind, name)
    inputs = with_specials(x) if values == "specials" else x
    with torch.no_grad():
        want = module(inputs)
    got = model(inputs.numpy())
    for k, (g, w) in enumerate(zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,))))):
        assert_arrays_match(g, w.numpy(), f"{name} output {k}", rtol=1e-5, atol=1e-5)
    executor = model.executor_for([inputs.numpy()])
    assert (executor._exact is not None) == (values == "specials" and (padded or executor._finite_inputs != ()))


@pytest.mark.skipif(channel_block() <= 1, reason="onnxruntime has no blocked layout on this CPU")
@pytest.mark.parametrize("kind,name", [("chain", "bottleneck"), ("chain", "silu"), ("chain", "hardswish"),
                                       ("chain", "leaky-relu"), ("group", "inverted-residual"), ("group", "residual"),
                                       ("group", "pooled"), ("group", "tf-padded")])  # fmt: skip
def test_a_padded_group_stays_in_the_blocked_layout(kind, name, tmp_path):
    """onnxruntime changes an off-block group back to the plain layout (ReorderOutput) and keeps a
    padded one blocked: one change back, at the end."""
    _, _, model, program, _ = _case(kind, name, pad=False)
    reorders = {}
    for padded in (False, True):
        graph = emit_model(program, model.engine)
        if padded:
            assert pad_channels(graph, program, model.engine.arrays)
        reorders[padded] = optimized_op_types(model, graph, tmp_path / f"{padded}.onnx").count("ReorderOutput")
    assert reorders[True] == 1 < reorders[False], reorders


class RandomNet(torch.nn.Module):
    """A small convolutional net drawn from ``seed``: a convolution to an off-block channel count,
    then five steps of the kinds padding follows or refuses (activations, BatchNorm, depthwise
    convolutions, pointwise ones to a new count, residual sums, squeeze-excitation, pools, pads,
    per-channel scales, concatenations), then a 3×3 convolution reader."""

    STEPS = ("act", "norm", "depthwise", "pointwise", "residual", "excite", "pool", "pad", "scale", "concat")
    ACTS = (torch.nn.ReLU(), torch.nn.ReLU6(), torch.nn.Hardswish(), torch.nn.SiLU(), torch.nn.LeakyReLU(0.1),
            torch.nn.Sigmoid(), torch.nn.Tanh())  # fmt: skip

    def __init__(self, seed: int) -> None:
        super().__init__()
        import random

        rng = random.Random(seed)
        torch.manual_seed(seed)
        channels = rng.choice((8, 12, 20, 24))
        self.first = torch.nn.Conv2d(16, channels, 1)
        self.steps: list[tuple[str, int]] = []
        self.layers = torch.nn.ModuleList()
        for _ in range(5):
            kind = rng.choice(self.STEPS)
            if kind == "act":
                layer: torch.nn.Module = rng.choice(self.ACTS)
            elif kind == "norm":
                layer = torch.nn.BatchNorm2d(channels).eval()
                with torch.no_grad():
                    layer.running_var.uniform_(0.5, 1.5)
                    layer.running_mean.uniform_(-0.5, 0.5)
            elif kind == "depthwise":
                layer = torch.nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
            elif kind == "pointwise":
                layer = torch.nn.Conv2d(channels, channels := rng.choice((8, 12, 16, 24)), 1)
            elif kind in ("residual", "excite"):
                layer = torch.nn.Sequential(torch.nn.Conv2d(channels, 4 if kind == "excite" else channels, 1),
                                            torch.nn.ReLU(), torch.nn.Conv2d(4, channels, 1) if kind == "excite"
                                            else torch.nn.Identity())  # fmt: skip
            elif kind == "scale":
                layer = torch.nn.Conv2d(channels, channels, 1, groups=channels, bias=False)  # (its weight: a scale)
            else:
                layer = torch.nn.Identity()
                channels *= 2 if kind == "concat" else 1
            self.steps.append((kind, channels))
            self.layers.append(layer)
        self.last = torch.nn.Conv2d(channels, 32, 3, padding=1)

    def forward(self, x):
        h = self.first(x)
        for (kind, _), layer in zip(self.steps, self.layers):
            if kind == "residual":
                h = h + layer(h)
            elif kind == "excite":
                h = h * torch.sigmoid(layer(h.mean((2, 3), keepdim=True)))
            elif kind == "pool":
                h = torch.nn.functional.max_pool2d(h, 3, 1, 1)
            elif kind == "pad":
                h = torch.nn.functional.pad(h, (1, 0, 0, 1))
            elif kind == "scale":
                h = h * layer.weight.view(1, -1, 1, 1)
            elif kind == "concat":
                h = torch.cat([h, torch.relu(h)], 1)
            else:
                h = layer(h)
        return self.last(h)


@pytest.mark.parametrize("seed", range(16))
def test_random_nets_padded_match_torch_with_nan_and_inf(seed):
    """Whatever a random net's groups are, padded or not, the padded engine gives PyTorch's values
    on finite inputs and on inputs holding NaN and inf."""
    module = RandomNet(seed).eval()
    x = rand((2, 16, 7, 7), seed=seed)
    model, program, _ = convert(module, (x,), engine="onnxruntime", engine_options={"pad_channels": True})
    for inputs in (x, with_specials(x)):
        with torch.no_grad():
            want = module(inputs)
        assert_arrays_match(model(inputs.numpy()), want.numpy(), f"seed {seed}", rtol=1e-4, atol=1e-4)


def test_random_nets_are_padded_somewhere():
    """(The random nets above exercise padding: most of them have a group it takes.)"""
    padded = 0
    for seed in range(16):
        model, program, _ = convert(RandomNet(seed).eval(), (rand((2, 16, 7, 7)),), engine="onnxruntime")
        padded += bool(pad_channels(emit_model(program, model.engine), program, model.engine.arrays, block=16))
    assert padded >= 8, padded
