"""The optional C accelerators, loaded once for every module that uses them.

``ACCEL`` is ``pybpf._accel`` (the Map layer's accelerator) and ``CACHE_MODEL`` is
``pybpf._cache_model`` (the emulated machine's cache model), each None when it was not built
or ``PYBPF_NO_ACCEL`` is set; pybpf works the same without them (pure-Python twins), only
slower.
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType


def _load(name: str, needs: tuple[str, ...] = ()) -> ModuleType | None:
    """The extension, or None; also None when it lacks a name in ``needs``: a build older
    than the source (rebuild it), whose Python twins run instead."""
    if os.environ.get("PYBPF_NO_ACCEL"):
        return None
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ImportError:
        return None
    return module if all(hasattr(module, attr) for attr in needs) else None


ACCEL = _load("_accel")
# maps in shared memory (pybpf.shared's C part), whose element ops the native tier calls
# from machine code (None: not built)
SHM_MAPS = _load("_shm_maps")
# The engines' hardware atomic on plain memory (None: a build older than the source, or no
# build; the engines then serialise atomics under one lock and compiled code leaves map
# values to Python).
ATOMIC_RMW = getattr(ACCEL, "atomic_rmw", None)
# Where a buffer's bytes are (None: an older build): how compiled code reaches a value.
BUFFER_ADDRESS = getattr(ACCEL, "buffer_address", None)
CACHE_MODEL = _load("_cache_model", needs=("CacheModel", "SpinLock", "swap_dicts", "HtabCore",
                                          "sync_idle", "count_schedulers"))
# A host lock as threading.Lock, which the C hot paths take by a direct call (threading.Lock:
# an older build, or none)
HostLock = getattr(CACHE_MODEL, "HostLock", threading.Lock)
# the map helpers in C of a map whose element ops are C callables on bytes (a map in a
# shared segment); None: an older build, or none (the Python helpers run)
OpsHelpers = getattr(CACHE_MODEL, "OpsHelpers", None)
# lpm_trie.c's lookup walk in C (None: an older build, or none; lpm_trie.trie_walk runs)
LPM_TRIE_WALK = getattr(CACHE_MODEL, "lpm_trie_walk", None)
# bpf_probe_read_user's common case in C, which hands the rest to bpf_trace's (None: an
# older build, or none; bpf_trace.bpf_probe_read_user runs)
PROBE_READ_USER = getattr(CACHE_MODEL, "probe_read_user", None)
# a tracepoint's runs (progs._fire's loop) in C, and _fire and enter_syscall around them
# (None: an older build, or none)
TRACE_CALL_BPF = getattr(CACHE_MODEL, "trace_call_bpf", None)
FIRE_TRACEPOINT = getattr(CACHE_MODEL, "fire_tracepoint", None)
# EmulatedSystem.enter_syscall in C, a method (progs.py's is its reference)
ENTER_SYSCALL_METHOD = getattr(CACHE_MODEL, "enter_syscall_method", None)
# hashtab.c's htab_map_hash(key, hashrnd) in C, from the shared maps' extension (None: the
# emulated maps hash in Python, pybpf/emulated/maps/jhash.py)
HTAB_MAP_HASH = getattr(_load("_shm_maps"), "htab_map_hash", None)


def accelerated() -> bool:
    """True when the C accelerator is in use (built, and PYBPF_NO_ACCEL not set)."""
    return ACCEL is not None
