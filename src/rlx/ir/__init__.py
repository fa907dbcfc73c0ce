"""The rlx IR: dtypes, the Call vocabulary and the Program."""

from rlx.ir import calls
from rlx.ir.program import CALL_TYPES, Call, Instr, Lit, Operand, Program, Ref, Value, Weight

__all__ = ["CALL_TYPES", "Call", "Instr", "Lit", "Operand", "Program", "Ref", "Value", "Weight", "calls"]
