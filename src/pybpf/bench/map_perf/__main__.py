"""``python -m pybpf.bench.map_perf``: the same as ``pybpf map-perf``."""

import sys

from . import main

sys.exit(main())
