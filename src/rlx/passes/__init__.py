"""Program → Program rewrites. Each pass is a function ``(Program) -> Program`` (constant folding,
which computes with the weights, maps ``(Program, weights)`` to ``(Program, weights)``).

``BUILD_PASSES`` run when a Program is built (convert); ``pipeline.optimize`` runs the
optimisation passes when the numpy runtime loads one.
"""

from rlx.passes.dce import dead_code_elimination

BUILD_PASSES = (dead_code_elimination,)

__all__ = ["BUILD_PASSES", "dead_code_elimination"]
