"""PyTorch front-end: the only part of rlx that needs torch."""

from rlx.frontends.torch.export import Exported, capture, dynamic_shapes_from_cli, export, write
from rlx.frontends.torch.levels import LEVELS

__all__ = ["LEVELS", "Exported", "capture", "dynamic_shapes_from_cli", "export", "write"]
