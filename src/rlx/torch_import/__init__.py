"""PyTorch front-end: the only part of rlx that needs torch."""

from rlx.torch_import.export import Exported, capture, dynamic_shapes_from_cli, export, write
from rlx.torch_import.levels import LEVELS

__all__ = ["LEVELS", "Exported", "capture", "dynamic_shapes_from_cli", "export", "write"]
