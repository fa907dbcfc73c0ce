"""The aten front-end: torch-ir.json's aten ops → Calls, through one decorator registry
(``registry.REGISTRY``). Reads the language-neutral torch-ir.json, so it needs no torch.

Importing the package imports every family module (``<family>.py`` or ``<family>_<topic>.py``, the
families of ``rlx.ir.calls.FAMILIES``), whose ``@lowers`` decorators fill the registry.
"""

# The family modules (named by ``rlx.ir.calls.FAMILIES``); importing each registers its lowerings.
from rlx.frontends.aten import creation, elementwise, linalg, linalg_factorizations, movement  # noqa: F401, I001
from rlx.frontends.aten import nn, ordering, random, reduce, resample, scatter  # noqa: F401
from rlx.frontends.aten import selection, special, spectral  # noqa: F401
from rlx.frontends.aten.registry import REGISTRY, check_coverage, lower, lowers, supported_ops

__all__ = ["REGISTRY", "check_coverage", "lower", "lowers", "supported_ops"]
