"""``python -m accel``: the ``accel`` command line (:mod:`accel.cli`)."""

import sys

from accel.cli import main

sys.exit(main())
