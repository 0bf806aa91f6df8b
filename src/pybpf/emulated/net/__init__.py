"""The network: net/core and net/ipv4's parts that BPF maps and programs touch.

netdev.py (devices, NAPI, the softirq; one ``Net`` per machine, ``net_of(machine)``),
skbuff.py, gro.py, stack.py (the receive path and sockets), xdp.py (net/core/xdp.c and the
XDP run), and the maps whose data paths are here, beside those paths as the kernel keeps them
near net/: devmap.py, cpumap.py (kernel/bpf), sock_map.py, skmsg.py (psocks and their backlog
work, net/core/skmsg.c), tcp_bpf.py (net/ipv4/tcp_bpf.c).

Rules this package keeps:
- Imports from ``machine``, ``maps`` and ``prog``; never from the front (system, progs, links,
  test_run).
- XDP and SK actions are ``pybpf.uapi``'s.
"""
