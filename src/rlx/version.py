"""The rlx version: a leaf module, so what stamps it into artifacts imports nothing else of rlx."""

__version__ = "0.1.0"
