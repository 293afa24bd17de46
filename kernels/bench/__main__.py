"""``python -m accel.kernels.bench``: ``accel bench`` (:func:`accel.kernels.bench.main`)."""

import sys

from accel.kernels.bench import main

sys.exit(main())
