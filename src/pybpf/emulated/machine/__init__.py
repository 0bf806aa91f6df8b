"""The emulated machine: the ground floor of the emulated kernel.

CPUs and NUMA nodes (machine.py), modeled time and its costs (timing.py), contexts contending
for each CPU in virtual time (sched.py), RCU (rcu.py) and the allocators (memalloc.py:
kmalloc, bpf_mem_alloc). As in the kernel, these know nothing of maps,
programs or the network.

Rules this package keeps:
- It imports nothing from the other floors of ``pybpf.emulated`` (maps, prog, net, the front);
  the floors above keep their own per-machine state in side tables (``per_machine``), so the
  machine never owns what stands on it.
- Everything per CPU exists for every possible CPU of the emulated machine, whatever the host.
"""
