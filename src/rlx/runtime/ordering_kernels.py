"""numpy kernels for ordering and scan Calls (ArgTopK, ArgSort, CumReduce, Flip, Roll)."""
