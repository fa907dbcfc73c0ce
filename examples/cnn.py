"""A small CNN: conv → batchnorm → relu → maxpool, twice, then adaptive avg pool and a linear head.
Try: rlx import examples/cnn.py -o out/cnn
"""

import torch
from torch import nn


def conv_block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(),
        nn.MaxPool2d(2),
    )


class CNN(nn.Module):
    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(conv_block(3, 16), conv_block(16, 32))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(32, n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(images)), 1))


def get_model() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = CNN().eval()
    # Non-trivial running statistics, so batchnorm is not an identity.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(2, 3, 32, 32),)
