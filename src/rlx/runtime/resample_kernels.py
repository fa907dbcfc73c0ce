"""numpy kernels for resampling Calls (Upsample, GridSample)."""
