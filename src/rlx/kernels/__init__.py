"""One definition per Call, written once against an array namespace and shared by every engine.

``KERNELS`` maps a Call name to its shared definition ``fn(c, *operands, xp)``. An engine binds
them to its namespace and overrides a definition only where it needs another algorithm
(``registry.engine_kernels``). This package imports only numpy, ml_dtypes and itself (plus
``rlx.ir.dtypes``), with relative imports, so a generated package carries it as a plain copy.
"""

# The families, in one explicit list: importing each registers its definitions.
from . import creation, elementwise, linalg, movement, nn, ordering, random, reduce  # isort: split

from . import resample, selection, special, spectral
from .registry import KERNELS, Kernel, engine_kernels, kernel

FAMILIES = (creation, elementwise, linalg, movement, nn, ordering, random, reduce, resample, selection, special, spectral)  # fmt: skip

__all__ = ["FAMILIES", "KERNELS", "Kernel", "engine_kernels", "kernel"]
