"""``python -m pybpf.bench.map_perf`` (the tests run it): the same as ``pybpf map-perf``."""

import sys

from ...commands import run_standalone
from . import configure_parser, run_from_args

sys.exit(run_standalone("pybpf map-perf", configure_parser, run_from_args))
