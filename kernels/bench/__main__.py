"""``python -m accel.kernels.bench``: ``accel bench`` (:func:`accel.cli.bench.main`).

An entry script that nothing imports: the one module under ``accel.kernels`` that reaches the command line,
whose library code calls this package, never the other way (``tests/test_import_graph.py``).
"""

import sys

from accel.cli.bench import main

sys.exit(main())
