"""DSL kernels as ATen operator overrides (installed as ``accel.kernels``)."""
