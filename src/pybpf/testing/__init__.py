"""Testing aids that ship with pybpf: the kernel-vs-emulated differential harness.

``pybpf.testing.differential`` runs one operation sequence on two ``System`` backends and
compares every returned byte and errno; ``python -m pybpf.testing.differential`` is its CLI.
"""
