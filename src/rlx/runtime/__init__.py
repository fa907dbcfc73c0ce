"""Runtime: load a bundle and run it with numpy only (no torch)."""

from rlx.runtime.model import Model, load, unflatten

__all__ = ["Model", "load", "unflatten"]
