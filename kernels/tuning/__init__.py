"""Tuning tables (below the ops, which read them): which implementation and config wins per
(op, arch, dtype, shape bucket) in :mod:`.table`, and the per-dtype tolerances of :mod:`.tolerance`.

Filling a table is measurement and lives on top, with the benchmark: :mod:`accel.kernels.bench`.
"""
