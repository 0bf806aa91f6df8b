"""``python -m pybpf``: the same command line as ``pybpf``."""

from .cli import main

raise SystemExit(main())
