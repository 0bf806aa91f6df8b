"""CPUMAP (kernel/bpf/cpumap.c): creation and element rules.

Rules this module keeps:
- Values are ``struct bpf_cpumap_val { u32 qsize; union { int fd; u32 id; } bpf_prog; }`` cut
  to value_size (4: queue size only, 8: with an XDP program fd on update, its id on lookup).
- Create (``cpu_map_alloc``): max_entries 0, key_size != 4, value_size not 4 or 8, any flag but
  BPF_F_NUMA_NODE (RDONLY/WRONLY included) -> EINVAL; max_entries over NR_CPUS -> E2BIG.
  NR_CPUS is the host kernel's (``/sys/devices/system/cpu/kernel_max`` + 1), or the machine's
  CPU count when that is larger.
- UPDATE: flags > BPF_EXIST -> EINVAL; key >= max_entries -> E2BIG; BPF_NOEXIST -> EEXIST;
  qsize > 16384 -> EOVERFLOW; a key that is not a possible CPU of the machine -> ENODEV;
  qsize 0 removes the entry; otherwise a new entry replaces the old one, and any failure to
  build it (an fd that is not an XDP program with expected_attach_type XDP_CPUMAP included)
  -> ENOMEM, as the kernel reports it.
- LOOKUP of an empty slot or a key >= max_entries -> ENOENT; DELETE of key >= max_entries ->
  EINVAL, else 0. get_next_key walks every index; LOOKUP_AND_DELETE and batches -> ENOTSUPP.
- Deliberate gap: entries carry no queue or kthread yet (the redirect data path comes later).
"""

from __future__ import annotations

import errno
import struct
from typing import TYPE_CHECKING

from ..errors import KernelError
from ..uapi import BPF_EXIST, BPF_F_NUMA_NODE, BPF_NOEXIST, AttachType, MapType
from .arraymap import index_get_next_key
from .bpf_map import BpfMap, MapAttr, map_ops, u32_key
from .devmap import resolve_xdp_prog

if TYPE_CHECKING:
    from .machine import Machine

CPU_MAP_QSIZE_MAX = 16384
DEFAULT_NR_CPUS = 8192  # x86-64 distribution kernels, when /sys does not say
SYS_KERNEL_MAX = "/sys/devices/system/cpu/kernel_max"


def host_nr_cpus() -> int:
    """NR_CPUS of the running kernel (kernel_max is NR_CPUS - 1)."""
    try:
        with open(SYS_KERNEL_MAX) as f:
            return int(f.read()) + 1
    except (OSError, ValueError):
        return DEFAULT_NR_CPUS


def nr_cpus(machine: Machine) -> int:
    return max(host_nr_cpus(), machine.num_cpus)


@map_ops(MapType.CPUMAP)
class CpuMap(BpfMap):
    """struct bpf_cpu_map: one optional entry per destination CPU."""

    @staticmethod
    def cpu_map_alloc_check(attr: MapAttr, machine: Machine) -> None:
        """cpu_map_alloc's checks, made before it allocates."""
        if attr.max_entries == 0:
            raise KernelError(errno.EINVAL, "max_entries must be at least 1")
        if attr.key_size != 4:
            raise KernelError(errno.EINVAL, f"cpumap keys are u32 CPU numbers: key_size must be "
                                            f"4, got {attr.key_size}")
        if attr.value_size not in (4, 8):
            raise KernelError(errno.EINVAL, f"value_size {attr.value_size}: a cpumap value is a "
                                            f"u32 qsize (4) or qsize + XDP prog fd (8)")
        if attr.map_flags & ~BPF_F_NUMA_NODE:
            raise KernelError(errno.EINVAL, f"map_flags {attr.map_flags:#x}: cpumaps accept only "
                                            f"BPF_F_NUMA_NODE")
        limit = nr_cpus(machine)
        if attr.max_entries > limit:
            raise KernelError(errno.E2BIG, f"max_entries {attr.max_entries} is over NR_CPUS "
                                           f"({limit})")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        """cpu_map_alloc."""
        super().__init__(attr, machine, node)
        # cpu -> the entry's live bpf_cpumap_val (qsize, prog id).
        self.cpu_map: dict[int, bytearray] = {}

    def cpu_map_lookup_elem(self, key: bytes) -> bytearray | None:
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)
        return self.cpu_map.get(u32_key(key))

    def cpu_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        key_cpu = u32_key(key)
        qsize = int.from_bytes(value[:4], "little")
        prog_fd = struct.unpack("<i", value[4:8])[0] if self.value_size == 8 else 0
        if flags > BPF_EXIST:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: use BPF_ANY or BPF_EXIST")
        if key_cpu >= self.max_entries:
            raise KernelError(errno.E2BIG, f"CPU {key_cpu} is out of range (max_entries "
                                           f"{self.max_entries})")
        if flags == BPF_NOEXIST:
            raise KernelError(errno.EEXIST, "every cpumap slot exists, so BPF_NOEXIST always "
                                            "fails")
        if qsize > CPU_MAP_QSIZE_MAX:
            raise KernelError(errno.EOVERFLOW, f"qsize {qsize} is over {CPU_MAP_QSIZE_MAX}")
        if key_cpu >= self.machine.num_cpus:
            raise KernelError(errno.ENODEV, f"CPU {key_cpu} is not a possible CPU of this "
                                            f"machine (CPUs 0-{self.machine.num_cpus - 1})")
        if qsize == 0:
            self.cpu_map.pop(key_cpu, None)
            return
        prog_id = 0
        if prog_fd > 0:
            prog = resolve_xdp_prog(self.system, prog_fd, AttachType.XDP_CPUMAP)
            if prog is None:
                raise KernelError(errno.ENOMEM, f"fd {prog_fd} is not an XDP program loaded "
                                                f"with expected_attach_type BPF_XDP_CPUMAP (the "
                                                f"kernel reports this as ENOMEM)")
            prog_id = prog.id
        self.cpu_map[key_cpu] = bytearray(struct.pack("<II", qsize, prog_id))
        self.access_stats.access(self.machine.current_cpu(), self.machine.cpu_node[key_cpu])

    def cpu_map_delete_elem(self, key: bytes) -> None:
        key_cpu = u32_key(key)
        if key_cpu >= self.max_entries:
            raise KernelError(errno.EINVAL, f"CPU {key_cpu} is out of range (max_entries "
                                            f"{self.max_entries})")
        self.cpu_map.pop(key_cpu, None)

    def cpu_map_get_next_key(self, key: bytes | None) -> bytes:
        return index_get_next_key(self.max_entries, key)

    # struct bpf_map_ops cpu_map_ops
    map_alloc_check = cpu_map_alloc_check
    map_lookup_elem = cpu_map_lookup_elem
    map_update_elem = cpu_map_update_elem
    map_delete_elem = cpu_map_delete_elem
    map_get_next_key = cpu_map_get_next_key
