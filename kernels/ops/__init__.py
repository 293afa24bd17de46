"""accel's built-in kernels, one package per ATen op (``rms_norm/``: reference, per-DSL kernel and impl)."""
