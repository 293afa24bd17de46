"""RMSNorm, softmax, LayerNorm forward/backward: ATen vs accel's Triton and Helion kernels vs the routed call vs
Liger-Kernel and quack.

Usage (on a CUDA GPU; < 3 minutes on an H200)::

    python benchmarks/kernel_bench.py --out benchmarks/results        # tables + JSON/markdown files
    python benchmarks/kernel_bench.py --json                          # JSON report on stdout

Same as ``accel bench`` (:func:`accel.cli.bench.main`); the benchmark's code lives in :mod:`accel.kernels.bench`.
"""

import sys

from accel.cli.bench import main

if __name__ == "__main__":
    sys.exit(main())
