"""Program → Program rewrites. Each pass is a function ``(Program) -> Program``."""

from rlx.passes.dce import dead_code_elimination

DEFAULT_PASSES = (dead_code_elimination,)

__all__ = ["DEFAULT_PASSES", "dead_code_elimination"]
