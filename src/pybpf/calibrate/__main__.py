"""``python -m pybpf.calibrate``."""

import sys

from . import main

sys.exit(main())
