"""CPUs and NUMA nodes: the ground floor every other module may stand on.

Rules this module keeps: it imports nothing from pybpf; it only reads /sys (never writes),
and a /sys that says nothing gives one node with ``os.cpu_count()`` CPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

SYS_CPU_POSSIBLE = "/sys/devices/system/cpu/possible"
SYS_NODE_DIR = "/sys/devices/system/node"


@dataclass
class Topology:
    """CPUs and NUMA nodes: ``cpu_node[cpu]`` is the node of each possible CPU."""

    cpu_node: list[int] = field(default_factory=list)

    @property
    def num_cpus(self) -> int:
        return len(self.cpu_node)

    @property
    def num_nodes(self) -> int:
        return max(self.cpu_node, default=0) + 1

    def cpus_of_node(self, node: int) -> list[int]:
        return [cpu for cpu, n in enumerate(self.cpu_node) if n == node]


def parse_cpu_list(text: str) -> list[int]:
    """Parse a kernel CPU list such as ``0-3,5,8-9`` into sorted CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def host_topology() -> Topology:
    """This host's possible CPUs and their NUMA nodes (one node when /sys says nothing)."""
    try:
        with open(SYS_CPU_POSSIBLE) as f:
            ncpus = max(parse_cpu_list(f.read())) + 1
    except (OSError, ValueError):
        ncpus = os.cpu_count() or 1
    cpu_node = [0] * ncpus
    try:
        entries = os.listdir(SYS_NODE_DIR)
    except OSError:
        entries = []
    for entry in entries:
        if not (entry.startswith("node") and entry[4:].isdigit()):
            continue
        try:
            with open(os.path.join(SYS_NODE_DIR, entry, "cpulist")) as f:
                cpus = parse_cpu_list(f.read())
        except (OSError, ValueError):
            continue
        for cpu in cpus:
            if cpu < ncpus:
                cpu_node[cpu] = int(entry[4:])
    return Topology(cpu_node)
