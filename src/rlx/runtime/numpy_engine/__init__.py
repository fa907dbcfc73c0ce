"""The numpy engine: shared kernel definitions on numpy, the engine's own fast algorithms, the
load-time passes and a plan-compiled executor. Needs numpy and ml_dtypes only."""
