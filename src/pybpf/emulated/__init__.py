"""The emulated backend: the BPF map subsystem reimplemented in user space.

The package is laid out as the kernel tree, in floors that import only downwards:

- ``machine/``: CPUs, NUMA nodes, modeled time, RCU, the allocators (the ground floor);
- ``maps/``: the map families of kernel/bpf;
- ``prog/``: the verifier, the engines (interpreter, JIT to Python, native through LLVM),
  helpers, kfuncs;
- ``net/``: devices, skbs, GRO, XDP, and the maps whose data paths are the network's
  (devmap, cpumap, sockmap with its psocks);
- the front (this folder): ``system.py`` (EmulatedSystem: fd table, ids, the commands in
  syscall.c's order of checks), ``bpf_types.py`` (the map-type table), ``progs.py`` (program
  load, test runs, attachment), ``test_run.py`` (net/bpf/test_run.c), ``links.py``,
  ``sockmap_progs.py``, ``syscall.py``, ``inode.py`` (bpffs).

What code outside the package (benchmarks, the testing helpers) may use is exported here;
nothing outside imports the floors' modules. Unit tests of one module (tests/emulated/) are
the exception: they test that module.
"""

from .machine.machine import NO_MODELED_TIME_ENV, Machine, modeled_time_default
from .machine.memalloc import HTAB_MEM_DESIGNS
from .machine.sched import SLEEP, CpuStats, Run, Scheduler, Work
from .machine.timing import VirtualTimeScheduler
from .maps.hashtab import HTAB_ELEM_SIZE
from .net.cpumap import RING_WAIT
from .net.netdev import net_of
from .net.skmsg import psock_table
from .net.xdp import XdpBuff
from .prog.core import ENGINES
from .prog.native import native_missing, native_reach
from .system import EmulatedSystem
from .test_run import bpf_test_run_xdp_live

__all__ = [
    "ENGINES",
    "HTAB_ELEM_SIZE",
    "HTAB_MEM_DESIGNS",
    "NO_MODELED_TIME_ENV",
    "RING_WAIT",
    "SLEEP",
    "CpuStats",
    "EmulatedSystem",
    "Machine",
    "Run",
    "Scheduler",
    "VirtualTimeScheduler",
    "Work",
    "XdpBuff",
    "bpf_test_run_xdp_live",
    "modeled_time_default",
    "native_missing",
    "native_reach",
    "net_of",
    "psock_table",
]
