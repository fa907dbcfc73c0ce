"""The aten front-end: torch-ir.json's aten ops → Calls, through one decorator registry
(``registry.REGISTRY``). Reads the language-neutral torch-ir.json, so it needs no torch.

Importing the package imports every family module, whose ``@lowers`` decorators fill the registry.
"""

from rlx.frontends.aten import (  # noqa: E402, F401, I001  (after the registry: each family registers into it)
    creation,
    decompositions,
    elementwise,
    linalg,
    misc,
    movement,
    nn,
    ordering,
    random,
    reduce,
    resample,
    scatter,
    selection,
    special,
    spectral,
)
from rlx.frontends.aten.registry import REGISTRY, check_coverage, lower, lowers, supported_ops

__all__ = ["REGISTRY", "check_coverage", "lower", "lowers", "supported_ops"]
