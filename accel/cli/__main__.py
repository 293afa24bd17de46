import sys

from accel.cli import main

sys.exit(main())
