"""The map families: kernel/bpf's map files, one module per kernel file.

bpf_map.py is ``struct bpf_map`` and ``struct bpf_map_ops``; each family's class names the map
types it serves (``@map_ops``), and ``emulated/bpf_types.py`` lists them all, as bpf_types.h
does. The families whose data paths are the network's (devmap, cpumap, sockmap) live in
``net/``, beside those paths.

Rules this package keeps:
- Imports only from ``pybpf.emulated.machine`` and the ground floor of pybpf (uapi, errors,
  attrs): maps never import programs or the network.
- A pure ``map_alloc_check(attr, machine)`` runs before any allocation.
- The hash table's parts follow hashtab.c's seams: buckets and locks (htab_buckets.py),
  element allocation and free (htab_elem.py), the batch commands (htab_batch.py).
"""
